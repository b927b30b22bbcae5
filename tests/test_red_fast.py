"""Red fast: under ``-x`` with xdist the first failure stops every worker at once and the report stays complete;
the first tier runs first on every worker; shrinking is bounded. (The times themselves are a benchmark,
``gdn-equiv bench verdict``, never asserted here: docs/red-fast.md.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import testing
from gdn_equiv.plugin import ordering, stop

PROJECT = textwrap.dedent(
    '''
    import os
    import time
    from pathlib import Path

    import pytest
    from hypothesis import given, settings, strategies as st

    HERE = Path(os.environ["GDN_STOP_TEST_DIR"])


    @pytest.mark.first
    @settings(max_examples=int(os.environ["GDN_STOP_TEST_EXAMPLES"]), deadline=None, database=None)
    @given(st.data())
    def test_a_long_search(data):
        """Would run for many minutes: only the stop flag ends it. It draws inside the test, as the gate's
        properties do, so the stop meets an example Hypothesis cannot replay (reported as flaky: the stop)."""
        (HERE / "search-started").touch()
        data.draw(st.lists(st.integers(), max_size=3))
        time.sleep(0.01)


    @pytest.mark.first
    def test_a_failure_while_the_search_runs():
        deadline = time.monotonic() + 60
        while not (HERE / "search-started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert False, "the planted failure"


    @pytest.mark.parametrize("i", range(12))
    def test_later(i):
        pass
    '''
)


def _gate(
    tmp_path: Path, *args: str, examples: int = 100_000, inherited: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], ET.Element]:
    (tmp_path / "pytest.ini").write_text("[pytest]\ngdn_equiv_suite = true\n")
    (tmp_path / "test_stop.py").write_text(PROJECT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.update(GDN_STOP_TEST_DIR=str(tmp_path), GDN_STOP_TEST_EXAMPLES=str(examples), HYPOTHESIS_PROFILE="dev")
    env.update(inherited or {})
    junit = tmp_path / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "--junit-xml", str(junit), *args]
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert junit.exists(), result.stdout + result.stderr
    return result, ET.parse(junit).getroot()


def _cases(root: ET.Element) -> dict[str, str]:
    """test name -> passed / failed / skipped: <message>"""
    out = {}
    for case in root.iter("testcase"):
        failed = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        if failed is not None:
            out[case.get("name")] = "failed"
        elif skipped is not None:
            out[case.get("name")] = f"skipped: {skipped.get('message')}"
        else:
            out[case.get("name")] = "passed"
    return out


def test_a_run_stopped_by_x_stops_every_worker_and_leaves_its_report_complete(tmp_path: Path) -> None:
    """``-x -n 2``: one worker fails while the other is deep in a Hypothesis search that would run for
    minutes. The search stops at its next example (skipped, "not reached": never a pass), no worker starts
    another test, every collected test has its row in the JUnit XML (the ones never started "not reached"),
    the run says it stopped, and its status is pytest's "tests failed" (1), not xdist's "interrupted" (2).
    Three pytest processes start (controller and two workers, each importing torch): ~15 s."""
    result, root = _gate(tmp_path, "-n", "2", "-x")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    cases = _cases(root)
    assert len(cases) == 14, cases  # every collected test, once
    assert cases.pop("test_a_failure_while_the_search_runs") == "failed"
    search = cases.pop("test_a_long_search")
    assert search.startswith("skipped: not reached: stopped mid-run"), search
    assert "FAILED test_stop.py::test_a_failure_while_the_search_runs" in search
    for name, outcome in cases.items():
        assert outcome.startswith("skipped: not reached: never started"), (name, outcome)
    assert "gdn-equiv: stopped: the run stopped at its first failure (-x)" in out
    assert "1 test(s) stopped mid-run, 12 never started" in out


def test_a_gate_started_from_inside_an_xdist_worker_is_a_run_of_its_own(tmp_path: Path) -> None:
    """A gate started as a subprocess of a test under ``pytest -n`` (a kernel repository's own test of its
    kernel, ``bench verdict`` in a CI job) inherits ``PYTEST_XDIST_WORKER``: it is still its run's one
    process, not a worker of the parent's, so it writes its failure log as the failure happens (and pins no
    GPU, sizes no thread pool, by the parent's worker number)."""
    (tmp_path / "search-started").touch()  # the planted failure fails at once
    log = tmp_path / "failures.txt"
    inherited = {"PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "4", "PYTEST_XDIST_TESTRUNUID": "x"}
    args = ("-p", "no:xdist", "-k", "failure_while", "--gdn-failure-log", str(log))
    result, root = _gate(tmp_path, *args, inherited=inherited)
    assert result.returncode == 1, result.stdout + result.stderr
    assert _cases(root) == {"test_a_failure_while_the_search_runs": "failed"}
    assert log.exists() and "the planted failure" in log.read_text(), result.stdout


def test_without_x_or_maxfail_there_is_no_stop_flag() -> None:
    """The green gate (no ``-x``) runs as before: no flag, so no test is wrapped and nothing can stop it."""
    for maxfail, flagged in ((0, False), (1, True), (3, True)):
        flag = stop.StopFlag()
        flag.configure(SimpleNamespace(getoption=lambda name, m=maxfail: m))  # type: ignore[arg-type]
        assert (flag.path is not None) is flagged and flag.reason() is None
        flag.unconfigure()
        assert flag.path is None or not flag.path.parent.exists()


def _items(names: list[str], first: set[str], slow: set[str]) -> list[SimpleNamespace]:
    def item(name: str) -> SimpleNamespace:
        mark = SimpleNamespace(args=())
        marks = {"first": name in first, "slow": name in slow}
        return SimpleNamespace(name=name, get_closest_marker=lambda m, marks=marks: mark if marks.get(m) else None)

    return [item(n) for n in names]


@pytest.mark.parametrize(("dist", "workers"), [("no", 2), ("worksteal", 3), ("load", 2), ("load", 4)])
def test_every_worker_starts_on_the_first_tier(dist: str, workers: int) -> None:
    """Every worker's first batch, as xdist deals it (worksteal: a contiguous share; load: a chunk of
    consecutive tests), begins with its share of the first tier, then of the slow tests."""
    names = [f"t{i:03d}" for i in range(200)]
    first = {names[i] for i in (5, 50, 120, 199, 7, 8)}
    slow = {names[i] for i in (1, 99, 150)}
    items = _items(names, first, slow)
    config = SimpleNamespace(
        workerinput={"workercount": workers}, option=SimpleNamespace(dist=dist, maxschedchunk=None)
    )
    ordering.order(config, items)  # type: ignore[arg-type]
    assert sorted(i.name for i in items) == names  # the same tests, each once
    starts = ordering.first_batch_starts(config, len(items), workers)  # type: ignore[arg-type]
    assert starts is not None
    firsts = sorted(first)
    slows = sorted(slow)
    for w, start in enumerate(starts):
        mine = firsts[w::workers]
        assert [i.name for i in items[start : start + len(mine)]] == mine
        after = slows[w::workers]
        assert [i.name for i in items[start + len(mine) : start + len(mine) + len(after)]] == after


def test_the_first_tier_runs_by_rank() -> None:
    names = ["a", "b", "c", "d"]
    items = _items(names, first={"b", "c", "d"}, slow=set())
    ranks = {"b": (2,), "c": (), "d": (1,)}  # first(2), first (rank 0), first(1)
    for item in items:
        mark = SimpleNamespace(args=ranks.get(item.name, ()))
        if item.name in ranks:
            item.get_closest_marker = lambda m, mark=mark: mark if m == "first" else None
    ordering.order(SimpleNamespace(workerinput={}, option=SimpleNamespace(dist="no")), items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["c", "d", "b", "a"]


def test_one_process_runs_the_first_tier_first() -> None:
    names = [f"t{i}" for i in range(10)]
    items = _items(names, first={"t7", "t3"}, slow={"t5"})
    ordering.order(SimpleNamespace(workerinput={}, option=SimpleNamespace(dist="no")), items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["t3", "t7", "t0", "t1", "t2", "t4", "t5", "t6", "t8", "t9"]


def test_shrinking_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure whose shrinking would take many seconds reports its example once the bound is spent, and
    Hypothesis says it stopped shrinking; the bound is restored by the monkeypatch afterwards."""
    import time

    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.internal.conjecture import engine
    from hypothesis.reporting import with_reporter

    monkeypatch.setattr(engine, "MAX_SHRINKING_SECONDS", engine.MAX_SHRINKING_SECONDS)
    assert testing.bound_shrinking(1.0) is None and engine.MAX_SHRINKING_SECONDS == 1.0
    calls = []

    @settings(database=None, max_examples=200, deadline=None)
    @given(st.lists(st.integers(), min_size=30))
    def slow_to_shrink(xs: list[int]) -> None:
        calls.append(1)
        time.sleep(0.02)
        assert sum(map(abs, xs)) < 10

    said: list[str] = []
    with with_reporter(said.append), pytest.raises(AssertionError):
        slow_to_shrink()
    # shrinking a 30-element list one 20 ms call at a time takes many seconds unbounded
    assert any("stopped because it is making very slow progress" in line for line in map(str, said)), said
    with pytest.raises(InvalidArgument, match="> 0"):
        testing.bound_shrinking(0)


def test_every_profile_has_a_shrink_bound() -> None:
    assert set(testing.SHRINK_SECONDS) == set(testing.PROFILES)
    assert all(v > 0 for v in testing.SHRINK_SECONDS.values())
