"""The ground-truth backend: an explicit W-tap sum in fp32 (fp64 for fp64 operands), fixed order.

Every operation here is elementwise per channel, so a channel's result does not depend on how many
channels share the call: that is what makes fused == separate bitwise (SPEC P3). ``F.silu`` is not
used on purpose: on CPU its scalar tail loop and its vector body round differently (measured on
torch 2.13: 12 of 1000 outputs change when the same values sit at another offset), while
``exp``, ``add`` and ``div`` give the same bits at every offset. Activations come from the registry
(:mod:`gdn_equiv.model.conv_ops`), so a registered one runs here with no change to this file.
"""

from __future__ import annotations

from typing import Any

import torch

from gdn_equiv.model.backends.base import Backend, compute_dtype
from gdn_equiv.model.conv_ops import apply_activation, silu

Tensor = torch.Tensor
__all__ = ["BACKEND", "forward", "silu", "update"]


def _activate(y: Tensor, activation: str | None) -> Tensor:
    """The registered reference maths (:mod:`gdn_equiv.model.conv_ops`): silu as above, relu, relu2, plug-ins."""
    return apply_activation(y, activation)


def _per_channel_sum(t: Tensor, dtype: torch.dtype) -> Tensor:
    """``t [..., D]`` summed over every dim but the last, in fp64, rounded once to ``dtype``.

    Autograd's own reduction for a per-channel weight (``sum`` over the outer dims of ``[B, T, D]``)
    vectorises across channels, so a channel's order of accumulation, and its rounding, depends on
    how many channels share the call (seen: fp32, T=61, scale 100, a weight gradient 1.9e-5 apart
    between the fused and the separate call). Summed in fp64 and rounded once, a channel's gradient
    no longer depends on its neighbours (up to a double rounding, ~1e-8 per element)."""
    return t.to(torch.float64).sum(dim=tuple(range(t.dim() - 1))).to(dtype)


class _Scale(torch.autograd.Function):
    """``t * w`` (``w [D]`` per channel) with a weight gradient that does not depend on ``D``."""

    @staticmethod
    def forward(ctx: Any, t: Tensor, w: Tensor) -> Tensor:
        ctx.save_for_backward(t, w)
        return t * w

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        t, w = ctx.saved_tensors
        dt = g * w if ctx.needs_input_grad[0] else None
        dw = _per_channel_sum(t.to(torch.float64) * g.to(torch.float64), w.dtype) if ctx.needs_input_grad[1] else None
        return dt, dw


class _Shift(torch.autograd.Function):
    """``t + b`` (``b [D]`` per channel) with a bias gradient that does not depend on ``D``."""

    @staticmethod
    def forward(ctx: Any, t: Tensor, b: Tensor) -> Tensor:
        ctx.b_dtype = b.dtype
        return t + b

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        db = _per_channel_sum(g, ctx.b_dtype) if ctx.needs_input_grad[1] else None
        return g, db


def _taps(window: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, length: int) -> Tensor:
    """``window [B, W-1+T, D]`` (history then inputs) -> ``[B, T, D]``; one fixed summation order."""
    W = weight.shape[1]
    acc = _Scale.apply(window[:, 0:length], weight[:, 0])
    for j in range(1, W):
        acc = acc + _Scale.apply(window[:, j : j + length], weight[:, j])
    if bias is not None:
        acc = _Shift.apply(acc, bias)
    return _activate(acc, activation)


def _segment(
    x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """One run of sequences sharing a layout: ``x [B,T,D]`` (compute dtype), ``state [B,D,W]|None``."""
    B, T, D = x.shape
    W = weight.shape[1]
    if state is None:
        history = x.new_zeros(B, W, D)
    else:
        history = state.to(x.dtype).transpose(1, 2)  # [B, D, W] -> [B, W, D]
    window = torch.cat([history, x], dim=1)  # [B, W+T, D]
    y = _taps(window[:, 1:], weight, bias, activation, T)
    final = window[:, -W:].transpose(1, 2)  # [B, W, D] -> [B, D, W]: the last W inputs
    return y, final


def forward(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    output_final_state: bool,
    cu_seqlens: Tensor | None,
) -> tuple[Tensor, Tensor | None]:
    cdt = compute_dtype(x, weight)
    xc, w = x.to(cdt), weight.to(cdt)
    b = None if bias is None else bias.to(cdt)
    if cu_seqlens is None:
        y, final = _segment(xc, w, b, activation, initial_state)
    else:
        bounds = cu_seqlens.tolist()
        ys, finals = [], []
        for s in range(len(bounds) - 1):
            state = None if initial_state is None else initial_state[s : s + 1]
            ys_s, final_s = _segment(xc[:, bounds[s] : bounds[s + 1]], w, b, activation, state)
            ys.append(ys_s)
            finals.append(final_s)
        y = torch.cat(ys, dim=1)
        final = torch.cat(finals, dim=0)
    state_dtype = x.dtype if initial_state is None else initial_state.dtype
    return y.to(x.dtype), (final.to(state_dtype) if output_final_state else None)


def update(
    x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None
) -> tuple[Tensor, Tensor]:
    new_state = torch.cat([state[:, :, 1:], x.to(state.dtype).unsqueeze(-1)], dim=-1)  # [N, D, W]
    cdt = compute_dtype(x, weight)
    # The taps see x at its own precision, as forward's do; only the stored state is rounded to
    # state.dtype (reading x back from new_state would round it when the state is narrower).
    window = torch.cat([state[:, :, 1:].to(cdt), x.to(cdt).unsqueeze(-1)], dim=-1)
    window = window.transpose(1, 2)  # [N, D, W] -> [N, W, D]: taps in forward's layout
    b = None if bias is None else bias.to(cdt)
    y = _taps(window, weight.to(cdt), b, activation, 1)  # [N, 1, D]
    return y[:, 0].to(x.dtype), new_state


BACKEND = Backend(
    name="torch",
    forward=forward,
    update=update,
    description="explicit fp32 W-tap sum in torch; runs everywhere; the ground truth",
)
