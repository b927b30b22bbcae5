"""The planted situations every driver must end right, through the one ledger (:mod:`gdn_equiv.harness.ledger`).

The drivers' own end-to-end runs are elsewhere (``check`` on an engine that admits nothing:
``tests/test_serving_drivers.py``; ``coverage`` on a stale folder: ``tests/test_coverage.py``); here each
situation is shown cheaply in process, in both drivers where it has two, and the ledger rule it rests on.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import find

from gdn_equiv.harness import cells, ledger, registry
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.model.backends import get_backend
from gdn_equiv.run import runner
from gdn_equiv.serving.planted import GuardAdmitsNothing
from gdn_equiv.strategies.combinations import all_cells, cell_call, feasible
from gdn_equiv.strategies.convs import conv_calls
from gdn_equiv.suite import test_serving

ADMITS_NOTHING = "gdn_equiv.serving.planted:GuardAdmitsNothing"


def test_an_engine_whose_fast_path_admits_nothing_fails_the_gate_test_not_exercised() -> None:
    """S6 on an engine whose guard admits no batch compares nothing: the gate's test fails (it used to be
    "1 passed" where a driver swallowed ``NotExercised``), as ``check``'s row is ``not exercised`` (exit 1)."""
    with pytest.raises(AssertionError, match=r"not exercised: none of the \d+ examples compared anything; .*fast path"):
        test_serving.test_serving_property(record=registry.get_record("S6-dispatch"), gdn_serving_engine=ADMITS_NOTHING)


def test_the_same_engine_is_a_not_exercised_row_under_check(monkeypatch) -> None:
    """``check``'s runner on the same engine: every example missed the premise, the row is not exercised,
    and the ledger's exit status is 1."""
    monkeypatch.setattr("gdn_equiv.serving.records.PLANTED", {"admits-nothing": (GuardAdmitsNothing, ())})
    row = runner.run_property("S6-dispatch", "admits-nothing", max_examples=5, family="-")
    assert row.result == Outcome.NOT_EXERCISED and row.examples == row.not_applicable == 5, row
    assert ledger.exit_status([row.result]) == ledger.EXIT_FAILED


def _cell_call():
    widths = (1, 4)
    base = find(conv_calls(widths=widths, varlen=False, max_seq_len=1, max_channels=4), lambda c: c.dtype == "float32")
    import random

    cell = next(c for c in all_cells() if feasible(c, widths=widths) is None and c.grad)
    return cell, cell_call(random.Random(0), base, cell, widths)


def test_torch_in_a_combination_cell_is_compared_with_the_fp64_truth_not_with_itself(monkeypatch) -> None:
    """``test_backend_matches_torch_in_every_combination`` on torch compared torch with torch: it reached
    every promised combination after two examples while comparing nothing. A cell on torch is now checked
    against the fp64 truth: a truth that disagrees (planted here) is a failure, so the comparison is real."""
    cell, call = _cell_call()
    cells.check_cell(call, cell, get_backend("torch"), "cpu")  # torch agrees with the truth
    real = cells.conv1d_truth

    def off(*args, **kwargs):
        y, state = real(*args, **kwargs)
        return y * 1.01 + 0.01, state

    monkeypatch.setattr(cells, "conv1d_truth", off)
    with pytest.raises(Mismatch, match="fp64 conv1d"):
        cells.check_cell(call, cell, get_backend("torch"), "cpu")


def test_the_layer_against_itself_is_not_among_a_cells_checks_on_torch() -> None:
    """The layer on torch against the layer on torch is the record's n/a row: not a check that applied."""
    assert registry.vacuous_against_torch("torch")
    assert not registry.vacuous_against_torch("triton")
    reason = registry.get_record("P7-backend-vs-torch").not_applicable("torch")
    assert ledger.asked(reason) is Outcome.NOT_APPLICABLE


def test_a_cell_truth_rounds_to_the_dtype_it_is_compared_in() -> None:
    cell, call = _cell_call()
    truth = cells._truth(call, "cpu", final=cell.final_state, grad=cell.grad, unused=0)
    assert truth["y"].dtype == torch.float64 and any(k.startswith("grad.") for k in truth)


