"""S0-S7 (SPEC §11): the short convs under a state pool, on the in-house reference and on every serving
engine path (:mod:`gdn_equiv.serving.engines`) of ``--gdn-serving-engine`` (default: every path; one that cannot run
here skips with its reason; a named engine none of whose paths can run here ends the session, status 3).

One parametrised test over the serving records (:func:`gdn_equiv.harness.registry.serving_records`), as OpInfo's
``@ops``: a property is its record, drawn and checked as ``gdn-equiv check`` draws and checks it. One premise and
one verdict (:mod:`gdn_equiv.harness.ledger`): an example counts once the property compared something (it did not
raise ``NotExercised``), and a test none of whose examples compared anything fails ("not exercised"), as the
check's row does.
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness import ledger, registry
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.serving.records import ServingRecord

# first: S1-S7 are cheap on the reference engine and each catches its planted engine: every worker starts on them
pytestmark = pytest.mark.first(1)


#: the gate's row verdict (the ledger's): a test none of whose examples compared anything fails, "not exercised"
exercised = functools.partial(ledger.exercised, what="compared anything")


@pytest.mark.parametrize("record", registry.serving_records(), ids=lambda r: r.name)
@exercised
@settings(deadline=None)
@given(data=st.data())
def test_serving_property(data: st.DataObject, record: ServingRecord, gdn_serving_engine: str) -> None:
    """S0-S7, each generated from its record (:mod:`gdn_equiv.serving.records`, what ``check`` runs too): cases
    from its premise on the engine path of ``--gdn-serving-engine``, its check on that path. A path where the
    record cannot be asked (the engine cannot run here; S4 on a step that takes no accepted count) is n/a,
    with the record's reason."""
    reason = record.not_applicable(gdn_serving_engine)
    if ledger.asked(reason) is not None:
        pytest.skip(f"{Outcome.NOT_APPLICABLE}: {reason}")
    draw = data.draw(record.strategy(gdn_serving_engine))
    note(draw.example.short())
    ledger.judge(lambda: record.check(draw.example), draw.example, must_apply=draw.must_apply, count=True)
