"""``gdn-equiv bench verdict``: bad arguments are refused before any run starts, the JSON says what the
table says, and a run with nothing planted is reported green, never as a time to red. Times here are
never asserted: the figure lives in the command (docs/red-fast.md), not in a test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gdn_equiv.harness import planted
from gdn_equiv.model.backends import get_backend
from gdn_equiv.run import plant as planting
from gdn_equiv.run import verdict
from gdn_equiv.run.cli import main
from gdn_equiv.run.cli.common import EXIT_OK, EXIT_USAGE

REFUSED = [
    (["--defect", "no-such-defect"], "--defect 'no-such-defect'"),
    (["--defect", ""], "--defect"),
    (["--driver", "pytest-y"], "--driver 'pytest-y'"),
    (["--runs", "0"], "--runs"),
    (["--jobs", "0"], "--jobs"),
    (["--timeout", "0"], "--timeout"),
    (["--fuzz-seconds", "-1"], "--fuzz-seconds"),
    (["--max-seconds", "0"], "--max-seconds"),
    (["--profile", "fuzz"], "--profile 'fuzz'"),
    (["--profile", "nope"], "--profile 'nope'"),
    (["--family", "no_such_family"], "no_such_family"),
    (["--device", "tpu"], "tpu"),
    (["--property", "P3-forward-exact"], "--property: the gate"),
    (["--driver", "check", "--property", "P99"], "--property 'P99'"),
    (["--iters", "3"], "--iters"),
    (["--quick"], "--quick"),
    (["--backend", "torch"], "--backend"),
    (["--plot", "x.png"], "--plot"),
]


@pytest.mark.parametrize(("argv", "named"), REFUSED, ids=[" ".join(a) or "empty" for a, _ in REFUSED])
def test_a_bad_argument_is_refused_before_any_run(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run started before the arguments were checked")

    monkeypatch.setattr(verdict, "run_once", no_run)
    report = tmp_path / "verdict.json"
    assert main(["bench", "verdict", *argv, "--json", str(report)]) == EXIT_USAGE
    assert named in capsys.readouterr().err
    assert not report.exists()


@pytest.mark.parametrize(
    "option", [["--runs", "2"], ["--defect", "none"], ["--driver", "check"], ["--max-seconds", "9"]]
)
def test_the_timing_benchmarks_refuse_the_verdict_options(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "layer", "--quick", *option]) == EXIT_USAGE
    assert "options of bench verdict" in capsys.readouterr().err


def test_every_registry_tooth_has_a_kind_and_reaches_each_driver(tmp_path: Path) -> None:
    """A backend by the ``module:attr`` a fresh process loads (the same backend), a layer defect or engine
    planted through the plant module in the driver's own process (and, for the gate, its xdist workers)."""
    plan = verdict.VerdictPlan(
        defects=[], drivers=[], runs=1, device="cpu", profile="dev", jobs=2, timeout=1.0, fuzz_seconds=1.0,
        family=None, json=tmp_path / "v.json",
    )  # fmt: skip
    teeth = planting.teeth()
    assert {planting.kind(t) for t in teeth} == {"backend", "layer", "engine"}
    for tooth in teeth:
        for driver in verdict.DRIVERS:
            argv, env = verdict.command(plan, tooth, driver, tmp_path)
            if planting.kind(tooth) == "backend":
                spec = planting.backend_spec(tooth)
                assert get_backend(spec).forward is planted.BACKENDS[tooth.removeprefix("backend:")].forward
                assert spec in argv and planting.ENV not in env
            elif driver.startswith("pytest"):
                assert env[planting.ENV] == tooth and argv[argv.index("-p", argv.index("-n")) + 1] == planting.__name__
            else:
                assert argv[1:4] == ["-m", planting.__name__, tooth] and planting.ENV not in env
            assert ("-x" in argv) == (driver == "pytest-x")
    argv, env = verdict.command(plan, verdict.NONE, "pytest", tmp_path)
    assert planting.ENV not in env and planting.__name__ not in argv


def test_the_median_of_the_runs_and_a_mixed_outcome() -> None:
    runs = [
        {"verdict": "red", "exit_s": 30.0, "first_red_s": 20.0},
        {"verdict": "red", "exit_s": 10.0, "first_red_s": 8.0},
        {"verdict": "red", "exit_s": 50.0, "first_red_s": 9.0},
    ]
    row = verdict.cell(runs)
    assert row["verdict"] == "red" and row["exit_s"] == {"median": 30.0, "min": 10.0, "max": 50.0}
    assert row["first_red_s"]["median"] == 9.0
    assert verdict.format_cell(row, 600).startswith("red 30.0 s [10.0-50.0]")
    mixed = verdict.cell([*runs[:2], {"verdict": "timeout", "exit_s": 600.0, "first_red_s": None}])
    assert mixed["verdict"] == "mixed" and "30.0" not in verdict.format_cell(mixed, 600)
    timeout = verdict.cell([{"verdict": "timeout", "exit_s": 600.2, "first_red_s": None}])
    assert verdict.format_cell(timeout, 600) == "no verdict in 600 s"
    report = {"rows": [{"defect": "fused-drops-v-bias", "driver": "check", **row}]}
    assert verdict.findings(report, None) == []
    assert verdict.findings(report, 20.0) == [
        "fused-drops-v-bias x check: red after 30.0 s (median), over --max-seconds 20"
    ]


def test_nothing_planted_is_reported_green_not_as_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One real run (a fresh ``gdn-equiv check`` process, one property row: ~10 s on 2 CPU cores, most of it
    importing torch): the JSON's shape, and a green run is "green (no red verdict)", never a time to red."""
    report_path = tmp_path / "verdict.json"
    argv = ["--defect", "none", "--driver", "check", "--property", "P2-path-taken", "--family", "gated_deltanet"]
    status = main(["bench", "verdict", *argv, "--profile", "dev", "--runs", "1", "--json", str(report_path)])
    out = capsys.readouterr().out
    assert status == EXIT_OK, out
    report = json.loads(report_path.read_text())
    assert (
        report["format"] == verdict.FORMAT and report["command"] == "bench verdict" and report["status"] == "complete"
    )
    assert report["defects"] == ["none"] and report["drivers"] == ["check"]
    assert report["settings"]["profile"] == "dev" and report["settings"]["runs"] == 1
    for key in ("device", "cpus", "load_at_start", "load_at_end", "torch"):
        assert key in report["machine"], key
    (row,) = report["rows"]
    assert row["defect"] == "none" and row["kind"] == "green" and row["driver"] == "check"
    assert row["verdict"] == "green" and row["verdicts"] == ["green"] and "first_red_s" not in row
    (run,) = row["each"]
    assert run["exit"] == 0 and run["first_red_s"] is None and run["first_failure"] is None
    assert run["rows"] == 3 and run["examples"] >= 3  # one row per dtype, each ran its examples
    line = next(ln for ln in out.splitlines() if ln.startswith("| none |"))
    assert verdict.GREEN in line and "red" not in line.replace(verdict.GREEN, "")
