"""One corpus for a team (issue #37): two ``gdn-equiv fuzz --engine hypofuzz`` runs on "two hosts" (two
processes, each in its own working directory) share one real ``redis-server`` (started here on a free
port, stopped after) while fuzzing a planted kernel defect. What the first run finds, the second run and a
later ``pytest --pyargs gdn_equiv.suite`` replay first, from the database; the finding is one entry in the
database and one row in each report, not one per run or per worker.

Slow (marked ``slow``): two HypoFuzz runs of 60 and 30 s (the first must finish shrinking its finding)
and a pytest replay, about 2.5 minutes on 2 shared cores, so not a CI-sized test: CI runs it only where
HypoFuzz is installed (it is not in the test extra). It needs HypoFuzz (``gdn-equiv[hypofuzz]``), the
redis package and the ``redis-server`` binary, and skips naming what is missing.
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
from gdn_equiv.run import fuzz_engines
from gdn_equiv.run.cli import common as cli_common

ROOT = Path(gdn_equiv.__file__).resolve().parent.parent
PLANTED = "gdn_equiv.harness.planted:wide_rounding"  # channel-count-dependent rounding: P3 catches it
ROW = f"P3-forward-exact[{PLANTED}-float32]"
ASK = ["--property", "P3-forward-exact", "--family", "gated_deltanet", "--dtype", "float32", "--backend", PLANTED]
TEST = "test_fused_forward_is_bitwise_equal"


@pytest.fixture
def team_redis_url(request: pytest.FixtureRequest) -> str:
    """conftest.py's redis-server, once HypoFuzz is known to be here (no server started for a skip)."""
    reason = fuzz_engines.hypofuzz_missing()
    if reason is not None:
        pytest.skip(reason)
    return str(request.getfixturevalue("redis_url"))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.pop("HYPOTHESIS_PROFILE", None)
    return env


def _host(where: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    where.mkdir()
    return subprocess.run(
        [sys.executable, *argv], cwd=where, env=_env(), capture_output=True, text=True, timeout=300, check=False
    )


def _p3_cases(report: Path) -> list[dict[str, object]]:
    cases = fuzz_engines.read_testcases(report / "hypofuzz").cases
    return [c for c in cases if TEST in str(c.get("property"))]


@pytest.mark.slow
def test_two_hosts_share_one_redis_corpus_and_the_finding_is_reported_once(tmp_path, team_redis_url) -> None:
    fuzz = ["-m", "gdn_equiv", "fuzz", "--engine", "hypofuzz", *ASK, "--database", team_redis_url]
    first = _host(tmp_path / "host-a", *fuzz, "--seconds", "60")
    out = first.stdout + first.stderr
    print(out)
    assert first.returncode == cli_common.EXIT_FAILED, out
    assert f"FAIL {ROW}" in first.stdout
    summary_a = json.loads((tmp_path / "host-a" / "gdn-equiv-report" / "summary.json").read_text())
    # saved shrunk, in redis: one or more distinct failures (how many is the random run's), under one key
    (saved,) = summary_a["meta"]["failures_in_database"].values()
    assert saved >= 1

    second = _host(tmp_path / "host-b", *fuzz, "--seconds", "30")
    out = second.stdout + second.stderr
    print(out)
    assert second.returncode == cli_common.EXIT_FAILED, out
    assert first.stdout.count(f"FAIL {ROW}") == second.stdout.count(f"FAIL {ROW}") == 1
    report_b = tmp_path / "host-b" / "gdn-equiv-report"
    assert len(list(report_b.glob("failure-*.json"))) >= 1
    # replayed first: host B's first example of the test is host A's failure, read from the database
    cases = _p3_cases(report_b)
    print(f"host B: first example of {TEST}: {cases[0]['status']}, {cases[0]['how_generated']}")
    assert cases[0]["status"] == "failed"
    summary_b = json.loads((report_b / "summary.json").read_text())
    # the same entries, not a copy per host
    assert list(summary_b["meta"]["failures_in_database"].values()) == [saved]
    (row_a,), (row_b,) = summary_a["checks"], summary_b["checks"]
    assert row_a["example"] == row_b["example"]  # the same shrunk example

    # a later pytest gate replays it first: Hypothesis' reuse phase holds the failing example
    gate = ["-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--pyargs", "gdn_equiv.suite", "-k", TEST]
    gate += ["--gdn-backend", PLANTED, "--gdn-family", "gated_deltanet", "--gdn-database", team_redis_url]
    replay = _host(tmp_path / "replay", *gate, "--hypothesis-show-statistics", "-q")
    out = replay.stdout + replay.stderr
    print(out[-3000:])
    assert replay.returncode == 1, out
    assert "during reuse phase" in out, out
    reuse = out.split("during reuse phase", 1)[1].split("\n\n", 1)[0]
    counts = re.search(r"(\d+) passing, (\d+) failing", reuse)
    assert counts is not None, reuse
    assert int(counts[1]) == 0 and int(counts[2]) >= 1, reuse
