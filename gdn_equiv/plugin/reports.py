"""What a gdn-equiv run writes besides pytest's own report: the failure log as failures arrive
(``--gdn-failure-log``) and the run's page (``--gdn-html``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gdn_equiv.harness import registry
from gdn_equiv.plugin.counts import examples_of
from gdn_equiv.plugin.stop import NOT_REACHED_SKIP, StopFlag
from gdn_equiv.run import html_report
from gdn_equiv.run.plan import RunPlan


class FailureLog:
    """``--gdn-failure-log``: a failure's full report, appended and flushed as soon as it arrives (for time-boxed
    runs that may be cut off before pytest's summary); with xdist the controller writes it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.failed:
            return
        with self.path.open("a", encoding="utf-8") as log:
            log.write(
                f"==== FAILED {report.nodeid} ({report.when}, {report.duration:.1f} s)\n{report.longreprtext}\n\n"
            )


class GatePage:
    """The hooks that feed :class:`gdn_equiv.run.html_report.GateLedger` and write the page."""

    NAME = "gdn-equiv-html"

    def __init__(self, config: pytest.Config, plan: RunPlan, stop: StopFlag) -> None:
        assert plan.html is not None, "a page is written where the plan names one"
        records = {r.gate_test: r.name for r in registry.records().values() if r.gate_test}
        self.path, self.config, self.plan, self.stop = plan.html, config, plan, stop
        self.ledger = html_report.GateLedger(
            records=records, backends=list(plan.backend_names), families=list(plan.families)
        )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.ledger.collected([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.ledger.collected(list(ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        longrepr = report.longreprtext
        outcome: str = report.outcome
        if report.skipped and isinstance(report.longrepr, tuple):
            longrepr = str(report.longrepr[2])
            if longrepr.removeprefix("Skipped: ").startswith(NOT_REACHED_SKIP):
                outcome = html_report.NOT_REACHED  # the stop's skip (-x/--maxfail): the test never ran whole
        if getattr(report, "wasxfail", ""):  # an xfail's reason (P1's known gaps, an allowed missed fusion)
            longrepr = str(report.wasxfail)
        self.ledger.reported(
            report.nodeid, when=report.when, outcome=outcome, longrepr=longrepr, duration=report.duration,
            examples=examples_of(report), xfail=hasattr(report, "wasxfail"),
        )  # fmt: skip

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        profile = self.plan.hypothesis_profile
        seed = self.config.getoption("hypothesis_seed", None)
        # the process' exit status is the session's as the last hook left it (the stop's own sessionfinish
        # turns xdist's "interrupted" of a -x stop into "tests failed"), not the status this hook was called with
        exitstatus = session.exitstatus
        status = "interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else "complete"
        if self.stop.stopped() is not None:
            maxfail = self.config.getoption("maxfail")
            status = "stopped at its first failure (-x)" if maxfail == 1 else f"stopped at --maxfail {maxfail}"
        args = " ".join(str(a) for a in self.config.invocation_params.args)
        meta = {"mode": "pytest gate", "arguments": args, "profile": profile}
        html = html_report.render(
            self.ledger.summary(status=status, meta=meta),
            page=self.path,
            report_dir=None,
            title=f"gdn-equiv pytest gate · {args}"[:200],
            env=html_report.environment(
                device="cuda" if self.plan.device != "cpu" else "cpu",
                profile=profile,
                seed=None if seed is None else str(seed),
            ),
            failing=html_report.GATE_FAILING,
            exit_note=f"pytest exit status {int(exitstatus)}",
        )
        html_report.write(self.path, html)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"gdn-equiv: page {self.path}")
