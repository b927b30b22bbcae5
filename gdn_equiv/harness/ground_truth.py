"""A second, independently written depthwise causal conv: the truth every backend is measured against.

The ``torch`` backend (:mod:`gdn_equiv.model.backends.torch_backend`) is the suite's reference *and* a
backend, so a defect in it (taps in reverse order, the initial state read one slot off) would be
shared by both sides of every torch-relative comparison and go unseen. This module shares no code
with it: the conv is ``torch.nn.functional.conv1d`` (``groups = channels``, cross-correlation, so
tap ``W-1`` meets the current token, as in fla and causal-conv1d), in fp64, one sequence at a time.

Semantics (SPEC §3), per sequence ``s`` with inputs ``x_s [T_s, D]`` and state ``h_s [D, W]``
(zeros without ``initial_state``):

- the conv input is ``h_s[:, 1:]`` (the last ``W-1`` inputs before the sequence) followed by ``x_s``:
  the causal left padding of ``W-1``, filled from the state instead of zeros;
- ``y_s = act(conv1d(that, weight, bias))``, ``act`` = ``F.silu`` for ``silu``/``swish``, ``F.relu``
  for ``relu``, its square for ``relu2`` (written here again, not taken from the registry); a plug-in
  activation has no second definition, so its registered maths is used (in fp64);
- the final state is the last ``W`` columns of ``h_s`` followed by ``x_s`` (an empty sequence keeps
  its state; one shorter than ``W`` keeps the state's tail, or zeros, in front);
- ``update`` is ``forward`` of one token with ``initial_state = state``.

Everything is differentiable (plain autograd), so gradients of x, weight, bias and the initial state
come from the same definition.

The checks at the end (``check_forward``, ``check_gradients``, ``check_update``) measure a backend's
call against this truth within the §6 table; :mod:`gdn_equiv.suite.test_ground_truth` draws the calls
and runs them, in a worker process under ``--gdn-isolate`` (so they live here, importable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from gdn_equiv.harness.compare import assert_equivalent, assert_zero_signs, extreme_allowance
from gdn_equiv.model.backends import Backend, causal_conv1d, causal_conv1d_update
from gdn_equiv.model.conv_ops import get_activation
from gdn_equiv.strategies.values import cotangent_scale

if TYPE_CHECKING:
    from gdn_equiv.strategies import ConvCall

Tensor = torch.Tensor
F64 = torch.float64


def _one_sequence(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, state: Tensor) -> tuple:
    """``x [T, D]``, ``weight [D, W]``, ``state [D, W]`` (all fp64) -> ``(y [T, D], final [D, W])``."""
    D, W = weight.shape
    seq = torch.cat([state, x.t()], dim=1)  # [D, W + T]: the state's W inputs, then the sequence's
    if x.shape[0] == 0:  # an empty sequence: no output (conv1d refuses an input shorter than W)
        return x, seq[:, -W:]
    y = F.conv1d(seq[:, 1:].unsqueeze(0), weight.unsqueeze(1), bias, groups=D)[0]  # [D, T]
    return _activate(y, activation).t(), seq[:, -W:]


_OWN_ACTIVATIONS: dict[str | None, Any] = {
    None: lambda y: y,
    "silu": F.silu,
    "swish": F.silu,
    # relu's derivative at its kink is a convention, and the activation's registered definition fixes it:
    # where(y < 0, 0, y), slope 1 at +-0 (F.relu takes 0 there). A call whose pre-activations are exactly
    # zero (the negative-zero values) then judged every kernel by F.relu's convention: 6 of 6 dx off on torch
    # (CI, ConvCall(B=1, T=1, D=6, W=2, float32, relu, values='negative-zero')). Written here, not imported.
    "relu": lambda y: torch.where(y < 0, torch.zeros_like(y), y),
    "relu2": lambda y: F.relu(y).square(),
}


def _activate(y: Tensor, activation: str | None) -> Tensor:
    own = _OWN_ACTIVATIONS.get(activation)
    if own is not None:
        return own(y)

    return get_activation(activation).fn(y)  # a plug-in's activation: its registered maths


def conv1d_truth(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    initial_state: Tensor | None = None,
    cu_seqlens: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``x [B, T, D]`` -> ``(y [B, T, D], final_state [N, D, W])``, both fp64, whatever the inputs' dtype.

    ``cu_seqlens`` (``B == 1``) splits the packed tokens into ``N`` sequences; without it each batch row
    is one sequence. Inputs are cast to fp64 (so they keep autograd links to the caller's tensors).
    """
    B, T, D = x.shape
    W = weight.shape[1]
    xd, wd = x.to(F64), weight.to(F64)
    bd = None if bias is None else bias.to(F64)
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        bounds = [int(v) for v in cu_seqlens.tolist()]
        spans = [(0, bounds[s], bounds[s + 1]) for s in range(len(bounds) - 1)]
    ys, finals = [], []
    for s, (row, start, end) in enumerate(spans):
        state = xd.new_zeros(D, W) if initial_state is None else initial_state[s].to(F64)
        y, final = _one_sequence(xd[row, start:end], wd, bd, activation, state)
        ys.append(y)
        finals.append(final)
    if cu_seqlens is None:
        y = torch.stack(ys, dim=0)
    else:
        y = torch.cat(ys, dim=0).unsqueeze(0)
    return y, torch.stack(finals, dim=0)


