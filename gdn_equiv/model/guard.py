"""The fusion guard: a pure function from frozen facts to a :class:`Decision` with its reasons.

Conditions G1–G7 are PR #972's (fla 0.6.0); G8 and G9 are the ones this suite proved necessary
(SPEC P1, P6). A decision lists *every* failed condition; ``reason`` is the first, in G-order.
Activations are compared in canonical form (``silu`` is ``swish``; any registered activation or
alias the same way), so the guard never falls back where fusion is exact. After G9 come the
conditions of registered per-conv facts (:mod:`gdn_equiv.model.conv_ops`: the L2-norm conv's G10), each
"the convs agree on the fact's key"; the guard's core does not name them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from gdn_equiv.model.config import CallFacts, ConvFacts, LayerFacts, canonical_activation
from gdn_equiv.model.conv_ops import ConvFact
from gdn_equiv.model.conv_ops import conv_facts as registered_conv_facts


class _ConditionRegistry(type):
    """Iterating :class:`Condition` gives G1–G9, then one condition per registered per-conv fact
    (:func:`gdn_equiv.model.conv_ops.register_conv_fact`), so every consumer that lists the conditions
    (the necessity searches, the command line, the strategies, the oracle tests) sees them."""

    _all: Callable[[], list[Condition]]  # Condition's classmethod

    def __iter__(cls) -> Iterator[Condition]:
        return iter(cls._all())

    def __len__(cls) -> int:
        return len(cls._all())

    def __getitem__(cls, id_: str) -> Condition:
        for c in cls._all():
            if c.id == id_:
                return c
        raise KeyError(id_)

    def __contains__(cls, item: object) -> bool:
        return item in cls._all()


class Condition(metaclass=_ConditionRegistry):
    """One guard condition: ``id`` (``G1``...), ``short`` name and ``rule`` (what must hold for fusion).

    G1–G9 are class attributes (``Condition.G8``); a registered per-conv fact's condition is
    ``Condition[fact.condition_id]`` and carries the fact (``fact``). Compared by identity, like
    enum members; ``name`` is the id and ``value`` the ``(id, short, rule)`` triple, as they were
    when this was an enum.
    """

    _builtin: ClassVar[list[Condition]] = []
    _for_fact: ClassVar[dict[str, Condition]] = {}
    G1: ClassVar[Condition]
    G2: ClassVar[Condition]
    G3: ClassVar[Condition]
    G4: ClassVar[Condition]
    G5: ClassVar[Condition]
    G6: ClassVar[Condition]
    G7: ClassVar[Condition]
    G8: ClassVar[Condition]
    G9: ClassVar[Condition]

    def __init__(self, id_: str, short: str, rule: str, fact: ConvFact | None = None) -> None:
        self.id = id_
        self.short = short
        self.rule = rule
        self.fact = fact

    @property
    def name(self) -> str:
        return self.id

    @property
    def about_convs(self) -> bool:
        """Whether the condition is about the conv slots' facts (G5-G9, registered facts), not about
        the layer's flag, its cache or the call (G1-G4): strategies break the two kinds differently."""
        return self.fact is not None or self not in Condition._builtin[:4]

    @property
    def value(self) -> tuple[str, str, str]:
        return (self.id, self.short, self.rule)

    def __str__(self) -> str:
        return f"{self.id} {self.short}"

    def __repr__(self) -> str:
        return f"<Condition.{self.id}: {self.rule!r}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_condition, (self.id,))  # the registered instance in the receiving process too

    @classmethod
    def _all(cls) -> list[Condition]:
        return [*cls._builtin, *(cls.of_fact(f) for f in registered_conv_facts())]

    @classmethod
    def of_fact(cls, fact: ConvFact) -> Condition:
        """The condition a registered per-conv fact needs (one instance per fact registration)."""
        c = cls._for_fact.get(fact.name)
        if c is None or c.fact is not fact:
            c = cls._for_fact[fact.name] = Condition(fact.condition_id, fact.condition_short, fact.condition_rule, fact)
        return c


def _condition(id_: str) -> Condition:
    return Condition[id_]


for _id, _short, _rule in (
    ("G1", "short_conv", "use_short_conv must be on"),
    ("G2", "cached_state", "no cached state for this layer (fused path would ignore it)"),
    ("G3", "use_cache", "use_cache must be off (fused path writes no conv cache)"),
    ("G4", "varlen", "no cu_seqlens, given or from an attention_mask (fused path would leak across sequences)"),
    ("G5", "backend", "q/k/v convs must share one backend"),
    ("G6", "activation", "q/k/v convs must share one activation (silu == swish)"),
    ("G7", "kernel_size", "q/k/v convs must share one kernel size"),
    ("G8", "bias_parity", "each conv's bias presence must equal the others' and the layer's conv_bias flag"),
    ("G9", "param_dtype_device", "q/k/v weights (and biases) must share one dtype and one device"),
):
    Condition._builtin.append(Condition(_id, _short, _rule))
    setattr(Condition, _id, Condition._builtin[-1])


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
    for fact in registered_conv_facts():
        if not _all_equal([fact.key(fact.values(c.extras)) for c in convs]):
            failed.append(Condition.of_fact(fact))
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