def test_p1_is_a_record_of_its_own_kind_whose_rows_the_ledger_asks() -> None:
    """The fla gap search is asked through its record (one row per family, its reproducer's function), not
    through branches on the target's name; ours is asked its property records."""
    from gdn_equiv.run.cli import check

    assert registry.gap_search("gdn_equiv") is None
    search = registry.gap_search("fla")
    assert isinstance(search, registry.GapSearchRecord)
    rows = search.rows("fla", ["gated_deltanet", "kda"])
    assert [(r.name, r.family, r.backend, r.target) for r in rows] == [
        ("P1-fla-guard-vs-spec", "gated_deltanet", "-", "fla"),
        ("P1-fla-guard-vs-spec", "kda", "-", "fla"),
    ]
    assert search.gap_name("fla", "BiasDropped") == "P1-fla-gap-BiasDropped"
    assert [search.refused_name("fla", n) for n in (1, 2)] == ["P1-fla-upstream-refused", "P1-fla-upstream-refused#2"]
    plan = check.Plan(
        command="check", target="fla", target_options={"core": "fla"}, backends=["-"], properties=[], conditions=[],
        dtypes=["float32"], families=["gated_deltanet"], device="cpu", profile="dev", examples=1,
        necessity_examples=None, max_seq_len=8, seconds=None, report=None, database=None, junit_xml=None, json=None,
    )  # fmt: skip
    (row,) = check.ledger_rows(plan)
    assert (row.name, row.function, row.target_options) == (
        "P1-fla-guard-vs-spec",
        "check_target_guard",
        {"core": "fla"},
    )
    assert check.record_of(row) is search


def test_a_layer_wider_than_the_grid_is_checked_in_every_cell() -> None:
    """Found by the P7-combinations gate test generated from its record (on triton): a layer of conv_size 5 made a
    W=5 call, past the grid's widths 1-4, and every cell raised ValueError instead of checking it (under ``check``
    too). The grid now takes the layer's own width."""
    from gdn_equiv.model.example import Example
    from gdn_equiv.model.families.gated_deltanet import GDNConfig

    config = GDNConfig(hidden_size=8, head_dim=6, num_heads=2, conv_size=5, conv_bias=False)
    cells.check_example_in_every_cell(Example(config=config, dtype="float32", seq_len=1))


# ---- a row's failure message and its example are one failure's ------------------------------------------------


def _two_sites(example: int, device: str = "cpu") -> None:
    """Fails every example from 10 on, at one of two lines of the same kind (``Mismatch``): Hypothesis reports the
    two as distinct failures, each shrunk on its own (10 at the first line, 11 at the second)."""
    from gdn_equiv.harness.compare import Report

    if example >= 10 and example % 2 == 0:
        raise Mismatch(f"even site: {example}", Report("two-sites", ("a", "b"), False, 0))
    if example >= 10:
        raise Mismatch(f"odd site: {example}", Report("two-sites", ("a", "b"), False, 0))


class _TwoSitesRecord:
    function = "two_sites"
    serving = True
    check = staticmethod(_two_sites)

    @staticmethod
    def strategy(backend: str):
        from hypothesis import strategies as st

        from gdn_equiv.harness.premise import Draw

        return st.integers(0, 1000).map(lambda n: Draw(n, False))


def test_a_rows_failure_message_is_the_one_its_shrunk_example_raises() -> None:
    """Two failures of one kind at two lines (as vLLM 0.31.0's all-mode row showed, a wrong count and a wrong
    window, both ``Misrouted``): the row's message and its example belong to the same failure. Before, the
    message was the first error's and the example the last replayed one's (the other failure's), so the
    reproducer replayed an example whose failure the row did not describe."""
    check = runner.run_property("two-sites", "stub", max_examples=300, record=_TwoSitesRecord(), derandomize=True)
    assert check.result == Outcome.FAILED, check.failure
    site = "even" if "even site" in check.failure else "odd"
    assert check.failure.endswith(f"{site} site: {check.example}"), (check.failure, check.example)
    assert check.example == (10 if site == "even" else 11), (check.failure, check.example)
