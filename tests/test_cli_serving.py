"""``gdn-equiv check --serving-engine`` as the one serving driver (it replaced ``scripts/serving_search.py``; the GPU
column, ``scripts/serving_gpu.sh``, runs it once per engine path): ``--derandomize`` (the same cases on every
machine), ``--row-seconds`` (each row's own time), each asked path said once (version, whether its smallest case
computes right) in the report's meta, rows and exit status from check's ledger.
"""

from __future__ import annotations

import json

from gdn_equiv.run import cli, runner
from gdn_equiv.run.cli import common as cli_common

PLANTED = "gdn_equiv.serving.planted:SkipsSequence0"


def test_a_planted_engine_is_caught_with_its_path_said_first(gdn_main, tmp_path) -> None:
    asked = ["--serving-engine", PLANTED, "--property", "S0-reference", "--examples", "30", "--derandomize"]
    status, out, err = gdn_main("check", "--device", "cpu", *asked, "--row-seconds", "120", "--json", "out.json")
    assert status == cli_common.EXIT_FAILED, out + err
    assert f"FAIL S0-reference[{PLANTED}-any--]" in out, out
    said = json.loads((tmp_path / "out.json").read_text())
    path = said["meta"]["serving_paths"][PLANTED]
    assert path["version"] == "in-house" and path["runs"].startswith("does not compute right"), path
    assert f"{PLANTED} in-house: does not compute right (S0 on the smallest case)" in out
    [row] = said["checks"]
    assert row["result"] == "FAIL" and row["example"]["engine"] == PLANTED


def test_a_bad_engine_name_or_row_seconds_is_refused_before_any_example(gdn_main, tmp_path) -> None:
    for argv, says in [
        (["--serving-engine", "reference,tgi"], "--serving-engine 'tgi': no serving engine 'tgi'"),
        (["--row-seconds", "0"], "--row-seconds must be a finite number of seconds > 0, got 0.0"),
        (["--row-seconds", "nan"], "--row-seconds must be a finite number of seconds > 0, got nan"),
        (["--target", "fla", "--derandomize"], "--derandomize apply to the gdn_equiv target's rows, not --target fla"),
    ]:
        status, out, err = gdn_main("check", "--device", "cpu", *argv)
        assert status == cli_common.EXIT_USAGE, (argv, out + err)
        assert says in err.strip().splitlines()[-1], (argv, err)
        assert "ledger:" not in out and not (tmp_path / cli.DEFAULT_REPORT).exists(), argv


def test_row_seconds_end_a_row_that_keeps_what_it_ran(gdn_main, tmp_path) -> None:
    """100,000 examples cannot run in one second: the row ends on its time, passing on what it compared (SPEC
    §10: at least one applicable example, none failed), and says its budget was spent."""
    status, out, err = gdn_main("check", "--device", "cpu", "--property", "S6-dispatch", "--examples", "100000",
                                "--row-seconds", "1", "--json", "out.json")  # fmt: skip
    assert status == cli_common.EXIT_OK, out + err
    [row] = json.loads((tmp_path / "out.json").read_text())["checks"]
    assert row["budget_spent"] and 0 < row["examples"] < 100_000 and row["result"] == "pass", row
    assert row["seconds"] < 30, row


def test_derandomized_rows_draw_the_same_cases_and_write_no_database(tmp_path) -> None:
    """Two derandomized runs of a planted engine's row meet its first failure after as many examples; the
    database handed in is neither read nor written (Hypothesis: a fixed sequence has none)."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    runs = [
        runner.run_property("S2-untouched", PLANTED, max_examples=60, database=db, derandomize=True) for _ in range(2)
    ]
    assert [r.result for r in runs] == ["FAIL", "FAIL"]
    assert runs[0].examples == runs[1].examples and runs[0].example == runs[1].example
    assert not (tmp_path / "db").exists() or not any((tmp_path / "db").rglob("*"))
