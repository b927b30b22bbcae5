"""Planted serving engines: each is the reference adapter with one defect an engine could ship, and each is
caught by the properties named in :data:`PLANTED` (``tests/test_serving.py`` requires the catch, and the drivers'
tests run them through the plug-in door, ``--serving-engine gdn_equiv.serving.planted:<class>``).

The first ones are what S1-S7 would let through if each compared the engine only with itself (zeros, identity,
a dropped bias): each of S1-S7 carries its own comparison with the reference, so they catch them too.

Nothing is patched: the defect is the adapter's own code, as an engine's kernel would hold it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from gdn_equiv.serving import pool as ref
from gdn_equiv.serving import surface
from gdn_equiv.serving.adapters import ReferenceAdapter
from gdn_equiv.serving.routing import Call, ReferenceRouting, RoutingCase, SchedRow
from gdn_equiv.serving.routing_apc import ApcCase, ConvCall, Indices, ReferenceApcRouting, VllmMamba2ApcRouting
from gdn_equiv.serving.surface import SurfaceCase, SurfaceOp

Tensor = torch.Tensor

__all__ = ["PLANTED", "BiasDropped", "Identity", "NoOpPrefill", "SkipsSequence0", "StateOneSlotOff", "Zeros", "planted"]


class KeepsRejectedDrafts(ReferenceAdapter):
    """vLLM #50272's class: the verify step's window keeps every draft's input, accepted or not."""

    name = "planted-keeps-rejected-drafts"

    def step(self, pool, x, weight, bias, activation, slots, accepted=None):
        return super().step(pool, x, weight, bias, activation, slots, None)


class WritesPadSlot(ReferenceAdapter):
    """The pad id used as an index: a pad sequence's state is written to ``pool[-1]``, the last slot."""

    name = "planted-writes-pad-slot"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        y = super().prefill(pool, x, weight, bias, activation, starts, slots, has_state, path=path)
        for i, slot in enumerate(slots.tolist()):
            lo, hi = int(starts[i]), int(starts[i + 1])
            if slot == self.pad_slot and hi > lo:
                width = pool.states.shape[-1]
                window = torch.cat([torch.zeros_like(pool.states[slot]), x[lo:hi].T.to(pool.states.dtype)], dim=-1)
                pool.states[slot] = window[:, -width:]
        return y


class ReadsSequenceIndexSlot(ReferenceAdapter):
    """Reads sequence ``i``'s initial state from ``pool[i]`` (its place in the batch), writes ``pool[slots[i]]``."""

    name = "planted-reads-sequence-index-slot"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        if path == "fast":
            return super().prefill(pool, x, weight, bias, activation, starts, slots, has_state, path=path)
        staged = pool.states.clone()
        for i, slot in enumerate(slots.tolist()):
            if slot != self.pad_slot and i < staged.shape[0]:
                staged[slot] = pool.states[i]
        y = ref.prefill(x, weight, bias, activation, staged, starts, slots, has_state, pad_slot=self.pad_slot)
        named = [s for s in slots.tolist() if s != self.pad_slot]
        pool.states[named] = staged[named]
        return y


class PackedDropsKBias(ReferenceAdapter):
    """The packed q|k|v call builds its bias from q's and v's and leaves k's channels at zero."""

    name = "planted-packed-drops-k-bias"

    def packed_prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, sizes):
        if bias is not None:
            bias = bias.clone()
            bias[sizes[0] : sizes[0] + sizes[1]] = 0
        return self.prefill(pool, x, weight, bias, activation, starts, slots, has_state)


class SnapshotOffByOneBlock(ReferenceAdapter):
    """Prefix caching stores the state at each block's start instead of its end (snapshot b after b blocks)."""

    name = "planted-snapshot-off-by-one-block"

    def snapshots(self, x, weight, bias, activation, state, block_size):
        ends = ref.snapshots(x, weight, bias, activation, state, block_size)
        return torch.cat([state[None], ends[:-1]]) if ends.shape[0] else ends


