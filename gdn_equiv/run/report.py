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

import dataclasses
import json
import math
import os
import select
import signal
import sys
import threading
import types
import typing
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from gdn_equiv.harness.compare import Report, worst
from gdn_equiv.harness.ledger import FAILING, Outcome, cut_short, fold
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import DEFAULT_FAMILY
from gdn_equiv.run import html_report

#: the failure JSON's ``format_version``; bump it when a field changes meaning or is removed
FORMAT_VERSION = 1
INTERNAL_ERROR_FILE = "internal-error.txt"

#: what an asked row holds until a result reaches it: a run that ends first leaves it failing
UNREACHED = Outcome.NOT_REACHED
ASKED = "the run ended before this row"


@dataclass
class Check:
    """One row of the summary: a property run against a backend on examples of one dtype and family.

    ``result``: ``pass``, ``FAIL``, ``not exercised`` (every example was not applicable: a strategy or
    environment problem, never a pass); for a P6 necessity search ``counterexample``, ``none found`` (the
    condition may be unnecessary: a note, not a pass) or ``n/a`` (the state cannot exist here).
    ``worst`` is the comparison that came closest to (or went past) its tolerance: for a failure,
    the shrunk example's. ``function`` names the property in :mod:`gdn_equiv.harness.properties` that a
    reproducer calls.
    """

    name: str
    backend: str
    dtype: str = "any"
    family: str = DEFAULT_FAMILY
    target: str = "gdn_equiv"
    target_options: dict[str, str] = field(default_factory=dict)
    function: str = ""
    examples: int = 0
    not_applicable: int = 0
    result: Outcome = Outcome.PASSED
    reasons: Counter[str] = field(default_factory=Counter)
    failure: str = ""
    example: Example | None = None
    seconds: float = 0.0
    budget_spent: bool = False
    repro: str = ""
    repro_json: str = ""
    worst: Report | None = None
    #: further distinct failures of the same run (another kind: another tensor, region or diagnosis),
    #: each a row of its own so a harmless finding cannot hide a real one
    also: list[Check] = field(default_factory=list, repr=False)

    @property
    def row_id(self) -> str:
        # the default family's rows keep the ids they had before families existed, so the JUnit
        # history of a CI job carries on
        family = "" if self.family == DEFAULT_FAMILY else f"-{self.family}"
        return f"{self.name}[{self.backend}-{self.dtype}{family}]"

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """What makes two checks the same row (a fuzz run merges its rounds by it)."""
        return (self.name, self.family, self.backend, self.dtype, self.target)

    @property
    def database_key(self) -> bytes:
        """This row's own key in Hypothesis' example database (the ``@given`` function is the same
        code for every row, so without it one row's run would delete another's saved failure)."""
        options = ",".join(f"{k}={v}" for k, v in sorted(self.target_options.items()))
        return "|".join((*self.key, options)).encode()

    def worst_cells(self) -> tuple[str, str]:
        """``(worst difference, tolerance)`` for the table: ``3.1e-06 grad.x``, ``rtol 1e-05 atol 1e-05 (31%)``."""
        r = self.worst
        if r is None:
            return "-", "-"
        if r.problem:
            return (
                f"{r.name}: {r.problem[:40]}",
                "exact" if r.rtol == r.atol == 0 else f"rtol {r.rtol:g} atol {r.atol:g}",
            )
        diff = f"{r.max_abs:.2g} {r.name}"
        if r.rtol == r.atol == 0:
            return diff, "exact"
        return diff, f"rtol {r.rtol:g} atol {r.atol:g} ({100 * r.tol_used:.0f}%)"

    def row(self) -> list[str]:
        reasons = ", ".join(f"{k}:{v}" for k, v in sorted(self.reasons.items()))
        return [
            self.name,
            self.family,
            self.backend,
            self.dtype,
            str(self.examples),
            str(self.not_applicable),
            self.result,
            *self.worst_cells(),
            f"{self.seconds:.1f}",
            reasons,
        ]

    def as_dict(self) -> dict[str, Any]:
        r = self.worst
        out: dict[str, Any] = {
            "property": self.name,
            "family": self.family,
            "backend": self.backend,
            "dtype": self.dtype,
            "target": self.target,
            "examples": self.examples,
            "not_applicable": self.not_applicable,
            "result": self.result,
            "seconds": round(self.seconds, 2),
            "budget_spent": self.budget_spent,
            "reasons": dict(self.reasons),
            "failure": self.failure,
            "worst": None if r is None else _report_dict(r),
        }
        if self.target_options:
            out["target_options"] = dict(self.target_options)
        if self.example is not None:
            out["example"] = json.loads(self.example.to_json())
        if self.repro:
            out["repro"], out["repro_json"] = self.repro, self.repro_json
        return out


