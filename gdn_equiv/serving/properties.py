"""S0-S7 (SPEC §11) as functions of an engine adapter and a drawn case.

S0 is the anchor: the engine against the in-house pool reference
(:class:`~gdn_equiv.serving.adapters.ReferenceAdapter`), every output and every state it leaves, within the
tolerance table. S1-S7 each run the adapter's own ops twice in two ways §11 says must agree, and each also
compares one of its two runs with the reference (``_anchor``; S5 its snapshots), so none stands on S0 alone: an
engine that computes nothing, returns its input or drops its bias fails every one of them. They raise
:class:`gdn_equiv.harness.compare.Mismatch` (through :func:`gdn_equiv.harness.compare.assert_equivalent`) with both
paths named and the case printed; :class:`NotExercised` where the case has nothing the property can compare.
Outputs of pad sequences are never compared (engines leave them unspecified).
"""

from __future__ import annotations

from typing import Any

import torch

from gdn_equiv.harness.compare import assert_equivalent
from gdn_equiv.serving.adapters import EngineAdapter, NotExercised, ReferenceAdapter
from gdn_equiv.serving.cases import Batch, HandoffCase, PackedCase, PrefixCase, SpecCase, draft_tokens, materialize

Tensor = torch.Tensor

__all__ = [
    "NotExercised",
    "check_s0_reference",
    "check_s1_pool_equals_alone",
    "check_s2_untouched",
    "check_s3_handoff",
    "check_s4_speculation",
    "check_s5_prefix_cache",
    "check_s6_dispatch",
    "check_s7_packed_qkv",
]


def _prefill(adapter: EngineAdapter, t: dict[str, Any], states: Tensor, **kw: Any) -> tuple[Tensor, Any]:
    pool = adapter.new_pool(states, max_step=kw.pop("max_step", 1))
    args = (t["x"], t["weight"], t["bias"], t["activation"], t["starts"], t["slots"], t["has_state"])
    return adapter.prefill(pool, *args, **kw), pool


def _tensors(batch: Batch, adapter: EngineAdapter) -> dict[str, Any]:
    t = materialize(batch, adapter)
    t["activation"] = batch.conv.activation
    return t


def _rows(t: dict[str, Any], i: int) -> slice:
    return slice(int(t["starts"][i]), int(t["starts"][i + 1]))


def _ctx(adapter: EngineAdapter, case: Any) -> str:
    return f"{adapter.name} {adapter.version}: {case.short()}"


def _against(
    adapter: EngineAdapter, ref_pool: Any, pool: Any, y: Tensor, y_ref: Tensor, rows: list[slice], what: str, ctx: str
) -> None:
    """Outputs of the named sequences within §6; every state of the pool the engine may name, bitwise (a state is
    a copy of inputs: no arithmetic), slots the call did not name included (they must be as they were)."""
    paths = ("engine", "reference")
    for i, r in enumerate(rows):
        assert_equivalent(y[r], y_ref[r], name=f"{what} y of named sequence {i}", paths=paths, exact=False, context=ctx)
    first = adapter.first_slot
    got, want = adapter.states(pool)[first:], ReferenceAdapter().states(ref_pool)[first:]
    assert_equivalent(got, want, name=f"pool states after {what} (slot {first} on)", paths=paths, context=ctx)


def _anchor(
    adapter: EngineAdapter, t: dict[str, Any], y: Tensor, pool: Any, named: list[int], ctx: str, what: str
) -> None:
    """Each of S1-S7 carries its own comparison with the reference (so none stands on S0 alone): the engine's
    prefill of this property's batch, ``y`` and ``pool``, = the reference's prefill of the same call (outputs of
    the named sequences within §6, every state bitwise)."""
    ref = ReferenceAdapter()
    ref.pad_slot = adapter.pad_slot
    ref_pool = ref.new_pool(t["states"], max_step=1)
    args = (t["starts"], t["slots"], t["has_state"])
    y_ref = ref.prefill(ref_pool, t["x"], t["weight"], t["bias"], t["activation"], *args)
    _against(adapter, ref_pool, pool, y, y_ref, [_rows(t, i) for i in named], f"{what} (against the reference)", ctx)


