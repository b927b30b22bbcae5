"""The run's example count and its milestones (issue #17's cold-start figure), ``--gdn-split-families``
and the torch threads each xdist worker gets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gdn_equiv import testing
from gdn_equiv.families import parse_families

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_split_families_gives_each_family_a_test_and_the_controller_counts_every_example() -> None:
    """Two properties split over every family under xdist (``-n 1``): one test per family each, the examples
    reported by the worker summed (15 per test in the dev profile) and the 100th example's time reported."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": "dev", "PYTHONPATH": str(ROOT)}
    env.pop("CI", None)
    cmd = [sys.executable, "-m", "pytest", "-n", "1", "-v", "-p", "no:cacheprovider", "--pyargs",
           "gdn_equiv.suite.test_properties", "--gdn-backend", "torch", "--gdn-split-families",
           "-k", "forward_is_bitwise or fallback_is"]  # fmt: skip
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    families = parse_families("all")
    for test in ("test_fused_forward_is_bitwise_equal", "test_fallback_is_the_reference"):
        ran = set(re.findall(rf"PASSED \S*::{test}\[torch-(\w+)\]", out))
        assert ran == set(families), (test, ran, out)
    expected = 2 * len(families) * testing.PROFILES["dev"]["max_examples"]
    match = re.search(r"gdn-equiv: (\d+) Hypothesis examples in [\d.]+ s .*; (\d+) counted by properties", out)
    assert match is not None, out
    assert (int(match[1]), int(match[2])) == (expected, expected), out
    assert re.search(r"gdn-equiv: 100 examples by [\d.]+ s", out), out
    assert re.search(r"examples reached 100 by [\d.]+ s .*; [\d.]+ examples/s after the 100th", out), out


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