def _report_dict(r: Report) -> dict[str, Any]:
    return {
        "name": r.name,
        "paths": list(r.paths),
        "max_abs": r.max_abs,
        "max_rel": r.max_rel,
        "rtol": r.rtol,
        "atol": r.atol,
        "tol_used": r.tol_used,
        "mismatched": r.mismatched,
        "numel": r.numel,
        "problem": r.problem,
    }


def merge(old: Check, new: Check) -> None:
    """Fold ``new`` (a finished run of the row) into ``old`` (the asked row, or an earlier fuzz round's):
    counts add up, a failure wins, a search's counterexample stays, and an example row is exercised as
    soon as any round had an applicable example (``not reached`` while none ran at all)."""
    old.worst = new.worst if new.result == Outcome.FAILED else worst([new.worst] if new.worst else [], old.worst)
    old.examples += new.examples
    old.not_applicable += new.not_applicable
    old.seconds += new.seconds
    old.budget_spent = old.budget_spent or new.budget_spent
    old.reasons.update(new.reasons)
    before, arriving = Outcome(old.result), Outcome(new.result)
    if before.final:
        return
    old.result = fold(
        before, arriving, examples=old.examples, not_applicable=old.not_applicable, budget_spent=old.budget_spent
    )
    if arriving.decisive:
        old.failure, old.example = new.failure, new.example
    elif old.result == Outcome.PASSED:
        old.failure = ""
    elif old.result == Outcome.NOT_REACHED:
        old.failure = new.failure or "the budget ended before its first example"
    else:  # never the asked row's "the run ended before this row": this row ran
        old.failure = new.failure or "not exercised: no example met the property's premise"


REPRO_TEMPLATE = '''#!/usr/bin/env python
"""Standalone reproducer written by gdn-equiv: {name} on backend {backend!r} (family {family}).

{failure}
"""
import os

import torch

if {device!r} == "cpu" and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as gdn-equiv ran it: Triton kernels in the interpreter

from gdn_equiv.harness.interpreter import make_faithful

make_faithful()  # the interpreter rounding fp32->bf16 as a GPU does, as gdn-equiv ran it

from gdn_equiv.model.example import Example
from gdn_equiv.harness.properties import {function}

EXAMPLE = Example.from_json({example_json!r})

if __name__ == "__main__":
    {function}(EXAMPLE, device={device!r}{extra})
    print("no failure: the defect is gone")
'''


def _safe(name: str) -> str:
    """A backend name (``pkg.mod:fn``) as a file-name part."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def caused_by_interrupt(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was raised while handling, a ``KeyboardInterrupt``: Hypothesis (6.170)
    turns one that lands before its engine starts into an ``AssertionError`` of its own."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def stdout_closed(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the ``BrokenPipeError`` of writing to a standard output whose reader has gone
    (``gdn-equiv ... | head``): the run was stopped from outside, as by a signal. Any other broken pipe
    (a worker process's, say) is not."""
    if not isinstance(exc, BrokenPipeError):
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll here, or stdout is not a file
        return False


_INTERRUPTS: list[int] = []  # Ctrl-C / SIGTERM received by this process (see ``note_interrupt``)


def note_interrupt(signum: int) -> None:
    """Remember that ``signum`` asked this run to stop: the runners check :func:`interrupt_pending`
    before each example, so the run ends even if the ``KeyboardInterrupt`` raised for it was swallowed
    on its way up (code under test that catches ``BaseException``, a C++ frame that rewraps it)."""
    _INTERRUPTS.append(signum)


def interrupt_pending() -> bool:
    return bool(_INTERRUPTS)