def check_s0_reference(adapter: EngineAdapter, case: SpecCase) -> None:
    """S0: the engine = the in-house pool reference, on one session of calls: a prefill, a decode token, a
    verify step of ``k`` drafts keeping ``accepted[i]`` (every one where the path takes no count), one more
    token; then prefix snapshots of the prompt at blocks of 2, and the packed q|k|v call over the channels
    split in three (D >= 3). Outputs within §6, states bitwise."""
    batch = case.batch
    t = _tensors(batch, adapter)
    named = batch.named()
    if not named:
        raise NotExercised("every sequence is a pad")
    ctx = _ctx(adapter, case)
    ref = ReferenceAdapter()
    ref.pad_slot = adapter.pad_slot  # the same tensors: the reference skips the engine's pad id
    w, b, act, slots = t["weight"], t["bias"], t["activation"], t["slots"]
    args = (t["starts"], slots, t["has_state"])
    pool, ref_pool = adapter.new_pool(t["states"], max_step=case.k), ref.new_pool(t["states"], max_step=case.k)
    rows = [_rows(t, i) for i in named]
    y, y_ref = adapter.prefill(pool, t["x"], w, b, act, *args), ref.prefill(ref_pool, t["x"], w, b, act, *args)
    _against(adapter, ref_pool, pool, y, y_ref, rows, "prefill", ctx)
    speculative = getattr(adapter, "speculative", True)
    accepted = torch.tensor(case.accepted, dtype=torch.int32) if speculative else None
    steps = [("decode", draft_tokens(batch, 1, salt=3), None), ("verify", draft_tokens(batch, case.k), accepted),
             ("next decode", draft_tokens(batch, 1, salt=99), None)]  # fmt: skip
    for what, x, acc in steps:
        y, y_ref = adapter.step(pool, x, w, b, act, slots, acc), ref.step(ref_pool, x, w, b, act, slots, acc)
        _against(adapter, ref_pool, pool, y, y_ref, [slice(i, i + 1) for i in named], what, ctx)
    prompt, state = t["x"], t["states"][adapter.first_slot]
    snaps = adapter.snapshots(prompt, w, b, act, state, 2)
    want = ref.snapshots(prompt, w, b, act, state, 2)
    assert_equivalent(snaps, want, name="snapshots at blocks of 2", paths=("engine", "reference"), context=ctx)
    D = batch.conv.dim
    if D >= 3:
        sizes = (D // 3, D // 3, D - 2 * (D // 3))
        pool, ref_pool = adapter.new_pool(t["states"], max_step=1), ref.new_pool(t["states"], max_step=1)
        y = adapter.packed_prefill(pool, t["x"], w, b, act, *args, sizes)
        y_ref = ref.packed_prefill(ref_pool, t["x"], w, b, act, *args, sizes)
        _against(adapter, ref_pool, pool, y, y_ref, rows, f"packed q|k|v {list(sizes)}", ctx)


def check_s1_pool_equals_alone(adapter: EngineAdapter, batch: Batch) -> None:
    """S1: each sequence of a batch = that sequence run alone from its own state (a one-slot pool), bitwise."""
    t = _tensors(batch, adapter)
    if not batch.named():
        raise NotExercised("every sequence is a pad")
    y, pool = _prefill(adapter, t, t["states"])
    _anchor(adapter, t, y, pool, batch.named(), _ctx(adapter, batch), "the batch's prefill")
    after = adapter.states(pool)
    first = adapter.first_slot
    for i in batch.named():
        slot = int(t["slots"][i])
        own = t["states"][[0] * first + [slot]]  # reserved rows (never read) then the sequence's state
        alone = {
            **t,
            "x": t["x"][_rows(t, i)],
            "starts": torch.tensor([0, _rows(t, i).stop - _rows(t, i).start], dtype=t["starts"].dtype),
            "slots": torch.tensor([first], dtype=t["slots"].dtype),
            "has_state": t["has_state"][i : i + 1],
        }
        y_alone, pool_alone = _prefill(adapter, alone, own)
        ctx = f"{_ctx(adapter, batch)}, sequence {i} (slot {slot})"
        paths = ("in the batch", "alone")
        assert_equivalent(y[_rows(t, i)], y_alone, name="y", paths=paths, context=ctx)
        assert_equivalent(after[slot], adapter.states(pool_alone)[first], name="state", paths=paths, context=ctx)


def _inputs_snapshot(t: dict[str, Any]) -> dict[str, Tensor]:
    return {k: v.clone() for k, v in t.items() if isinstance(v, Tensor)}


def _assert_inputs_unchanged(before: dict[str, Tensor], t: dict[str, Any], ctx: str) -> None:
    for k, v in before.items():
        assert_equivalent(t[k], v, name=f"input {k}", paths=("after the call", "before"), context=ctx)


def _assert_rows_untouched(adapter: EngineAdapter, before: list[Tensor], pool: Any, named: set[int], ctx: str) -> int:
    checked = 0
    for j, (old, new) in enumerate(zip(before, adapter.storage(pool), strict=True)):
        for row in range(old.shape[0]):
            if row in named:
                continue
            checked += 1
            name = f"storage[{j}][slot {row}] (not named)"
            assert_equivalent(new[row], old[row], name=name, paths=("after the call", "before"), context=ctx)
    return checked


def check_s2_untouched(adapter: EngineAdapter, case: SpecCase) -> None:
    """S2: after a prefill and after a verify step, slots not named (pads, reserved, unused) are bitwise
    unchanged in every tensor of the pool, and the caller's inputs are unchanged."""
    batch = case.batch
    t = _tensors(batch, adapter)
    named = {int(t["slots"][i]) for i in batch.named()}
    ctx = _ctx(adapter, case)
    pool = adapter.new_pool(t["states"], max_step=case.k)
    before_storage = [s.clone() for s in adapter.storage(pool)]
    before = _inputs_snapshot(t)
    y = adapter.prefill(pool, t["x"], t["weight"], t["bias"], t["activation"], t["starts"], t["slots"], t["has_state"])
    _assert_inputs_unchanged(before, t, ctx + " (prefill)")
    checked = _assert_rows_untouched(adapter, before_storage, pool, named, ctx + " (prefill)")
    _anchor(adapter, t, y, pool, batch.named(), ctx, "the prefill")
    drafts = draft_tokens(batch, case.k)
    # a path without speculative steps keeps every token (its S4 row says why)
    accepted = torch.tensor(case.accepted, dtype=torch.int32) if getattr(adapter, "speculative", True) else None
    step_inputs = {"x": drafts, "slots": t["slots"], "weight": t["weight"]}
    if accepted is not None:
        step_inputs["accepted"] = accepted
    before = _inputs_snapshot(step_inputs)
    before_storage = [s.clone() for s in adapter.storage(pool)]
    adapter.step(pool, drafts, t["weight"], t["bias"], t["activation"], t["slots"], accepted)
    _assert_inputs_unchanged(before, step_inputs, ctx + " (verify step)")
    checked += _assert_rows_untouched(adapter, before_storage, pool, named, ctx + " (verify step)")
    if checked == 0:
        raise NotExercised("every slot of the pool is named")


def check_s3_handoff(adapter: EngineAdapter, case: HandoffCase) -> None:
    """S3: a prefill then decode steps = one prefill over the same tokens (outputs of the decoded tokens and the
    final states); bitwise where the engine promises its kernels agree, else within §6 for outputs."""
    batch = case.batch
    t = _tensors(batch, adapter)
    named = batch.named()
    if not named:
        raise NotExercised("every sequence is a pad")
    y0, pool = _prefill(adapter, t, t["states"], max_step=max(case.steps))
    decoded = [draft_tokens(batch, k, salt=10 + j) for j, k in enumerate(case.steps)]
    ys = [adapter.step(pool, d, t["weight"], t["bias"], t["activation"], t["slots"]) for d in decoded]
    # the same tokens as one prefill: each sequence's prompt then its decoded tokens
    parts, lens = [], []
    for i in range(len(batch.slots)):
        parts += [t["x"][_rows(t, i)], *(d[i] for d in decoded)]
        lens.append(batch.lens[i] + sum(case.steps))
    one = {
        **t,
        "x": torch.cat(parts),
        "starts": torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=t["starts"].dtype),
    }
    y1, pool1 = _prefill(adapter, one, t["states"])
    ctx = _ctx(adapter, case)
    _anchor(adapter, one, y1, pool1, named, ctx, "the one prefill")
    exact = adapter.handoff_exact
    paths = ("prefill then steps", "one prefill")
    for i in named:
        lo = int(one["starts"][i])
        stepped = torch.cat([y0[_rows(t, i)], *(y[i] for y in ys)])
        assert_equivalent(
            stepped, y1[lo : lo + lens[i]], name=f"y of sequence {i}", paths=paths, exact=exact, context=ctx
        )
        slot = int(t["slots"][i])
        assert_equivalent(
            adapter.states(pool)[slot],
            adapter.states(pool1)[slot],
            name=f"state of slot {slot}",
            paths=paths,
            context=ctx,
        )