class ShortPrefillDropsHistory(ReferenceAdapter):
    """A continued prompt shorter than ``W-1`` tokens stores its zero-padded inputs: the old state's tail is lost
    at the prefill -> decode handoff (outputs of the prefill itself are right)."""

    name = "planted-short-prefill-drops-history"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        y = super().prefill(pool, x, weight, bias, activation, starts, slots, has_state, path=path)
        width = pool.states.shape[-1]
        for i, slot in enumerate(slots.tolist()):
            lo, hi = int(starts[i]), int(starts[i + 1])
            if slot != self.pad_slot and 0 < hi - lo < width:
                window = torch.cat([torch.zeros_like(pool.states[slot]), x[lo:hi].T.to(pool.states.dtype)], dim=-1)
                pool.states[slot] = window[:, -width:]
        return y


class FastGuardAdmitsFresh(ReferenceAdapter):
    """The decode fast path's guard checks lengths only: a fresh sequence is sent to the decode kernel,
    which always reads its slot's (stale) state."""

    name = "planted-fast-guard-admits-fresh"

    def fast_admits(self, starts: Tensor, has_state: Tensor) -> tuple[bool, str]:
        return super().fast_admits(starts, torch.ones_like(has_state))


class Zeros(ReferenceAdapter):
    """Outputs zeros and leaves the pool as it was: x, weight and bias ignored."""

    name = "planted-zeros"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        return torch.zeros_like(x)

    def step(self, pool, x, weight, bias, activation, slots, accepted=None):
        return torch.zeros_like(x)


class NoOpPrefill(ReferenceAdapter):
    """The prefill writes nothing, outputs or states (an output buffer never filled); decode is right."""

    name = "planted-no-op-prefill"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        if path == "fast":
            return super().prefill(pool, x, weight, bias, activation, starts, slots, has_state, path=path)
        return torch.zeros_like(x)


class Identity(ReferenceAdapter):
    """Every call returns its input as its output (states kept right): a conv never applied."""

    name = "planted-identity"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        super().prefill(pool, x, weight, bias, activation, starts, slots, has_state, path=path)
        return x.clone()

    def step(self, pool, x, weight, bias, activation, slots, accepted=None):
        super().step(pool, x, weight, bias, activation, slots, accepted)
        return x.clone()


class BiasDropped(ReferenceAdapter):
    """Every call runs without the bias (S7 compares the packed call with the engine's own three calls)."""

    name = "planted-bias-dropped"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        return super().prefill(pool, x, weight, None, activation, starts, slots, has_state, path=path)

    def step(self, pool, x, weight, bias, activation, slots, accepted=None):
        return super().step(pool, x, weight, None, activation, slots, accepted)


class SkipsSequence0(ReferenceAdapter):
    """The prefill skips the batch's first sequence (output zeros, state unwritten): vLLM's Triton prefill given
    ``pad_slot_id=0``, which it compares with the sequence's index in the batch (the old adapter's mistake)."""

    name = "planted-skips-sequence-0"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        if path == "fast":
            return super().prefill(pool, x, weight, bias, activation, starts, slots, has_state, path=path)
        skipped = slots.clone()
        skipped[0] = self.pad_slot
        y = super().prefill(pool, x, weight, bias, activation, starts, skipped, has_state)
        y[int(starts[0]) : int(starts[1])] = 0
        return y


class StateOneSlotOff(ReferenceAdapter):
    """The prefill writes each sequence's final state one slot further on (``slot + 1``, wrapping); outputs right."""

    name = "planted-state-one-slot-off"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        if path == "fast":
            return super().prefill(pool, x, weight, bias, activation, starts, slots, has_state, path=path)
        before = pool.states.clone()
        y = super().prefill(pool, x, weight, bias, activation, starts, slots, has_state)
        after = pool.states.clone()
        pool.states.copy_(before)
        S = pool.states.shape[0]
        for slot in slots.tolist():
            if slot != self.pad_slot:
                pool.states[(slot + 1) % S] = after[slot]
        return y