def update_truth(
    x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None = None, activation: str | None = None
) -> tuple[Tensor, Tensor]:
    """One decode step: ``x [N, D]``, ``state [N, D, W]`` -> ``(y [N, D], new_state [N, D, W])`` in fp64."""
    y, new_state = conv1d_truth(x.unsqueeze(1), weight, bias, activation, state)
    return y[:, 0], new_state


def gated_deltanet_truth(layer: Any, x: Tensor, *, beta_scale: float | None = None) -> Tensor:
    """A Gated DeltaNet layer's output: SPEC §2 written out independently, token by token in fp64, from
    ``layer``'s parameters only (no cache, mask or ``cu_seqlens``; a conv activation is silu or none).

    Uses ``F.conv1d`` (groups = channels, left padding) for the short convs and an explicit per-token
    loop for the recurrence; shares no code with ``gdn_equiv.model.reference`` or ``gdn_equiv.model.core``.
    ``x [B, T, H]``; returns ``[B, T, H]`` in fp64.
    """
    d = torch.float64
    x = x.to(d)
    B, T, _ = x.shape
    Hk, Hv, Dk, Dv = layer.num_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim

    def lin(mod: Any, inp: Tensor) -> Tensor:
        return inp @ mod.weight.to(d).T

    q, k, v = lin(layer.q_proj, x), lin(layer.k_proj, x), lin(layer.v_proj, x)
    if layer.use_short_conv:
        outs = []
        for conv, inp in zip((layer.q_conv1d, layer.k_conv1d, layer.v_conv1d), (q, k, v), strict=True):
            W = conv.weight.shape[-1]
            bias = None if conv.bias is None else conv.bias.to(d)
            y = F.conv1d(F.pad(inp.transpose(1, 2), (W - 1, 0)), conv.weight.to(d), bias, groups=inp.shape[-1])
            y = y.transpose(1, 2)
            outs.append(y if conv.activation is None else y * torch.sigmoid(y))
        q, k, v = outs
    else:
        q, k, v = (t * torch.sigmoid(t) for t in (q, k, v))
    q, k, v = q.reshape(B, T, Hk, Dk), k.reshape(B, T, Hk, Dk), v.reshape(B, T, Hv, Dv)
    q = q / torch.sqrt((q**2).sum(-1, keepdim=True) + 1e-6)
    k = k / torch.sqrt((k**2).sum(-1, keepdim=True) + 1e-6)
    a, b = lin(layer.a_proj, x), lin(layer.b_proj, x)  # [B, T, Hv]
    g = -torch.exp(layer.A_log.to(d)) * F.softplus(a + layer.dt_bias.to(d))
    beta = torch.sigmoid(b) * (beta_scale if beta_scale is not None else (2.0 if layer.allow_neg_eigval else 1.0))
    o = torch.zeros(B, T, Hv, Dv, dtype=d)
    group = Hv // Hk
    for bi in range(B):
        for h in range(Hv):
            S = torch.zeros(Dv, Dk, dtype=d)
            for t in range(T):
                kt, qt = k[bi, t, h // group], q[bi, t, h // group]
                S = torch.exp(g[bi, t, h]) * S
                u = beta[bi, t, h] * (v[bi, t, h] - S @ kt)
                S = S + torch.outer(u, kt)
                o[bi, t, h] = S @ (qt * Dk**-0.5)
    y = o * torch.rsqrt((o**2).mean(-1, keepdim=True) + layer.o_norm.eps) * layer.o_norm.weight.to(d)
    if layer.use_gate:
        gate = lin(layer.g_proj, x).reshape(B, T, Hv, Dv)
        act = layer.config.output_gate_activation
        y = y * gate * torch.sigmoid(gate) if act in ("swish", "silu") else y * torch.sigmoid(gate)
    return y.reshape(B, T, Hv * Dv) @ layer.o_proj.weight.to(d).T


# ---- a backend's call against the truth (the suite's ground-truth properties) ---------------------------


def close_to_truth(
    actual: torch.Tensor | None,
    truth: torch.Tensor,
    name: str,
    backend: str,
    call: ConvCall,
    *,
    summed: bool = False,
    context: object = None,
) -> None:
    """``actual`` against the fp64 truth rounded to ``actual``'s dtype, within the §6 table for it (``context``,
    default ``call``: what a mismatch names)."""
    expected = truth.detach().to(actual.dtype) if actual is not None else truth
    paths = (backend, "fp64 conv1d")
    # extreme values: the table's atol widened at their scale (compare.extreme_allowance); ``summed``: a sum
    # over the tokens (a gradient)
    extreme = getattr(call, "values", "randn") != "randn"
    extra = extreme_allowance(expected, summed_over_tokens=summed) if extreme else 0.0
    ctx = call if context is None else context
    assert_equivalent(actual, expected, name=name, paths=paths, exact=False, extra_atol=extra, context=ctx)


def _same_zeros(actual: torch.Tensor | None, truth: torch.Tensor, name: str, backend: str, call: ConvCall) -> None:
    """A state copies inputs: where the truth holds a zero, ``actual`` holds the same signed zero."""
    assert_zero_signs(actual, truth, name=name, paths=(backend, "fp64 conv1d"), context=call)


def check_forward(call: ConvCall, impl: Backend, device: str) -> None:
    """y and the final state of one call == the fp64 truth's, within §6. ``impl``: the backend's object, its
    caller's (in an isolation worker, the worker's own: gdn_equiv.harness.isolation.resolved)."""
    backend = impl.name
    t = call.tensors(device)
    y, final = causal_conv1d(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], True, t["cu_seqlens"], backend=impl
    )
    y_true, final_true = conv1d_truth(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], t["cu_seqlens"]
    )
    close_to_truth(y, y_true, "y", backend, call)
    s = impl.state_slots(call.W)  # the slots the backend declares meaningful
    close_to_truth(None if final is None else final[..., s], final_true[..., s], "final_state", backend, call)
    _same_zeros(None if final is None else final[..., s], final_true[..., s], "final_state", backend, call)


