"""The verdict's own machinery, checked by the gate itself: the ledger (:mod:`gdn_equiv.run.report`) and the
property registry (:mod:`gdn_equiv.harness.registry`) that every driver reads.

A gate is only worth its verdict. As ``test_compare`` checks the comparison every property rests on,
these check that a row which did not run, ran nothing applicable, or compared a backend with itself can
never be counted green, and that the rows asked are the registry's. No layer runs here (fast, CPU).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, find, settings

from gdn_equiv import strategies
from gdn_equiv.harness import ledger, registry
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.compare import Report
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.harness.testing import MISS_BOUND, PROFILES, counts
from gdn_equiv.model.backends import BUILTIN_BACKENDS, available_backends
from gdn_equiv.model.example import build_layer
from gdn_equiv.model.guard import Condition, decide
from gdn_equiv.run import runner
from gdn_equiv.run.report import FAILING, UNREACHED, Check, ReportWriter, merge, read_failure
from gdn_equiv.strategies import premises

GREEN = ("pass", "counterexample", "n/a", "none found")


def _row(result: str = "pass", **fields: object) -> Check:
    check = Check("P3-forward-exact", "torch", "float32")
    check.result = Outcome(result)
    for key, value in fields.items():
        setattr(check, key, value)
    return check


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        (dict(result="pass", examples=3, not_applicable=1), "pass"),
        (dict(result="not exercised", examples=3, not_applicable=3), "not exercised"),
        (dict(result="pass", examples=0, not_applicable=0, budget_spent=True), UNREACHED),
        # a run that drew nothing with time left (its premise filtered every draw) was not cut short
        (dict(result="not exercised", examples=0, not_applicable=0), "not exercised"),
        (dict(result="FAIL", examples=1, failure="Mismatch: x"), "FAIL"),
        (dict(result="counterexample", examples=4), "counterexample"),
        (dict(result="none found", examples=4), "none found"),
        (dict(result="n/a", failure="same backend"), "n/a"),
    ],
)
def test_an_asked_row_takes_exactly_what_its_run_showed(tmp_path: Path, new: dict, expected: str) -> None:
    """An asked row starts failing ("not reached") and turns green only on applicable examples."""
    writer = ReportWriter(tmp_path, device="cpu", meta={})
    writer.ask([_row()])
    assert [r.result for r in writer.rows] == [UNREACHED] and writer.failed == writer.rows
    writer.add(_row(**new))
    (row,) = writer.rows
    assert row.result == expected
    assert (row in writer.failed) == (expected in FAILING)
    assert row.examples == new.get("examples", 0)


def test_an_unfinished_row_says_why(tmp_path: Path) -> None:
    """A row the budget never reached says so, and a row that ran but met no premise says that, never
    the asked row's "the run ended before this row"."""
    writer = ReportWriter(tmp_path / "nested" / "report", device="cpu", meta={})  # made with its parents
    writer.ask([_row(), _row(name="P4-gradients"), _row(name="P5-fallback-exact")])
    writer.add(_row(examples=0, budget_spent=True))
    writer.add(_row(name="P4-gradients", examples=0, budget_spent=True, failure="the budget ran out at row 2"))
    writer.add(_row("not exercised", name="P5-fallback-exact", examples=0))
    assert [(r.result, r.failure) for r in writer.rows] == [
        (UNREACHED, "the budget ended before its first example"),
        (UNREACHED, "the budget ran out at row 2"),
        ("not exercised", "not exercised: no example met the property's premise"),
    ]