class GuardAdmitsNothing(ReferenceAdapter):
    """Not a defect: an engine whose fast-path guard admits no batch, so S6 never compares anything (the drivers
    must say "not exercised", never pass)."""

    name = "guard-admits-nothing"

    def fast_admits(self, starts: Tensor, has_state: Tensor) -> tuple[bool, str]:
        return False, "this engine has no fast path"


class AdapterTypeError(ReferenceAdapter):
    """Not an engine's defect: an adapter that calls its engine wrongly (a TypeError on every prefill). Its rows
    must fail (an error of the row, with its case), never read "cannot run here"."""

    name = "adapter-type-error"

    def prefill(self, pool, x, weight, bias, activation, starts, slots, has_state, *, path="general"):
        raise TypeError("causal_conv1d_fn() got an unexpected keyword argument 'pad_slot_idx'")


# ---- planted on the whole surface (SPEC §11, "the whole surface"): each op of the in-house reference's declared
# surface (:data:`gdn_equiv.serving.surface.REFERENCE_SURFACES`) with one defect that valid, aliased, narrow calls
# never show: caught by S0-surface only where the strategy draws the location, width, count or pad apart


class _SurfaceDefect(SurfaceOp):
    """The reference op with one defect: :meth:`planted` turns the case into what the defective op computes."""

    def planted(self, case: SurfaceCase) -> tuple[SurfaceCase, str]:
        return case, self.surface.layout

    def call(self, case: SurfaceCase, t: dict) -> Tensor:
        if case.outside is not None and case.outside not in surface.ANSWERABLE:
            raise ValueError(f"{case.outside}: outside the surface of {self.surface.key}")
        wrong, layout = self.planted(case)
        out = surface.expected(wrong, t, self.surface.reserved, layout)
        t["pool"].copy_(out["pool"])
        t["windows"].copy_(out["windows"])
        return out["y"]


class _SurfaceEngine(ReferenceAdapter):
    """The reference adapter whose surface ops are the reference's but for :attr:`defect` on every op."""

    defect: type[SurfaceOp] = SurfaceOp

    def surface_ops(self) -> dict[str, SurfaceOp]:
        return {f"{s.op}/{a}": self.defect(s) for s in surface.REFERENCE_SURFACES for a in s.addressing}


class _WindowsAtStateRow(_SurfaceDefect):
    def planted(self, case):
        if case.addressing != surface.WINDOWS:
            return case, self.surface.layout
        rows = tuple(r if r.read is None else replace(r, window=r.read % case.num_windows) for r in case.rows)
        return replace(case, rows=rows), self.surface.layout


class WindowsAtStateRow(_SurfaceEngine):
    """Aliasing: the verify step writes each row's draft windows at its state row (``conv_state_indices``), not
    at ``intermediate_state_indices``: right whenever the two are the same tensor, as sglang's caller passes them."""

    name = "planted-windows-at-state-row"
    defect = _WindowsAtStateRow


class _ReadsWriteBlock(_SurfaceDefect):
    def planted(self, case):
        if case.addressing != surface.BLOCK_TABLE:
            return case, self.surface.layout
        rows = tuple(r if r.blocks is None else replace(r, blocks=(r.blocks[2], *r.blocks[1:])) for r in case.rows)
        return replace(case, rows=rows), self.surface.layout


class ReadsWriteBlock(_SurfaceEngine):
    """Aliasing (prefix caching): the initial state is read from the block the call writes
    (``block_idx_last_scheduled_token``), not from ``initial_state_idx``'s: right when they are one block."""

    name = "planted-reads-write-block"
    defect = _ReadsWriteBlock


class _SkipsBoundaryBlocks(_SurfaceDefect):
    def planted(self, case):
        return (
            replace(case, block_size=10**9) if case.addressing == surface.BLOCK_TABLE else case
        ), self.surface.layout