def check_s4_speculation(adapter: EngineAdapter, case: SpecCase) -> None:
    """S4: a k-token verify step accepting j leaves exactly the state of feeding those j tokens: the state read
    back, and the output and state of the next decode token (where an engine applies the count it was given)."""
    batch = case.batch
    t = _tensors(batch, adapter)
    named = batch.named()
    if not named:
        raise NotExercised("every sequence is a pad")
    drafts = draft_tokens(batch, case.k)
    nxt = draft_tokens(batch, 1, salt=99)
    w, b, act, slots = t["weight"], t["bias"], t["activation"], t["slots"]
    # verified: prefill, verify k drafts keeping accepted[i], then one more token
    y0, spec = _prefill(adapter, t, t["states"], max_step=case.k)
    _anchor(adapter, t, y0, spec, named, _ctx(adapter, case), "the prefill before the verify step")
    adapter.step(spec, drafts, w, b, act, slots, torch.tensor(case.accepted, dtype=torch.int32))
    spec_state = adapter.states(spec).clone()
    y_spec = adapter.step(spec, nxt, w, b, act, slots)
    # fed: prefill, then a prefill continuing each slot with only its accepted drafts, then the same token
    _, fed = _prefill(adapter, t, t["states"], max_step=case.k)
    kept = torch.cat([drafts[i, :j] for i, j in enumerate(case.accepted)])
    bounds = torch.tensor([0, *torch.tensor(case.accepted).cumsum(0).tolist()], dtype=t["starts"].dtype)
    adapter.prefill(fed, kept, w, b, act, bounds, slots, torch.ones(len(slots), dtype=torch.bool))
    fed_state = adapter.states(fed).clone()
    y_fed = adapter.step(fed, nxt, w, b, act, slots)
    ctx = _ctx(adapter, case)
    paths = ("verify k, accept j", "feed the j accepted")
    for i in named:
        slot = int(slots[i])
        name = f"slot {slot} (accepted {case.accepted[i]} of {case.k})"
        assert_equivalent(spec_state[slot], fed_state[slot], name=f"state of {name}", paths=paths, context=ctx)
        assert_equivalent(y_spec[i], y_fed[i], name=f"next token's y of {name}", paths=paths, context=ctx)
        assert_equivalent(
            adapter.states(spec)[slot],
            adapter.states(fed)[slot],
            name=f"next state of {name}",
            paths=paths,
            context=ctx,
        )


