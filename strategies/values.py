"""Two dimensions of a conv call beyond its shape: how long it runs, and what values it carries.

**Lengths past the time tiles** (issue #49). Kernels tile time: fla's conv (0.6.0) by ``chunk_size=64``,
this project's Triton kernels on a GPU by 64 rows (the forward in rows, the one-pass backward) and 128
(the serial and two-pass backward), 8 under the interpreter. A kernel wrong only past its first tile,
or only in its second, passes every call of up to 2W + 6 tokens. :func:`long_length` draws a length
past them (a tile edge past 64 up to the reach, or any length between): few such calls, each at one
sequence and a few channels, so they cost little on a CPU.

**Extreme values** (issue #52). Every other call draws randn-like values, where a kernel that
accumulates its taps in fp16, flushes subnormals to zero or loses a tap to cancellation can agree
with the reference to the last bit. :data:`VALUE_KINDS` names the other values a call may carry
(:attr:`gdn_equiv.strategies.ConvCall.values`); :func:`extreme_values` makes them from the randn
tensors, deterministically from the call's seed:

- ``huge``: inputs and weights whose products and sums approach the output dtype's largest finite
  value. fp16 (computed in fp32, which cannot overflow on fp16 operands) sums past it, so a kernel
  that accumulates in fp16 overflows where the fp32 sum does not (and both round an overflowing sum
  to the same infinity); bf16 and fp32 share fp32's range, so there every sum stays below half of it
  whatever the order (no order-dependent overflow to blame on a correct kernel).
- ``subnormal``: inputs (and states) below the dtype's smallest normal value, against weights large
  enough to lift the products into the tolerance's view: a kernel that flushes them reads zero.
- ``negative-zero``: half of the inputs (and states) ``+0.0`` or ``-0.0``, the rest randn: the final
  state and the step's new state copy inputs, so they must keep the zero's sign.
- ``cancel``: constant runs of inputs against weights with one large tap and its negative: the
  large products cancel exactly in fp32 and leave the small taps; a sum rounded to fp16 or bf16 on
  the way loses them.
- ``constant``: each channel's inputs (and states) one value for the whole call.

Shrinking goes to ``randn`` (the first kind) and to the shortest length.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import torch
from hypothesis import strategies as st

from gdn_equiv.model.conv_ops import apply_activation
from gdn_equiv.strategies.sampling import sampled

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import Tensor

    from .convs import ConvCall

__all__ = [
    "LONG_MAX_CHANNELS",
    "LONG_ODDS",
    "TIME_TILES",
    "VALUE_KINDS",
    "cotangent_scale",
    "extreme_values",
    "long_length",
    "long_lengths",
    "swept_lengths",
    "swept_values",
    "value_kinds",
]

#: the time tiles of the kernels a GPU runs (fla's conv ``chunk_size``, this project's row chunks)
TIME_TILES = (64, 128, 256)
#: one call in this many is long (past the first tile), when a reach is given
LONG_ODDS = 6
#: a long call's channels at most (its cost is in T, not D)
LONG_MAX_CHANNELS = 16
#: the values a call may carry; the first is where shrinking goes
VALUE_KINDS = ("randn", "huge", "subnormal", "negative-zero", "cancel", "constant")
#: one call in this many carries extreme values (a kind other than ``randn``), when kinds are given
EXTREME_ODDS = 3


def long_lengths(reach: int) -> tuple[int, ...]:
    """The lengths at the time tiles' edges past the first tile, up to ``reach``: 65, 127-129, 255-257."""
    edges = {e + d for e in TIME_TILES for d in (-1, 0, 1)} | {TIME_TILES[0] + 1}
    return tuple(sorted(t for t in edges if TIME_TILES[0] < t <= reach))


