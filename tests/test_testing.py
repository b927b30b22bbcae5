"""The pytest helpers of :mod:`gdn_equiv.harness.testing`: xdist GPU pinning, option parsing, profiles, counting."""

from __future__ import annotations

import pytest
from hypothesis import settings

from gdn_equiv.harness import testing


@pytest.mark.parametrize(
    ("worker", "visible", "count", "expected"),
    [
        ("gw0", None, 4, "0"),
        ("gw3", None, 4, "3"),
        ("gw5", None, 4, "1"),  # round-robin past the last device
        ("gw1", "2,5", 8, "5"),  # an existing list is shared out, not the physical devices
        ("gw2", "2,5", 8, "2"),
        ("gw1", "GPU-aaaa, GPU-bbbb", 0, "GPU-bbbb"),  # UUIDs pass through
    ],
)
def test_xdist_workers_are_pinned_round_robin(worker: str, visible: str | None, count: int, expected: str) -> None:
    env = {"PYTEST_XDIST_WORKER": worker}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    assert testing.pin_xdist_worker_device(env, device_count=count) == expected
    assert env["CUDA_VISIBLE_DEVICES"] == expected


@pytest.mark.parametrize(
    "env",
    [
        {},  # not under xdist
        {"PYTEST_XDIST_WORKER": "master"},
        {"PYTEST_XDIST_WORKER": "gw0", "CUDA_VISIBLE_DEVICES": ""},  # CUDA hidden on purpose
        {"PYTEST_XDIST_WORKER": "gw0", "CUDA_VISIBLE_DEVICES": "-1"},
        {"PYTEST_XDIST_WORKER": "gw1"},  # no GPU
    ],
)
def test_nothing_is_pinned_without_a_worker_or_a_gpu(env: dict[str, str]) -> None:
    before = dict(env)
    assert testing.pin_xdist_worker_device(env, device_count=0) is None
    assert env == before


def test_backend_lists_are_parsed_in_order_without_repeats() -> None:
    assert testing.parse_names(" torch, triton ,torch,,pkg.mod:conv") == ["torch", "triton", "pkg.mod:conv"]


@pytest.mark.parametrize(
    ("env", "profile"),
    [({}, "dev"), ({"CI": "true"}, "ci"), ({"CI": "true", "HYPOTHESIS_PROFILE": "fuzz"}, "fuzz")],
)
def test_profile_selection(env: dict[str, str], profile: str) -> None:
    from gdn_equiv.run import plan

    assert plan.profile(None, plan.pytest_default_profile(env), env) == profile


def test_profiles_are_registered_without_deadlines() -> None:
    for name in testing.PROFILES:
        profile = settings.get_profile(name)
        assert profile.deadline is None and profile.print_blob
    assert settings.get_profile("gpu").derandomize
    assert settings.get_profile("fuzz").max_examples > settings.get_profile("ci").max_examples


def test_hypothesis_statistics_are_counted_per_example() -> None:
    stats = {
        "generate-phase": {"test-cases": [{"status": "valid"}, {"status": "overrun"}, {"status": "interesting"}]},
        "shrink-phase": {"test-cases": [{"status": "valid"}, {"status": "invalid"}]},
        "stopped-because": "settings.max_examples=3",
    }
    before = testing.counts()["hypothesis"]
    assert testing.count_hypothesis_test_cases(stats) == 3
    assert testing.counts()["hypothesis"] == before + 3


@pytest.mark.parametrize(
    ("ending", "counted"),
    [
        (None, 1),  # the comparison passed
        (AssertionError("y differs"), 1),  # a comparison (or assert) failed: it compared something
        (RuntimeError("refused: not on this device"), 0),  # the call under test refused: nothing compared
        (pytest.skip.Exception("n/a"), 0),
        ("worker died", 0),  # a crash (an AssertionError to Hypothesis, a finding) compared nothing
        ("premise", 0),  # built to meet the premise, did not: compared nothing
    ],
)
def test_an_example_counts_by_properties_once_it_compared_something(ending: object, counted: int) -> None:
    """``count_example`` is called before the comparison; inside an example's scope (the plugin opens one per
    Hypothesis example) it counts only once the example ends having compared something (issue #49)."""
    from gdn_equiv.harness.compare import Report
    from gdn_equiv.harness.isolation import WorkerDied
    from gdn_equiv.harness.ledger import PremiseNotMet

    if ending == "worker died":
        ending = WorkerDied("the worker running the example was killed by signal SIGSEGV")
    elif ending == "premise":
        ending = PremiseNotMet("the example was built to meet the premise", Report("premise", ("p", "spec"), False, 0))
    before = testing.counts()["properties"]
    try:
        with testing.example_scope():
            testing.count_example()
            if isinstance(ending, BaseException):
                raise ending
    except BaseException as exc:
        assert exc is ending
    assert testing.counts()["properties"] - before == counted
    with testing.example_scope():  # an example that never called count_example: not a property's
        pass
    assert testing.counts()["properties"] - before == counted
    testing.count_example()  # outside any example's scope: counts at once (a driver of its own)
    assert testing.counts()["properties"] - before == counted + 1


