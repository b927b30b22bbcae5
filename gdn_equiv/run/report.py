"""The report of a ``gdn-equiv check`` / ``fuzz`` run, written as the run goes (SPEC §10).

A report directory holds:

- ``rows.jsonl``: one line per finished check, appended the moment it finishes;
- ``summary.json``: every row so far (a fuzz run merges its rounds into one row per property x family
  x backend x dtype) and the run's ``status``: ``running``, then ``complete``, ``interrupted`` or
  ``internal-error``. It is rewritten after each check by write-then-rename, so a reader (or a run that
  is killed) never sees half a file;
- per failure, the shrunk example as a versioned JSON file (:func:`read_failure` validates it) and a
  standalone reproducer script;
- ``internal-error.txt``: the traceback, when gdn-equiv itself failed (exit status 4).

An interrupted run therefore leaves a valid report of every check that finished before it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import TracebackType
from typing import Any

from gdn_equiv.harness.ledger import EXIT_INTERRUPTED, FAILING, Outcome, cut_short, exit_status
from gdn_equiv.run import html_report
from gdn_equiv.run.failures import (
    FORMAT_VERSION,
    Failure,
    InvalidFailureFile,
    file_name_part,
    read_failure,
    write_atomically,
    write_failure,
)
from gdn_equiv.run.junit import write_junit
from gdn_equiv.run.rows import ASKED, UNREACHED, Check, format_table, merge
from gdn_equiv.run.signals import (
    caused_by_interrupt,
    clear_interrupts,
    deferred_signals,
    interrupt_pending,
    note_interrupt,
    stdout_closed,
)

# the rows, their files and the signals live in modules of their own below this writer; the names stay here
# for the drivers that read a report through this module
__all__ = [
    "ASKED",
    "FAILING",
    "FORMAT_VERSION",
    "INTERNAL_ERROR_FILE",
    "UNREACHED",
    "Check",
    "Failure",
    "InvalidFailureFile",
    "ReportWriter",
    "caused_by_interrupt",
    "clear_interrupts",
    "deferred_signals",
    "format_table",
    "interrupt_pending",
    "merge",
    "note_interrupt",
    "read_failure",
    "stdout_closed",
    "write_junit",
]

INTERNAL_ERROR_FILE = "internal-error.txt"
#: the exit status of a run that gdn-equiv itself failed (the command table's 4; the traceback is INTERNAL_ERROR_FILE)
EXIT_INTERNAL = 4


class ReportWriter:
    """Writes a run's report directory check by check; use as a context manager so that an
    interruption or an internal error still leaves ``summary.json`` saying how the run ended."""

    def __init__(
        self,
        out_dir: Path,
        *,
        device: str,
        meta: dict[str, Any],
        json_copy: Path | None = None,
        junit_xml: Path | None = None,
        html: Path | None = None,
    ) -> None:
        self.out_dir = out_dir
        self.html = html
        self.device = device
        self.meta = meta
        self.json_copy = json_copy
        self.junit_xml = junit_xml
        self.rows: list[Check] = []
        self.status = "running"
        self._failures = 0
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in (*out_dir.glob("failure-*.json"), *out_dir.glob("failure-*.py"), out_dir / INTERNAL_ERROR_FILE):
            old.unlink(missing_ok=True)  # a past run's: a report holds what this run found and nothing older
        self.rows_path = out_dir / "rows.jsonl"
        self.rows_path.write_text("")
        self.summary_path = out_dir / "summary.json"
        self._write_summary()

    def __enter__(self) -> ReportWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            if self.status == "running":
                self.finish("complete")
        elif caused_by_interrupt(exc) or stdout_closed(exc):
            for row in self.rows:  # the rows no result reached: the interruption's, not the budget's
                if row.result == UNREACHED and row.failure == ASKED:
                    row.result, row.failure = cut_short(UNREACHED), "interrupted before this row ran"
            self.finish("interrupted")
        else:
            self.finish("internal-error")

    def ask(self, rows: list[Check]) -> None:
        """The ledger: every row the run was asked for, before its first example. Each stays
        ``not reached`` (failing) until a result reaches it; a row that cannot be asked here comes
        with its ``n/a`` result and reason already."""
        with deferred_signals():
            for row in rows:
                if row.result == Outcome.PASSED:
                    row.result, row.failure = UNREACHED, ASKED
                self.rows.append(row)
            self._write_summary()

    def add(self, check: Check) -> Check:
        """Record a finished check now: its row (merged with an earlier round's), its failure files,
        its line in ``rows.jsonl`` and the rewritten summary. Returns the merged row."""
        with deferred_signals():
            return self._add(check)

    def _add(self, check: Check) -> Check:
        row = next((r for r in self.rows if r.key == check.key), None)
        if row is None:
            row = check
            self.rows.append(row)
        else:
            merge(row, check)
        if row.result in (Outcome.FAILED, Outcome.MISSED_FUSION) and row.example is not None and not row.repro:
            self._write_failure(row)
            check.repro, check.repro_json = row.repro, row.repro_json
        with self.rows_path.open("a") as f:
            f.write(json.dumps(check.as_dict()) + "\n")
        self._write_summary()
        return row

    def finish(self, status: str) -> Path:
        """Write the final summary (and the ``--json`` / ``--junit-xml`` copies) with ``status``."""
        with deferred_signals():
            return self._finish(status)

    def _finish(self, status: str) -> Path:
        self.status = status
        summary = self._write_summary()
        if self.json_copy is not None:
            self.json_copy.parent.mkdir(parents=True, exist_ok=True)
            self.json_copy.write_text(summary.read_text())
        if self.junit_xml is not None:
            write_junit(self.rows, self.junit_xml, meta=self.meta)
        if self.html is not None:
            self.write_html(self.html)
        return summary

    def write_html(self, path: Path) -> Path:
        """The run's page (:mod:`gdn_equiv.run.html_report`) from the summary as written, every row with
        the ledger's result."""
        data = json.loads(self.summary_path.read_text())
        for check, row in zip(data["checks"], self.rows, strict=True):
            check["row_id"] = row.row_id
        failing = f"exit status {self.exit_status()}"
        what = f"{self.meta.get('mode', 'check')} · {self.meta.get('family', '')} · {self.meta.get('backend', '')}"
        page = html_report.render(
            data,
            page=path,
            report_dir=self.out_dir,
            title=f"gdn-equiv {what}",
            env=html_report.environment(device=self.device, profile=self.meta.get("profile")),
            failing=FAILING,
            exit_note=failing if self.status == "complete" else f"run {self.status}: {failing}",
        )
        return html_report.write(path, page)

    def exit_status(self) -> int:
        """The status the run's command exits with, as its report stands: 130 interrupted, 4 for an internal
        error of gdn-equiv, else the ledger's (0 or 1, from the rows)."""
        if self.status == "interrupted":
            return EXIT_INTERRUPTED
        if self.status == "internal-error":
            return EXIT_INTERNAL
        return exit_status(Outcome(r.result) for r in self.rows)

    @property
    def failed(self) -> list[Check]:
        return [r for r in self.rows if Outcome(r.result).fails]

    @property
    def asked(self) -> int:
        return len(self.rows)

    def _write_summary(self) -> Path:
        data = {
            "format_version": FORMAT_VERSION,
            "status": self.status,
            "meta": self.meta,
            "counts": dict(Counter(r.result for r in self.rows)),
            "checks": [r.as_dict() for r in self.rows],
        }
        write_atomically(self.summary_path, json.dumps(data, indent=2))
        return self.summary_path

    def _write_failure(self, check: Check) -> None:
        stem = f"failure-{self._failures:02d}-{check.name}-{check.family}-{file_name_part(check.backend)}-{check.dtype}"
        self._failures += 1
        write_failure(self.out_dir, stem, check, self.device)