def check_s5_prefix_cache(adapter: EngineAdapter, case: PrefixCase) -> None:
    """S5: the snapshot at each block boundary = the state after that many tokens (each prefix run alone)."""
    batch = Batch(case.conv, 1, (case.length,), (0,), (case.has_state,), case.seed)
    t = _tensors(batch, adapter)
    first = adapter.first_slot
    state = t["states"][first] if case.has_state else torch.zeros_like(t["states"][first])
    snaps = adapter.snapshots(t["x"], t["weight"], t["bias"], t["activation"], state, case.block_size)
    blocks = case.length // case.block_size
    ctx = _ctx(adapter, case)
    want = ReferenceAdapter().snapshots(t["x"], t["weight"], t["bias"], t["activation"], state, case.block_size)
    assert_equivalent(snaps, want, name="snapshots", paths=("engine", "reference"), context=ctx)
    if snaps.shape[0] != blocks:
        raise AssertionError(f"{ctx}: {snaps.shape[0]} snapshots for {blocks} whole blocks of {case.block_size}")
    for b in range(blocks):
        n = (b + 1) * case.block_size
        prefix = {**t, "x": t["x"][:n], "starts": torch.tensor([0, n], dtype=t["starts"].dtype)}
        _, pool = _prefill(adapter, prefix, t["states"])
        assert_equivalent(
            snaps[b],
            adapter.states(pool)[first],
            name=f"snapshot {b} (after {n} tokens)",
            paths=("snapshot", "prefix alone"),
            context=ctx,
        )


