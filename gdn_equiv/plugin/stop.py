"""Stopping at the first failure under xdist: ``-x`` / ``--maxfail`` stops every worker at once, and the report
says what did not run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

#: how the skip of a test that the stop kept from running (or from finishing) begins
NOT_REACHED_SKIP = "not reached: "


class StopFlag:
    """``-x`` / ``--maxfail`` that stops every xdist worker at once, and a report that says what did not run.

    pytest-xdist handles ``-x`` in the controller: when enough failures have arrived it sends each worker a
    shutdown that the worker reads only after every test already queued to it (pytest-xdist #420, open since
    2019; #1024: the stop must travel controller -> worker, so no worker-local fix suffices), and a worksteal
    queue holds a whole share of the suite. So the controller writes a flag file the moment the failure that
    reaches ``--maxfail`` arrives (its path travels to the workers in ``workerinput``); each worker checks it
    before every test and between the examples of a Hypothesis test, and on seeing it ends the running test as
    skipped ("not reached", never a pass: the examples it ran are not the test's budget) and stops
    (``session.shouldstop``), which ends its loop after that test.

    The report stays complete: every collected test that sent no report is reported as skipped, "not reached"
    (the terminal's count, JUnit XML), and the controller's exit status is pytest's "tests failed" (1), as for
    ``-x`` without xdist, not the "interrupted" (2) that xdist's own stop gives.

    One per gdn-equiv run, registered with its config's plugin manager (its hooks are its methods)."""

    KEY = "gdn_equiv_stop_flag"
    NAME = "gdn-equiv-stop"

    def __init__(self, started: float | None = None) -> None:
        self.started = time.perf_counter() if started is None else started
        self.config: pytest.Config | None = None
        self.path: Path | None = None
        self.owner = False  # the controller (or the single process) that created the flag's directory
        self.seen: str | None = None
        self.failures = 0
        self.first_failure: tuple[str, float] | None = None
        self.collected: list[str] = []
        self.reported: set[str] = set()
        self.stopped_mid_run = 0
        self.never_started = 0

    def configure(self, config: pytest.Config) -> None:
        self.config = config
        worker = getattr(config, "workerinput", None)
        if worker is not None:
            value = worker.get(self.KEY)
            self.path = Path(value) if value else None
        elif (config.getoption("maxfail") or 0) > 0:
            import tempfile

            self.path = Path(tempfile.mkdtemp(prefix="gdn-equiv-stop-")) / "stop"
            self.owner = True

    def unconfigure(self) -> None:
        if self.owner and self.path is not None:
            import shutil

            shutil.rmtree(self.path.parent, ignore_errors=True)

    def reason(self) -> str | None:
        """Why this worker must stop (the flag's text), or ``None``; cheap enough to ask per example."""
        if self.seen is None and self.path is not None and self.path.exists():
            self.seen = self.path.read_text(encoding="utf-8").strip() or "the run stopped"
        return self.seen

    def stopped(self) -> str | None:
        """Why the run stopped at a failure (``-x``/``--maxfail``), or ``None`` when it did not."""
        return self.reason() if self.first_failure is not None else None

    def raise_if_stopped(self, item: pytest.Item, *, mid_run: bool) -> None:
        why = self.reason()
        if why is None:
            return
        item.session.shouldstop = f"gdn-equiv: {why}"
        if mid_run:
            item.user_properties.append(("gdn_equiv_stopped_mid_run", True))
        where = "stopped mid-run" if mid_run else "not started"
        pytest.skip(f"{NOT_REACHED_SKIP}{where}, {why}")

    def skip_if_stopped_mid_run(self, item: pytest.Item, exc: BaseException) -> None:
        """The stop raised between two examples of a Hypothesis test comes out of Hypothesis as the cause of
        another error (the run drew less than the same choices drew before: ``FlakyStrategyDefinition``), since
        a stopped example is one Hypothesis cannot replay. Such an error whose chain holds this flag's skip is
        the stop, nothing else: the test is reported skipped, "not reached", as the flag's skip says."""
        if isinstance(exc, pytest.skip.Exception) or self.seen is None:
            return
        seen: set[int] = set()
        todo: list[BaseException | None] = [exc]
        while todo:
            e = todo.pop()
            if e is None or id(e) in seen:
                continue
            seen.add(id(e))
            if isinstance(e, pytest.skip.Exception) and str(e.msg).startswith(f"{NOT_REACHED_SKIP}stopped mid-run"):
                raise pytest.skip.Exception(e.msg) from None
            todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]

    def note_report(self, config: pytest.Config, report: pytest.TestReport) -> None:
        """Controller (or single process): count failures as pytest does, raise the flag at ``--maxfail``."""
        self.reported.add(report.nodeid)
        if report.when == "call" and any(k == "gdn_equiv_stopped_mid_run" for k, _ in report.user_properties):
            self.stopped_mid_run += 1
        if not report.failed or not self.owner or self.path is None:
            return
        self.failures += 1
        if self.first_failure is None:
            self.first_failure = (report.nodeid, time.perf_counter() - self.started)
        if self.failures >= config.getoption("maxfail") and not self.path.exists():
            nodeid, at = self.first_failure
            text = f"the run stopped at its first failure (-x): FAILED {nodeid} at {at:.1f} s"
            if config.getoption("maxfail") > 1:
                text = f"the run stopped at --maxfail {config.getoption('maxfail')} failures (first: FAILED {nodeid})"
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(text + "\n", encoding="utf-8")
            tmp.replace(self.path)  # whole or absent for a worker that reads it

    def not_reached(self, session: pytest.Session) -> list[str]:
        """Collected tests without any report: never started (in collection order)."""
        ids = self.collected or [item.nodeid for item in session.items]
        return [i for i in ids if i not in self.reported]

    # ---- its hooks ----

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist: each worker gets the path of the controller's stop flag."""
        if self.path is not None:
            node.workerinput[self.KEY] = str(self.path)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """xdist: what the workers collected (every worker collects the same), for the "not reached" rows."""
        if not self.collected:
            self.collected = list(ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.raise_if_stopped(item, mid_run=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.config is not None and not hasattr(self.config, "workerinput"):
            self.note_report(self.config, report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Controller (or single process) of a run that ``-x``/``--maxfail`` stopped: every test that never ran is
        reported skipped, "not reached" (before JUnit XML is written), and the status is "tests failed"."""
        if hasattr(session.config, "workerinput") or not self.owner or self.first_failure is None:
            return
        reason = self.reason() or "the run stopped at its first failure (-x)"
        missing = self.not_reached(session)
        for nodeid in missing:
            path = nodeid.split("::")[0]
            report = pytest.TestReport(
                nodeid=nodeid,
                location=(path, None, nodeid.split("::", 1)[-1]),
                keywords={},
                outcome="skipped",
                longrepr=(path, 0, f"Skipped: {NOT_REACHED_SKIP}never started, {reason}"),
                when="setup",
            )
            session.config.hook.pytest_runtest_logreport(report=report)
        self.never_started = len(missing)
        if session.exitstatus == pytest.ExitCode.INTERRUPTED and session.testsfailed:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.unconfigure()