@pytest.mark.parametrize(
    ("raised", "status", "exit_status"),
    [(None, "complete", 1), (KeyboardInterrupt, "interrupted", 130), (RuntimeError, "internal-error", 4)],
)
def test_a_report_says_how_its_run_ended(
    tmp_path: Path, raised: type[BaseException] | None, status: str, exit_status: int
) -> None:
    """However the run ends, the summary on disk says so and still lists every asked row, and the page names
    the exit status the command ends with (an interrupted run's page said "exit status 1", issue #49)."""
    pytest.importorskip("jinja2", reason="the page needs Jinja2 (pip install gdn-equiv[html])")
    page = tmp_path / "page.html"
    try:
        copy, junit = tmp_path / "summary-copy.json", tmp_path / "junit.xml"  # into a directory that exists
        with ReportWriter(tmp_path, device="cpu", meta={}, json_copy=copy, junit_xml=junit, html=page) as writer:
            writer.ask([_row(), _row(name="P4-gradients")])
            writer.add(_row(examples=3))
            if raised is not None:
                raise raised()
    except (KeyboardInterrupt, RuntimeError):
        pass
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == status and json.loads(copy.read_text()) == summary
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "1"  # type: ignore[union-attr]
    # a row no result reached: interrupted when the run was, else not reached (both fail the run)
    assert [c["result"] for c in summary["checks"]] == ["pass", "interrupted" if status == "interrupted" else UNREACHED]
    ended = "" if status == "complete" else f"run {status}: "
    assert f"{ended}exit status {exit_status}<" in page.read_text().replace("\n", "")
    assert writer.exit_status() == exit_status


def test_every_copy_of_a_report_holds_the_ledger(tmp_path: Path) -> None:
    """The summary, its ``--json`` copy and the JUnit XML say the same thing about every asked row, and
    a failure with an example leaves a failure file that reads back and a reproducer beside it."""
    example = find(strategies.examples(dtypes=("float32",), max_seq_len=2), lambda e: True)
    json_copy, junit = tmp_path / "copies" / "of-the" / "summary.json", tmp_path / "junit" / "deeper" / "gdn.xml"
    writer = ReportWriter(
        tmp_path / "report", device="cpu", meta={"mode": "check"}, json_copy=json_copy, junit_xml=junit
    )
    writer.ask(
        [
            _row(function="check_forward_exact"),
            *(_row(name=n) for n in ("P4-gradients", "P5-fallback-exact", "P2-path-taken", "P2-no-short-conv")),
        ]
    )
    found = _row("FAIL", examples=1, failure="Mismatch: planted", function="check_forward_exact", example=example)
    writer.add(found)
    writer.add(_row(name="P4-gradients", examples=2))
    writer.add(_row("n/a", name="P2-path-taken", failure="same backend"))
    writer.add(_row("not exercised", name="P2-no-short-conv", examples=2, not_applicable=2))
    assert writer.asked == 5
    summary = writer.finish("complete")
    assert summary == tmp_path / "report" / "summary.json"
    data = json.loads(summary.read_text())
    assert json.loads(json_copy.read_text()) == data
    assert [c["result"] for c in data["checks"]] == ["FAIL", "pass", UNREACHED, "n/a", "not exercised"]
    assert data["counts"] == {"FAIL": 1, "pass": 1, UNREACHED: 1, "n/a": 1, "not exercised": 1}
    # the finding: its failure file reads back to the same example, its reproducer beside it
    (row,) = [r for r in writer.rows if r.result == "FAIL"]
    assert (found.repro, found.repro_json) == (row.repro, row.repro_json)  # what the command line prints
    assert row.repro_json and Path(row.repro_json).parent == tmp_path / "report" and Path(row.repro).is_file()
    failure = read_failure(Path(row.repro_json), functions=("check_forward_exact",))
    assert failure.example == example and failure.function == "check_forward_exact"
    # JUnit: one testcase per asked row; FAIL and not reached are failures, n/a a skip
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "3", "1")
    kinds = [
        next((child.tag for child in case if child.tag in ("failure", "skipped")), "passed")
        for case in suite.iter("testcase")
    ]
    assert kinds == ["failure", "passed", "failure", "skipped", "failure"]
    types = [f.get("type") for case in suite.iter("testcase") for f in case.iter("failure")]
    assert types == ["Mismatch", "NotReached", "NotExercised"]  # what a CI system groups failures by
    # the finding's JUnit text carries what replays it: the shrunk example and the reproducer
    text = next(case.find("failure") for case in suite.iter("testcase")).text or ""  # type: ignore[union-attr]
    assert example.to_json() in text and f"Reproducer: python {row.repro}" in text