def clear_interrupts() -> None:
    _INTERRUPTS.clear()


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Ctrl-C and SIGTERM that arrive inside the block are delivered when it ends, so a report is
    never left half-updated (a row in ``rows.jsonl`` but not in the summary, or the reverse).

    Python runs signal handlers in the main thread only, so recording them there is enough whichever
    thread the operating system picked; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: types.FrameType | None) -> None:
        received.append(signum)
        note_interrupt(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)  # now handled as it would have been


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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
        if row.result == Outcome.FAILED and row.example is not None and not row.repro:
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
        failing = "exit status 1" if self.failed else "exit status 0"
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
        _write_atomically(self.summary_path, json.dumps(data, indent=2))
        return self.summary_path

    def _write_failure(self, check: Check) -> None:
        assert check.example is not None
        stem = f"failure-{self._failures:02d}-{check.name}-{check.family}-{_safe(check.backend)}-{check.dtype}"
        self._failures += 1
        failure_json = self.out_dir / f"{stem}.json"
        _write_atomically(
            failure_json,
            json.dumps(
                {
                    "format_version": FORMAT_VERSION,
                    "property": check.name,
                    "function": check.function,
                    "family": check.family,
                    "backend": check.backend,
                    "dtype": check.dtype,
                    "target": check.target,
                    "target_options": dict(check.target_options),
                    "device": self.device,
                    "failure": check.failure,
                    "example": json.loads(check.example.to_json()),
                },
                indent=2,
            ),
        )
        extra = ""
        if check.function == "check_target_guard":
            options = {"target": check.target, **check.target_options}
            extra = "".join(f", {k}={v!r}" for k, v in options.items())
        script = self.out_dir / f"{stem}.py"
        own = getattr(check.example, "reproducer", None)  # a serving case (S1-S7) writes its own script
        script.write_text(
            own(check.function, check.failure)
            if own is not None
            else REPRO_TEMPLATE.format(
                name=check.name,
                backend=check.backend,
                family=check.family,
                failure=check.failure.replace('"""', "'''"),
                function=check.function,
                example_json=check.example.to_json(),
                device=self.device,
                extra=extra,
            )
        )
        check.repro, check.repro_json = str(script), str(failure_json)


