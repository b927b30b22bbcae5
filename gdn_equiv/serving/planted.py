"""Planted serving engines: each is the reference adapter with one defect an engine could ship, and each is
caught by the properties named in :data:`PLANTED` (``tests/test_serving.py`` requires the catch, and the drivers'
tests run them through the plug-in door, ``--serving-engine gdn_equiv.serving.planted:<class>``).

The first six are what the metamorphic S1-S7 let through (an engine compared only with itself): only S0, the
engine against the reference, must catch them.

Nothing is patched: the defect is the adapter's own code, as an engine's kernel would hold it.
"""

from __future__ import annotations

import torch

from gdn_equiv.serving import pool as ref
from gdn_equiv.serving.adapters import ReferenceAdapter

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


S0 = "check_s0_reference"

#: planted adapter -> the properties (function names in :mod:`gdn_equiv.serving.properties`) that must catch it
PLANTED: dict[str, tuple[type[ReferenceAdapter], tuple[str, ...]]] = {
    Zeros.name: (Zeros, (S0,)),
    NoOpPrefill.name: (NoOpPrefill, (S0,)),
    Identity.name: (Identity, (S0,)),
    BiasDropped.name: (BiasDropped, (S0,)),
    SkipsSequence0.name: (SkipsSequence0, (S0, "check_s1_pool_equals_alone")),
    StateOneSlotOff.name: (StateOneSlotOff, (S0, "check_s2_untouched")),
    KeepsRejectedDrafts.name: (KeepsRejectedDrafts, (S0, "check_s4_speculation")),
    WritesPadSlot.name: (WritesPadSlot, (S0, "check_s2_untouched")),
    ReadsSequenceIndexSlot.name: (ReadsSequenceIndexSlot, (S0, "check_s1_pool_equals_alone")),
    PackedDropsKBias.name: (PackedDropsKBias, (S0, "check_s7_packed_qkv")),
    SnapshotOffByOneBlock.name: (SnapshotOffByOneBlock, (S0, "check_s5_prefix_cache")),
    ShortPrefillDropsHistory.name: (ShortPrefillDropsHistory, (S0, "check_s3_handoff")),
    FastGuardAdmitsFresh.name: (FastGuardAdmitsFresh, ("check_s6_dispatch",)),
}


def planted(name: str) -> ReferenceAdapter:
    return PLANTED[name][0]()
