"""A second, independently written depthwise causal conv: the truth every backend is measured against.

The ``torch`` backend (:mod:`gdn_equiv.backends.torch_backend`) is the suite's reference *and* a
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
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

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
    "relu": F.relu,
    "relu2": lambda y: F.relu(y).square(),
}


def _activate(y: Tensor, activation: str | None) -> Tensor:
    own = _OWN_ACTIVATIONS.get(activation)
    if own is not None:
        return own(y)
    from gdn_equiv.conv_ops import get_activation

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