def write_junit(checks: list[Check], path: Path, *, meta: dict[str, Any]) -> None:
    """JUnit XML, one testcase per row: a failure carries the message, the shrunk example and its
    reproducer; "not exercised" and "not reached" are failures too; a P6 search that found nothing (or cannot run here)
    is a skip with the reason."""
    import socket
    import xml.etree.ElementTree as ET
    from datetime import datetime, timezone

    failures = sum(Outcome(c.result).fails for c in checks)
    skipped = sum(Outcome(c.result).reports for c in checks)
    seconds = f"{sum(c.seconds for c in checks):.3f}"
    counts = {"tests": str(len(checks)), "failures": str(failures), "errors": "0", "skipped": str(skipped)}
    root = ET.Element("testsuites", {"name": "gdn-equiv", **counts, "time": seconds})
    suite = ET.SubElement(
        root,
        "testsuite",
        {
            "name": f"gdn-equiv {meta.get('mode', 'check')}",
            **counts,
            "time": seconds,
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "hostname": socket.gethostname(),
        },
    )
    props = ET.SubElement(suite, "properties")
    for key, value in meta.items():
        ET.SubElement(props, "property", {"name": str(key), "value": str(value)})
    for check in checks:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"gdn_equiv.{check.family}.{_safe(check.backend)}",
                "name": check.row_id,
                "time": f"{check.seconds:.3f}",
            },
        )
        worst_diff, tol = check.worst_cells()
        out = (
            f"family: {check.family}; examples: {check.examples} (n/a: {check.not_applicable}); "
            f"result: {check.result}; worst difference: {worst_diff} ({tol}); guard reasons: {dict(check.reasons)}"
        )
        outcome = Outcome(check.result)
        if outcome == Outcome.FAILED:
            text = [check.failure]
            if check.example is not None:
                text += ["", f"Shrunk example: {check.example.short()}", check.example.to_json()]
            if check.repro:
                text += ["", f"Reproducer: python {check.repro}", f"Replay: gdn-equiv repro {check.repro_json}"]
            first = check.failure.splitlines()[0] if check.failure else "failed"
            kind = check.failure.split(":", 1)[0] if ":" in check.failure else "Failure"
            ET.SubElement(case, "failure", {"message": first[:500], "type": kind}).text = "\n".join(text)
        elif outcome.fails:  # not exercised, not reached, crashed, interrupted
            kind = "".join(word.capitalize() for word in outcome.name.split("_"))
            ET.SubElement(case, "failure", {"message": check.failure[:500], "type": kind})
        elif outcome.reports:
            reasons = {
                Outcome.NONE_FOUND: f"no counterexample found in {check.examples} examples: the condition may be "
                f"unnecessary on {check.backend}",
                Outcome.NOT_APPLICABLE: f"cannot run here: {check.failure}",
                Outcome.UPSTREAM_REFUSED: f"the upstream constructor refused a drawn config: {check.failure[:400]}",
            }
            reason = reasons[outcome]
            ET.SubElement(case, "skipped", {"message": reason})
        ET.SubElement(case, "system-out").text = out
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def format_table(checks: list[Check]) -> str:
    header = [
        "property",
        "family",
        "backend",
        "dtype",
        "examples",
        "n/a",
        "result",
        "worst difference",
        "tolerance (used)",
        "seconds",
        "guard reasons",
    ]
    rows = [header, *(c.row() for c in checks)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---- reading a failure back (gdn-equiv repro) ------------------------------------------------


class InvalidFailureFile(ValueError):
    """A failure JSON that cannot be replayed: missing, unreadable, of an unknown format version or
    not validating. The message is one line naming the file, the value and the rule."""


@dataclass(frozen=True)
class Failure:
    """A validated failure JSON (format version 1)."""

    property: str
    function: str
    family: str
    backend: str
    dtype: str
    target: str
    target_options: dict[str, str]
    device: str
    failure: str
    example: Example


_FAILURE_FIELDS: dict[str, type] = {
    "format_version": int,
    "property": str,
    "function": str,
    "family": str,
    "backend": str,
    "dtype": str,
    "target": str,
    "target_options": dict,
    "device": str,
    "failure": str,
    "example": dict,
}
#: the example fields format version 1 was written with; fields Example gained since (``family``)
#: may be absent and take their defaults
_EXAMPLE_FIELDS_V1 = frozenset(
    {
        "config",
        "dtype",
        "batch",
        "seq_len",
        "seed",
        "scale",
        "varlen",
        "seq_lens",
        "pad_side",
        "cache",
        "prefix_len",
        "use_cache",
        "grad",
        "train",
    }
)
_TYPE_NAMES = {int: "an integer", str: "a string", dict: "a JSON object", bool: "a boolean", float: "a number"}


def _is(value: Any, kind: type) -> bool:
    # JSON's true/false arrive as bool, a subclass of int: never let one pass for a number
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, kind)


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: leave those fields to the class's own checks
        return {}


def _fits(value: Any, hint: Any) -> bool | None:
    """Whether a JSON ``value`` fits a field's type hint; ``None`` when the hint is not a plain JSON type."""
    if hint is type(None):
        return value is None
    if hint in (bool, int, float, str):
        return _is(value, hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        verdicts = [_fits(value, a) for a in args]
        return True if True in verdicts else None if None in verdicts else False
    if origin in (tuple, list):
        if not isinstance(value, list):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            # a fixed-length tuple (``tuple[str, Any]``): one hint per position
            return len(value) == len(args) and all(_fits(v, a) is not False for v, a in zip(value, args, strict=True))
        element = args[0] if args else None
        return element is None or all(_fits(v, element) is not False for v in value)
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict)
    return None


def _check_fields(where: str, path: str, payload: dict[str, Any], cls: type) -> None:
    """Type-check the keys of ``payload`` that are fields of dataclass ``cls``, recursing into nested
    dataclasses (a config's conv specs). Unknown keys are left to the class's own ``from_*``."""
    hints = _hints(cls)
    for name, value in payload.items():
        hint = hints.get(name)
        if hint is None:
            continue
        if _fits(value, hint) is False:
            raise InvalidFailureFile(f"{where}: {path}.{name} must be {_hint_name(hint)}, got {json.dumps(value)}")
        nested = [h for h in (hint, *typing.get_args(hint)) if isinstance(h, type) and dataclasses.is_dataclass(h)]
        if nested and isinstance(value, dict):
            _check_fields(where, f"{path}.{name}", value, nested[0])


