"""The serving gate (S1-S7) by import, and its teeth: every planted engine of :mod:`gdn_equiv.serving.planted`
is caught by its property, found by Hypothesis from the same strategies the gate draws from; the reference's
§11 bookkeeping pinned on hand-made cases; bad calls refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import find
from hypothesis import strategies as st

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.run.runner import run_property
from gdn_equiv.serving import engines
from gdn_equiv.serving import pool as ref
from gdn_equiv.serving import properties as S
from gdn_equiv.serving.adapters import ReferenceAdapter
from gdn_equiv.serving.engines import EngineOps, engine_adapters
from gdn_equiv.serving.planted import PLANTED
from gdn_equiv.serving.records import SERVING
from gdn_equiv.serving.surface import REFERENCE_SURFACES
from gdn_equiv.strategies.pools import (
    apc_cases,
    batches,
    handoff_cases,
    packed_cases,
    prefix_cases,
    routing_cases,
    spec_cases,
    surface_calls,
)

#: the case strategy each property's teeth search draws from (the gate's own)
CASES: dict[str, Any] = {
    "check_s0_reference": spec_cases(),
    "check_s1_pool_equals_alone": batches(),
    "check_s2_untouched": spec_cases(),
    "check_s3_handoff": handoff_cases(),
    "check_s4_speculation": spec_cases(),
    "check_s5_prefix_cache": prefix_cases(),
    "check_s6_dispatch": st.integers(1, 3).flatmap(lambda n: batches(min_len=n, max_len=n)),
    "check_s7_packed_qkv": packed_cases(bias=None),
    "check_s0_surface": surface_calls(REFERENCE_SURFACES),
    "check_s0_outside": surface_calls(REFERENCE_SURFACES, outside=True),
    "check_s6_routing": routing_cases(),
    "check_s6_routing_all": apc_cases(max_spec=3),
}


def _fails(prop: Any, adapter: Any) -> Any:
    def predicate(case: Any) -> bool:
        try:
            prop(adapter, case)
        except S.NotExercised:
            return False
        except Mismatch:
            return True
        return False

    return predicate


@pytest.mark.teeth
@pytest.mark.parametrize(("defect", "prop_name"), [(d, p) for d, (_, props) in sorted(PLANTED.items()) for p in props])
def test_each_planted_engine_is_caught_by_its_properties(defect: str, prop_name: str) -> None:
    prop = getattr(S, prop_name)
    case = find(CASES[prop_name], _fails(prop, PLANTED[defect][0]()), settings=first_hit(300))
    print(f"{defect} caught by {prop_name}: {case.short()}")


@pytest.mark.parametrize("prop_name", sorted(CASES))
def test_the_reference_passes_a_few_cases_of_each_property(prop_name: str) -> None:
    """The catch above means something only if the reference itself passes the same search."""
    with pytest.raises(Exception) as caught:
        find(CASES[prop_name], _fails(getattr(S, prop_name), ReferenceAdapter()), settings=first_hit(25))
    assert type(caught.value).__name__ == "NoSuchExample"


def test_the_pool_keeps_the_last_w_minus_1_inputs_and_skips_pads() -> None:
    """§11 by hand: W=3, one channel; slot 2 continues [10, 20] with 1, 2, 3; slot 0 starts fresh with 4;
    a pad sequence of two tokens touches nothing; slot 1 is not named."""
    pool = torch.tensor([[[7.0, 8.0]], [[5.0, 6.0]], [[10.0, 20.0]]])
    x = torch.tensor([[1.0], [2.0], [3.0], [4.0], [9.0], [9.0]])
    weight = torch.tensor([[1.0, 10.0, 100.0]])
    starts = torch.tensor([0, 3, 4, 6])
    y = ref.prefill(x, weight, None, None, pool, starts, torch.tensor([2, 0, -1]), torch.tensor([True, False, True]))
    assert pool.tolist() == [[[0.0, 4.0]], [[5.0, 6.0]], [[2.0, 3.0]]]
    assert y[:, 0].tolist() == [10 + 200 + 100, 20 + 10 + 200, 1 + 20 + 300, 400, 0, 0]


def test_the_reference_step_keeps_the_accepted_drafts_only() -> None:
    pool = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
    x = torch.tensor([[[5.0], [6.0], [7.0]], [[8.0], [9.0], [10.0]]])
    ref.step(x, torch.ones(1, 3), None, None, pool, torch.tensor([1, 0]), torch.tensor([0, 2]))
    assert pool.tolist() == [[[8.0, 9.0]], [[3.0, 4.0]]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"slots": torch.tensor([0, 0])}, "a slot may be named once per call"),
        ({"slots": torch.tensor([0, 5])}, "slots must be in [0, 3)"),
        ({"starts": torch.tensor([0, 3, 2])}, "starts must rise from 0 to 4"),
        ({"has_state": torch.tensor([True])}, "has_state must have len(slots) = 2"),
    ],
)
def test_a_call_outside_section_11_is_refused_and_nothing_mutated(call: dict[str, Any], message: str) -> None:
    args = {
        "x": torch.randn(4, 2),
        "weight": torch.randn(2, 3),
        "bias": None,
        "activation": None,
        "pool": torch.randn(3, 2, 2),
        "starts": torch.tensor([0, 1, 4]),
        "slots": torch.tensor([0, 1]),
        "has_state": torch.tensor([True, False]),
        **call,
    }
    before = args["pool"].clone()
    with pytest.raises(InvalidArgument, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        ref.prefill(**args)
    assert torch.equal(args["pool"], before)


def test_every_engine_path_is_listed_and_one_that_cannot_run_says_why() -> None:
    names = [a.name for a in engine_adapters()]
    assert names[0] == "reference"
    assert {"vllm-cpu-torch", "vllm-interpret", "vllm-gpu", "sglang-interpret", "sglang-gpu"} <= set(names)
    for adapter in engine_adapters():
        reason = adapter.unavailable()
        assert reason is None or adapter.name in {a.name for a in engine_adapters() if isinstance(a, EngineOps)}
        if isinstance(adapter, EngineOps) and reason is not None:
            assert adapter.engine in reason or "CUDA" in reason or "TRITON_INTERPRET" in reason


@pytest.mark.slow
@pytest.mark.teeth
@pytest.mark.parametrize("record", SERVING, ids=[r.name for r in SERVING])
def test_the_records_for_the_registry_run_through_the_runner(record: Any) -> None:
    """Each serving record (:data:`gdn_equiv.serving.records.SERVING`) gives a green row on the reference and a
    FAIL row on each planted engine the record names, through ``run_property`` itself."""
    name, teeth = record.name, record.teeth
    assert teeth
    row = run_property(name, "reference", max_examples=10, record=record, family="gdn")
    assert row.result in ("pass", "not exercised"), row.failure
    for defect in teeth:
        # caught is all this asks: the row ends at its first failure, kept as drawn (no further kinds, no shrink)
        row = run_property(name, defect, max_examples=200, record=record, family="gdn", shrink=False, first_kind=True)
        assert row.result == "FAIL", (defect, row.result)


def test_an_engine_version_the_table_lacks_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "installed_version", lambda engine: "9.9.9")
    reason = EngineOps("vllm", "cpu-torch").unavailable()
    assert (
        reason == f"vllm 9.9.9 is not a version the adapter knows; known versions: {', '.join(engines.VLLM_VERSIONS)}"
    )


class _AdapterTypeError(EngineOps):
    """An engine path whose ops load, and whose adapter calls them wrongly (a TypeError on every call)."""

    def unavailable(self) -> str | None:
        return None

    def _ops(self) -> tuple[Any, Any]:
        def kernel(x: Any, weight: Any) -> Any:
            return x

        return kernel, kernel


def test_an_adapter_type_error_is_an_error_of_the_row_never_cannot_run_here() -> None:
    a = _AdapterTypeError("vllm", "cpu-torch")
    case = find(spec_cases(), lambda c: bool(c.batch.named()))  # a case with a sequence to compare (not all pads)
    with pytest.raises(TypeError):
        S.check_s0_reference(a, case)
    row = run_property("S0-reference", "reference", max_examples=1)
    assert row.result == "pass"


def test_every_adapter_call_names_the_engine_caller_it_mirrors() -> None:
    """Data of the version row, not a comment: every path of every release names a caller per call kind."""
    for table in engines.ENGINES.values():
        for row in table.values():
            for path in row.ops:
                callers = row.callers[path]
                assert set(callers) == {"prefill", "decode", "verify", "packed", "snapshots"}, (row.version, path)
                assert all(".py:" in w or w.startswith("none mirrored:") for w in callers.values()), callers
    prefill = engines.VLLM_VERSIONS["0.34.0"].callers["interpret"]["prefill"]
    assert "pad_slot_id never passed" in prefill and "null_block_id" in prefill


def test_a_path_without_speculative_steps_refuses_an_accepted_count() -> None:
    adapter = EngineOps("vllm", "cpu-torch")
    assert not adapter.speculative and "C++ op" in str(adapter.not_speculative)
    with pytest.raises(S.NotExercised, match="takes no accepted count"):
        adapter.step(None, torch.zeros(1, 2, 1), torch.ones(1, 2), None, None, torch.tensor([1]), torch.tensor([1]))