def long_length(draw: st.DrawFn, reach: int) -> int:
    """A length past the first time tile (64), up to ``reach``: at a tile edge half the time, else any;
    shrinks to 65."""
    edges = long_lengths(reach)
    if not edges:
        raise ValueError(f"reach {reach} is not past the first time tile ({TIME_TILES[0]})")
    if draw(st.booleans()):
        return draw(st.integers(TIME_TILES[0] + 1, reach))
    return draw(sampled(edges))


@functools.lru_cache(maxsize=64)  # one strategy per kinds: see gdn_equiv.strategies.sampling.sampled
def value_kinds(kinds: tuple[str, ...] = VALUE_KINDS) -> st.SearchStrategy[str]:
    """``randn`` two draws in three, else one of the other ``kinds``; shrinks to ``randn``."""
    unknown = [k for k in kinds if k not in VALUE_KINDS]
    if unknown:
        raise ValueError(f"unknown value kinds {unknown}; known: {', '.join(VALUE_KINDS)}")
    extremes = [k for k in kinds if k != "randn"]
    if not extremes:
        return st.just("randn")
    # randn repeated first (shrinking goes to the first element), then each extreme once
    return st.sampled_from(("randn",) * ((EXTREME_ODDS - 1) * len(extremes)) + tuple(extremes))


# ---- making the values ----------------------------------------------------------------------------


def _signs(gen: torch.Generator, shape: tuple[int, ...]) -> Tensor:
    return torch.randint(0, 2, shape, generator=gen, dtype=torch.int64).to(torch.float64) * 2 - 1


def _uniform(gen: torch.Generator, shape: tuple[int, ...], lo: float, hi: float) -> Tensor:
    return lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float64)


def _magnitudes(gen: torch.Generator, t: Tensor, scale: float, *, short: bool = False) -> Tensor:
    """``t``'s shape, random signs, magnitudes in ``[scale/2, scale]``, in ``t``'s dtype; ``short``: with
    bf16's 8-bit mantissa (so that products and short sums of them are exact in fp32)."""
    shape = tuple(t.shape)
    v = _signs(gen, shape) * _uniform(gen, shape, 0.5, 1.0) * scale
    if short:  # rounded after scaling: a scale is no power of two
        v = v.to(torch.bfloat16).to(torch.float64)
    return v.to(t.dtype)


def _per_channel(t: Tensor, values: Tensor, dim: int) -> Tensor:
    """``values [D]`` broadcast over ``t`` along its channel dimension ``dim`` (``[B,T,D]``: -1, ``[N,D,W]``: 1)."""
    shape = [1] * t.dim()
    shape[dim] = -1
    return values.view(shape).expand(t.shape).to(t.dtype).clone()


def activation_room(activation: str | None, budget: float) -> float:
    """How large the conv's sums may be so that ``activation`` (its registered reference maths, in fp64) stays
    within ``budget`` at either sign: ``budget`` itself for silu, relu or none; for an activation that grows
    faster than its input (relu2 squares the sum), the largest power of two found by halving the exponent.
    ``huge`` values aim the sums at a dtype's limit; such an activation would carry them past it, where any
    kernel's fp32 arithmetic (torch's too) meets inf * 0 in the gradients: no question about the kernel."""
    room = budget
    while room > 1.0:
        probe = torch.tensor([room, -room], dtype=torch.float64)
        if bool((apply_activation(probe, activation).abs() <= budget).all()):
            return room
        room = 2.0 ** math.floor(math.log2(room) / 2)  # squares grow fast: halve the exponent, a power of two
    return room