def _hint_name(hint: Any) -> str:
    if hint in _TYPE_NAMES:
        return _TYPE_NAMES[hint]
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _validate_example(where: str, payload: dict[str, Any], family: str) -> Example:
    fields = {f.name for f in dataclasses.fields(Example)}
    unknown = sorted(set(payload) - fields - {"family"})
    if unknown:
        raise InvalidFailureFile(f"{where}: example has unknown field(s) {', '.join(map(repr, unknown))}")
    missing = sorted((_EXAMPLE_FIELDS_V1 & fields) - set(payload))
    if missing:
        raise InvalidFailureFile(f"{where}: example is missing field(s) {', '.join(map(repr, missing))}")
    if not _is(payload.get("family", family), str):
        raise InvalidFailureFile(f"{where}: example.family must be a string, got {json.dumps(payload['family'])}")
    _check_fields(where, "example", payload, Example)
    payload = dict(payload)
    if payload.get("family", family) != family:
        raise InvalidFailureFile(f"{where}: example family {payload['family']!r} contradicts family {family!r}")
    if "family" not in fields:
        # an Example without a family field is a gated_deltanet one
        payload.pop("family", None)
        if family != DEFAULT_FAMILY:
            raise InvalidFailureFile(f"{where}: family {family!r} needs a gdn-equiv that knows layer families")
    try:
        return Example.from_json(payload)
    except Exception as exc:  # the example's own validation (config ranges, names): a bad file, not a crash
        message = " ".join(str(exc).split())
        raise InvalidFailureFile(f"{where}: example does not validate: {type(exc).__name__}: {message}") from exc


def read_failure(path: Path, *, functions: tuple[str, ...]) -> Failure:
    """Read and validate a failure JSON written by :class:`ReportWriter`; ``functions`` are the
    property names a failure may name. Raises :class:`InvalidFailureFile`."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidFailureFile(f"{where}: no such file") from None
    except IsADirectoryError:
        raise InvalidFailureFile(f"{where}: is a directory, not a failure JSON") from None
    except UnicodeDecodeError as exc:
        raise InvalidFailureFile(f"{where}: not a UTF-8 text file ({exc.reason})") from None
    except OSError as exc:
        raise InvalidFailureFile(f"{where}: cannot be read: {exc.strerror or exc}") from None
    if not text.strip():
        raise InvalidFailureFile(f"{where}: is empty, expected a failure JSON written by gdn-equiv")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidFailureFile(f"{where}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidFailureFile(f"{where}: must hold a JSON object, got {type(data).__name__}")
    version = data.get("format_version")
    if "format_version" not in data:
        raise InvalidFailureFile(
            f"{where}: has no format_version; a failure JSON written by gdn-equiv has format_version {FORMAT_VERSION}"
        )
    if not _is(version, int) or version != FORMAT_VERSION:
        raise InvalidFailureFile(
            f"{where}: format_version {json.dumps(version)} is unknown; this gdn-equiv reads {FORMAT_VERSION}"
        )
    missing = [k for k in _FAILURE_FIELDS if k not in data]
    if missing:
        raise InvalidFailureFile(f"{where}: missing field(s) {', '.join(map(repr, missing))}")
    unknown = sorted(set(data) - set(_FAILURE_FIELDS))
    if unknown:
        raise InvalidFailureFile(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
    for name, kind in _FAILURE_FIELDS.items():
        if not _is(data[name], kind):
            raise InvalidFailureFile(
                f"{where}: field {name!r} must be {_TYPE_NAMES[kind]}, got {json.dumps(data[name])}"
            )
    if data["function"] not in functions:
        raise InvalidFailureFile(
            f"{where}: function {data['function']!r} is not a gdn-equiv property; known: {', '.join(functions)}"
        )
    options = data["target_options"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
        raise InvalidFailureFile(f"{where}: target_options must map strings to strings, got {json.dumps(options)}")
    example = _validate_example(where, data["example"], data["family"])
    return Failure(
        property=data["property"],
        function=data["function"],
        family=data["family"],
        backend=data["backend"],
        dtype=data["dtype"],
        target=data["target"],
        target_options=dict(options),
        device=data["device"],
        failure=data["failure"],
        example=example,
    )
