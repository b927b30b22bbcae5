"""Planted defects the property records name as their teeth (:mod:`gdn_equiv.harness.registry`).

Each is a defect a user could ship: a class mixed in front of a family's fused layer (the ``gdn_equiv``
target's ``defect=`` option) or a conv backend. Nothing here patches the guard or the code under test;
the defect is the implementation. ``tests/test_registry.py`` runs every record against each of its teeth
and requires a catch; ``tests/test_teeth.py`` holds the family-specific ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
import time
from typing import Any

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.planted_guards import GUARD_DEFECTS
from gdn_equiv.model.backends import CAUSAL_CONV1D, Backend, Capabilities, causal_conv1d, get_backend
from gdn_equiv.model.backends import torch_backend as tb
from gdn_equiv.model.conv_ops import apply_activation, apply_conv_facts
from gdn_equiv.model.families.gated_deltanet import GatedDeltaNet, compute_dtype, delta_rule
from gdn_equiv.model.families.lightnet import LightNetAttention
from gdn_equiv.model.guard import decide
from gdn_equiv.model.reference import RMSNorm, repad

__all__ = [
    "BACKENDS",
    "COMBINATION_BACKENDS",
    "LAX_CAUSAL_CONV1D",
    "LAYER_DEFECTS",
    "STRICT_CAUSAL_CONV1D",
    "defect_family",
    "fused_biases",
    "fused_conv",
    "fused_weights",
]


def fused_conv(
    layer: Any,
    proj: Any,
    call: Any,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    activation: Any = "own",
    sizes: list[int] | None = None,
) -> tuple[torch.Tensor, ...]:
    """The fused conv as the real fused path runs it, with the weight, bias, activation or split sizes
    a planted defect chooses."""
    first = layer.convs()[0]
    x = proj.conv_in if call.conv_mask is None else proj.conv_in * call.conv_mask.unsqueeze(-1)
    act = first.activation if activation == "own" else activation
    y, _ = causal_conv1d(x, weight, bias, act, backend=first.backend)
    y = apply_conv_facts(y, first.extras())
    return tuple(t.contiguous() for t in torch.split(y, sizes or [c.channels for c in layer.convs()], dim=-1))


def fused_weights(layer: Any) -> torch.Tensor:
    return torch.cat([c.weight[:, 0] for c in layer.convs()], dim=0)


def fused_biases(layer: Any) -> torch.Tensor | None:
    return torch.cat([c.bias for c in layer.convs()]) if layer.conv_bias else None


class GuardIgnoresVarlen:
    """The guard fuses packed sequences: one conv over the packed tokens leaks state across them."""

    guard = staticmethod(lambda layer, call: decide(layer, dataclasses.replace(call, varlen=False)))


class AutoIgnoresDecision:
    """``prologue='auto'`` always runs the separate convs: outputs stay right, the fusion never happens."""

    def _prologue(self, proj: Any, call: Any, use_cache: Any, prologue: str = "auto", **kwargs: Any) -> Any:
        return super()._prologue(proj, call, use_cache, "separate" if prologue == "auto" else prologue, **kwargs)  # type: ignore[misc]


class FusedDropsVBias:
    """The fused conv adds q's and k's biases but not v's."""

    def _fused_prologue(self, proj: Any, call: Any) -> Any:
        *rest, last = self.convs()  # type: ignore[attr-defined]
        bias = torch.cat([*(c.bias for c in rest), torch.zeros_like(last.bias)]) if self.conv_bias else None  # type: ignore[attr-defined]
        return fused_conv(self, proj, call, fused_weights(self), bias)


class FusedDetachesConvWeights:
    """The fused conv's weights are detached: no gradient reaches the conv parameters."""

    def _fused_prologue(self, proj: Any, call: Any) -> Any:
        return fused_conv(self, proj, call, fused_weights(self).detach(), fused_biases(self))


class FallbackForgetsConvCache:
    """The separate path writes no conv state into the cache."""

    def _separate_prologue(self, proj: Any, call: Any, use_cache: Any) -> Any:
        outs, states = super()._separate_prologue(proj, call, use_cache)  # type: ignore[misc]
        return outs, tuple(None for _ in states)


