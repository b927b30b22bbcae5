"""Strategies for serving cases under a state pool (SPEC §11): plain data, materialized per engine adapter.

Every strategy shrinks towards one sequence, no pad, fresh sequences (no state read), the narrowest conv
(D1 W2), fp32, no bias, no activation, the identity slot order and the fewest slots; the pool's unnamed
slots, pad entries, continued sequences and slot permutations are all reachable by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from gdn_equiv.serving.cases import Batch, ConvSpec, HandoffCase, PackedCase, PrefixCase, SpecCase
from gdn_equiv.serving.routing import RoutingCase, SchedRow
from gdn_equiv.serving.routing_apc import ApcCase
from gdn_equiv.serving.surface import BLOCK_TABLE, POSITIONAL, SLOTS, WINDOWS, OpSurface, Row, SurfaceCase

__all__ = [
    "apc_cases",
    "batches",
    "channel_counts",
    "conv_specs",
    "handoff_cases",
    "outside_draws",
    "packed_cases",
    "prefix_cases",
    "routing_cases",
    "spec_cases",
    "surface_calls",
    "surface_cases",
]

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


def channel_counts(block: int | None = 256, max_small: int = 8) -> st.SearchStrategy[int]:
    """``1..max_small`` channels, or one of a kernel's channel-block edges (``block - 1``, ``block``, ``block + 1``,
    ``2 * block + 1``): the block-edge sweep. Shrinks to 1."""
    edges = () if block is None else (block - 1, block, block + 1, 2 * block + 1)
    small = st.integers(1, max_small)
    return st.one_of(small, st.sampled_from(edges)) if edges else small


@st.composite
def surface_cases(
    draw: st.DrawFn,
    surface: OpSurface,
    *,
    addressing: str | None = None,
    outside: str | None = None,
    spec: bool | None = None,
    max_rows: int = 4,
    max_tokens: int = 5,
    max_k: int = 4,
    max_spare: int = 2,
) -> SurfaceCase:
    """One call on ``surface`` (an op's declared surface): its addressing, a width in its range, channels across
    its block edges, a state ``W-1..W-1+max_extra`` wide, pads anywhere between rows, and every read and write
    location drawn on its own from the pool (block tables: initial, first and last blocks apart or equal; draft
    windows: rows apart from the state rows or the same numbers), counts ``1..k`` and circular positions where
    declared. ``outside`` (one of the surface's :attr:`OpSurface.outside`) makes the one change that takes the
    call outside; ``spec`` forces accepted counts on or off where the op takes them (None: either). Shrinks to
    one row of one token, D1, the narrowest width, state W-1, slot 0."""
    addr = draw(st.sampled_from(surface.addressing)) if addressing is None else addressing
    lo_w, hi_w = surface.widths
    if outside == "width":
        width = draw(st.integers(hi_w + 1, hi_w + 2))
    elif outside == "narrow-state":
        width = draw(st.integers(max(lo_w, 3), max(hi_w, 3)))
    else:
        width = draw(st.integers(lo_w, hi_w))
    dim = draw(channel_counts(surface.block_n or 256))
    update = surface.op == "update"
    k = draw(st.sampled_from(range(1, max_k + 1))) if update else 1
    circular = update and surface.circular and addr == SLOTS and outside is None and draw(st.booleans())
    circular = circular or outside == "circular"
    can_count = update and surface.accepted and addr != POSITIONAL and not circular
    spec = can_count and (draw(st.booleans()) if spec is None else spec)
    spec = spec or outside in ("count-0", "count-k+1")
    if spec:
        k = max(k, 2) if outside == "count-k+1" else k
        k = min(k, surface.max_extra + 1)
    min_extra = k - 1 if spec else 0
    extra = draw(st.sampled_from(range(min_extra, max(min_extra, surface.max_extra) + 1)))
    if outside == "narrow-state":
        extra = -1
    n = draw(st.integers(1, max_rows))
    pads = addr != POSITIONAL and surface.pad_id is not None
    is_pad = [pads and draw(st.integers(0, 3)) == 3 for _ in range(n)]
    if all(is_pad):
        is_pad[draw(st.integers(0, n - 1))] = False
    varlen = spec and surface.engine != "sglang"
    block = draw(st.sampled_from(surface.block_sizes)) if addr == BLOCK_TABLE and not update else 0
    long = max(max_tokens, 2 * block + 1) if addr == BLOCK_TABLE and not update else max_tokens
    named = n - sum(is_pad)
    rows: list[Row] = []
    if addr == BLOCK_TABLE:
        apart = draw(st.booleans())  # the whole call: each row's read block apart from its write block, or free
        per_row = []
        for pad in is_pad:
            tokens = (draw(st.integers(1, k)) if varlen else k) if update else draw(st.integers(1, long))
            computed = draw(st.integers(0, 2 * block)) if not update else 0
            bounds = 0 if update else sum((computed + m) % block == 0 for m in range(1, tokens))
            size = bounds + 1 + (draw(st.integers(1, 2)) if apart else draw(st.integers(0, 2)))
            first = draw(st.integers(0, size - bounds - 1))
            last = first + bounds
            allowed = [p for p in range(size) if not first <= p < last]
            if len(allowed) > 1 and apart:
                allowed = [p for p in allowed if p != last]
            init = draw(st.sampled_from(allowed))
            per_row.append((pad, tokens, computed, size, (init, first, last)))
        total = sum(size for pad, _, _, size, _ in per_row if not pad)
        num_slots = total + draw(st.integers(0, max_spare))
        order = iter(draw(st.permutations(range(num_slots))))
        for pad, tokens, computed, size, blocks in per_row:
            table = tuple(next(order) for _ in range(size)) if not pad else (0,) * size
            rows.append(
                Row(tokens, None if pad else table[blocks[0]], None if pad else table[blocks[2]],
                    draw(st.booleans()), blocks=blocks, table=table, computed=computed)
            )  # fmt: skip
    else:
        num_slots = max(named, 1) + (0 if (addr == POSITIONAL and update) else draw(st.integers(0, max_spare)))
        if addr == POSITIONAL:
            num_slots = max(num_slots, n)
        order = iter(draw(st.permutations(range(num_slots))))
        num_windows = named + draw(st.integers(0, max_spare)) if addr == WINDOWS else 0
        windows = draw(st.permutations(range(num_windows))) if addr == WINDOWS else []
        if windows and draw(st.booleans()):  # half the time a window row is rotated away from the state rows' order
            windows = windows[1:] + windows[:1]
        win_order = iter(windows)
        L = width - 1 + extra
        for i, pad in enumerate(is_pad):
            tokens = (draw(st.integers(1, k)) if varlen else k) if update else draw(st.integers(1, long))
            if pad:
                rows.append(Row(tokens, None, None))
                continue
            slot = i if addr == POSITIONAL else next(order)
            has_state = True if update else draw(st.booleans())
            accepted = draw(st.sampled_from(range(1, k + 1))) if spec else 1  # spread over 1..k, shrinks to 1
            seqlen = draw(st.integers(0, 2 * L)) if circular else None
            rows.append(Row(tokens, slot, slot, has_state, next(win_order, None), accepted, seqlen=seqlen))
    if outside in ("count-0", "count-k+1"):
        i = draw(st.sampled_from([j for j, r in enumerate(rows) if r.read is not None]))
        rows[i] = replace(rows[i], accepted=0 if outside == "count-0" else k + 1)
    if outside == "index":
        i = draw(st.sampled_from([j for j, r in enumerate(rows) if r.read is not None]))
        if addr == BLOCK_TABLE:
            r = rows[i]
            assert r.blocks is not None
            table = tuple(num_slots if j == r.blocks[0] else b for j, b in enumerate(r.table))
            rows[i] = replace(r, read=num_slots, table=table)
        else:
            rows[i] = replace(rows[i], read=num_slots, write=num_slots)
    return SurfaceCase(
        surface.op, addr, dim, width, tuple(rows), num_slots, extra, k, spec, circular, block,
        num_windows if addr == WINDOWS else 0, draw(st.sampled_from(("float32", "float16", "bfloat16"))),
        draw(st.booleans()), draw(st.sampled_from(_ACTIVATIONS)), draw(st.integers(0, 2**16)), outside,
    )  # fmt: skip


def outside_draws(surfaces: Sequence[OpSurface]) -> list[tuple[OpSurface, str, str]]:
    """(surface, outside kind, addressing) the outside draws can make: an index past the pool needs an op that
    reads one, a circular state one addressed by slots, a count one that takes counts (an empty list: nothing
    to draw outside, the S0-outside row is n/a with that reason)."""
    return [
        (s, kind, a)
        for s in surfaces
        for kind in s.outside
        for a in s.addressing
        if not (kind == "index" and a == POSITIONAL)
        and not (kind == "circular" and (a != SLOTS or s.op != "update"))
        and not (kind in ("count-0", "count-k+1") and (a == POSITIONAL or s.op != "update"))
    ]


def surface_calls(surfaces: Sequence[OpSurface], *, outside: bool = False) -> st.SearchStrategy[SurfaceCase]:
    """Calls on any of ``surfaces`` (an engine version's ops), or with ``outside`` calls outside each one's
    declared surface (one of its :attr:`OpSurface.outside` kinds, where :func:`outside_draws` can make one)."""
    if outside:
        options = [surface_cases(s, outside=kind, addressing=a) for s, kind, a in outside_draws(surfaces)]
    else:  # one branch per addressing of each op: a rare one (draft windows, block tables) is as likely as slots
        # and where an op takes accepted counts, one more branch that always passes them
        options = [surface_cases(s, addressing=a) for s in surfaces for a in s.addressing]
        options += [
            surface_cases(s, addressing=a, spec=True) for s in surfaces if s.accepted for a in s.addressing
            if a != POSITIONAL
        ]  # fmt: skip
    if not options:
        raise InvalidArgument("no surface (or nothing declared outside one) to draw from")
    return st.one_of(options)


@st.composite
def routing_cases(
    draw: st.DrawFn,
    *,
    max_spec: int = 3,
    max_steps: int = 3,
    max_rows: int = 4,
    max_tokens: int = 5,
    pads_between: bool = True,
) -> RoutingCase:
    """Scheduler steps in a row over one pool of blocks (:class:`~gdn_equiv.serving.routing.RoutingCase`): up to
    ``max_spec`` drafts per verify row (0: no speculative decoding), each step up to ``max_rows`` requests on
    distinct blocks drawn from the whole pool (each block's state as a previous step left it, a verify of up to
    k+1 tokens among them): fresh and continued prefill chunks, one-token decodes (no
    speculation) or verify rows of 0..k drafts whose count is any the block's wide state holds (1..the previous
    verify's tokens), and pads (0 tokens, on the null block or on any block, which must stay as it was).
    Verify and decode rows come first, then prefills, then pads, as the engines' schedulers order a batch;
    ``pads_between`` puts pads and rows in any order. Shrinks to one step of one fresh prefill, no speculation."""
    _bounds("steps", 1, max_steps, 1)
    _bounds("rows", 1, max_rows, 1)
    k = draw(st.integers(0, max_spec))
    num_blocks = max_rows + 2
    # each block's state as a previous step left it: its tokens so far, the counts it holds windows for
    held = tuple(draw(st.lists(st.integers(1, k + 1), min_size=num_blocks, max_size=num_blocks)))
    computed = {b: draw(st.integers(0, 3)) if h == 1 else h for b, h in enumerate(held, start=1)}
    holds = dict(enumerate(held, start=1))
    steps = []
    # with drafts, a chunk then a verify after a verify: 3 steps at least, a step more than max_steps at most
    for _ in range(draw(st.integers(min(3, max_steps + 1) if k else 1, max_steps + (k > 0)))):
        n = draw(st.integers(1, max_rows))
        blocks = draw(st.permutations(range(1, num_blocks + 1)))[:n]
        front, back = [], []
        for b in blocks:
            kinds = ["prefill"] + (["continue"] if computed[b] else [])
            kinds += (["verify"] if k else ["decode"]) if computed[b] else []
            kind = draw(st.sampled_from(kinds))
            if kind == "verify":
                d = draw(st.integers(0, k))
                spare = tuple(draw(st.lists(st.integers(0, num_blocks), min_size=k, max_size=k)))
                row = SchedRow(d + 1, b, computed[b], d, draw(st.integers(1, holds[b])), spare)
                front.append(row)
                holds[b] = d + 1
            elif kind == "decode":
                front.append(SchedRow(1, b, computed[b]))
                holds[b] = 1
            else:
                tokens = draw(st.integers(1, max_tokens))
                back.append(SchedRow(tokens, b, computed[b] if kind == "continue" else 0))
                holds[b] = 1
            last = front[-1] if kind in ("verify", "decode") else back[-1]
            computed[b] = last.computed + last.tokens
        pads = [SchedRow(0, draw(st.integers(0, num_blocks))) for _ in range(draw(st.integers(0, 2)))]
        rows = front + back + pads
        if pads_between:
            rows = draw(st.permutations(rows))
        steps.append(tuple(rows))
    return RoutingCase(k, tuple(steps), num_blocks, draw(st.booleans()), held)


@st.composite
def apc_cases(
    draw: st.DrawFn,
    *,
    min_block: int = 2,
    max_block: int = 4,
    max_requests: int = 3,
    max_columns: int = 4,
    max_steps: int = 3,
    min_spec: int = 0,
    max_spec: int = 0,
) -> ApcCase:
    """Scheduler steps in Mamba2's "all" prefix-caching mode (:class:`~gdn_equiv.serving.routing_apc.ApcCase`):
    a block size ``B`` of ``min_block``..``max_block`` (a scale model of vLLM's: the indices are in blocks), up
    to ``max_requests`` requests, each with a block table of up to ``max_columns`` blocks (drawn from one
    shuffled pool, so a request's columns lie apart) and a cached prefix of whole blocks (a prefix-cache hit) or
    none; each step schedules some of them, one-token decodes of a request with computed tokens first, then
    chunks of any length its table still holds (fresh prompts, chunked prefills resuming inside a block or on a
    boundary, chunks crossing several boundaries), then up to one pad. With ``k`` of ``min_spec..max_spec``
    drafts (speculative decoding), a request past its first chunk may turn to verify rows of ``1 + d`` tokens
    (``d`` of 0..k; any accepted count of 1..1+d), which lead the step, and stays there (then 3 to
    ``max_steps + 1`` steps, so a verify can follow a verify after the first chunk). Shrinks to one fresh
    request of one block, one step, one token, the smallest block, the fewest drafts."""
    _bounds("block", min_block, max_block, 1)
    _bounds("requests", 1, max_requests, 1)
    _bounds("columns", 1, max_columns, 1)
    _bounds("steps", 1, max_steps, 1)
    _bounds("spec", min_spec, max_spec, 0)
    B = draw(st.integers(min_block, max_block))
    k = draw(st.integers(min_spec, max_spec))
    # verify rows need room for a chunk and two verifies after it: tables of 2 blocks more
    cols = draw(st.lists(st.integers(1 + 2 * (k > 0), max_columns + 2 * (k > 0)), min_size=1, max_size=max_requests))
    ids = draw(st.permutations(range(1, sum(cols) + 1 + draw(st.integers(0, 2)))))
    tables, at = [], 0
    for c in cols:
        tables.append(tuple(ids[at : at + c]))
        at += c
    cached = [B * draw(st.integers(0, c - 1)) for c in cols]
    done = list(cached)
    started = [False] * len(cols)
    verifying = [False] * len(cols)
    steps = []
    # with drafts, a chunk then a verify after a verify: 3 steps at least, a step more than max_steps at most
    for _ in range(draw(st.integers(min(3, max_steps + 1) if k else 1, max_steps + (k > 0)))):
        open_ = [r for r in range(len(cols)) if done[r] < cols[r] * B]
        if not open_:
            break
        chosen = draw(st.permutations(open_))[: draw(st.integers(1, len(open_)))]
        front, back = [], []
        for r in chosen:
            room = cols[r] * B - done[r]
            if k and started[r] and (verifying[r] or draw(st.integers(0, 3)) > 0):
                d = draw(st.integers(0, min(k, room - 1)))
                a = draw(st.integers(1, d + 1))
                front.append((r, d + 1, d, a))
                verifying[r] = True
                done[r] += a
                continue
            n = draw(st.integers(1, room))
            (front if n == 1 and done[r] > 0 else back).append((r, n))
            started[r] = True
            done[r] += n
        pads = [(-1, 0)] * draw(st.integers(0, 1))
        steps.append(tuple(front + back + pads))
    return ApcCase(B, tuple(tables), tuple(cached), tuple(steps), draw(st.booleans()), k)
