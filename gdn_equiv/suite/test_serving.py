"""S0-S7 (SPEC §11): the short convs under a state pool, on the in-house reference and on every serving
engine path (:mod:`gdn_equiv.serving.engines`) of ``--gdn-serving-engine`` (default: every path; one that cannot run
here skips with its reason; a named engine none of whose paths can run here ends the session, status 3).

One property per test function; each draws its cases from :mod:`gdn_equiv.strategies.pools`. One premise and one
verdict with ``gdn-equiv check``: an example counts once the property compared something (it did not raise
``NotExercised``), and a test none of whose examples compared anything fails ("not exercised"), as the check's
row does.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness import ledger
from gdn_equiv.serving import properties as S
from gdn_equiv.serving import records
from gdn_equiv.strategies.pools import batches, handoff_cases, packed_cases, prefix_cases, spec_cases

# first: S1-S7 are cheap on the reference engine and each catches its planted engine: every worker starts on them
pytestmark = pytest.mark.first(1)


@pytest.fixture(scope="module")
def engine(gdn_serving_engine: str) -> Any:
    """The engine path of ``--gdn-serving-engine`` (default: every path; one that cannot run here skips with why,
    and a named engine none of whose paths runs here ended the session at configure time)."""
    adapter = records.adapter(gdn_serving_engine)
    if (reason := adapter.unavailable()) is not None:
        pytest.skip(reason)
    return adapter


#: the gate's row verdict (the ledger's): a test none of whose examples compared anything fails, "not exercised"
exercised = functools.partial(ledger.exercised, what="compared anything")


def _run(prop: Any, engine: Any, case: Any) -> None:
    """One case through the ledger: counted once the property compared something (it did not raise
    ``NotExercised``, the serving properties' premise miss)."""
    note(case.short())
    ledger.judge(lambda: prop(engine, case), case, must_apply=False, count=True)


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_s0_the_engine_equals_the_in_house_reference(data: st.DataObject, engine: Any) -> None:
    """S0: prefill, decode, verify with accepted counts, snapshots and packed q|k|v against the reference."""
    case = data.draw(spec_cases(min_accepted=getattr(engine, "min_accepted", 0)))
    _run(S.check_s0_reference, engine, case)


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_s1_batch_over_a_pool_equals_each_sequence_alone(data: st.DataObject, engine: Any) -> None:
    """S1: bitwise, outputs and final states, on the engine's prefill kernel."""
    _run(S.check_s1_pool_equals_alone, engine, data.draw(batches()))


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_s2_unnamed_and_pad_slots_and_inputs_are_untouched(data: st.DataObject, engine: Any) -> None:
    """S2: after prefill and after a verify step."""
    case = data.draw(spec_cases(min_accepted=getattr(engine, "min_accepted", 0), min_extra_slots=1))
    _run(S.check_s2_untouched, engine, case)


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_s3_prefill_then_decode_equals_one_prefill(data: st.DataObject, engine: Any) -> None:
    """S3: the handoff between the engine's prefill and step kernels."""
    _run(S.check_s3_handoff, engine, data.draw(handoff_cases()))


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_s4_a_verify_step_keeps_exactly_the_accepted_tokens(data: st.DataObject, engine: Any) -> None:
    """S4: accepted counts from the engine's minimum (vLLM: 1) to k."""
    if not getattr(engine, "speculative", True):
        pytest.skip(f"cannot run here: {engine.not_speculative}")
    case = data.draw(spec_cases(min_accepted=getattr(engine, "min_accepted", 0)))
    _run(S.check_s4_speculation, engine, case)


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_s5_prefix_snapshots_are_the_states_at_block_ends(data: st.DataObject, engine: Any) -> None:
    """S5: each block-boundary snapshot = that prefix's state."""
    _run(S.check_s5_prefix_cache, engine, data.draw(prefix_cases()))


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_s6_fast_path_equals_general_path_where_the_guard_admits(data: st.DataObject, engine: Any) -> None:
    """S6: drawn mostly as uniform decode batches (which the decode guards admit), some free."""
    uniform = st.integers(1, 3).flatmap(lambda n: batches(min_len=n, max_len=n, fresh=False))
    _run(S.check_s6_dispatch, engine, data.draw(st.one_of(uniform, batches())))


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_s7_packed_qkv_equals_the_three_convs(data: st.DataObject, engine: Any) -> None:
    """S7: one call over q|k|v channels = three, biases included."""
    _run(S.check_s7_packed_qkv, engine, data.draw(packed_cases()))