def test_an_unknown_hypothesis_profile_is_refused_naming_the_known_ones():
    import pytest

    from gdn_equiv.errors import InvalidArgument
    from gdn_equiv.harness.testing import PROFILES
    from gdn_equiv.run.plan import profile

    known = ", ".join(sorted(PROFILES))
    with pytest.raises(InvalidArgument, match=f"'nosuch' is not a profile; known profiles: {known}"):
        profile(None, "dev", {"HYPOTHESIS_PROFILE": "nosuch"})
    with pytest.raises(InvalidArgument, match=f"'nosuch' is not a profile; known profiles: {known}"):
        profile("ci", "dev", {"HYPOTHESIS_PROFILE": "nosuch"})  # refused whichever wins, as `check` refuses it
    assert profile(None, "dev", {"HYPOTHESIS_PROFILE": "gpu"}) == "gpu"
    assert profile("ci", "dev", {"HYPOTHESIS_PROFILE": "gpu"}) == "ci"


def test_triton_kernels_are_kept_under_the_project_on_a_gpu_unless_the_caller_chose():
    assert testing.project_triton_cache("/repo", {}, gpu=True) == "/repo/.gdn-equiv/triton"
    assert testing.project_triton_cache("/repo", {"TRITON_CACHE_DIR": "/mine"}, gpu=True) is None
    assert testing.project_triton_cache("/repo", {"TRITON_CACHE_DIR": ""}, gpu=True) == "/repo/.gdn-equiv/triton"
    assert testing.project_triton_cache("/repo", {}, gpu=False) is None


def test_the_test_command_collects_the_gate_where_it_lives(request: pytest.FixtureRequest):
    """The README's test command collects ``tests/`` and the installed gate, ``gdn_equiv/suite``, from where each
    lives (pyproject's ``testpaths``): no gate module reaches ``tests/`` by a star import (it would run twice),
    and no module of the repository's own tests sits in the gate (the gate holds only the gate)."""
    import re
    from pathlib import Path

    import gdn_equiv.suite

    root = Path(request.config.rootpath)
    suite = Path(gdn_equiv.suite.__file__).parent
    assert {"tests", "gdn_equiv/suite"} <= set(request.config.getini("testpaths"))
    assert suite.resolve() == (root / "gdn_equiv" / "suite").resolve()
    star = re.compile(r"^from gdn_equiv\.suite\S* import \*", re.M)
    assert [p.name for p in (root / "tests").glob("*.py") if star.search(p.read_text())] == []
    # the harness's own tests (the comparison, the ledger, the plugin) live in tests/
    assert not {"test_compare.py", "test_verdict.py", "test_plugin_promises.py"} & {p.name for p in suite.iterdir()}


def test_fuzzing_holds_under_the_fuzz_profile_with_a_shared_database() -> None:
    """``--gdn-database`` loads ``<profile>+database``; the fuzz profile with a database is still fuzzing
    (strategies and the runner call ``target()`` there), and no other profile is."""
    from hypothesis import settings

    from gdn_equiv.harness.testing import fuzzing, register_profiles

    register_profiles()
    previous = settings.get_current_profile_name()
    try:
        for name, expected in (("fuzz", True), ("gpu", False), ("dev", False)):
            settings.register_profile(f"{name}+database", parent=settings.get_profile(name))
            for loaded in (name, f"{name}+database"):
                settings.load_profile(loaded)
                assert fuzzing() is expected, loaded
    finally:
        settings.load_profile(previous)
