"""The ledger's hooks: every Hypothesis example counted, summed as reports arrive, and the run's summary line."""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any, cast

import pytest

from gdn_equiv.harness import testing
from gdn_equiv.plugin.stop import StopFlag

if TYPE_CHECKING:
    from collections.abc import Callable

    from hypothesis.utils.dynamicvariables import DynamicVariable

#: the key a test's example counts travel under in its report's ``user_properties``
COUNTS_KEY = "gdn_equiv_counts"
#: example counts whose time of reaching the summary line reports (issue #17's cold start: 500 in <= 60 s)
MILESTONES = (100, 500, 1000)
#: the attribute of a wrapped Hypothesis test holding the item and stop flag of its running call
_RUNNING = "_gdn_equiv_running"


def examples_of(report: pytest.TestReport) -> int:
    """The Hypothesis examples a finished test's report carries."""
    return sum(
        int(v.get("hypothesis", 0)) for k, v in report.user_properties if k == COUNTS_KEY and isinstance(v, dict)
    )


def _wrap_examples(item: pytest.Item) -> list[tuple[pytest.Item, StopFlag]] | None:
    """Every example of a Hypothesis test runs in its own count (:func:`gdn_equiv.harness.testing.example_scope`:
    a ``count_example`` counts once the example compared something), and asks the stop flag first where one
    exists (``-x``/``--maxfail``). Wrapped once per test function (its parametrisations share it: the stop is
    the running call's, kept on the wrapper). Returns the wrapper's list of running calls, or ``None`` for a
    test that is not a Hypothesis test."""
    handle = getattr(getattr(item, "obj", None), "hypothesis", None)
    inner = getattr(handle, "inner_test", None)
    if handle is None or inner is None:
        return None
    running = getattr(inner, _RUNNING, None)
    if running is not None:
        return cast("list[tuple[pytest.Item, StopFlag]]", running)
    calls: list[tuple[pytest.Item, StopFlag]] = []

    @functools.wraps(inner)  # the same source, signature and digest: the same database key
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if calls and calls[-1][1].path is not None:
            running_item, stop = calls[-1]
            stop.raise_if_stopped(running_item, mid_run=True)
        with testing.example_scope():
            return inner(*args, **kwargs)

    setattr(wrapped, _RUNNING, calls)
    handle.inner_test = wrapped
    return calls


def _key_by_node_id(item: pytest.Item) -> None:
    """A gate test's examples are saved under its node id (``test_properties.py::test_x[torch]``): one key per
    backend it is parametrised with, and the key HypoFuzz uses for it, so what a ``gdn-equiv fuzz --engine
    hypofuzz`` run saved replays first here. Hypothesis adds the node id itself only to tests parametrised by
    a marker or a fixture's params; ``--gdn-backend`` parametrises through ``pytest_generate_tests``, so every
    backend shared one key (the record's name) and HypoFuzz's findings were never replayed (issue #37)."""
    obj = getattr(item, "obj", None)
    inner = getattr(getattr(obj, "hypothesis", None), "inner_test", None)
    if inner is not None and str(getattr(obj, "__module__", "")).startswith("gdn_equiv.suite"):
        inner._hypothesis_internal_add_digest = item.nodeid.encode()


class ExampleCounts:
    """One per gdn-equiv run (registered with its config's plugin manager): the examples of every Hypothesis
    test, counted in the process that runs it and summed where reports arrive (the controller under xdist)."""

    NAME = "gdn-equiv-counts"

    def __init__(self, config: pytest.Config, stop: StopFlag, profile: str) -> None:
        self.config, self.stop, self.profile = config, stop, profile
        self.started = stop.started
        self.totals: dict[str, int] = {"properties": 0, "hypothesis": 0}
        self.reached: dict[int, float] = {}

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        """Count the examples of every Hypothesis test, chaining Hypothesis' own statistics callback.

        The test's counts travel with its report (``user_properties``), so under xdist the controller
        sums them as reports arrive and knows when the run reached each :data:`MILESTONES` count.
        """
        calls = _wrap_examples(item)
        _key_by_node_id(item)
        from hypothesis.statistics import collector as _collector

        collector = cast("DynamicVariable[Callable[[Any], None] | None]", _collector)
        previous = collector.value
        before = testing.counts()

        def note(stats: Any) -> None:
            testing.count_hypothesis_test_cases(stats)
            if previous is not None:
                previous(stats)

        call = (item, self.stop)
        if calls is not None:
            calls.append(call)
        try:
            with collector.with_value(note):
                return (yield)
        except BaseException as exc:
            self.stop.skip_if_stopped_mid_run(item, exc)
            raise
        finally:
            if calls is not None:
                calls.remove(call)
            after = testing.counts()
            item.user_properties.append((COUNTS_KEY, {k: after[k] - before[k] for k in after}))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Sum the examples of each finished test (controller and single process alike)."""
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == COUNTS_KEY and isinstance(value, dict):
                self._count(value)

    def _count(self, counts: dict[str, int]) -> None:
        before = self.totals["hypothesis"]
        for key, value in counts.items():
            self.totals[key] = self.totals.get(key, 0) + int(value)
        for milestone in MILESTONES:
            if before < milestone <= self.totals["hypothesis"]:
                self.reached[milestone] = time.perf_counter() - self.started
                # said as it happens too, so a run cut short by a time limit still tells its cold start
                reporter = self.config.pluginmanager.get_plugin("terminalreporter")
                if reporter is not None:
                    if getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):
                        reporter.write("\n")  # after the progress dots of -q
                    reporter.write_line(f"gdn-equiv: {milestone:,} examples by {self.reached[milestone]:.1f} s")

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if hasattr(config, "workerinput"):
            return
        totals = self.totals
        elapsed = time.perf_counter() - self.started
        n = totals["hypothesis"]
        rate = n / elapsed if elapsed > 0 else 0.0
        terminalreporter.write_line(
            f"gdn-equiv: {n} Hypothesis examples in {elapsed:.1f} s ({rate:.1f} examples/s); "
            f"{totals['properties']} counted by properties (count_example); profile {self.profile!r}"
        )
        why = self.stop.stopped()
        if why is not None:
            terminalreporter.write_line(
                f"gdn-equiv: stopped: {why}; every worker stopped at once: {self.stop.stopped_mid_run} test(s) "
                f"stopped mid-run, {self.stop.never_started} never started (reported skipped, 'not reached': "
                "none passed)"
            )
        if self.reached:
            reached = ", ".join(f"{m:,} by {t:.1f} s" for m, t in sorted(self.reached.items()))
            first, at = min(self.reached.items())
            # past the start-up (workers, imports, device contexts, the first compiles): the warm rate
            after = f"; {(n - first) / (elapsed - at):.1f} examples/s after the {first:,}th" if elapsed > at else ""
            terminalreporter.write_line(f"gdn-equiv: examples reached {reached} (since pytest started){after}")
