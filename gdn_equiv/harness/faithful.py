"""Our reference layer = fla's layer, on a CPU: the in-house families checked against upstream.

The fla target compares fla's layer with ours only on a GPU (fla's Triton cores do not run in Triton's
interpreter), so on a CPU nothing would notice an in-house family that computes something else than
fla's class: a wrong head grouping, a wrong default activation, a gate in the wrong place. Here fla's
layer runs on a CPU with its own code everywhere but the core recurrence: its projections, short
convolutions and norms run as fla wrote them (Triton kernels in the interpreter, TRITON_INTERPRET=1,
tiny shapes), and its core is fla's own pure-torch reference (``fla/ops/<op>/naive.py``), swapped in for
the names the layer module calls, for one run. What fla's fused kernel does before its recurrence
(q/k L2 norm, the gate ``-exp(A_log) softplus(a + dt_bias)``, ``sigmoid(beta)``, GVA's head index
``i_hv // (HV // H)``; LightNet's additive gate, which fla ships no naive form of) is restated here from
fla's kernels. Every in-house family has an adapter: Gated DeltaNet, KDA, GLA, Simple GLA, LightNet.

:func:`check_faithful` builds both layers from one example (fla's from our config through the family's
``fla_kwargs``; with ``defaults=True`` fla's own short convolutions, as a user gets them without
arguments, instead of ones built from our per-conv facts), loads our state_dict into fla's (strict),
and compares the output and the gradients of x and of every parameter within the tolerance table
(:func:`gdn_equiv.harness.compare.assert_equivalent`). :func:`unfaithful_reason` says why a family cannot be
checked here (fla not installed, no GPU and no interpreter, a family without an adapter).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.compare import ACCURACY_FACTOR, assert_run_as_accurate, least_accurate
from gdn_equiv.model.backends.fla_backend import pin_loaded_fla
from gdn_equiv.model.example import Example, accuracy_runs, build_layer, materialize, run_layer, unit_cotangent_backward
from gdn_equiv.model.families import get_family
from gdn_equiv.targets.fla_target import build_fla_layer, construct_layer, fla_class_of, load_reference_state

__all__ = ["FAITHFUL_FAMILIES", "Difference", "check_faithful", "naive_cores", "unfaithful_reason"]

Tensor = torch.Tensor


def _l2norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    # fla.modules.l2norm's maths (x * rsqrt(sum x^2 + eps)), in fp32 as its kernel computes
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def naive_gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Tensor | None = None,
    use_gate_in_kernel: bool = False,
    A_log: Tensor | None = None,
    dt_bias: Tensor | None = None,
    **unused: Any,
) -> tuple[Tensor, Tensor | None]:
    """fla's ``chunk_gated_delta_rule`` signature over fla's ``naive_recurrent_gated_delta_rule``."""
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

    if cu_seqlens is not None:
        raise InvalidArgument("the naive core runs dense batches only; give the example varlen='none'")
    H, HV = q.shape[-2], v.shape[-2]
    if HV > H:  # fla's kernels read q/k head i_hv // (HV // H) for value head i_hv
        q, k = q.repeat_interleave(HV // H, dim=-2), k.repeat_interleave(HV // H, dim=-2)
    q, k, g, beta = q.float(), k.float(), g.float(), beta.float()
    if use_gate_in_kernel:
        assert A_log is not None and dt_bias is not None
        g = -torch.exp(A_log.float()) * F.softplus(g + dt_bias.float())
    if use_beta_sigmoid_in_kernel:
        beta = torch.sigmoid(beta) * (2 if allow_neg_eigval else 1)
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    h0 = initial_state.transpose(-1, -2) if (initial_state is not None and state_v_first) else initial_state
    o, state = naive_recurrent_gated_delta_rule(
        q, k, v.float(), beta, g, scale=scale, initial_state=h0, output_final_state=output_final_state
    )
    if state is not None and state_v_first:
        state = state.transpose(-1, -2).contiguous()
    return o.to(v.dtype), state


def naive_kda(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    lower_bound: float | None = None,
    state_v_first: bool = False,
    cu_seqlens: Tensor | None = None,
    A_log: Tensor | None = None,
    dt_bias: Tensor | None = None,
    **unused: Any,
) -> tuple[Tensor, Tensor | None]:
    """fla's ``chunk_kda`` signature over fla's ``naive_kda_gate`` / ``naive_kda_lowerbound_gate`` (the
    gate its kernel computes in place, ``lower_bound`` choosing which) and ``naive_recurrent_kda``."""
    from fla.ops.kda.gate import naive_kda_gate, naive_kda_lowerbound_gate
    from fla.ops.kda.naive import naive_recurrent_kda

    if cu_seqlens is not None:
        raise InvalidArgument("the naive core runs dense batches only; give the example varlen='none'")
    if use_gate_in_kernel:
        if lower_bound is not None:
            g = naive_kda_lowerbound_gate(g, A_log, dt_bias, lower_bound)
        else:
            assert A_log is not None
            g = naive_kda_gate(g, A_log, dt_bias)
    beta = beta.float()
    if use_beta_sigmoid_in_kernel:
        beta = torch.sigmoid(beta) * (2 if allow_neg_eigval else 1)
    q, k = q.float(), k.float()
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    h0 = initial_state.transpose(-1, -2) if (initial_state is not None and state_v_first) else initial_state
    o, state = naive_recurrent_kda(
        q, k, v.float(), g.float(), beta, scale=scale, initial_state=h0, output_final_state=output_final_state
    )
    if state is not None and state_v_first:
        state = state.transpose(-1, -2).contiguous()
    return o.to(v.dtype), state


def _v_first(state: Tensor | None, state_v_first: bool) -> Tensor | None:
    # fla's state_v_first keeps states [N, H, V, K]; its naive cores keep [N, H, K, V]
    return state.transpose(-1, -2).contiguous() if (state is not None and state_v_first) else state


def _dense(cu_seqlens: Tensor | None) -> None:
    if cu_seqlens is not None:
        raise InvalidArgument("the naive core runs dense batches only; give the example varlen='none'")


def naive_gla(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    gk: Tensor | None = None,
    g: Tensor | None = None,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Tensor | None = None,
    **unused: Any,
) -> tuple[Tensor, Tensor | None]:
    """fla's ``fused_recurrent_gla`` / ``chunk_gla`` / ``fused_chunk_gla`` signatures (the gate ``gk`` or
    ``g``) over fla's ``naive_recurrent_gla``, whose scale is fixed at ``K ** -0.5`` (a given scale
    rescales q)."""
    from fla.ops.gla.naive import naive_recurrent_gla

    _dense(cu_seqlens)
    gate = gk if gk is not None else g
    assert gate is not None
    K = q.shape[-1]
    if scale is not None:
        q = q * (scale * K**0.5)
    h0 = _v_first(initial_state, state_v_first)
    o, state = naive_recurrent_gla(q, k, v, gate, initial_state=h0, output_final_state=output_final_state)
    return o.to(v.dtype), _v_first(state, state_v_first)


def naive_simple_gla(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Tensor | None = None,
    **unused: Any,
) -> tuple[Tensor, Tensor | None]:
    """fla's ``chunk_simple_gla`` / ``fused_recurrent_simple_gla`` signatures (one gate per head) over
    fla's ``naive_recurrent_simple_gla``."""
    from fla.ops.simple_gla.naive import naive_recurrent_simple_gla

    _dense(cu_seqlens)
    h0 = _v_first(initial_state, state_v_first)
    o, state = naive_recurrent_simple_gla(
        q, k, v, g, scale=scale, initial_state=h0, output_final_state=output_final_state
    )
    return o.to(v.dtype), _v_first(state, state_v_first)


