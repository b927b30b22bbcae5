"""Strategies for serving cases under a state pool (SPEC §11): plain data, materialized per engine adapter.

Every strategy shrinks towards one sequence, no pad, fresh sequences (no state read), the narrowest conv
(D1 W2), fp32, no bias, no activation, the identity slot order and the fewest slots; the pool's unnamed
slots, pad entries, continued sequences and slot permutations are all reachable by construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from gdn_equiv.serving.cases import Batch, ConvSpec, HandoffCase, PackedCase, PrefixCase, SpecCase

__all__ = ["batches", "conv_specs", "handoff_cases", "packed_cases", "prefix_cases", "spec_cases"]

_ACTIVATIONS: tuple[str | None, ...] = (None, "silu")


def _bounds(name: str, lo: int, hi: int, floor: int) -> None:
    if lo < floor or hi < lo:
        raise InvalidArgument(f"{name}: need {floor} <= min_{name} <= max_{name}, got {lo} and {hi}")


def conv_specs(
    *,
    min_dim: int = 1,
    max_dim: int = 8,
    min_width: int = 2,
    max_width: int = 4,
    dtypes: Sequence[str] = ("float32", "float16", "bfloat16"),
    bias: bool | None = None,
    activations: Sequence[str | None] = _ACTIVATIONS,
) -> st.SearchStrategy[ConvSpec]:
    """A depthwise conv: ``D`` channels, width ``W`` (engines take 2..7), dtype, bias (``None``: either),
    activation. Shrinks to D=min_dim, W=min_width, the first dtype, no bias, the first activation."""
    _bounds("dim", min_dim, max_dim, 1)
    _bounds("width", min_width, max_width, 2)
    if not dtypes or not activations:
        raise InvalidArgument("dtypes and activations must not be empty")
    return st.builds(
        ConvSpec,
        dim=st.integers(min_dim, max_dim),
        width=st.integers(min_width, max_width),
        bias=st.booleans() if bias is None else st.just(bias),
        activation=st.sampled_from(tuple(activations)),
        dtype=st.sampled_from(tuple(dtypes)),
    )


@st.composite
def batches(
    draw: st.DrawFn,
    *,
    conv: st.SearchStrategy[ConvSpec] | None = None,
    min_seqs: int = 1,
    max_seqs: int = 4,
    min_len: int = 1,
    max_len: int = 6,
    min_extra_slots: int = 0,
    max_extra_slots: int = 3,
    pad: bool | None = None,
    fresh: bool | None = None,
) -> Batch:
    """One §11 call: sequences of ``min_len..max_len`` tokens in a pool with ``min_extra_slots..max_extra_slots``
    slots no sequence names; slots a permutation of the pool's; ``pad`` (None: some may be pads; True: at least
    one; False: none) and ``fresh`` (None: each sequence either; True: none continues; False: all do).
    Shrinks to one fresh, unpadded sequence in a pool of exactly the slots named, in slot order."""
    _bounds("seqs", min_seqs, max_seqs, 1)
    _bounds("len", min_len, max_len, 0)
    _bounds("extra_slots", min_extra_slots, max_extra_slots, 0)
    spec = draw(conv if conv is not None else conv_specs())
    n = draw(st.integers(min_seqs, max_seqs))
    # a pad one time in four: most batches keep sequences to compare; shrinks to no pad
    is_pad = [draw(st.integers(0, 3)) == 3 if pad is None else False for _ in range(n)]
    if pad:
        is_pad[draw(st.integers(0, n - 1))] = True
    named = n - sum(is_pad)
    num_slots = max(named, 1) + draw(st.integers(min_extra_slots, max_extra_slots))
    order = draw(st.permutations(range(num_slots)))
    picks = iter(order[:named])
    slots = tuple(None if p else next(picks) for p in is_pad)
    lens = tuple(draw(st.integers(min_len, max_len)) for _ in range(n))
    has_state = tuple(draw(st.booleans()) if fresh is None else not fresh for _ in range(n))
    return Batch(spec, num_slots, lens, slots, has_state, draw(st.integers(0, 2**16)))


@st.composite
def spec_cases(
    draw: st.DrawFn,
    *,
    conv: st.SearchStrategy[ConvSpec] | None = None,
    min_k: int = 1,
    max_k: int = 4,
    min_accepted: int = 0,
    pad: bool | None = None,
    min_extra_slots: int = 0,
) -> SpecCase:
    """A prefill then a verify step of ``k`` drafts keeping ``accepted[i]`` in ``[min_accepted, k]`` each.
    ``min_accepted=1`` for an engine whose first token of a verify step is always a real one (vLLM);
    ``min_extra_slots`` slots of the pool at least that no sequence names (S2 has one to watch in every case).
    Shrinks to k=min_k and the fewest accepted."""
    _bounds("k", min_k, max_k, 1)
    if not 0 <= min_accepted <= min_k:
        raise InvalidArgument(f"need 0 <= min_accepted <= min_k, got {min_accepted} and {min_k}")
    batch = draw(batches(conv=conv, pad=pad, min_extra_slots=min_extra_slots))
    k = draw(st.integers(min_k, max_k))
    accepted = tuple(draw(st.integers(min_accepted, k)) for _ in batch.slots)
    return SpecCase(batch, k, accepted)


@st.composite
def handoff_cases(
    draw: st.DrawFn, *, conv: st.SearchStrategy[ConvSpec] | None = None, max_steps: int = 3, max_k: int = 2
) -> HandoffCase:
    """A prefill then 1..``max_steps`` decode steps of 1..``max_k`` tokens (all kept). Shrinks to one 1-token step."""
    _bounds("steps", 1, max_steps, 1)
    _bounds("k", 1, max_k, 1)
    batch = draw(batches(conv=conv))
    steps = tuple(draw(st.lists(st.integers(1, max_k), min_size=1, max_size=max_steps)))
    return HandoffCase(batch, steps)


@st.composite
def prefix_cases(
    draw: st.DrawFn,
    *,
    conv: st.SearchStrategy[ConvSpec] | None = None,
    min_block: int = 1,
    max_block: int = 4,
    max_blocks: int = 4,
) -> PrefixCase:
    """A sequence of ``0..max_blocks`` whole blocks plus a partial one, block size in bounds. Shrinks to one
    block of ``min_block`` tokens, fresh."""
    _bounds("block", min_block, max_block, 1)
    spec = draw(conv if conv is not None else conv_specs())
    block = draw(st.integers(min_block, max_block))
    blocks = draw(st.integers(1, max_blocks))
    tail = draw(st.integers(0, block - 1))
    return PrefixCase(spec, blocks * block + tail, block, draw(st.booleans()), draw(st.integers(0, 2**16)))


@st.composite
def packed_cases(
    draw: st.DrawFn, *, max_part: int = 4, bias: bool | None = None, dtypes: Sequence[str] = ("float32",)
) -> PackedCase:
    """A batch over q|k|v channels (``1..max_part`` each; k and v may differ from q, as in KDA/GDN's
    expand_v). Shrinks to 1|1|1 channels."""
    _bounds("part", 1, max_part, 1)
    sizes = tuple(draw(st.integers(1, max_part)) for _ in range(3))
    spec = draw(conv_specs(min_dim=sum(sizes), max_dim=sum(sizes), bias=bias, dtypes=dtypes))
    return PackedCase(draw(batches(conv=st.just(spec))), sizes)
