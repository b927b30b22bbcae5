"""``gdn-equiv fuzz --engine hypofuzz`` (gdn_equiv/run/fuzz_engines.py): the gate's property tests under HypoFuzz,
with the ledger and report of our own loop, read from what Hypothesis recorded.

Each behaviour is planted: HypoFuzz made unimportable (exit 3, naming the extra), a budget HypoFuzz cannot
start in (every row ``not reached``, exit 1), a planted kernel defect (a ``FAIL`` row whose reproducer
fails), and observation lines for some rows only (the rest ``not reached``). The runs need HypoFuzz
(``pip install gdn-equiv[hypofuzz]``, AGPL-3.0, not in the test extra): skipped with the reason without it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gdn_equiv
from gdn_equiv.harness import ledger
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.run import browser, cli, fuzz_engines
from gdn_equiv.run.cli import common as cli_common

ROOT = Path(gdn_equiv.__file__).resolve().parent.parent
PLANTED = "gdn_equiv.harness.planted:wide_rounding"  # channel-count-dependent rounding: P3's planted defect
P3 = ["--property", "P3-forward-exact", "--family", "gated_deltanet", "--dtype", "float32"]


def needs_hypofuzz() -> None:
    reason = fuzz_engines.hypofuzz_missing()
    if reason is not None:
        pytest.skip(reason)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gdn(cwd: Path, *argv: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.pop("HYPOTHESIS_PROFILE", None)
    return subprocess.run(
        [sys.executable, "-m", "gdn_equiv", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_hypofuzz_asked_for_but_not_installed_is_exit_3_naming_the_extra(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "hypofuzz", None)  # importlib finds no such module
    status = cli.main(["fuzz", "--engine", "hypofuzz", "--seconds", "30", "--report", str(tmp_path / "r"), *P3])
    assert status == cli_common.EXIT_ENVIRONMENT
    assert "pip install gdn-equiv[hypofuzz]" in capsys.readouterr().err


def test_hypofuzz_options_are_refused_for_our_loop_and_other_properties_for_hypofuzz(capsys, tmp_path) -> None:
    report = ["--report", str(tmp_path / "r")]
    assert cli.main(["fuzz", "--workers", "2", "--seconds", "30", *report, *P3]) == cli_common.EXIT_USAGE
    assert "apply to --engine hypofuzz only" in capsys.readouterr().err
    needs_hypofuzz()
    status = cli.main(["fuzz", "--engine", "hypofuzz", "--property", "P7-ground-truth", "--seconds", "30", *report])
    assert status == cli_common.EXIT_USAGE
    assert "P7-ground-truth run under --engine ours" in capsys.readouterr().err


def _case(test: str, family: str, dtype: str, status: str = "passed", **features: str) -> dict[str, object]:
    labels = {f"coverage:layer.family={family}": "", f"coverage:layer.dtype={dtype}": ""}
    labels.update({f"coverage:{k.replace('_', '.', 1)}={v}": "" for k, v in features.items()})
    return {
        "type": "test_case",
        "property": f"gdn_equiv/suite/test_properties.py::{test}[torch]",
        "status": status,
        "features": labels,
        "how_generated": "during generate phase",
        "metadata": {},
    }


def test_rows_without_an_observed_example_are_not_reached_and_premise_misses_are_not_exercised() -> None:
    """Observation lines (Hypothesis' format) for one row that applied and one whose examples all missed the
    premise; the third asked row has none."""
    tests = fuzz_engines.gate_tests(["P3-forward-exact", "P5-fallback-exact"])
    cases = [
        _case("test_fused_forward_is_bitwise_equal", "kda", "float32", layer_cache="none"),
        _case("test_fused_forward_is_bitwise_equal", "kda", "float32", layer_cache="populated"),
        {**_case("test_fallback_is_the_reference", "kda", "float32"), "features": {
            "coverage:layer.family=kda": "", "coverage:layer.dtype=float32": "", fuzz_engines.NOT_APPLICABLE: ""}},
    ]  # fmt: skip
    rows, outside = fuzz_engines.tally_rows(cases, tests, ["torch"])
    assert rows[("P3-forward-exact", "kda", "torch", "float32")].examples == 2
    p5 = rows[("P5-fallback-exact", "kda", "torch", "float32")]
    assert (p5.examples, p5.not_applicable) == (1, 1)
    assert ("P3-forward-exact", "kda", "torch", "float16") not in rows
    table = fuzz_engines.coverage_rows(rows, [("P3-forward-exact", "kda", "torch", "float32")])
    regions = table[0]["regions"]
    first_reached = next(i for i, r in enumerate(regions) if r["count"] > 0)
    assert all(r["count"] == 0 for r in regions[:first_reached])  # unreached first
    assert {"region": "cache=empty", "count": 0} in regions
    assert {"region": "cache=populated", "count": 1} in regions
    assert not outside


@pytest.mark.slow
def test_a_budget_hypofuzz_cannot_start_in_leaves_every_row_not_reached_and_exits_1(tmp_path) -> None:
    """HypoFuzz collects the gate (torch, the families) for seconds before its first example: stopped after
    one second, it ran none, and the run must not pass."""
    needs_hypofuzz()
    done = gdn(tmp_path, "fuzz", "--engine", "hypofuzz", *P3, "--seconds", "1", "--database", "db")
    assert done.returncode == cli_common.EXIT_FAILED, done.stdout + done.stderr
    assert "NOT REACHED P3-forward-exact[torch-float32]: HypoFuzz ran no example" in done.stdout
    summary = json.loads((tmp_path / "gdn-equiv-report" / "summary.json").read_text())
    assert summary["meta"]["engine"] == "hypofuzz"
    assert [c["result"] for c in summary["checks"]] == ["not reached"]


@pytest.mark.slow
def test_a_planted_defect_found_under_hypofuzz_is_a_fail_row_with_a_reproducer_that_fails(tmp_path) -> None:
    needs_hypofuzz()
    planted = ["--backend", PLANTED, "--seconds", "45", "--database", "db"]
    page = ["--html", "page.html", "--dashboard-port", str(_free_port())]
    done = gdn(tmp_path, "fuzz", "--engine", "hypofuzz", *P3, *planted, *page)
    assert done.returncode == cli_common.EXIT_FAILED, done.stdout + done.stderr
    # the run's page shows the finding, and the dashboard's picture where a browser is installed
    text = (tmp_path / "page.html").read_text()
    assert f"P3-forward-exact[{PLANTED}-float32]" in text and 'data-result="FAIL"' in text
    picture = tmp_path / "gdn-equiv-report" / "dashboard.png"
    if browser.missing() is None:
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "dashboard.png" in text
    else:
        assert not picture.exists() and f"dashboard.png: not taken ({browser.missing()})" in text
    assert "engine: hypofuzz" in done.stdout
    assert f"FAIL P3-forward-exact[{PLANTED}-float32]" in done.stdout
    assert "channel count" in done.stdout  # the diagnosis of the planted kernel
    (row,) = json.loads((tmp_path / "gdn-equiv-report" / "summary.json").read_text())["checks"]
    assert row["result"] == "FAIL" and row["examples"] >= 1 and row["example"]["family"] == "gated_deltanet"
    replay = gdn(tmp_path, "repro", row["repro_json"])
    assert replay.returncode == 1, replay.stdout + replay.stderr  # still fails: the defect is real


@pytest.mark.slow
def test_the_gate_replays_a_finding_from_its_database_option_first(tmp_path) -> None:
    """``--gdn-database``: what one gate run saved, the next replays in Hypothesis' reuse phase, before any
    new example (what a HypoFuzz run saves is read the same way: tests/test_team_corpus.py)."""
    gate = ["-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--pyargs", "gdn_equiv.suite", "-q"]
    gate += ["-k", "test_fused_forward_is_bitwise_equal", "--gdn-backend", PLANTED, "--gdn-family", "gated_deltanet"]
    gate += ["--gdn-database", str(tmp_path / "db"), "--hypothesis-show-statistics"]
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci", "PYTHONPATH": str(ROOT)}
    runs = [subprocess.run([sys.executable, *gate], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)]
    assert runs[0].returncode == 1, runs[0].stdout  # found fresh
    assert "during reuse phase" not in runs[0].stdout
    runs.append(
        subprocess.run([sys.executable, *gate], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    )
    assert runs[1].returncode == 1, runs[1].stdout
    # The first run saved every distinct failure it found (one or more: how many is the random draw's, so not
    # asserted); whatever it saved, the reuse phase replays it before any new example, and all of it fails again.
    reuse = runs[1].stdout.split("during reuse phase", 1)[-1].split("\n\n", 1)[0]
    counts = re.search(r"(\d+) passing, (\d+) failing", reuse)
    assert counts is not None, runs[1].stdout
    passing, failing = int(counts[1]), int(counts[2])
    assert passing == 0 and failing >= 1, runs[1].stdout


# ---- what the observations cannot say: HypoFuzz's own end and its database (no HypoFuzz needed) --------


def _rows() -> list:
    from gdn_equiv.run.report import Check

    return [
        Check("P3-forward-exact", "torch", "float32", "gated_deltanet", examples=40),
        Check("P3-forward-exact", "triton", "float32", "gated_deltanet", examples=12),
        Check("P4-gradients", "torch", "float32", "gated_deltanet", examples=9, result="FAIL", failure="dx"),
    ]


TESTS = {"test_fused_forward_is_bitwise_equal": "P3-forward-exact", "test_fused_gradients_match": "P4-gradients"}


def test_hypofuzz_ending_by_itself_before_the_budget_leaves_no_row_passing() -> None:
    rows = _rows()
    fuzz_engines.judge_engine_end(rows, "HypoFuzz ended by itself with status 1", {}, TESTS, ["torch", "triton"])
    assert [r.result for r in rows] == [Outcome.CRASHED, Outcome.CRASHED, Outcome.FAILED]
    assert ledger.exit_status(r.result for r in rows) == cli_common.EXIT_FAILED
    assert "status 1 before the budget ended: 40 examples ran" in rows[0].failure
    untouched = _rows()
    fuzz_engines.judge_engine_end(untouched, None, {}, TESTS, ["torch", "triton"])
    assert [r.result for r in untouched] == ["pass", "pass", "FAIL"]


def test_a_shrunk_failure_only_in_the_database_fails_its_tests_rows() -> None:
    rows = _rows()
    nodeid = "gdn_equiv/suite/test_properties.py::test_fused_forward_is_bitwise_equal[triton]"
    fuzz_engines.judge_engine_end(
        rows, None, {nodeid: 2, "x.py::test_fused_gradients_match[torch]": 0}, TESTS, ["torch", "triton"]
    )
    assert [r.result for r in rows] == ["pass", "FAIL", "FAIL"]
    assert "holds 2 shrunk failures of " + nodeid in rows[1].failure
    assert rows[2].failure == "dx"  # a row's own failure is kept


def test_the_gate_keys_are_hypothesis_own_computed_without_importing_the_gate_here() -> None:
    """HypoFuzz's database is read under each gate test's key; the key comes from a process of its own (the gate
    sits above the fuzz engine, which runs it, never imports it) and equals Hypothesis' digest computed here."""
    from hypothesis.internal.reflection import function_digest

    from gdn_equiv.suite import test_properties as gate

    nodeid = "gdn_equiv/suite/test_properties.py::test_fused_forward_is_bitwise_equal[torch]"
    (key,) = fuzz_engines.gate_keys([nodeid, nodeid]).values()
    inner = gate.test_fused_forward_is_bitwise_equal.hypothesis.inner_test
    before = inner._hypothesis_internal_add_digest
    inner._hypothesis_internal_add_digest = nodeid.encode()
    try:
        assert key == function_digest(inner)
    finally:
        inner._hypothesis_internal_add_digest = before
    assert fuzz_engines.gate_keys(["x.py::test_no_such_gate_test[torch]"]) == {}


def test_hypofuzz_is_not_started_when_every_asked_row_is_na(tmp_path, monkeypatch) -> None:
    """A row that cannot be asked here (the layer on torch against the layer on torch) is n/a in the ledger;
    its gate test is not handed to HypoFuzz (it would only skip there), and with nothing left to run HypoFuzz is
    not started at all: the ledger says n/a and the run is green (no launch needed: HypoFuzz may be absent)."""
    import types

    from gdn_equiv.run.report import ReportWriter
    from gdn_equiv.run.rows import Check

    def no_launch(*args, **kwargs):
        raise AssertionError("HypoFuzz was started")

    monkeypatch.setattr(fuzz_engines.subprocess, "Popen", no_launch)
    row = Check("P7-backend-vs-torch", "torch", "float32", result=Outcome.NOT_APPLICABLE, failure="same backend")
    plan = types.SimpleNamespace(properties=["P7-backend-vs-torch"], report=tmp_path, seconds=5)
    writer = ReportWriter(tmp_path, device="cpu", meta={})
    status = fuzz_engines.run_hypofuzz(
        plan, rows=[row], header="", writer=writer, findings=lambda w: ledger.exit_status(r.result for r in w.rows),
        workers=1, dashboard_port=None,
    )  # fmt: skip
    assert status == cli_common.EXIT_OK and [r.result for r in writer.rows] == [Outcome.NOT_APPLICABLE]