def _additive_gate(x: Tensor, z0: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """fla's ``fla.ops.gsa.gate.fused_additive_gate`` on a dense batch, restated from its kernel (the
    Triton interpreter cannot run it: it passes ``None`` for an unused pointer): ``z`` the running
    ``logsumexp`` of ``x`` over time after ``z0``, ``k = exp(x - z)``, the log decay ``g = z[t-1] - z[t]``
    (0 where ``z[t-1]`` is ``-inf``: the first token without ``z0``), the final ``z`` [N, 1, H, K]."""
    x = x.float()
    z = x.logcumsumexp(1)
    if z0 is not None:
        z = torch.logaddexp(z, z0.float())
    first = z0.float() if z0 is not None else torch.full_like(z[:, :1], float("-inf"))
    prev = torch.cat((first, z[:, :-1]), 1)
    g = torch.where(prev == float("-inf"), torch.zeros_like(z), prev - z)
    final = z[:, -1:] if x.shape[1] else first
    return torch.exp(x - z), g, final


def naive_lightnet(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float | None = None,
    initial_state: Any = None,
    output_final_state: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Tensor | None = None,
    **unused: Any,
) -> tuple[Tensor, tuple[Tensor | None, Tensor]]:
    """fla's ``fused_recurrent_lightnet`` / ``chunk_lightnet`` as fla composes them (fla ships no naive
    LightNet): fla's additive gate (:func:`_additive_gate`), then fla's naive GLA recurrence
    (:func:`naive_gla`). fla 0.5.2's layer computes that gate itself (in torch) and calls the GLA cores,
    which :func:`naive_gla` replaces there."""
    _dense(cu_seqlens)
    h0, z0 = (None, None) if initial_state is None else initial_state
    k, g, zt = _additive_gate(k, z0)
    o, ht = naive_gla(
        q, k.to(v.dtype), v, gk=g.to(v.dtype), scale=scale, initial_state=h0,
        output_final_state=output_final_state, state_v_first=state_v_first,
    )  # fmt: skip
    return o, (ht, zt)


_GLA_CORES = {"fused_recurrent_gla": naive_gla, "chunk_gla": naive_gla, "fused_chunk_gla": naive_gla}

#: family -> (fla's layer module, {the core names it may call: their naive adapter}); a name the
#: installed version's module does not hold is left alone (0.5.2's LightNet calls the GLA cores)
_CORES: dict[str, tuple[str, dict[str, Any]]] = {
    "gated_deltanet": (
        "fla.layers.gated_deltanet",
        {
            "chunk_gated_delta_rule": naive_gated_delta_rule,
            "fused_recurrent_gated_delta_rule": naive_gated_delta_rule,
        },
    ),
    "kda": ("fla.layers.kda", {"chunk_kda": naive_kda, "fused_recurrent_kda": naive_kda}),
    "gla": ("fla.layers.gla", _GLA_CORES),
    "simple_gla": (
        "fla.layers.simple_gla",
        {"chunk_simple_gla": naive_simple_gla, "fused_recurrent_simple_gla": naive_simple_gla},
    ),
    "lightnet": (
        "fla.layers.lightnet",
        {"fused_recurrent_lightnet": naive_lightnet, "chunk_lightnet": naive_lightnet, **_GLA_CORES},
    ),
}
FAITHFUL_FAMILIES = tuple(_CORES)


def unfaithful_reason(family: str) -> str | None:
    """Why ``family`` cannot be checked against fla on this machine, or ``None``."""
    if importlib.util.find_spec("fla") is None:
        return "flash-linear-attention is not installed (pip install gdn-equiv[fla])"
    if family not in _CORES:
        return f"no naive-core adapter for {family!r} yet (adapted: {', '.join(FAITHFUL_FAMILIES)})"
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        return "fla's convs and norms need a GPU or TRITON_INTERPRET=1 (set before triton is imported)"
    return None


@contextlib.contextmanager
def naive_cores(family: str) -> Iterator[None]:
    """fla's ``family`` layer runs fla's naive core for the block; on a CPU, Triton's autotuner picks
    a kernel's first config (the interpreter has no benchmarker; every config computes the same)."""
    module = importlib.import_module(_CORES[family][0])
    swaps = {name: fn for name, fn in _CORES[family][1].items() if hasattr(module, name)}
    if not swaps:  # a version whose layer calls a core no adapter covers: its own would run unseen
        raise InvalidArgument(f"{module.__name__} calls none of {sorted(_CORES[family][1])}: no naive core to swap in")
    saved = {name: getattr(module, name) for name in swaps}
    patched_bench = None
    if not torch.cuda.is_available():
        from triton.runtime import autotuner

        patched_bench = autotuner.Autotuner.__dict__.get("do_bench")
        autotuner.Autotuner.do_bench = property(lambda self: lambda fn, quantiles=None, **kw: [0.0, 0.0, 0.0])
    for name, fn in swaps.items():
        setattr(module, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(module, name, fn)
        if patched_bench is not None:
            from triton.runtime import autotuner

            autotuner.Autotuner.do_bench = patched_bench


@dataclass(frozen=True)
class Difference:
    """One compared tensor: fla's and our largest distance from the fp64 truth, and the bar fla's must
    stay under (:func:`gdn_equiv.harness.compare.assert_as_accurate`: ``ACCURACY_FACTOR`` x ours plus one unit)."""

    name: str
    fla_error: float
    our_error: float
    bound: float


def _fla_layer(example: Example, defaults: bool, layer_cls: type | None, device: str) -> tuple[Any, Any]:
    family = get_family(example.family)
    ours = build_layer(example, layer_cls or family.layer_cls, device)
    if defaults:  # fla's class as a user builds it: its own ShortConvolution defaults
        theirs, _ = construct_layer(fla_class_of(example.family), example.family, example.config)
    else:
        theirs = build_fla_layer(example.config, family=example.family, pinnable=False)
    load_reference_state(theirs, ours.state_dict())  # fla's parameters take ours' dtype and device
    theirs.to(device).train(example.train)
    # GDN_EQUIV_FLA_AUTOTUNE=first holds here as in the fla target: without it every faithfulness row on a GPU
    # autotuned fla's conv and norm kernels over all their configs (80-92 s a row cold on the H100)
    pin_loaded_fla()
    return ours, theirs


def _distance(value: Tensor | None, truth: Tensor | None) -> float:
    if value is None or truth is None or not value.numel():
        return 0.0
    return float((value.double() - truth.double()).abs().max())


def check_faithful(
    example: Example, *, defaults: bool = False, layer_cls: type | None = None, device: str = "cpu"
) -> list[Difference]:
    """Our reference layer (``layer_cls``: default the family's) and fla's layer of ``example``'s family
    (same state_dict) on the example's inputs: the output and, under ``example.grad``, dx and every
    parameter's gradient, each no further from our layer's fp64 twin than ``ACCURACY_FACTOR`` x the least
    accurate of our same-dtype runs (the project's bar for a whole layer of another implementation:
    :func:`gdn_equiv.model.example.accuracy_runs`). Both layers and the inputs live on ``device`` (fla's
    Triton kernels take no CPU tensors on a GPU machine; on a CPU they run in the interpreter).
    Raises :class:`gdn_equiv.harness.compare.Mismatch` on the first
    tensor past it; returns every compared tensor's distances."""

    reason = unfaithful_reason(example.family)
    if reason is not None:
        raise InvalidArgument(reason)
    if example.varlen != "none" or example.cache != "none" or example.use_cache:
        raise InvalidArgument(
            f"faithfulness compares a plain call (varlen='none', cache='none', use_cache=False), got {example.short()}"
        )
    ours, theirs = _fla_layer(example, defaults, layer_cls, device)
    backward = unit_cotangent_backward(example.seed + 11) if example.grad else None

    def inputs() -> Any:
        return materialize(example, ours, device)

    with naive_cores(example.family):
        got = run_layer(theirs, inputs(), backward)
    refs, truth = accuracy_runs(ours, inputs, backward, seed=example.seed)
    context = f"{example.short()} ({'fla defaults' if defaults else 'our per-conv facts'})"
    assert_run_as_accurate(got, refs, truth, paths=("fla", "ours"), context=context)
    named: list[tuple[str, int, str | None]] = [("output", 0, None), *([("dx", 1, None)] if example.grad else [])]
    named += [(f"grad.{n}", 2, n) for n in (got[2] if example.grad else {})]
    out = []
    for name, i, key in named:

        def pick(run: Any, i: int = i, key: str | None = key) -> Tensor | None:
            return run[i] if key is None else run[i].get(key)

        bar = least_accurate([pick(r) for r in refs], pick(truth))
        ours_error = _distance(bar, pick(truth))
        out.append(Difference(name, _distance(pick(got), pick(truth)), ours_error, ACCURACY_FACTOR * ours_error))
    return out
