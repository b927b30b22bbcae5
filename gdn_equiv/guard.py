"""The fusion guard: a pure function from frozen facts to a :class:`Decision` with its reasons.

Conditions G1–G7 are PR #972's (fla 0.6.0); G8 and G9 are the ones this suite proved necessary
(SPEC P1, P6). A decision lists *every* failed condition; ``reason`` is the first, in G-order.
Activations are compared in canonical form (``silu`` is ``swish``), so the guard never falls back
where fusion is exact.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from gdn_equiv.config import CallFacts, ConvFacts, LayerFacts, canonical_activation


class Condition(enum.Enum):
    """One guard condition; ``value`` is its short id, ``rule`` what must hold for fusion."""

    G1 = ("G1", "short_conv", "use_short_conv must be on")
    G2 = ("G2", "cached_state", "no cached state for this layer (fused path would ignore it)")
    G3 = ("G3", "use_cache", "use_cache must be off (fused path writes no conv cache)")
    G4 = ("G4", "varlen", "no cu_seqlens, given or from an attention_mask (fused path would leak across sequences)")
    G5 = ("G5", "backend", "q/k/v convs must share one backend")
    G6 = ("G6", "activation", "q/k/v convs must share one activation (silu == swish)")
    G7 = ("G7", "kernel_size", "q/k/v convs must share one kernel size")
    G8 = ("G8", "bias_parity", "each conv's bias presence must equal the others' and the layer's conv_bias flag")
    G9 = ("G9", "param_dtype_device", "q/k/v weights (and biases) must share one dtype and one device")

    def __init__(self, id_: str, short: str, rule: str) -> None:
        self.id = id_
        self.short = short
        self.rule = rule

    def __str__(self) -> str:
        return f"{self.id} {self.short}"


@dataclass(frozen=True)
class Decision:
    """``fuse`` and why: ``failed`` lists every condition that does not hold, in G-order."""

    fuse: bool
    failed: tuple[Condition, ...] = ()

    @property
    def reason(self) -> str:
        if self.fuse:
            return "fusable: all conditions G1-G9 hold"
        first = self.failed[0]
        return f"{first}: {first.rule}"

    @property
    def reason_id(self) -> str:
        """``"fuse"`` or the first failed condition's id; what reports count."""
        return "fuse" if self.fuse else self.failed[0].id

    def __str__(self) -> str:
        if self.fuse:
            return self.reason
        return "; ".join(f"{c}: {c.rule}" for c in self.failed)


def _all_equal(values: Sequence[object]) -> bool:
    return all(v == values[0] for v in values)


def _conv_conditions(conv_bias: bool, convs: Sequence[ConvFacts]) -> list[Condition]:
    failed = []
    if not _all_equal([c.backend for c in convs]):
        failed.append(Condition.G5)
    if not _all_equal([canonical_activation(c.activation) for c in convs]):
        failed.append(Condition.G6)
    if not _all_equal([c.kernel_size for c in convs]):
        failed.append(Condition.G7)
    if not all(c.has_bias == conv_bias for c in convs):
        failed.append(Condition.G8)
    dtypes = [c.weight_dtype for c in convs]
    bias_dtypes = [c.bias_dtype for c in convs if c.has_bias]
    if not (_all_equal(dtypes) and _all_equal(bias_dtypes or [None]) and _all_equal([c.device for c in convs])):
        failed.append(Condition.G9)
    return failed


def decide(layer: LayerFacts, call: CallFacts) -> Decision:
    """Whether the fused prologue (one conv over every slot's channels) computes exactly what the
    separate convs do; any number of named conv slots."""
    failed: list[Condition] = []
    if not layer.use_short_conv or layer.convs is None:
        failed.append(Condition.G1)
    if call.has_cached_state:
        failed.append(Condition.G2)
    if call.use_cache:
        failed.append(Condition.G3)
    if call.varlen:
        failed.append(Condition.G4)
    if layer.use_short_conv and layer.convs is not None:
        failed.extend(_conv_conditions(layer.conv_bias, layer.convs))
    return Decision(fuse=not failed, failed=tuple(failed))


def decide_upstream(layer: LayerFacts, call: CallFacts) -> bool:
    """fla 0.6.0's ``_use_fused_qkv_conv`` restated over facts (G1–G7, raw activation strings).

    Kept for the suite's P1/P6 demonstrations and the ``fla`` target's comparisons; it is not
    used to choose a path.
    """
    if not (layer.use_short_conv and not call.has_cached_state and not call.use_cache and not call.varlen):
        return False
    assert layer.convs is not None
    convs = layer.convs
    return (
        _all_equal([c.backend for c in convs])
        and _all_equal([c.activation for c in convs])
        and _all_equal([c.kernel_size for c in convs])
    )