class SkipsBoundaryBlocks(_SurfaceEngine):
    """Prefix-cache arguments: the blocks between the first and last scheduled ones never get their boundary
    states (only the final state is written)."""

    name = "planted-skips-boundary-blocks"
    defect = _SkipsBoundaryBlocks


class _WideStateShifts(_SurfaceDefect):
    def planted(self, case):
        wide = case.op == "update" and case.extra > 0 and not case.spec and not case.circular
        return case, (surface.SHIFT_REGISTER if wide else self.surface.layout)


class WideStateShifts(_SurfaceEngine):
    """Wide states: a one-token decode on a state wider than ``W-1`` shifts the whole buffer and reads its last
    ``W-1`` columns, where the window is its first ``W-1`` (right on states exactly ``W-1`` wide)."""

    name = "planted-wide-state-shifts"
    defect = _WideStateShifts


class _IgnoresCacheSeqlens(_SurfaceDefect):
    def planted(self, case):
        return replace(case, circular=False), self.surface.layout


class IgnoresCacheSeqlens(_SurfaceEngine):
    """Circular states: ``cache_seqlens`` accepted and ignored (the state read and written as a plain window)."""

    name = "planted-ignores-cache-seqlens"
    defect = _IgnoresCacheSeqlens


class _ChannelsPastBlock(_SurfaceDefect):
    def call(self, case, t):
        before = t["pool"].clone()
        y = super().call(case, t)
        y[:, 256:] = 0
        t["pool"][:, 256:] = before[:, 256:]
        return y


class ChannelsPastBlock(_SurfaceEngine):
    """Channel blocks: one program per row, no grid over channel blocks: channels past the first 256 never
    computed nor stored."""

    name = "planted-channels-past-block"
    defect = _ChannelsPastBlock


class _WidthFiveAsFour(_SurfaceDefect):
    def call(self, case, t):
        if case.width < 5:
            return super().call(case, t)
        w = t["weight"].clone()
        w[:, : case.width - 4] = 0  # the kernel's taps stop at four
        return super().call(case, dict(t, weight=w))


class WidthFiveAsFour(_SurfaceEngine):
    """Widths: a kernel written for widths up to 4 given a wider one computes with its last four taps."""

    name = "planted-width-five-as-four"
    defect = _WidthFiveAsFour


class _CountsIgnored(_SurfaceDefect):
    def planted(self, case):
        return replace(case, rows=tuple(replace(r, accepted=1) for r in case.rows)), self.surface.layout


class CountsIgnored(_SurfaceEngine):
    """Counts: the accepted count is read as 1 (the window always at offset 0): right while every count is 1."""

    name = "planted-counts-ignored"
    defect = _CountsIgnored


class _PadEndsBatch(_SurfaceDefect):
    def planted(self, case):
        rows, seen = [], False
        for r in case.rows:
            seen = seen or r.read is None
            rows.append(replace(r, read=None, write=None) if seen else r)
        return replace(case, rows=tuple(rows)), self.surface.layout


class PadEndsBatch(_SurfaceEngine):
    """Pads between rows: the first pad ends the batch (rows after it neither computed nor stored): right while
    pads only trail."""

    name = "planted-pad-ends-batch"
    defect = _PadEndsBatch


class _AnswersOutside(SurfaceOp):
    def call(self, case: SurfaceCase, t: dict) -> Tensor:
        if case.outside is not None:  # no check of the call: whatever it computes, it says nothing
            return torch.zeros_like(t["x"])
        return super().call(case, t)


class AnswersOutside(_SurfaceEngine):
    """Outside the surface: a count of 0 or k+1, a state narrower than W-1 or an index past the pool answered
    without a word (zeros, the pool left as it was)."""

    name = "planted-answers-outside"
    defect = _AnswersOutside


