"""Our in-house reference layers = fla's layers, on the run's device (:mod:`gdn_equiv.harness.faithful`).

For every in-house family (each has a naive-core adapter) and the installed fla version: output and
gradients of fla's layer (its projections, convs and norms as fla wrote them, its core fla's own
pure-torch naive recurrence) against ours on the same state_dict, by the project's whole-layer
accuracy bar; once with fla's convs built from our per-conv facts, once with fla's own conv defaults.
Skipped with the reason where fla is not installed or the family has no adapter.
"""

from __future__ import annotations

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness.faithful import FAITHFUL_FAMILIES, check_faithful, unfaithful_reason
from gdn_equiv.harness.testing import count_example
from gdn_equiv.strategies.faithful import faithful_budget, faithful_examples

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]

#: fla's Triton convs and norms run in the interpreter here: tiny layers, few examples
MAX_EXAMPLES = faithful_budget()


FAMILIES = [
    pytest.param(f, marks=pytest.mark.skipif(unfaithful_reason(f) is not None, reason=str(unfaithful_reason(f))))
    for f in ("gated_deltanet", "gla", "kda", "lightnet", "simple_gla")
]


@pytest.mark.parametrize("defaults", [False, True], ids=["our-conv-facts", "fla-defaults"])
@pytest.mark.parametrize("family", FAMILIES)
@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(data=st.data())
def test_reference_layer_matches_fla_layer(data, family: str, defaults: bool, device: str) -> None:
    """Output (and dx, parameter gradients) of fla's layer within the accuracy bar of ours, on the run's device."""
    assert family in FAITHFUL_FAMILIES
    example = data.draw(faithful_examples(family), label="example")
    count_example()
    note(example.short())
    check_faithful(example, defaults=defaults, device=device)
