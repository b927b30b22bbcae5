"""Planted guards (issue #53): P1's teeth, in both directions.

Each is a guard a user could ship, mixed in front of a family's fused layer as its ``guard`` (the
``gdn_equiv`` target's ``defect=`` option, like every layer defect in :mod:`gdn_equiv.harness.planted`):

- too lax (``guard-ignores-G<n>``): one condition dropped, so the layer fuses where the spec refuses for
  that condition alone (an unsafe fusion, P1's ``FAIL``);
- too strict (``guard-strict-G<n>``): one condition checked more strictly than the spec, so the layer falls
  back where fusion is exact (a missed fusion, P1's ``missed fusion``). The conditions on the layer's
  convs (G5-G10) each have one; G1-G4 are single flags, whose only stricter form is refusing a state they
  do not govern, which ``guard-never-fuses`` covers.

Nothing here patches the guard under test: each is a guard of its own built on the real one.
"""

from __future__ import annotations

from collections.abc import Callable

from gdn_equiv.model.config import CallFacts, LayerFacts
from gdn_equiv.model.guard import Condition, Decision, decide

__all__ = ["GUARD_DEFECTS"]

Guard = Callable[[LayerFacts, CallFacts], Decision]


def _ignoring(cid: str) -> Guard:
    def guard(layer: LayerFacts, call: CallFacts) -> Decision:
        failed = tuple(c for c in decide(layer, call).failed if c.id != cid)
        return Decision(fuse=not failed, failed=failed)

    return guard


def _stricter(cid: str, refuses: Callable[[LayerFacts], bool]) -> Guard:
    """The real guard, with condition ``cid`` also failing where ``refuses`` says so."""

    def guard(layer: LayerFacts, call: CallFacts) -> Decision:
        decision = decide(layer, call)
        convs = layer.convs if layer.use_short_conv and layer.convs is not None else None
        if convs is None or Condition[cid] in decision.failed or not refuses(layer):
            return decision
        failed = tuple(sorted((*decision.failed, Condition[cid]), key=list(Condition).index))
        return Decision(fuse=False, failed=failed)

    return guard


def _never(layer: LayerFacts, call: CallFacts) -> Decision:
    decision = decide(layer, call)
    return decision if not decision.fuse else Decision(fuse=False, failed=(Condition.G1,))


def _convs(layer: LayerFacts) -> tuple:
    return layer.convs or ()


#: condition -> (what the stricter check refuses, in words; the predicate over the layer's facts)
STRICTER: dict[str, tuple[str, Callable[[LayerFacts], bool]]] = {
    "G5": ("trusts only the torch backend", lambda layer: any(c.backend != "torch" for c in _convs(layer))),
    "G6": ("refuses convs without an activation", lambda layer: any(c.activation is None for c in _convs(layer))),
    "G7": ("accepts only the default width 4", lambda layer: any(c.kernel_size != 4 for c in _convs(layer))),
    "G8": ("refuses every biased conv", lambda layer: layer.conv_bias or any(c.has_bias for c in _convs(layer))),
    "G9": ("accepts only fp32 parameters", lambda layer: any(c.weight_dtype != "float32" for c in _convs(layer))),
    "G10": ("refuses every conv with a registered fact", lambda layer: any(c.extras for c in _convs(layer))),
}


def _defect(name: str, doc: str, guard: Guard) -> type:
    return type(name, (), {"__doc__": doc, "guard": staticmethod(guard), "__module__": __name__})


#: name -> class mixed in front of the family's fused layer; joined to ``planted.LAYER_DEFECTS``
GUARD_DEFECTS: dict[str, type] = {
    **{
        f"guard-ignores-{c.id}": _defect(
            f"GuardIgnores{c.id}", f"The guard drops {c}: it fuses where only that condition fails.", _ignoring(c.id)
        )
        for c in list(Condition)[:10]
    },
    **{
        f"guard-strict-{cid}": _defect(
            f"GuardStrict{cid}",
            f"The guard's {cid} also {what}: it falls back where fusion is exact.",
            _stricter(cid, p),
        )
        for cid, (what, p) in STRICTER.items()
    },
    "guard-never-fuses": _defect(
        "GuardNeverFuses", "The guard always falls back (a cautious guard: every fusion lost).", _never
    ),
}
