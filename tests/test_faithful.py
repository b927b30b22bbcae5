"""Teeth of the faithfulness check: each planted reference edit (gdn_equiv.planted.reference_defects) is
caught by the gate's own strategy within the ci profile's examples, and the real reference passes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gdn_equiv.compare import Mismatch
from gdn_equiv.faithful import check_faithful, unfaithful_reason
from gdn_equiv.planted import reference_defects
from gdn_equiv.suite.test_faithful import MAX_EXAMPLES, faithful_examples

_REASON = unfaithful_reason("gated_deltanet")
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.skipif(_REASON is not None, reason=str(_REASON)),
]


@pytest.mark.parametrize("defect", sorted(reference_defects()))
def test_planted_reference_edit_is_caught_within_the_gate_budget(defect: str) -> None:
    layer_cls = reference_defects()[defect]

    @settings(deadline=None, max_examples=MAX_EXAMPLES, database=None, suppress_health_check=list(HealthCheck))
    @given(example=faithful_examples("gated_deltanet"), defaults=st.booleans())
    def gate(example, defaults) -> None:
        check_faithful(example, defaults=defaults, layer_cls=layer_cls)

    with pytest.raises(Mismatch):
        gate()