class _CountsFromBatchFront(ReferenceRouting):
    caller = "gdn_equiv/serving/planted.py:CountsFromBatchFront (a metadata builder)"

    def route(self, rows: tuple[SchedRow, ...], case: RoutingCase) -> list[Call]:
        plan = super().route(rows, case)
        front = iter(r.accepted for r in rows)  # every row's count in batch order, not the verify rows' own
        return [replace(c, accepted=next(front)) if c.kind == "verify" else c for c in plan]


class CountsFromBatchFront(ReferenceAdapter):
    """Routing: the metadata builder gathers the verify rows' accepted counts as the batch's first counts
    (``num_accepted_tokens[:num_spec_decodes]``) instead of each verify row's own: right while verify rows lead
    the batch, wrong once a prefill or pad comes before one."""

    name = "planted-counts-from-batch-front"

    def routing(self) -> _CountsFromBatchFront:
        return _CountsFromBatchFront()


class _OnePromptAsDecode(ReferenceRouting):
    caller = "gdn_equiv/serving/planted.py:OnePromptAsDecode (a short-conv metadata builder)"

    def route(self, rows: tuple[SchedRow, ...], case: RoutingCase) -> list[Call]:
        plan = super().route(rows, case)
        return [replace(c, kind="decode", has_state=True) if c.kind == "prefill" and len(c.tokens) == 1 else c
                for c in plan]  # fmt: skip


class OnePromptAsDecode(ReferenceAdapter):
    """Routing (short-conv): the metadata builder splits decodes from prefills by query length alone, so a fresh
    one-token prompt goes to the decode update, which continues its block's (recycled) state instead of zeros
    (the class of vLLM 0.28.0-0.30.0's GDN builder finding, planted in a short-conv builder)."""

    name = "planted-short-conv-one-prompt-as-decode"

    def short_conv_routing(self) -> _OnePromptAsDecode:
        return _OnePromptAsDecode()


class ApcReadsFirstScheduledBlock(ReferenceApcRouting):
    """Mamba2 "all" mode: a metadata builder whose ``block_idx_last_computed_token`` is the first scheduled
    token's column (``floor(c/B)``) instead of the last computed token's (``ceil(c/B) - 1``): right while a
    request resumes inside a block, one block off (the column it is about to fill) when its computed tokens end
    on a boundary (a prefix-cache hit, a chunk that ended on one). An engine's builder in :class:`ApcFirstScheduled`
    (``S6-routing-all``'s tooth in :data:`PLANTED`)."""

    caller = "gdn_equiv/serving/planted.py:ApcReadsFirstScheduledBlock (a Mamba2 all-mode metadata builder)"

    def indices(self, computed: int, seq_len: int, block_size: int) -> Indices:
        ix = super().indices(computed, seq_len, block_size)
        return replace(ix, last_computed=ix.first_scheduled)


