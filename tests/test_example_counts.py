"""How a gdn-equiv run is spread and counted under xdist (issue #17): the example count and its
milestones, ``--gdn-split-families``, work stealing with the slow tests first, and the torch threads
each worker gets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gdn_equiv.harness import registry, testing
from gdn_equiv.model.families import parse_families

ROOT = Path(__file__).resolve().parent.parent
# the gate's layer-property tests, one per registry record (gdn_equiv/suite/test_properties.py makes them)
PROPERTIES = tuple(r.gate_test for r in registry.property_records() if r.gate_test is not None)

# two trivial Hypothesis tests of 60 examples each: what the run counts is known without a layer
COUNTED = """
import pytest
from hypothesis import given, settings, strategies as st
from gdn_equiv.harness.testing import count_example

@settings(max_examples=60, database=None, deadline=None)
@given(st.integers(0, 10**9))
def test_one(x):
    count_example()

@settings(max_examples=60, database=None, deadline=None)
@given(st.integers(0, 10**9))
def test_two(x):
    count_example()

@pytest.mark.slow
def test_slow_last():
    pass
"""


def _pytest(*args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CI", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    return out


def test_split_families_gives_each_layer_property_one_test_per_family() -> None:
    out = _pytest("--collect-only", "-q", "--pyargs", "gdn_equiv.suite.test_properties", "--gdn-backend", "torch",
                  "--gdn-split-families", cwd=ROOT)  # fmt: skip
    ids = set(re.findall(r"::(test_\w+)\[torch-(\w+)\]", out))
    assert ids == {(p, f) for p in PROPERTIES for f in parse_families("all")}, out
    assert "[torch]" not in out, out  # no property left spanning the families


@pytest.mark.slow
def test_the_controller_counts_every_workers_examples_and_says_when_it_reached_the_100th(tmp_path: Path) -> None:
    """Under xdist the counts travel with each test's report: two workers' 60 + 60 examples are 120, the
    100th example's time is written as it happens and in the summary, with the rate after it; and
    ``-n`` alone schedules by work stealing, with a slow test collected last started first."""
    (tmp_path / "test_counted.py").write_text(COUNTED)
    (tmp_path / "pytest.ini").write_text("[pytest]\ngdn_equiv_suite = true\n")
    out = _pytest("-n", "2", "-v", cwd=tmp_path)
    assert "WorkStealingScheduling" in out, out  # -n without --dist, in a gdn-equiv run
    # collected last, started first on its worker (each worker's first share opens with its slow tests)
    worker = re.search(r"^\[(gw\d)\].*test_slow_last", out, re.MULTILINE)
    assert worker is not None, out
    first = re.search(rf"^\[{worker[1]}\].* PASSED (\S+)", out, re.MULTILINE)
    assert first is not None and first[1].endswith("::test_slow_last"), out
    match = re.search(r"gdn-equiv: (\d+) Hypothesis examples in [\d.]+ s .*; (\d+) counted by properties", out)
    assert match is not None, out
    assert (int(match[1]), int(match[2])) == (120, 120), out
    assert re.search(r"^gdn-equiv: 100 examples by [\d.]+ s$", out, re.MULTILINE), out
    assert re.search(r"examples reached 100 by [\d.]+ s .*; [\d.]+ examples/s after the 100th", out), out


class _Item:
    def __init__(self, name: str, slow: bool) -> None:
        self.name, self.slow = name, slow

    def get_closest_marker(self, name: str) -> object:
        return object() if name == "slow" and self.slow else None

    def __repr__(self) -> str:
        return self.name


class _Config:
    def __init__(self, workers: int) -> None:
        self.workerinput = {"workercount": workers}
        self.option = type("Option", (), {"dist": "no", "maxschedchunk": None})()


@pytest.mark.parametrize("workers", [2, 3, 12])
def test_slow_tests_open_every_workers_share(workers: int) -> None:
    """Work stealing gives worker ``w`` the ``w``-th contiguous share of the list: the slow tests (last
    in collection, as the gate's layer properties are) are dealt round robin to the share fronts."""
    from gdn_equiv.plugin.ordering import order

    fast = [_Item(f"f{i}", False) for i in range(40)]
    slow = [_Item(f"s{i}", True) for i in range(7)]
    items = [*fast, *slow]
    order(_Config(workers), items)  # type: ignore[arg-type]
    assert sorted(map(repr, items)) == sorted(map(repr, fast + slow))  # a reordering, nothing lost
    share = len(items) // workers
    for w in range(workers):
        mine = slow[w::workers]
        assert items[w * share : w * share + len(mine)] == mine, (w, items)


def test_slow_first_leaves_a_single_process_alone() -> None:
    from gdn_equiv.plugin.ordering import order

    items = [_Item("f", False), _Item("s", True)]
    order(_Config(1), items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["f", "s"]


@pytest.mark.parametrize(
    ("env", "cpus", "threads"),
    [
        ({"TRITON_INTERPRET": "1", "PYTEST_XDIST_WORKER_COUNT": "2"}, 16, 1),
        ({"PYTEST_XDIST_WORKER_COUNT": "12"}, 16, 1),
        ({"PYTEST_XDIST_WORKER_COUNT": "4"}, 16, 4),
        ({"PYTEST_XDIST_WORKER_COUNT": "3"}, 16, 5),
        ({"PYTEST_XDIST_WORKER_COUNT": "32"}, 16, 1),
        ({}, 16, None),
        ({"PYTEST_XDIST_WORKER_COUNT": "0"}, 16, None),
        ({"PYTEST_XDIST_WORKER_COUNT": "x"}, 16, None),
    ],
)
def test_each_worker_gets_its_share_of_the_cores(env, cpus, threads) -> None:
    assert testing.worker_threads(env, cpus) == threads


# a backend that refuses every call, as a kernel built for another device or dtype would
REFUSING = """
from gdn_equiv.model.backends import Backend


def _refuse(*args, **kwargs):
    raise RuntimeError("refused: this backend takes no call")


REFUSES_EVERYTHING = Backend("refuses-everything", forward=_refuse, update=_refuse, description="refuses every call")
"""


@pytest.mark.slow
def test_counted_by_properties_counts_only_examples_that_compared_something(tmp_path: Path) -> None:
    """A gate conformance test on a backend that refuses every call: its examples ran (and failed: a refusal
    inside the declared capabilities is a finding), but none compared anything, so none is "counted by
    properties" (it counted each before its comparison: 2,925 of a run on such a backend, issue #49)."""
    (tmp_path / "refusing.py").write_text(REFUSING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "HYPOTHESIS_PROFILE": "dev"}
    env.pop("CI", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--gdn-backend",
           "refusing:REFUSES_EVERYTHING", "--pyargs", "gdn_equiv.suite.test_conformance",
           "-k", "test_backend_forward_matches_torch or test_backend_update_matches_torch_and_keeps_state"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "refused: this backend takes no call" in out, out[-3000:]
    match = re.search(r"gdn-equiv: (\d+) Hypothesis examples in [\d.]+ s .*; (\d+) counted by properties", out)
    assert match is not None, out[-3000:]
    assert int(match[1]) > 0 and int(match[2]) == 0, match[0]