def check_gradients(call: ConvCall, impl: Backend, device: str) -> None:
    """Gradients of x, weight, bias and initial_state through y and the final state == the truth's."""
    backend = impl.name
    tensors = call.tensors(device)
    names = [n for n in ("x", "weight", "bias", "initial_state") if tensors[n] is not None]
    t = {k: (v.detach().clone().requires_grad_() if k in names else v) for k, v in tensors.items()}
    y, final = causal_conv1d(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], True, t["cu_seqlens"], backend=impl
    )
    if not y.requires_grad:
        raise AssertionError(f"backend {backend!r} returned y without a gradient (no backward)\nExample: {call}")
    assert final is not None  # asked for (output_final_state=True); the backend's outputs are checked
    gen = torch.Generator().manual_seed(call.seed + 11)
    dy = torch.randn(y.shape, generator=gen).to(y.dtype).to(device)
    dfinal = torch.randn(final.shape, generator=gen).to(final.dtype).to(device)
    dfinal[..., : impl.unused_state_slots] = 0  # no gradient into slots declared unused
    scale = cotangent_scale(call.values, call.B, call.T)  # huge inputs: gradients kept in range
    dy, dfinal = dy * scale, dfinal * scale
    grads = torch.autograd.grad((y, final), [t[n] for n in names], (dy, dfinal), allow_unused=True)
    # the truth from the same (low-precision) values, leaves of its own, same cotangents in fp64
    d = {k: (v.detach().to(torch.float64).requires_grad_() if k in names else v) for k, v in tensors.items()}
    y_t, final_t = conv1d_truth(d["x"], d["weight"], d["bias"], call.activation, d["initial_state"], d["cu_seqlens"])
    truths = torch.autograd.grad(
        (y_t, final_t), [d[n] for n in names], (dy.double(), dfinal.double()), allow_unused=True
    )
    for name, g, g_true in zip(names, grads, truths, strict=True):
        if g_true is None:  # the truth has no path to it (cannot happen with y and final both used)
            g_true = torch.zeros_like(d[name])
        if g is None:
            raise AssertionError(f"backend {backend!r} gave no gradient for {name}\nExample: {call}")
        close_to_truth(g, g_true, f"grad.{name}", backend, call, summed=True)


def check_update(call: ConvCall, impl: Backend, device: str) -> None:
    """The single-step update: y and the new state == the truth's one-token forward, within §6."""
    backend = impl.name
    t = call.tensors(device)
    x, state = t["x"][:, 0], t["initial_state"]
    y, new_state = causal_conv1d_update(x, state, t["weight"], t["bias"], call.activation, backend=impl)
    y_true, new_true = update_truth(x, state, t["weight"], t["bias"], call.activation)
    close_to_truth(y, y_true, "update.y", backend, call)
    s = impl.state_slots(call.W)
    close_to_truth(new_state[..., s], new_true[..., s], "update.new_state", backend, call)
    _same_zeros(new_state[..., s], new_true[..., s], "update.new_state", backend, call)
