"""Gaps in the guard's tests that mutation testing found (docs/mutation.md, tools/mutate.py guard)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given

from gdn_equiv.model.config import CallFacts, LayerFacts
from gdn_equiv.model.guard import Condition, Decision, decide
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


# ---- the condition registry (survivors of guard.py's whole set against the tree, 2026-12-04) -----


def test_the_registry_lists_looks_up_and_contains_each_condition_once() -> None:
    """``Condition`` behaves like the enum it replaced: iteration, ``len``, ``[id]``, ``in``; the
    registered per-conv facts' conditions (G10, the L2-norm fact) are members too."""
    members = list(Condition)
    assert len(Condition) == len(members) == len(set(members)) >= 10
    assert [c.id for c in members[:9]] == [f"G{i}" for i in range(1, 10)]
    assert any(c.fact is not None for c in members)
    for c in members:
        assert Condition[c.id] is c and c in Condition
        assert c.name == c.id and c.value == (c.id, c.short, c.rule)
        assert c.id in repr(c) and repr(c.rule) in repr(c)
    with pytest.raises(KeyError, match="G0"):
        Condition["G0"]
    assert "G5" not in Condition and Condition("G5", "backend", "another rule") not in Condition


def test_conditions_about_the_conv_slots_are_g5_on() -> None:
    """SPEC G1-G4 are about the layer's flag, its cache and the call; G5-G9 and every registered
    fact's condition about the q/k/v convs (strategies break the two kinds differently)."""
    assert {c.id for c in Condition if not c.about_convs} == {"G1", "G2", "G3", "G4"}


def test_a_condition_and_a_decision_cross_a_process_boundary_as_themselves() -> None:
    """``--gdn-isolate`` and ``check``'s workers send decisions back pickled: each condition arrives as
    the registered instance, so identity comparisons (``Condition.G8 in decision.failed``) still hold."""
    for c in Condition:
        assert pickle.loads(pickle.dumps(c)) is c
    decision = Decision(False, tuple(Condition))
    back = pickle.loads(pickle.dumps(decision))
    assert back == decision and all(a is b for a, b in zip(back.failed, decision.failed, strict=True))