#: name -> class mixed in front of the family's fused layer (``get_target("gdn_equiv", defect=...)``)
LAYER_DEFECTS: dict[str, type] = {
    "guard-ignores-cu-seqlens": GuardIgnoresVarlen,
    "auto-ignores-decision": AutoIgnoresDecision,
    "fused-drops-v-bias": FusedDropsVBias,
    "fused-detaches-weights": FusedDetachesConvWeights,
    "fallback-forgets-conv-cache": FallbackForgetsConvCache,
}
# guards (issue #53): P1's planted guards, too lax and too strict for each condition
LAYER_DEFECTS.update(GUARD_DEFECTS)


def _scaled(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """Every output 1% too large: past every tolerance of the table, bitwise self-consistent."""
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return y * 1.01, final


def _wide_rounding(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """Channel-count-dependent rounding: calls wider than 16 channels (the fused one) round every output one unit
    in the last place up, in the output's own dtype (a scale such as 1 + 2^-20 would vanish in fp16 and bf16)."""
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return (torch.nextafter(y, torch.full_like(y, math.inf)) if x.shape[-1] > 16 else y), final


#: name -> a defective conv backend (register it with :func:`gdn_equiv.model.backends.registered`)
BACKENDS: dict[str, Backend] = {
    "planted-scaled": Backend("planted-scaled", forward=_scaled, update=tb.update),
    "planted-wide-rounding": Backend("planted-wide-rounding", forward=_wide_rounding, update=tb.update),
}


# ---- defects only where regions meet (gdn_equiv.suite.test_combinations reaches them by construction)


def _grad_taken(*tensors: Any) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _short_state_grad(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """A kernel whose backward-saving variant loads the initial state one slot off, a code path taken only
    when ``T < W`` (the window reaches into the state), an initial state is given, gradients are taken and
    no ``cu_seqlens`` is given: each region on its own runs the right code."""
    T, W = x.shape[1], weight.shape[-1]
    if T < W and initial_state is not None and cu_seqlens is None and _grad_taken(x, weight, initial_state):
        initial_state = torch.cat([initial_state[..., 1:], initial_state[..., -1:]], dim=-1)
    return tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)


def _short_state_grad_no_final(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """As :func:`_short_state_grad`, and only in the variant that writes no final state (the one a layer
    runs on a prefill without ``use_cache``): every conformance check that asks for the final state
    runs the right code."""
    if output_final_state:
        return tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return _short_state_grad(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)


#: name -> a conv backend wrong only at a combination of regions
COMBINATION_BACKENDS: dict[str, Backend] = {
    "planted-short-state-grad": Backend("planted-short-state-grad", forward=_short_state_grad, update=tb.update),
    "planted-short-state-grad-no-final": Backend(
        "planted-short-state-grad-no-final", forward=_short_state_grad_no_final, update=tb.update
    ),
}
BACKENDS.update(COMBINATION_BACKENDS)
#: two planted backends by ``module:attr`` (``--backend gdn_equiv.harness.planted:wide_rounding``): a process that
#: cannot share this one's registration (a HypoFuzz worker, a team's second host) loads them by name
wide_rounding = BACKENDS["planted-wide-rounding"]
scaled = BACKENDS["planted-scaled"]
#: the same, importable as ``--gdn-backend gdn_equiv.harness.planted:SHORT_STATE_GRAD`` (a fresh process)
SHORT_STATE_GRAD = COMBINATION_BACKENDS["planted-short-state-grad"]
SHORT_STATE_GRAD_NO_FINAL = COMBINATION_BACKENDS["planted-short-state-grad-no-final"]


# ---- a backend with declared limits, strict about them (SPEC §3 capabilities; the gate's CPU check)

#: causal-conv1d's limits (:data:`gdn_equiv.model.backends.CAUSAL_CONV1D`) on any device
STRICT_LIMITS = dataclasses.replace(CAUSAL_CONV1D, devices=None)


def _strict_forward(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """torch's conv, behind causal-conv1d's limits: a call outside them raises as the package does (a
    ``RuntimeError``, not the suite's ``InvalidArgument``), so a test that draws outside them fails."""
    reason = STRICT_LIMITS.refusal(x, weight, bias, activation, initial_state, cu_seqlens)
    if reason is not None:
        raise RuntimeError(f"strict causal-conv1d limits: {reason}")
    return tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)


def _strict_update(x: Any, state: Any, weight: Any, bias: Any, activation: Any) -> Any:
    reason = STRICT_LIMITS.refusal(x, weight, bias, activation, state, step=True)
    if reason is not None:
        raise RuntimeError(f"strict causal-conv1d limits: {reason}")
    return tb.update(x, state, weight, bias, activation)


#: ``--gdn-backend gdn_equiv.harness.planted:STRICT_CAUSAL_CONV1D``: the whole gate on a CPU with a backend that
#: has causal-conv1d's limits and refuses every call outside them. The gate passes on it only when every
#: property that compares results draws inside a backend's declared capabilities, so the GPU's false
#: alarms of that kind (widths, fp64, channel multiples, strides, bias layout, packed states) show here.
STRICT_CAUSAL_CONV1D = Backend(
    "strict-causal-conv1d",
    forward=_strict_forward,
    update=_strict_update,
    description="torch's conv behind causal-conv1d's declared limits, raising outside them (planted, CPU)",
    capabilities=STRICT_LIMITS,
)


def _lax_forward(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """Declares causal-conv1d's limits but answers every call; outside them, wrongly (the widths past 4 lose
    their oldest taps, packed sequences drop their initial states, odd channel counts their last channel)."""
    W = weight.shape[-1]
    if W > 4:
        weight = torch.cat([torch.zeros_like(weight[:, : W - 4]), weight[:, W - 4 :]], dim=-1)
    if cu_seqlens is not None and initial_state is not None:
        initial_state = torch.zeros_like(initial_state)
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    if x.shape[-1] % 8:
        y = torch.cat([y[..., :-1], torch.zeros_like(y[..., -1:])], dim=-1)
    return y, final


#: a planted defect for the refusal property: limits declared, calls outside them answered wrongly
LAX_CAUSAL_CONV1D = Backend(
    "planted-lax-limits",
    forward=_lax_forward,
    update=tb.update,
    description="declares causal-conv1d's limits, answers outside them wrongly (planted)",
    capabilities=STRICT_LIMITS,
)
BACKENDS["planted-lax-limits"] = LAX_CAUSAL_CONV1D


# ---- in-house reference layers that silently differ from fla's (gdn_equiv.harness.faithful must catch them)


def _gated_deltanet() -> type:
    return GatedDeltaNet


def _tiled_heads(layer: Any, q: Any, k: Any, v: Any) -> Any:
    q = q.unflatten(-1, (layer.num_heads, layer.head_k_dim))
    k = k.unflatten(-1, (layer.num_heads, layer.head_k_dim))
    v = v.unflatten(-1, (layer.num_v_heads, layer.head_v_dim))
    group = layer.num_v_heads // layer.num_heads
    return q.repeat(1, 1, group, 1), k.repeat(1, 1, group, 1), v  # fla: head i_hv reads i_hv // group


def defect_family(layer_cls: type) -> str:
    """The family of a planted reference layer: the module of the in-house class it edits."""
    base = next(c for c in layer_cls.__mro__ if c.__module__.startswith("gdn_equiv.model.families."))
    return base.__module__.rsplit(".", 1)[-1]


def reference_defects() -> dict[str, type]:
    """name -> an in-house reference layer (Gated DeltaNet, or the family its class is of) with one edit
    upstream does not have."""
    import torch.nn.functional as F

    base = _gated_deltanet()

    class WrongHeadGrouping(base):  # type: ignore[misc, valid-type]
        """GVA value head ``i`` reads q/k head ``i % H`` (tiled) instead of fla's ``i // (HV // H)``."""

        def _recurrence(self, xs: Any, proj: Any, call: Any) -> Any:
            q, k, v = _tiled_heads(self, *xs)
            cdt = compute_dtype(q)
            g = -torch.exp(self.A_log.to(cdt)) * F.softplus(proj["a"].to(cdt) + self.dt_bias.to(cdt))
            return delta_rule(self, q, k, v, g, proj["b"], call)

    class VConvNoActivation(base):  # type: ignore[misc, valid-type]
        """The v conv's default activation is none (fla's ShortConvolution defaults to silu)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if self.use_short_conv:
                self.v_conv1d.activation = None

    class GateBeforeNorm(base):  # type: ignore[misc, valid-type]
        """The output gate multiplies before the RMSNorm instead of inside it (after normalising)."""

        def _epilogue(self, o: Any, proj: Any, call: Any) -> Any:
            if not self.use_gate:
                return super()._epilogue(o, proj, call)
            g = proj["g"].unflatten(-1, (self.num_v_heads, self.head_v_dim))
            o = self.o_norm(o * F.silu(g.to(o.dtype)), None)
            return repad(self.o_proj(o.flatten(-2)), call)

    class LightNetNormEps(LightNetAttention):
        """The output norm at the config's ``norm_eps``, as fla's module is built, where fla's forward
        runs it at ``rms_norm_swish_gate_linear``'s default 1e-6 (what this reference did before
        gdn_equiv.harness.faithful found it)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            norm = self.g_norm
            factory = {"device": norm.weight.device, "dtype": norm.weight.dtype}
            self.g_norm = RMSNorm(norm.weight.numel(), self.config.norm_eps, "swish", **factory)

    return {
        "reference-lightnet-norm-eps": LightNetNormEps,
        "reference-wrong-head-grouping": WrongHeadGrouping,
        "reference-v-conv-no-activation": VConvNoActivation,
        "reference-gate-before-norm": GateBeforeNorm,
    }


# ---- a slower kernel, bitwise right (``gdn-equiv bench compare`` must flag it; no property may)

#: how much more work the slowed forward does
SLOWDOWN = 0.2


def _slowed_forward(base: str) -> Any:
    def forward(
        x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
    ) -> Any:
        run = get_backend(base).forward
        if x.device.type == "cuda":
            # device work: the forward again over the first fifth of the sequence, discarded (seen by CUDA
            # events and captured by CUDA graphs alike; a host-side wait would be neither)
            out = run(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
            part = max(1, round(x.shape[1] * SLOWDOWN))
            with torch.no_grad():
                run(
                    x[:, :part].detach(),
                    weight.detach(),
                    None if bias is None else bias.detach(),
                    activation,
                    None,
                    False,
                    None,
                )
            return out
        # on a CPU the wall clock is the measure: spin for a fifth of the call's own time
        start = time.perf_counter()
        out = run(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
        until = time.perf_counter() + SLOWDOWN * (time.perf_counter() - start)
        while time.perf_counter() < until:
            pass
        return out

    return forward


def slowed(base: str) -> Backend:
    """``base``'s forward, bitwise, about :data:`SLOWDOWN` slower (the step kernel untouched): on a CPU it spins
    for a fifth of each call's wall time; on CUDA it repeats the forward over the first fifth of the sequence
    (forward+backward is slower by the forward's share of it)."""
    return Backend(
        f"planted-slow-{base}",
        forward=_slowed_forward(base),
        update=tb.update,
        unavailable=lambda: get_backend(base).unavailable(),
        description=f"{base}'s conv, {SLOWDOWN:.0%} slower (planted for bench compare)",
    )


#: ``gdn-equiv bench prologue --backend gdn_equiv.harness.planted:SLOW_TORCH`` (a CPU) or ``...:SLOW_TRITON``
#: (a GPU), compared with ``bench compare OLD NEW --pair torch=gdn_equiv.harness.planted:SLOW_TORCH``
SLOW_TORCH = slowed("torch")
SLOW_TRITON = slowed("triton")


# ---- kernels right in their outputs, wrong in their memory accesses (``--gdn-sanitize``'s teeth)

#: printed by :data:`SANITIZER_MARKED` where a real kernel would make a bad access: a fake compute-sanitizer
#: (tests/test_sanitize.py) turns it into a report, so the report-to-failing-example path runs on a CPU
SANITIZER_MARKER = "GDN-EQUIV-PLANTED-INVALID-READ"


def _planted_triton_forward(edge: int, race: int) -> Any:
    def forward(
        x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
    ) -> Any:
        plain = initial_state is None and cu_seqlens is None and x.stride(-1) == 1
        if not plain or _grad_taken(x, weight, bias):  # outside the planted kernel's reach: torch's conv
            return tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
        # y from the planted kernel; a final state asked for (the gate's forward checks ask for it) from torch's
        # conv: the planted access sits in y's kernel, which the gate's conformance calls must reach (on the
        # H100 a kernel run only for calls without a final state never ran in the sanitized gate: 15 examples
        # green under memcheck)
        final = tb.forward(x, weight, bias, activation, None, True, None)[1] if output_final_state else None
        # lazily: the kernels module imports triton, an optional extra
        from gdn_equiv.harness import _sanitizer_kernels as kernels

        B, T, D = x.shape
        W = weight.shape[-1]
        y = torch.empty(B, T, D, dtype=torch.float32, device=x.device)
        w = weight.contiguous()
        kernels.planted_conv_fwd_kernel[(B, T)](
            x, w, w if bias is None else bias.contiguous(), y, T, D, x.stride(0), x.stride(1), y.stride(0),
            y.stride(1), W=W, HAS_BIAS=bias is not None, BD=1 << D.bit_length(), EDGE=edge, RACE=race,
            num_warps=4,
        )  # fmt: skip
        return apply_activation(y, activation).to(x.dtype), final

    return forward


def _triton_unavailable() -> str | None:
    return get_backend("triton").unavailable()


def _race_unavailable() -> str | None:
    if not torch.cuda.is_available():
        return "the planted shared-memory race is inline PTX: it needs a CUDA device (not Triton's interpreter)"
    return _triton_unavailable()


def _marked_forward(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """torch's conv, saying :data:`SANITIZER_MARKER` on stderr for a call of 3 or more time steps."""
    if x.shape[1] >= 3:
        print(f"{SANITIZER_MARKER} T={x.shape[1]}", file=sys.stderr, flush=True)
    return tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)


def sanitizer_marked_call(T: int) -> bool:
    """One call of :data:`SANITIZER_MARKED` over ``T`` steps (a module-level function a sanitized process can run)."""
    x = torch.arange(4 * T, dtype=torch.float32).reshape(1, T, 4)
    y, _ = SANITIZER_MARKED.forward(x, torch.ones(4, 3), None, "silu", None, False, None)
    return bool(torch.isfinite(y).all())


def sanitizer_probe(backend: Backend, B: int = 2, T: int = 8, D: int = 40, dtype: str = "float32") -> bool:
    """One forward of ``backend`` on fresh contiguous CUDA tensors, checked against torch's conv (a module-level
    function a sanitized process can run, handed the backend's object: ``tools/sanitize_teeth.py``)."""
    gen = torch.Generator("cuda").manual_seed(0)
    kind = getattr(torch, dtype)
    x = torch.randn(B, T, D, device="cuda", generator=gen).to(kind)
    weight = torch.randn(D, 4, device="cuda", generator=gen).to(kind)
    bias = torch.randn(D, device="cuda", generator=gen).to(kind)
    y = backend.forward(x, weight, bias, "silu", None, False, None)[0]
    want = tb.forward(x, weight, bias, "silu", None, False, None)[0]
    torch.cuda.synchronize()
    return bool(torch.allclose(y.float(), want.float(), rtol=1e-3, atol=1e-3))


#: our fused conv's arithmetic as one simple Triton kernel (no state, no packing, no gradients: torch's conv
#: answers those calls), clean: ``compute-sanitizer`` must find nothing in it
SANITIZER_CLEAN = Backend(
    "planted-sanitizer-clean",
    forward=_planted_triton_forward(edge=0, race=0),
    update=tb.update,
    unavailable=_triton_unavailable,
    description="a simple Triton conv, clean under compute-sanitizer (the control of the planted ones)",
)
#: the same kernel reading one element past its block's edge, masked back: bitwise right, memcheck's to find
SANITIZER_OOB = Backend(
    "planted-oob-read",
    forward=_planted_triton_forward(edge=1, race=0),
    update=tb.update,
    unavailable=_triton_unavailable,
    description="reads one element past its block's edge, masked back to the right value (planted, memcheck)",
)
#: the same kernel with an unsynchronised shared-memory store and load between warps: bitwise right,
#: racecheck's to find
SANITIZER_RACE = Backend(
    "planted-shared-race",
    forward=_planted_triton_forward(edge=0, race=1),
    update=tb.update,
    unavailable=_race_unavailable,
    description="a shared-memory read-after-write race between warps, its value never written (planted, racecheck)",
)
#: torch's conv that prints :data:`SANITIZER_MARKER` where the OOB kernel would read past its edge (T >= 3)
SANITIZER_MARKED = Backend(
    "planted-sanitizer-marked",
    forward=_marked_forward,
    update=tb.update,
    description="torch's conv printing a marker a fake compute-sanitizer reports (planted, CPU tests)",
)


# ---- declarations (issue #49): torch's conv behind any declaration, right or wrong on either side of it

#: how a declared backend answers: right inside and refusing outside (a correct narrow kernel), wrong inside
#: (every output doubled and one too large, so its gradients are wrong too; refusing outside), or right
#: inside and answering every call outside wrongly (zeros: the plug-in of issue #49 that declared fp32 and
#: fp64 and returned zeros for fp16 and bf16)
DECLARED_KINDS = ("right", "wrong-inside", "wrong-outside")


def declared_backend(caps: Capabilities, kind: str = "right") -> Backend:
    """torch's conv declaring ``caps``, answering as ``kind`` (:data:`DECLARED_KINDS`) says. Named by kind and
    declaration (the gate's strategies are cached by backend name: one name, one declaration). A call outside
    is read by :meth:`Capabilities.refusal` (devices aside: the meta-test runs on the CPU); the right and
    wrong-inside kinds refuse it with :class:`InvalidArgument` naming the limit, as a careful kernel would."""
    if kind not in DECLARED_KINDS:
        raise InvalidArgument(f"unknown declared kind {kind!r}; known: {', '.join(DECLARED_KINDS)}")
    limits = dataclasses.replace(caps, devices=None)

    def answer(y: torch.Tensor, reason: str | None) -> torch.Tensor:
        if reason is not None:
            if kind == "wrong-outside":
                return torch.zeros_like(y)
            raise InvalidArgument(f"declared backend: {reason}")
        return 2 * y + 1 if kind == "wrong-inside" else y

    def forward(
        x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
    ) -> Any:
        reason = limits.refusal(x, weight, bias, activation, initial_state, cu_seqlens)
        if reason is not None and kind != "wrong-outside":
            answer(x, reason)  # raises before any arithmetic: a refusal, not a crash
        y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
        return answer(y, reason), final

    def update(x: Any, state: Any, weight: Any, bias: Any, activation: Any) -> Any:
        reason = limits.refusal(x, weight, bias, activation, state, step=True)
        if reason is not None and kind != "wrong-outside":
            answer(x, reason)
        y, new_state = tb.update(x, state, weight, bias, activation)
        return answer(y, reason), new_state

    digest = hashlib.sha1(repr(caps).encode()).hexdigest()[:10]
    return Backend(
        f"declared-{kind}-{digest}",
        forward=forward,
        update=update,
        description=f"torch's conv declaring {', '.join(caps.limits()) or 'everything'}; {kind} (planted)",
        capabilities=caps,
    )


def _raises_always(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    raise RuntimeError("planted: this kernel refuses every call")


def raising_backend(caps: Capabilities) -> Backend:
    """A backend that declares ``caps`` and raises on every call, inside them too (issue #49: one with a channel
    multiple of 3 passed the block-edge sweep, which compared nothing)."""
    digest = hashlib.sha1(repr(caps).encode()).hexdigest()[:10]
    return Backend(f"declared-raising-{digest}", forward=_raises_always, capabilities=caps)


def _ignores_initial_state(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """Answers as if no initial state were given (fla's ``cuda`` backend on the H100, issue #49)."""
    y, _ = tb.forward(x, weight, bias, activation, None, False, cu_seqlens)
    _, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return y, final


#: declares causal-conv1d's contiguous bias, takes every call, and ignores the initial state inside the limit
#: as outside it: a refusal finding on such a call must name the state, not the bias limit
IGNORES_INITIAL_STATE = Backend(
    "planted-ignores-initial-state",
    forward=_ignores_initial_state,
    update=tb.update,
    description="ignores the initial state of a call (planted; fla-cuda on the H100)",
    capabilities=Capabilities(contiguous_bias=True),
)


# values (issue #52), and lengths (issue #49) ----------------------------------------------------------
# Backends right on randn-like values of up to a few dozen tokens, wrong past the first time tile or near a
# dtype's limits. gdn_equiv.strategies.values draws the calls that reach them; tests/test_values.py runs the
# gate's properties on each and expects red (and torch green on the same draws).


def _fp16_past_64(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """A kernel whose second time tile (tokens 64 on) stores fp16 outputs 1% too large: every call of up to
    64 tokens, and every fp32/bf16 call, is right (issue #49's escaped defect)."""
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    if x.dtype != torch.float16 or x.shape[1] <= 64:
        return y, final
    return torch.cat([y[:, :64], y[:, 64:] * 1.01], dim=1), final


def _sequences(x: Any, initial_state: Any, cu_seqlens: Any) -> list[tuple[Any, Any]]:
    """``(x_s [1|B, T_s, D], state_s [.., D, W] | None)`` per sequence (one span for a dense call)."""
    from itertools import pairwise  # here: this block is appended whole (other helpers append theirs)

    if cu_seqlens is None:
        return [(x, initial_state)]
    bounds = [int(b) for b in cu_seqlens.tolist()]
    return [
        (x[:, s:e], None if initial_state is None else initial_state[i : i + 1])
        for i, (s, e) in enumerate(pairwise(bounds))
    ]


def _fp16_sum(x: Any, weight: Any, bias: Any, activation: Any, state: Any) -> Any:
    """The taps of one sequence summed in fp16: each product in fp32, every partial sum rounded to fp16."""
    B, T, D = x.shape
    W = weight.shape[-1]
    history = x.new_zeros(B, W - 1, D) if state is None else state[..., 1:].to(x.dtype).transpose(1, 2)
    window = torch.cat([history, x], dim=1).float()  # [B, W-1+T, D]
    acc = None
    for j in range(W):
        p = window[:, j : j + T] * weight[:, j].float()
        acc = p if acc is None else acc + p
        acc = acc.half().float()
    assert acc is not None
    if bias is not None:
        acc = (acc + bias.float()).half().float()
    return tb._activate(acc, activation).to(x.dtype)


def _fp16_accumulate(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """fp16 calls accumulate their taps in fp16 (fp32 products, every partial sum rounded to fp16): past
    fp16's largest value a partial sum overflows to inf where the fp32 sum is finite (issue #52)."""
    _, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    if x.dtype != torch.float16:
        return tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    ys = [_fp16_sum(xs, weight, bias, activation, s) for xs, s in _sequences(x, initial_state, cu_seqlens)]
    return torch.cat(ys, dim=1), final


def _flushed(t: Any) -> Any:
    """``t`` with its subnormal values (in its own dtype) flushed to zero."""
    if t is None:
        return None
    return torch.where(t.abs() < torch.finfo(t.dtype).tiny, torch.zeros_like(t), t)


def _flush_subnormals(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """Subnormal inputs, weights and states read as zero, and subnormal outputs stored as zero (a GPU's
    flush-to-zero mode): right on every value at or above each dtype's smallest normal one."""
    y, final = tb.forward(
        _flushed(x),
        _flushed(weight),
        _flushed(bias),
        activation,
        _flushed(initial_state),
        output_final_state,
        cu_seqlens,
    )
    if final is not None:  # the state still holds the inputs as given: the flush is in the arithmetic
        final = tb.forward(x, weight, bias, activation, initial_state, True, cu_seqlens)[1]
    return _flushed(y), final


def _flush_subnormals_update(x: Any, state: Any, weight: Any, bias: Any, activation: Any) -> Any:
    y, _ = tb.update(_flushed(x), _flushed(state), _flushed(weight), _flushed(bias), activation)
    return _flushed(y), tb.update(x, state, weight, bias, activation)[1]


def _drops_negative_zero(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """The final state written as ``state + 0.0`` (a zero-initialised buffer accumulated into): every value
    right, and a copied ``-0.0`` stored as ``+0.0``."""
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return y, None if final is None else final + 0.0


def _drops_negative_zero_update(x: Any, state: Any, weight: Any, bias: Any, activation: Any) -> Any:
    y, new_state = tb.update(x, state, weight, bias, activation)
    return y, new_state + 0.0


#: ``--gdn-backend gdn_equiv.harness.planted:FP16_PAST_64`` (and the others by their names) in a fresh process
FP16_PAST_64 = Backend("planted-fp16-past-64", forward=_fp16_past_64, update=tb.update)
FP16_ACCUMULATE = Backend("planted-fp16-accumulate", forward=_fp16_accumulate, update=tb.update)
FLUSH_SUBNORMALS = Backend("planted-flush-subnormals", forward=_flush_subnormals, update=_flush_subnormals_update)
DROPS_NEGATIVE_ZERO = Backend(
    "planted-drops-negative-zero", forward=_drops_negative_zero, update=_drops_negative_zero_update
)
#: name -> a conv backend wrong only past the first time tile or near a dtype's limits
VALUE_BACKENDS: dict[str, Backend] = {
    b.name: b for b in (FP16_PAST_64, FP16_ACCUMULATE, FLUSH_SUBNORMALS, DROPS_NEGATIVE_ZERO)
}
BACKENDS.update(VALUE_BACKENDS)


# run-to-run nondeterminism (issue #52's G5 flake: a counterexample found on the H100 that did not reproduce)


#: its own generator, seeded from the OS: a seed an example sets (torch.manual_seed) never makes the jitter repeat
_JITTER = torch.Generator().manual_seed(int.from_bytes(__import__("os").urandom(8), "little") >> 1)


def _jittered(
    x: Any, weight: Any, bias: Any, activation: Any, initial_state: Any, output_final_state: Any, cu_seqlens: Any
) -> Any:
    """torch's conv with every output element moved one bf16 ulp up or down, at random, per call: never the same
    bits twice in a row (as a backward with atomics is not, on a GPU). Past fp32's and fp16's tolerances, so on
    those a forced-vs-separate comparison may look wrong on a state where fusion is exact: such a state is
    unstable as well, and set aside like the others."""
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return _jitter(y), final


_JITTER_CALLS = [0]


def reset_jitter(seed: int = 0) -> None:
    """Start :data:`JITTER`'s draws over from ``seed`` (a new process seeds them from the OS): a test that must be a
    fact of the code runs its search derandomized on these."""
    _JITTER.manual_seed(seed)
    _JITTER_CALLS[0] = 0


def _jitter(y: Any) -> Any:
    """``y`` with each element one bf16 ulp up or down at random; the first element's way alternates from call to call,
    so no two calls in a row agree, whatever the draws (a few-element output would otherwise repeat by chance)."""
    _JITTER_CALLS[0] += 1
    up = torch.rand(y.shape, generator=_JITTER) < 0.5
    if up.numel():
        up.view(-1)[0] = bool(_JITTER_CALLS[0] % 2)
    # one ulp of bf16, the coarsest dtype, at each value: an ulp of a finer one is often rounded away by the
    # layer's casts and its own roundings (an fp32 ulp under an fp16 layer), and the two runs then agree by chance
    y0 = y.detach().to(torch.bfloat16)
    way = torch.where(up.to(y.device), torch.full_like(y0, math.inf), torch.full_like(y0, -math.inf))
    return y + (torch.nextafter(y0, way).to(y.dtype) - y0.to(y.dtype))


def _jittered_update(x: Any, state: Any, weight: Any, bias: Any, activation: Any) -> Any:
    y, new_state = tb.update(x, state, weight, bias, activation)
    return _jitter(y), new_state


#: ``gdn_equiv.harness.planted:JITTER``: P6's searches on it end ``nondeterministic``, never a flaky counterexample
JITTER = Backend("planted-jitter", forward=_jittered, update=_jittered_update)