class ApcWritesPastLastBlock(ReferenceApcRouting):
    """Mamba2 "all" mode: a metadata builder whose ``block_idx_last_scheduled_token`` is ``floor(s/B)`` instead
    of ``ceil(s/B) - 1``: right unless the step ends on a block boundary, where the last state goes one column
    past the block it completes."""

    caller = "gdn_equiv/serving/planted.py:ApcWritesPastLastBlock (a Mamba2 all-mode metadata builder)"

    def indices(self, computed: int, seq_len: int, block_size: int) -> Indices:
        ix = super().indices(computed, seq_len, block_size)
        return replace(ix, last_scheduled=seq_len // block_size)


class ApcVerifyReadsLastComputedBlock(ReferenceApcRouting):
    """Mamba2 "all" mode with speculative decoding: the conv update of a verify row reads the last computed
    token's column (``ceil(c/B) - 1``) instead of the one its request's previous verify ended in (where that
    update left its windows): right unless the previous verify's tokens crossed a block boundary its accepted
    ones did not reach (the class of vLLM 0.28.0-0.31.0's MambaMixer2 finding, planted in the in-house
    builder so CI carries it without a release's source)."""

    caller = "gdn_equiv/serving/planted.py:ApcVerifyReadsLastComputedBlock (a Mamba2 all-mode metadata builder)"

    def route(self, case: ApcCase, s: int) -> list[ConvCall]:
        step = case.timeline()[s]
        B, calls, verify = case.block_size, super().route(case, s), iter(x for x in step if x.tokens and x.request >= 0)
        out = []
        for call in calls:
            x = next(verify)
            if x.drafts >= 0:
                call = replace(call, initial=self.indices(x.computed, x.computed + x.tokens, B).last_computed)
            out.append(call)
        return out


class ReleaseReadsFirstScheduledBlock(VllmMamba2ApcRouting):
    """:class:`ApcReadsFirstScheduledBlock`'s defect planted in a release's own builder object: its
    ``_compute_prefix_caching_block_indices`` answers the first scheduled token's column as the last computed
    token's, the rest of ``build`` and the mixer's routing the release's (the driver's teeth through the real
    path; needs the release's source)."""

    def __init__(self, version: str) -> None:
        super().__init__(version)
        self.caller = f"{VllmMamba2ApcRouting.caller}, planted: last computed = first scheduled"

    def _builder(self, case: ApcCase) -> Any:
        b = super()._builder(case)
        own = b._compute_prefix_caching_block_indices

        def planted(m: Any, block_size: int) -> tuple[Tensor, Tensor, Tensor]:
            _, first, last = own(m, block_size)
            return first.clone(), first, last

        b._compute_prefix_caching_block_indices = planted
        return b


class _ApcPlanted(ReferenceAdapter):
    """A reference engine whose Mamba2 all-mode builder is one of the planted ones (S6-routing-all's teeth)."""

    builder: type[ReferenceApcRouting] = ReferenceApcRouting

    def apc_routing(self) -> ReferenceApcRouting:
        return self.builder()


class ApcFirstScheduled(_ApcPlanted):
    """S6-routing-all: :class:`ApcReadsFirstScheduledBlock` as an engine's builder."""

    name = "planted-apc-reads-first-scheduled-block"
    builder = ApcReadsFirstScheduledBlock


class ApcPastLast(_ApcPlanted):
    """S6-routing-all: :class:`ApcWritesPastLastBlock` as an engine's builder."""

    name = "planted-apc-writes-past-last-block"
    builder = ApcWritesPastLastBlock


class ApcVerifyLastComputed(_ApcPlanted):
    """S6-routing-all: :class:`ApcVerifyReadsLastComputedBlock` (vLLM 0.28.0-0.31.0's finding's class) as an
    engine's builder."""

    name = "planted-apc-verify-reads-last-computed-block"
    builder = ApcVerifyReadsLastComputedBlock


#: the Mamba2 all-mode planted builders by name, for ``tools/routing_mamba2_all.py`` (the record's teeth are their
#: adapters in :data:`PLANTED`; their catch is tests/test_serving.py's and tests/test_serving_routing.py's)
PLANTED_APC = {"apc-reads-first-scheduled-block": ApcReadsFirstScheduledBlock,
               "apc-writes-past-last-block": ApcWritesPastLastBlock,
               "apc-verify-reads-last-computed-block": ApcVerifyReadsLastComputedBlock}  # fmt: skip


S0 = "check_s0_reference"
_S1_S7 = ("check_s1_pool_equals_alone", "check_s2_untouched", "check_s3_handoff", "check_s4_speculation",
          "check_s5_prefix_cache", "check_s6_dispatch", "check_s7_packed_qkv")  # fmt: skip
SU = "check_s0_surface"

#: planted adapter -> the properties (function names in :mod:`gdn_equiv.serving.properties`) that must catch it
PLANTED: dict[str, tuple[type[ReferenceAdapter], tuple[str, ...]]] = {
    # an engine that computes nothing, returns its input or drops its bias: S1-S7 each carry their own comparison
    # with the reference, so each catches them too (S5 compares states only: zeros are caught, input and bias not)
    Zeros.name: (Zeros, (S0, *_S1_S7)),
    NoOpPrefill.name: (NoOpPrefill, (S0,)),
    Identity.name: (Identity, (S0, *(p for p in _S1_S7 if p != "check_s5_prefix_cache"))),
    BiasDropped.name: (BiasDropped, (S0, *(p for p in _S1_S7 if p != "check_s5_prefix_cache"))),
    SkipsSequence0.name: (SkipsSequence0, (S0, "check_s1_pool_equals_alone")),
    StateOneSlotOff.name: (StateOneSlotOff, (S0, "check_s2_untouched")),
    KeepsRejectedDrafts.name: (KeepsRejectedDrafts, (S0, "check_s4_speculation")),
    WritesPadSlot.name: (WritesPadSlot, (S0, "check_s2_untouched")),
    ReadsSequenceIndexSlot.name: (ReadsSequenceIndexSlot, (S0, "check_s1_pool_equals_alone")),
    PackedDropsKBias.name: (PackedDropsKBias, (S0, "check_s7_packed_qkv")),
    SnapshotOffByOneBlock.name: (SnapshotOffByOneBlock, (S0, "check_s5_prefix_cache")),
    ShortPrefillDropsHistory.name: (ShortPrefillDropsHistory, (S0, "check_s3_handoff")),
    FastGuardAdmitsFresh.name: (FastGuardAdmitsFresh, ("check_s6_dispatch",)),
    WindowsAtStateRow.name: (WindowsAtStateRow, (SU,)),
    ReadsWriteBlock.name: (ReadsWriteBlock, (SU,)),
    SkipsBoundaryBlocks.name: (SkipsBoundaryBlocks, (SU,)),
    WideStateShifts.name: (WideStateShifts, (SU,)),
    IgnoresCacheSeqlens.name: (IgnoresCacheSeqlens, (SU,)),
    ChannelsPastBlock.name: (ChannelsPastBlock, (SU,)),
    WidthFiveAsFour.name: (WidthFiveAsFour, (SU,)),
    CountsIgnored.name: (CountsIgnored, (SU,)),
    PadEndsBatch.name: (PadEndsBatch, (SU,)),
    AnswersOutside.name: (AnswersOutside, ("check_s0_outside",)),
    CountsFromBatchFront.name: (CountsFromBatchFront, ("check_s6_routing",)),
    OnePromptAsDecode.name: (OnePromptAsDecode, ("check_s6_routing",)),
    ApcFirstScheduled.name: (ApcFirstScheduled, ("check_s6_routing_all",)),
    ApcPastLast.name: (ApcPastLast, ("check_s6_routing_all",)),
    ApcVerifyLastComputed.name: (ApcVerifyLastComputed, ("check_s6_routing_all",)),
}

#: the class of issue #50's list each surface-planted engine stands for
SURFACE_CLASSES: dict[str, str] = {
    WindowsAtStateRow.name: "aliasing (draft windows apart from state rows)",
    ReadsWriteBlock.name: "aliasing (prefix-cache read block apart from write block)",
    SkipsBoundaryBlocks.name: "prefix-cache arguments (boundary blocks)",
    WideStateShifts.name: "wide states",
    IgnoresCacheSeqlens.name: "circular states (cache_seqlens)",
    ChannelsPastBlock.name: "channel blocks (D past 256)",
    WidthFiveAsFour.name: "widths (past 4)",
    CountsIgnored.name: "accepted counts (past 1)",
    PadEndsBatch.name: "pads between rows",
    AnswersOutside.name: "outside the surface (no refusal)",
    CountsFromBatchFront.name: "routing (a metadata builder's accepted counts)",
    OnePromptAsDecode.name: "routing (a short-conv metadata builder's decode/prefill split)",
}


def planted(name: str) -> ReferenceAdapter:
    return PLANTED[name][0]()
