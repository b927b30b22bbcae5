"""Gaps in the guard's tests that mutation testing found (docs/mutation.md, scripts/mutate.py guard)."""

from __future__ import annotations

from hypothesis import given

from gdn_equiv.config import CallFacts, LayerFacts
from gdn_equiv.guard import decide
from gdn_equiv.strategies import call_facts, layer_facts


@given(layer=layer_facts(), call=call_facts())
def test_a_decision_prints_its_outcome_and_every_failed_condition(layer: LayerFacts, call: CallFacts) -> None:
    """What a report prints for a decision is never empty: a fusing decision says it fuses, a
    falling-back one names every failed condition, in G-order, each with its rule."""
    decision = decide(layer, call)
    text = str(decision)
    if decision.fuse:
        assert text == decision.reason and "fusable" in text
    else:
        assert text.split("; ") == [f"{c}: {c.rule}" for c in decision.failed]
        assert text.startswith(decision.reason)
