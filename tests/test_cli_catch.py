"""``gdn-equiv bench catch``: how often a planted defect (or a command) is caught in N fresh runs, each with an empty
example database; a run that ends in neither 0 nor 1 is no verdict (exit 3); bad arguments exit 2 before any run."""

from __future__ import annotations

import json
import shlex
import sys

from gdn_equiv.run.cli import common as cli_common


def _python(code: str) -> str:
    return shlex.join([sys.executable, "-c", code])


#: exit 1 (a catch) only in a fresh, empty folder that is also Hypothesis' storage; 2 otherwise
FRESH = (
    "import os, sys; "
    "sys.exit(1 if os.listdir('.') == [] and os.environ['HYPOTHESIS_STORAGE_DIRECTORY'] == os.getcwd() else 2)"
)


def test_a_planted_combination_kernel_is_caught_in_each_fresh_run(gdn_main, tmp_path) -> None:
    """planted-short-state-grad: the gate's combination test catches it in its first examples (about 5 s a run)."""
    status, out, err = gdn_main("bench", "catch", "--defect", "planted-short-state-grad", "--runs", "2", "--profile",
                                "dev", "--json", "catch.json")  # fmt: skip
    assert status == cli_common.EXIT_OK, out + err
    assert out.count("caught in") == 2, out
    assert "caught 2 of 2 (" in out and "profile dev): planted-short-state-grad" in out, out
    [row] = json.loads((tmp_path / "catch.json").read_text())["rows"]
    assert (row["what"], row["caught"], row["runs"]) == ("planted-short-state-grad", 2, 2)


def test_a_command_is_counted_run_by_run_each_in_a_fresh_folder(gdn_main) -> None:
    status, out, err = gdn_main("bench", "catch", "--command", _python(FRESH), "--runs", "3")
    assert status == cli_common.EXIT_OK and "caught 3 of 3 (" in out, out + err
    status, out, err = gdn_main("bench", "catch", "--command", _python("pass"), "--runs", "2")
    assert status == cli_common.EXIT_OK and "run 2: missed" in out and "caught 0 of 2 (" in out, out + err


def test_a_run_without_a_verdict_ends_the_count(gdn_main) -> None:
    status, out, err = gdn_main("bench", "catch", "--command", _python("import sys; print('boom'); sys.exit(4)"))
    assert status == cli_common.EXIT_ENVIRONMENT, out + err
    assert "boom" in out and "run 1 of " in out and "exit status 4" in out and "caught" not in out, out
    status, out, err = gdn_main("bench", "catch", "--command", _python("import time; time.sleep(30)"), "--timeout", "1")
    assert status == cli_common.EXIT_ENVIRONMENT and "its timeout after" in out, out + err


def test_bad_arguments_are_refused_before_any_run(gdn_main) -> None:
    for argv, says in [
        ([], "give --defect NAME[,NAME]|all (one of: planted-short-state-grad,"),
        (["--defect", "all", "--command", "true"], "give --defect"),
        (["--defect", "planted-nothing"], "--defect 'planted-nothing': not a planted defect; known:"),
        (["--defect", "all", "--runs", "0"], "--runs"),
        (["--defect", "all", "--profile", "fuzz"], "--profile 'fuzz' is not a gate profile"),
        (["--defect", "all", "--driver", "check"], "--driver: not options of bench catch"),
    ]:
        status, out, err = gdn_main("bench", "catch", *argv)
        assert status == cli_common.EXIT_USAGE, (argv, out + err)
        assert says in err and "run 1" not in out, (argv, err)
    status, _, err = gdn_main("bench", "verdict", "--command", "true")
    assert status == cli_common.EXIT_USAGE and "--command: an option of bench catch" in err, err
