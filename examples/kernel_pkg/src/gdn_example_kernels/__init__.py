"""A depthwise causal conv written the way a kernel repo would ship one, to gate with gdn-equiv.

:data:`CORRECT` follows the backend protocol of gdn-equiv (SPEC §3, ``gdn_equiv.model.backends.ConvBackend``):
an object with ``forward`` and ``update``. :mod:`gdn_example_kernels.broken` plants one defect each.
Arithmetic is per channel and elementwise (fp32, fp64 for fp64 operands), so a channel's result does
not depend on which channels share the call: the property the fused q|k|v prologue relies on.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def _silu(y: Tensor) -> Tensor:
    return y / (1 + torch.exp(-y))


def taps(window: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, order=None) -> Tensor:
    """``window [B, W-1+T, D]`` (history, then inputs) -> ``[B, T, D]``; ``order``: tap order (default 0..W-1)."""
    W = weight.shape[1]
    T = window.shape[1] - (W - 1)
    order = range(W) if order is None else order
    acc = None
    for j in order:
        term = window[:, j : j + T] * weight[:, j]
        acc = term if acc is None else acc + term
    if bias is not None:
        acc = acc + bias
    return acc if activation is None else _silu(acc)


def conv(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    output_final_state: bool,
    cu_seqlens: Tensor | None,
    *,
    history=None,
    bias_of=None,
    order=None,
) -> tuple[Tensor, Tensor | None]:
    """SPEC §3 forward; the keyword-only hooks let :mod:`broken` plant its defects."""
    fp64 = torch.float64 in (x.dtype, weight.dtype)
    cdt = torch.float64 if fp64 else torch.float32
    w = weight.to(cdt)
    b = None if bias is None else (bias_of(bias) if bias_of else bias).to(cdt)
    W = w.shape[1]
    bounds = [0, x.shape[1]] if cu_seqlens is None else cu_seqlens.tolist()
    ys, finals = [], []
    for s in range(len(bounds) - 1):
        xs = x[:, bounds[s] : bounds[s + 1]].to(cdt)  # [B, T_s, D]
        rows = slice(None) if cu_seqlens is None else slice(s, s + 1)
        if initial_state is None:
            state = xs.new_zeros(xs.shape[0], xs.shape[2], W)
        else:
            state = initial_state[rows].to(cdt)  # [B, D, W], oldest input first
        hist = (history or (lambda h: h))(state).transpose(1, 2)  # [B, W, D]
        window = torch.cat([hist, xs], dim=1)  # [B, W+T, D]
        ys.append(taps(window[:, 1:], w, b, activation, order))
        finals.append(window[:, -W:].transpose(1, 2))
    y = torch.cat(ys, dim=1).to(x.dtype)
    if not output_final_state:
        return y, None
    state_dtype = x.dtype if initial_state is None else initial_state.dtype
    return y, torch.cat(finals, dim=0).to(state_dtype)


def step(x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None):
    """SPEC §3 update: one token per sequence; ``state`` is left as it was."""
    y, new_state = conv(x.unsqueeze(1), weight, bias, activation, state, True, None)
    return y[:, 0], new_state


class Conv:
    """The kernel as a gdn-equiv backend object (``forward`` + ``update``)."""

    forward = staticmethod(conv)
    update = staticmethod(step)

    @staticmethod
    def unavailable() -> str | None:
        return None


CORRECT = Conv()