def test_an_upstream_gap_reproducer_names_its_target(tmp_path: Path) -> None:
    """A gap of an upstream target (fla's guard against the spec) replays against that target, with the
    options it ran with (fla's core), not against ours."""
    example = find(strategies.examples(dtypes=("float32",), max_seq_len=2), lambda e: True)
    writer = ReportWriter(tmp_path, device="cpu", meta={})
    gap = Check("P1-fla-gap-BiasDropped", "-", target="fla", target_options={"core": "reference"})
    gap.result, gap.failure, gap.example, gap.function = Outcome.FAILED, "BiasDropped", example, "check_target_guard"
    writer.add(gap)
    script = Path(gap.repro).read_text()
    assert "check_target_guard(EXAMPLE, device='cpu', target='fla', core='reference')" in script


def test_a_further_kind_of_failure_is_a_row_of_its_own(tmp_path: Path) -> None:
    """A second kind of failure found by the same run was not asked for by name: it joins the ledger as a
    row of its own (a harmless finding must not hide a real one), in the summary and in its line log."""
    writer = ReportWriter(tmp_path, device="cpu", meta={})
    writer.ask([_row()])
    writer.add(_row("FAIL", examples=3, failure="Mismatch: one ulp"))
    second = _row("FAIL", name="P3-forward-exact#2", examples=1, failure="Mismatch: the bias")
    assert writer.add(second) is second
    assert [(r.name, r.result) for r in writer.rows] == [("P3-forward-exact", "FAIL"), ("P3-forward-exact#2", "FAIL")]
    assert len(writer.failed) == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [c["property"] for c in summary["checks"]] == ["P3-forward-exact", "P3-forward-exact#2"]
    logged = [json.loads(line)["property"] for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert logged == ["P3-forward-exact", "P3-forward-exact#2"]


def test_a_rows_worst_comparison_is_its_failures_else_the_closest_to_tolerance() -> None:
    close = Report("y", ("fused", "separate"), ok=True, numel=4, rtol=1e-5, atol=1e-5, tol_used=0.9)
    far = Report("y", ("fused", "separate"), ok=True, numel=4, rtol=1e-5, atol=1e-5, tol_used=0.1)
    row = _row(UNREACHED)
    merge(row, _row(examples=2, worst=close))
    merge(row, _row(examples=2, worst=far))
    assert row.worst is close
    # the failing example's own comparison (here its last one, before it raised), even if not the closest
    merge(row, _row("FAIL", examples=1, failure="RuntimeError: boom", worst=far))
    assert row.result == "FAIL" and row.worst is far


def test_a_failure_stays_whatever_later_rounds_show() -> None:
    row = _row(UNREACHED)
    merge(row, _row("FAIL", examples=1, failure="Mismatch: found"))
    for later in (_row("pass", examples=5), _row("not exercised", examples=2, not_applicable=2)):
        merge(row, later)
    assert row.result == "FAIL" and row.failure == "Mismatch: found" and row.examples == 8


def test_a_row_exercised_in_any_round_is_exercised() -> None:
    row = _row(UNREACHED)
    merge(row, _row("not exercised", examples=2, not_applicable=2))
    assert row.result == "not exercised"
    merge(row, _row("pass", examples=2, not_applicable=1))
    assert row.result == "pass" and row.examples == 4 and row.not_applicable == 3


def test_every_unfinished_result_fails_and_every_finished_one_is_green() -> None:
    assert set(FAILING) == {
        "FAIL",
        "missed fusion",
        "not exercised",
        UNREACHED,
        "crashed",
        "interrupted",
        "nondeterministic",
    }
    assert not set(FAILING) & set(GREEN)


def test_a_report_directory_keeps_nothing_of_an_earlier_run(tmp_path: Path) -> None:
    for name in ("failure-00-P3.json", "failure-00-P3.py", "internal-error.txt"):
        (tmp_path / name).write_text("old")
    (tmp_path / "notes.txt").write_text("the user's")
    ReportWriter(tmp_path, device="cpu", meta={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "rows.jsonl", "summary.json"]


def test_the_rows_asked_are_the_registry_s_with_their_reasons() -> None:
    records = registry.property_records() + registry.necessity_records()
    rows = registry.asked_rows(records, families=["gated_deltanet", "kda"], backends=["torch"], dtypes=["float32"])
    expected = [(f, r.name) for f in ("gated_deltanet", "kda") for r in records]
    assert [(row.family, row.name) for row, _, _ in rows] == expected
    for row, record, reason in rows:
        assert row.dtype == ("float32" if record.per_dtype else "any")
        same = record.name in ("P7-backend-vs-torch", "P7-conv-conformance", "P7-combinations")
        assert (reason is not None and "same backend" in reason) == same, (record.name, reason)
    for record in registry.property_records():
        assert record.not_applicable("mypkg.kernels:conv") is None  # a plug-in is compared with torch


def test_g5_is_asked_only_where_a_second_built_in_backend_runs() -> None:
    record = registry.get_record(registry.necessity_name(Condition.G5))
    for backend in ("torch", "triton", "mypkg.kernels:conv"):
        others = [b for b in available_backends() if b != backend and b in BUILTIN_BACKENDS]
        assert (record.not_applicable(backend) is None) == bool(others)


def test_every_guard_condition_has_its_necessity_row() -> None:
    assert [r.condition for r in registry.necessity_records()] == list(Condition)
    assert all(not r.per_dtype and r.check is None for r in registry.necessity_records())
    assert all(r.check is not None and r.condition is None for r in registry.property_records())


def test_a_necessity_search_is_bounded_by_what_a_miss_means() -> None:
    for backend in BUILTIN_BACKENDS:
        assert registry.necessity_budget(backend) == MISS_BOUND
    assert registry.necessity_budget("mypkg.kernels:conv") == registry.PLUGIN_NECESSITY_STATES < MISS_BOUND


def test_one_profile_table() -> None:
    for name, values in PROFILES.items():
        assert registry.examples_per_row(name) == values["max_examples"]


def test_a_row_that_compared_nothing_is_not_a_pass() -> None:
    """All drawn examples inapplicable: not exercised; a budget gone before the first: not reached; an
    example built to apply that did not: a failure."""

    def never(example: object, **_: object) -> None:
        raise P.NotApplicable("planted")

    base = registry.get_record("P3-forward-exact")
    loose = dataclasses.replace(base, check=never, premise=premises.any_examples)
    check = runner.run_property("P3-forward-exact", "torch", max_examples=3, max_seq_len=4, record=loose)
    assert check.result == "not exercised" and check.examples == check.not_applicable == 3
    check = runner.run_property("P3-forward-exact", "torch", max_examples=3, max_seq_len=4, record=loose, deadline=0)
    assert check.result == UNREACHED and check.examples == 0
    strict = dataclasses.replace(base, check=never)
    check = runner.run_property("P3-forward-exact", "torch", max_examples=20, max_seq_len=4, record=strict)
    assert check.result == "FAIL" and "built to meet the property's premise" in check.failure


def test_a_necessity_row_on_a_built_in_backend_that_finds_nothing_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, "forced_fusion_error", lambda example, **_: None)
    check = runner.find_counterexample(Condition.G8, "torch", max_examples=3, shrink=False)
    assert check.result == "FAIL" and "known to be necessary" in check.failure


def test_records_and_rows_are_frozen() -> None:
    """A record is shared by every driver (and cached premises): none may change it under another."""
    record = registry.get_record("P3-forward-exact")
    row = registry.Row(record.name, "gated_deltanet", "torch")
    for frozen, field in ((record, "name"), (row, "backend")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(frozen, field, "x")
    assert hash(row) == hash(registry.Row(record.name, "gated_deltanet", "torch"))


def test_every_example_property_splits_by_dtype_and_names_a_replayable_function() -> None:
    for record in registry.property_records():
        assert record.per_dtype, record.name
        assert getattr(P, record.function) is record.check
    for record in registry.necessity_records():
        assert getattr(P, record.function) is P.forced_fusion_error
    # only the properties whose premise is "the guard fuses" draw from the families a target fuses
    assert {r.name for r in registry.records().values() if r.needs_fusion} == {"P3-forward-exact", "P4-gradients"}


def test_g5_is_n_a_without_a_second_built_in_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only built-in kernels count as the second backend (a plug-in twin of torch could never differ)."""
    record = registry.get_record(registry.necessity_name(Condition.G5))
    monkeypatch.setattr(premises, "available_backends", lambda names=None: ["torch", "mypkg.kernels:conv"])
    reason = record.not_applicable("torch")
    assert reason is not None and "second available built-in conv backend besides 'torch'" in reason
    assert record.not_applicable("mypkg.kernels:conv") is None  # torch is its second
    monkeypatch.setattr(premises, "available_backends", lambda names=None: ["torch", "triton"])
    assert record.not_applicable("torch") is None


def _drew(what: str, value: bool, draw: registry.Draw) -> bool:
    return (draw.must_apply if what == "must_apply" else draw.example.grad) is value


@pytest.mark.parametrize("name", [r.name for r in registry.property_records()])
def test_each_premise_draws_what_its_record_says(name: str) -> None:
    """The premises, checked against the spec's own decision on what they drew: P3/P4's draws built to
    apply are states the spec fuses (P4's with gradients), P5's are states it refuses, the no-short-conv
    row's layers have none, and every draw is of the row's backend, family and dtype."""
    from hypothesis import find

    record = registry.get_record(name)
    strategy = record.strategy("torch", "kda", "float16", max_seq_len=8)
    seen: list[registry.Draw] = []

    def collect(draw: registry.Draw) -> bool:
        seen.append(draw)
        return len(seen) >= 25

    find(strategy, collect, settings=settings(database=None, max_examples=200, phases=[Phase.generate]))
    for example, must_apply in seen:
        assert (example.family, example.dtype, example.config.conv_backend) == ("kda", "float16", "torch")
        layer: Any = build_layer(example)
        spec = decide(layer.layer_facts(), example.call_facts())
        if name in ("P3-forward-exact", "P4-gradients"):  # built fusable, or one condition broken alone
            assert spec.fuse if must_apply else len(spec.failed) == 1, (name, must_apply, spec)
        if name == "P4-gradients":
            assert example.grad
        if name == "P5-fallback-exact":
            assert not spec.fuse and must_apply
        if name == "P2-no-short-conv":
            assert not example.config.use_short_conv
    # each side reached: searched for (a fixed number of draws could miss a rarer side, and did under one seed)
    reach = settings(database=None, max_examples=300, phases=[Phase.generate])
    if name in ("P3-forward-exact", "P4-gradients"):  # both sides of the guard
        for side in (True, False):
            find(strategy, functools.partial(_drew, "must_apply", side), settings=reach)
    if name == "P3-forward-exact":  # grad on and off
        for grad in (True, False):
            find(strategy, functools.partial(_drew, "grad", grad), settings=reach)


@pytest.mark.parametrize("condition", [Condition.G5, Condition.G8], ids=lambda c: c.id)
def test_a_necessity_premise_breaks_its_condition_between_the_right_backends(condition: Condition) -> None:
    """G5's states mix this backend with a second built-in one; every other condition's stay on one."""
    from hypothesis import find

    record = registry.get_record(registry.necessity_name(condition))
    if record.not_applicable("torch") is not None:
        pytest.skip(str(record.not_applicable("torch")))
    draw = find(
        record.strategy("torch", "gated_deltanet", max_seq_len=4), lambda d: True, settings=settings(database=None)
    )
    config = draw.example.config
    backends = {config.slot_backend(n) for n in config.SLOTS} if config.use_short_conv else {config.conv_backend}
    assert (len(backends) > 1) == (condition is Condition.G5), backends


# ---- the ledger's rules, one module for every driver (gdn_equiv.harness.ledger) ---------------------------


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        (dict(examples=3, not_applicable=2), Outcome.PASSED),
        (dict(examples=1, not_applicable=0), Outcome.PASSED),
        (dict(examples=3, not_applicable=3), Outcome.NOT_EXERCISED),
        (dict(examples=0, not_applicable=0), Outcome.NOT_EXERCISED),  # drew nothing with time left
        (dict(examples=0, not_applicable=0, budget_spent=True), Outcome.NOT_REACHED),
        (dict(examples=2, not_applicable=2, budget_spent=True), Outcome.NOT_EXERCISED),
        (dict(examples=2, not_applicable=0, budget_spent=True), Outcome.PASSED),
        (dict(examples=2, not_applicable=2, failed=True), Outcome.FAILED),  # a premise failure compared nothing
        (dict(examples=0, not_applicable=0, failed=True, budget_spent=True), Outcome.FAILED),
    ],
)
def test_a_rows_outcome_is_its_counts(counts: dict, expected: Outcome) -> None:
    assert ledger.row_outcome(**counts) is expected


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        (dict(found=True, examples=1, not_applicable=0, budget_spent=False, must_find=True), Outcome.COUNTEREXAMPLE),
        (dict(found=True, examples=9, not_applicable=9, budget_spent=True, must_find=True), Outcome.COUNTEREXAMPLE),
        (dict(found=False, examples=0, not_applicable=0, budget_spent=True, must_find=True), Outcome.NOT_REACHED),
        (dict(found=False, examples=0, not_applicable=0, budget_spent=False, must_find=True), Outcome.NOT_EXERCISED),
        (dict(found=False, examples=4, not_applicable=4, budget_spent=True, must_find=False), Outcome.NOT_EXERCISED),
        (dict(found=False, examples=4, not_applicable=3, budget_spent=False, must_find=True), Outcome.FAILED),
        (dict(found=False, examples=4, not_applicable=3, budget_spent=True, must_find=True), Outcome.NONE_FOUND),
        (dict(found=False, examples=4, not_applicable=3, budget_spent=False, must_find=False), Outcome.NONE_FOUND),
    ],
)
def test_a_searchs_outcome_is_what_it_found_in_what_applied(counts: dict, expected: Outcome) -> None:
    assert ledger.search_outcome(**counts) is expected


def test_which_outcomes_fail_a_run_and_which_are_reports() -> None:
    failing = {
        Outcome.FAILED,
        Outcome.MISSED_FUSION,  # P1: a guard that falls back where fusion is exact
        Outcome.NOT_EXERCISED,
        Outcome.NOT_REACHED,
        Outcome.CRASHED,
        Outcome.INTERRUPTED,
        Outcome.NONDETERMINISTIC,  # P6: a search whose states' verdicts a nondeterministic kernel decided
    }
    assert {o for o in Outcome if o.fails} == failing and set(ledger.FAILING) == failing
    reports = {Outcome.NOT_APPLICABLE, Outcome.NONE_FOUND, Outcome.UPSTREAM_REFUSED, Outcome.MISSED_FUSION_ALLOWED}
    assert {o for o in Outcome if o.reports} == reports
    assert not any(o.fails and o.reports for o in Outcome)
    assert {o for o in Outcome if o.final} == {
        Outcome.FAILED,
        Outcome.MISSED_FUSION,
        Outcome.COUNTEREXAMPLE,
        Outcome.NOT_APPLICABLE,
        Outcome.CRASHED,
        Outcome.NONDETERMINISTIC,
    }
    assert {o for o in Outcome if o.decisive} == {o for o in Outcome if o.final} | {Outcome.NONE_FOUND}
    # the word each prints, and finds as a key: a summary written before the enum reads the same
    assert [str(o) for o in Outcome][:5] == ["pass", "FAIL", "not exercised", "not reached", "n/a"]
    assert f"{Outcome.FAILED:<6}|" == "FAIL  |" and {"FAIL": 1}[Outcome.FAILED] == 1
    assert json.loads(json.dumps({Outcome.FAILED: [Outcome.PASSED]})) == {"FAIL": ["pass"]}


@pytest.mark.parametrize(
    ("outcomes", "interrupted", "status"),
    [
        ([], False, 0),
        ([Outcome.PASSED, Outcome.NOT_APPLICABLE, Outcome.COUNTEREXAMPLE, Outcome.NONE_FOUND], False, 0),
        ([Outcome.PASSED, Outcome.UPSTREAM_REFUSED], False, 0),
        ([Outcome.PASSED, Outcome.FAILED], False, 1),
        ([Outcome.NOT_EXERCISED], False, 1),
        ([Outcome.NOT_REACHED, Outcome.PASSED], False, 1),
        ([Outcome.CRASHED], False, 1),
        ([Outcome.INTERRUPTED], False, 1),
        (["pass", "FAIL"], False, 1),  # words read back from a summary
        ([Outcome.PASSED], True, 130),
        ([Outcome.FAILED], True, 130),
    ],
)
def test_the_exit_status_is_the_ledgers(outcomes: list, interrupted: bool, status: int) -> None:
    assert ledger.exit_status(outcomes, interrupted=interrupted) == status
    if not interrupted:  # a run is not interrupted unless it says so
        assert ledger.exit_status(outcomes) == status


def test_folding_rounds_keeps_a_final_outcome_and_takes_a_decisive_one() -> None:
    counts: dict[str, Any] = dict(examples=4, not_applicable=1, budget_spent=False)
    for final in (Outcome.FAILED, Outcome.COUNTEREXAMPLE, Outcome.NOT_APPLICABLE, Outcome.CRASHED):
        for new in Outcome:
            assert ledger.fold(final, new, **counts) is final
    assert ledger.fold(Outcome.PASSED, Outcome.NONE_FOUND, **counts) is Outcome.NONE_FOUND
    assert ledger.fold(Outcome.NOT_REACHED, Outcome.FAILED, **counts) is Outcome.FAILED
    assert ledger.fold(Outcome.NOT_REACHED, Outcome.NOT_EXERCISED, **counts) is Outcome.PASSED  # the totals decide
    assert ledger.fold(Outcome.PASSED, Outcome.PASSED, examples=2, not_applicable=2, budget_spent=False) is (
        Outcome.NOT_EXERCISED
    )
    assert ledger.fold(Outcome.NOT_REACHED, Outcome.PASSED, examples=0, not_applicable=0, budget_spent=True) is (
        Outcome.NOT_REACHED
    )


def test_an_interrupted_run_marks_only_the_rows_nothing_reached() -> None:
    assert ledger.cut_short(Outcome.NOT_REACHED) is Outcome.INTERRUPTED
    for other in set(Outcome) - {Outcome.NOT_REACHED}:
        assert ledger.cut_short(other) is other


def test_an_engine_that_ended_early_leaves_no_row_passing() -> None:
    assert ledger.ended_early(Outcome.PASSED) is Outcome.CRASHED
    for other in set(Outcome) - {Outcome.PASSED}:
        assert ledger.ended_early(other) is other


def test_an_asked_row_is_na_only_with_a_reason() -> None:
    assert ledger.asked("same backend") is Outcome.NOT_APPLICABLE
    assert ledger.asked("") is Outcome.NOT_APPLICABLE
    assert ledger.asked(None) is None


def _example() -> Any:
    return find(strategies.examples(dtypes=("float32",), max_seq_len=2), lambda e: True)


def test_judge_counts_what_met_the_premise_and_fails_what_was_built_to() -> None:
    example, tally = _example(), ledger.Tally()
    missed: list[str] = []

    def not_applicable() -> None:
        raise P.NotApplicable("guard does not fuse")

    assert ledger.judge(lambda: 7, example, must_apply=True, tally=tally) == 7
    result = ledger.judge(not_applicable, example, must_apply=False, tally=tally, on_missed=missed.append)
    assert result is ledger.MISSED and missed == ["guard does not fuse"]
    assert (tally.drawn, tally.not_applicable, tally.applied, tally.last) == (2, 1, 1, "guard does not fuse")
    with pytest.raises(ledger.PremiseNotMet, match="P3: the example was built to meet the property's premise") as err:
        ledger.judge(not_applicable, example, must_apply=True, tally=tally, name="P3")
    report = err.value.report  # a failing comparison of nothing, named for the property
    assert (report.name, report.paths, report.ok, report.numel) == ("premise", ("P3", "spec"), False, 0)
    assert report.problem == "guard does not fuse" and example.short() in str(err.value)
    with pytest.raises(ledger.PremiseNotMet, match=r"^the example was built") as err:
        ledger.judge(not_applicable, example, must_apply=True, tally=tally)
    assert err.value.report.paths == ("property", "spec")
    assert (tally.drawn, tally.not_applicable) == (4, 1)  # failures, not misses
    with pytest.raises(ZeroDivisionError):
        ledger.judge(lambda: 1 / 0, example, must_apply=False, tally=tally)
    assert (tally.drawn, tally.not_applicable, tally.outcome()) == (5, 1, Outcome.PASSED)


def test_judge_counts_an_example_for_the_session_only_once_it_compared_something() -> None:
    example = _example()
    before = counts()["properties"]

    def not_applicable() -> None:
        raise P.NotApplicable("no")

    ledger.judge(not_applicable, example, must_apply=False, count=True)
    assert counts()["properties"] == before
    ledger.judge(lambda: None, example, must_apply=False, count=True)
    with pytest.raises(AssertionError):
        ledger.judge(lambda: (_ for _ in ()).throw(AssertionError("y differs")), example, must_apply=False, count=True)
    with pytest.raises(RuntimeError):  # the backend refused the call: nothing compared
        ledger.judge(lambda: (_ for _ in ()).throw(RuntimeError("refused")), example, must_apply=False, count=True)
    ledger.judge(lambda: None, example, must_apply=False)  # a driver outside the gate counts nothing here
    assert counts()["properties"] == before + 2


def test_a_gate_test_none_of_whose_examples_met_the_premise_fails_not_exercised() -> None:
    example = _example()

    def body(applies: list[bool]) -> None:
        for a in applies:

            def run(a: bool = a) -> None:
                if not a:
                    raise P.NotApplicable("G3")

            ledger.judge(run, example, must_apply=False)

    with pytest.raises(AssertionError, match=r"^not exercised: none of the 2 examples met the premise; .*: G3$"):
        ledger.exercised(body)([False, False])
    with pytest.raises(AssertionError, match="none of the 0 examples compared anything"):
        ledger.exercised(body, what="compared anything")([])
    ledger.exercised(body)([False, True])  # one example compared something: a pass
    assert ledger.judge(lambda: 1, example, must_apply=False) == 1  # no test running: no tally, no error


def test_an_example_counts_for_the_innermost_running_gate_test() -> None:
    example = _example()

    def inner() -> None:
        ledger.judge(lambda: None, example, must_apply=False)

    def outer() -> None:
        ledger.judge(lambda: (_ for _ in ()).throw(P.NotApplicable("G3")), example, must_apply=False)
        ledger.exercised(inner)()  # its one example is its own: it passes

    with pytest.raises(AssertionError, match="none of the 1 examples met the premise"):
        ledger.exercised(outer)()


def test_only_an_example_that_compared_something_is_labelled_for_coverage(monkeypatch) -> None:
    """Regions are labelled for examples that compared something, failing ones included; a premise miss, a call
    that raised something other than a failed comparison (a backend's refusal), or a serving case (no layer
    regions), reaches none."""
    example = _example()
    labelled: list[Any] = []
    monkeypatch.setattr(ledger, "label_example", labelled.append)

    def not_applicable() -> None:
        raise P.NotApplicable("no")

    ledger.judge(not_applicable, example, must_apply=False, count=True)
    assert labelled == []
    ledger.judge(lambda: None, example, must_apply=False, count=True)
    with pytest.raises(ZeroDivisionError):
        ledger.judge(lambda: 1 / 0, example, must_apply=False, count=True)
    with pytest.raises(AssertionError):
        ledger.judge(lambda: (_ for _ in ()).throw(AssertionError("y differs")), example, must_apply=False, count=True)
    ledger.judge(lambda: None, "a serving case", must_apply=False, count=True)
    ledger.judge(lambda: None, example, must_apply=False)  # outside the gate: no labels
    assert labelled == [example, example]