def check_s6_dispatch(adapter: EngineAdapter, batch: Batch) -> None:
    """S6: on a batch the engine's guard admits, its fast path = its general path (outputs of named sequences
    and every state, bitwise). A batch the guard refuses is not exercised."""
    t = _tensors(batch, adapter)
    admits, reason = adapter.fast_admits(t["starts"], t["has_state"])
    if not admits:
        raise NotExercised(f"the guard refuses: {reason}")
    y_fast, fast = _prefill(adapter, t, t["states"], path="fast", max_step=max(batch.lens))
    y_general, general = _prefill(adapter, t, t["states"], path="general")
    ctx = _ctx(adapter, batch)
    _anchor(adapter, t, y_general, general, batch.named(), ctx, "the general path")
    paths = ("fast path", "general path")
    for i in batch.named():
        assert_equivalent(
            y_fast[_rows(t, i)], y_general[_rows(t, i)], name=f"y of sequence {i}", paths=paths, context=ctx
        )
    assert_equivalent(adapter.states(fast), adapter.states(general), name="pool", paths=paths, context=ctx)


def check_s7_packed_qkv(adapter: EngineAdapter, case: PackedCase) -> None:
    """S7: one call over q|k|v channels (one pool per slot) = the three convs over their channel slices, biases
    included: outputs of named sequences and states, bitwise."""
    batch = case.batch
    t = _tensors(batch, adapter)
    if not batch.named():
        raise NotExercised("every sequence is a pad")
    pool = adapter.new_pool(t["states"], max_step=1)
    args = (t["starts"], t["slots"], t["has_state"])
    y = adapter.packed_prefill(pool, t["x"], t["weight"], t["bias"], t["activation"], *args, case.sizes)
    ctx = _ctx(adapter, case)
    _anchor(adapter, t, y, pool, batch.named(), ctx, "the packed call")
    lo = 0
    for name, size in zip("qkv", case.sizes, strict=True):
        ch = slice(lo, lo + size)
        lo += size
        bias = None if t["bias"] is None else t["bias"][ch].contiguous()
        part = adapter.new_pool(t["states"][:, ch].contiguous(), max_step=1)
        y_part = adapter.prefill(
            part, t["x"][:, ch].contiguous(), t["weight"][ch].contiguous(), bias, t["activation"], *args
        )
        paths = ("packed q|k|v", f"{name} alone")
        for i in batch.named():
            assert_equivalent(
                y[_rows(t, i), ch], y_part[_rows(t, i)], name=f"{name} y of sequence {i}", paths=paths, context=ctx
            )
        for i in batch.named():
            slot = int(t["slots"][i])
            assert_equivalent(
                adapter.states(pool)[slot, ch],
                adapter.states(part)[slot],
                name=f"{name} state of slot {slot}",
                paths=paths,
                context=ctx,
            )


# S0 over each engine version's whole declared surface, and outside it (defined with the surfaces; here so every
# driver finds every serving property by name in this module)
from gdn_equiv.serving.routing import check_s6_routing  # noqa: E402
from gdn_equiv.serving.routing_apc import check_s6_routing_all  # noqa: E402
from gdn_equiv.serving.surface import check_s0_outside, check_s0_surface  # noqa: E402

__all__ += ["check_s0_outside", "check_s0_surface", "check_s6_routing", "check_s6_routing_all"]