def extreme_values(
    kind: str,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    state: Tensor | None,
    *,
    seed: int,
    activation: str | None = None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """``x [B,T,D]``, ``weight [D,W]``, ``bias [D]``, ``state [N,D,W]`` (randn-like, each in its dtype) with
    the values of ``kind`` (:data:`VALUE_KINDS`), same shapes and dtypes; ``randn`` returns them as they are.
    ``activation``: the call's, whose growth bounds the ``huge`` sums (:func:`activation_room`)."""
    if kind == "randn":
        return x, weight, bias, state
    if kind not in VALUE_KINDS:
        raise ValueError(f"unknown value kind {kind!r}; known: {', '.join(VALUE_KINDS)}")
    gen = torch.Generator().manual_seed(seed * 7 + 3)
    W = weight.shape[-1]
    out_max = torch.finfo(x.dtype).max
    if kind == "huge":
        # taps of about budget / W each (x near it, weights in [1/2, 1], the bias a tap of its own): fp16
        # (computed in fp32, exact enough) sums up to twice its largest value, so a kernel that accumulates
        # in fp16 overflows where the fp32 sum does not (an overflowing sum rounds to the same infinity in
        # both); bf16 and fp32 share fp32's range, so there every partial sum, in any order, stays under
        # half of it. Every value has bf16's 8-bit mantissa: products and sums of up to five such taps are
        # exact in fp32, whatever the order, so a correct kernel meets the fp64 truth to its last rounding
        budget = 2.0 * out_max if x.dtype == torch.float16 else 0.25 * out_max
        budget = min(budget, activation_room(activation, budget))
        x_mag = min(budget / W, 0.9 * out_max)
        x, weight = _magnitudes(gen, x, x_mag, short=True), _magnitudes(gen, weight, 1.0, short=True)
        if bias is not None:
            bias = _magnitudes(gen, bias, min(budget / W, 0.9 * torch.finfo(bias.dtype).max), short=True)
        if state is not None:
            state = _magnitudes(gen, state, min(x_mag, 0.9 * torch.finfo(state.dtype).max), short=True)
        return x, weight, bias, state
    if kind == "subnormal":
        # inputs (and states) log-uniform in [tiny/64, tiny/2] (subnormal), against weights that lift their
        # products past the tolerance table's atol (fp16: ~2e-3..0.1; bf16/fp32: ~2e-4..6e-3), held under
        # 1e36 so that no gradient's fp32 sum nears fp32's range
        tiny = torch.finfo(x.dtype).tiny
        x = _subnormals(gen, x, tiny / 64, tiny / 2)
        if state is not None:
            state_tiny = torch.finfo(state.dtype).tiny
            state = _subnormals(gen, state, state_tiny / 64, state_tiny / 2)
        w_mag = min(0.5 / tiny * 0.5, 0.25 * torch.finfo(weight.dtype).max / W, 1e36)
        weight = _magnitudes(gen, weight, w_mag)
        return x, weight, bias, state
    if kind == "negative-zero":
        x = _signed_zeros(gen, x)
        state = None if state is None else _signed_zeros(gen, state)
        return x, weight, bias, state
    if kind == "cancel":
        # constant runs of W or more tokens (each channel its own value per run), and weights with one tap
        # L and another -L: in a run the two products cancel exactly (x*L and x*-L round alike), leaving the
        # small taps; L*x ~ 32 keeps fp32's rounding of the partial sums (~2e-6) far inside its tolerance
        B, T, D = x.shape
        run = max(W, 4)
        levels = _magnitudes(gen, torch.empty(B, -(-T // run) + 1, D, dtype=torch.float64), 1.0)
        x = levels.repeat_interleave(run, dim=1)[:, :T].to(x.dtype)
        small = _magnitudes(gen, weight, 0.5)
        if W >= 2:
            big = _signs(gen, (weight.shape[0],)) * 32.0
            taps = torch.randperm(W, generator=gen)[:2]
            small[:, taps[0]] = big.to(weight.dtype)
            small[:, taps[1]] = (-big).to(weight.dtype)
        weight = small
        if state is not None:  # the state continues the first run, so the window cancels from the start
            state = _per_channel(state, levels[0, 0], 1)
        return x, weight, bias, state
    # constant: one value per channel for the whole call (and its states)
    values = x[0, 0].to(torch.float64) if x.numel() else torch.zeros(x.shape[-1], dtype=torch.float64)
    x = _per_channel(x, values, -1)
    state = None if state is None else _per_channel(state, values, 1)
    return x, weight, bias, state


def cotangent_scale(kind: str, B: int, T: int) -> float:
    """What a call's cotangents (``dy``, ``d final_state``) are multiplied by: ``huge`` inputs against a
    randn ``dy`` would sum a weight gradient of ``B*T`` huge terms, past fp32's range in some orders and
    not others; a power of two at or under ``1 / (4*B*T)`` keeps every such sum under the inputs' scale
    (and the cotangents' mantissas as they are). 1 for every other kind."""
    if kind != "huge":
        return 1.0
    return 2.0 ** -math.ceil(math.log2(4 * max(1, B * T)))


def _subnormals(gen: torch.Generator, t: Tensor, lo: float, hi: float) -> Tensor:
    """Random signs, magnitudes log-uniform in ``[lo, hi]`` (subnormal in ``t``'s dtype)."""
    shape = tuple(t.shape)
    mags = torch.exp(_uniform(gen, shape, math.log(lo), math.log(hi)))
    return (_signs(gen, shape) * mags).to(t.dtype)


def _signed_zeros(gen: torch.Generator, t: Tensor) -> Tensor:
    """Half of ``t``'s elements ``+0.0`` or ``-0.0`` (a coin each), the rest as they are."""
    shape = tuple(t.shape)
    zero = torch.rand(shape, generator=gen) < 0.5
    negative = torch.rand(shape, generator=gen) < 0.5
    zeros = torch.where(negative, torch.full(shape, -0.0), torch.zeros(shape)).to(t.dtype)
    return torch.where(zero, zeros, t)


# ---- sweeps: every drawn call moved past every tile and to every extreme, in every dtype ------------------

#: the lengths a sweep runs: just past each time tile, and packed beside a short sequence
SWEPT_LENGTHS = (65, 129, 257)


def swept_lengths(
    call: ConvCall, *, dtypes: Sequence[str], reach: int, varlen_initial_state: bool = True, channel_step: int = 1
) -> list[ConvCall]:
    """``call`` (one row, at most :data:`LONG_MAX_CHANNELS` channels, randn values) in each of ``dtypes`` at each
    of :data:`SWEPT_LENGTHS` up to ``reach`` (``channel_step``: the channel counts the backend takes are its
    multiples), and packed after a short sequence at the longest of them: a kernel
    wrong past a time tile in one dtype is wrong on every such sweep, whatever else the call drew."""
    import dataclasses

    lengths = [t for t in SWEPT_LENGTHS if t <= reach]
    # a multiple of the declared channel step (the drawn call's D is one): at most LONG_MAX_CHANNELS where one fits
    D = min(call.D, LONG_MAX_CHANNELS) // channel_step * channel_step or channel_step
    base = dataclasses.replace(call, B=1, D=D, seq_lens=(), values="randn", param_dtype=None)
    out = []
    for dtype in dtypes:
        for T in lengths:
            out.append(dataclasses.replace(base, dtype=dtype, T=T))
        if lengths:
            lens = (call.W + 1, lengths[-1])
            state = base.initial_state and varlen_initial_state
            out.append(dataclasses.replace(base, dtype=dtype, T=sum(lens), seq_lens=lens, initial_state=state))
    return out


def swept_values(call: ConvCall, *, dtypes: Sequence[str]) -> list[ConvCall]:
    """``call`` (one row, its own length) in each of ``dtypes`` carrying each extreme kind of :data:`VALUE_KINDS`:
    a kernel wrong near a dtype's limits is wrong on every such sweep."""
    import dataclasses

    base = dataclasses.replace(call, B=1, seq_lens=(), param_dtype=None, T=max(call.T, 2 * call.W + 2))
    return [dataclasses.replace(base, dtype=d, values=k) for d in dtypes for k in VALUE_KINDS if k != "randn"]
