"""Runs the properties under Hypothesis outside pytest: ``gdn-equiv check`` and ``fuzz``.

Each property runs as a Hypothesis test with the chosen profile (``fuzz`` repeats with fresh seeds
until the time budget is spent) and the example database kept in ``.hypothesis/``. A failure is
written as the shrunk :class:`Example` (JSON) plus a standalone reproducer script.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import find as hypothesis_find
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from gdn_equiv import properties as P
from gdn_equiv._source import alias_strategies
from gdn_equiv.compare import Mismatch, Report, observe, worst
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.example import Example
from gdn_equiv.guard import Condition

alias_strategies()  # the CLI imports gdn_equiv.strategies from here, installed or not


@dataclass
class Check:
    """One row of the summary: a property run against a backend on examples of one dtype.

    ``worst`` is the comparison that came closest to (or went past) its tolerance: for a failure,
    the shrunk example's.
    """

    name: str
    backend: str
    dtype: str = "any"
    examples: int = 0
    not_applicable: int = 0
    result: str = "pass"
    reasons: Counter[str] = field(default_factory=Counter)
    failure: str = ""
    example: Example | None = None
    seconds: float = 0.0
    repro: str = ""
    repro_json: str = ""
    worst: Report | None = None

    @property
    def row_id(self) -> str:
        return f"{self.name}[{self.backend}-{self.dtype}]"

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
        return {
            "property": self.name,
            "backend": self.backend,
            "dtype": self.dtype,
            "examples": self.examples,
            "not_applicable": self.not_applicable,
            "result": self.result,
            "seconds": round(self.seconds, 2),
            "reasons": dict(self.reasons),
            "failure": self.failure,
            "worst": None
            if r is None
            else {
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
            },
        }


def _strategy(kind: str, backend: str, max_seq_len: int, dtype: str | None = None) -> st.SearchStrategy[Example]:
    from gdn_equiv.strategies import examples

    fusable = {"fusable": True, "fusable-grad": True, "refused": False, "any": None}[kind]
    kwargs: dict[str, Any] = {"grad": True} if kind == "fusable-grad" else {}
    if dtype is not None:
        kwargs["dtypes"] = (dtype,)
    return examples(backends=(backend,), fusable=fusable, max_seq_len=max_seq_len, **kwargs)


# property name -> (function, which states to draw)
SPECS: dict[str, tuple[Callable[..., Any], str]] = {
    "P2-path-taken": (P.check_path_taken, "any"),
    "P3-forward-exact": (P.check_forward_exact, "fusable"),
    "P4-gradients": (P.check_gradients, "fusable-grad"),
    "P5-fallback-exact": (P.check_fallback_exact, "refused"),
    "P7-backend-vs-torch": (P.check_backend_matches_torch, "any"),
}


def run_property(
    name: str,
    backend: str,
    *,
    max_examples: int,
    device: str = "cpu",
    max_seq_len: int = 20,
    seed: int | None = None,
    database: Any = None,
    dtype: str | None = None,
) -> Check:
    """Run one property for ``max_examples`` examples (of ``dtype``, default any); the shrunk failure
    lands in ``check.example``, the comparison closest to its tolerance in ``check.worst``."""
    fn, kind = SPECS[name]
    check = Check(name, backend, dtype or "any")
    last_failing: list[Example] = []
    start = time.perf_counter()

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=database,
        suppress_health_check=list(HealthCheck),
        phases=list(Phase),
    )
    @given(_strategy(kind, backend, max_seq_len, dtype))
    def prop(example: Example) -> None:
        check.examples += 1
        with observe() as reports:
            try:
                decision = fn(example, device=device)
            except P.NotApplicable:
                check.not_applicable += 1
                return
            except BaseException:
                last_failing[:] = [example]
                raise
        check.worst = worst(reports, check.worst)
        check.reasons[decision.reason_id] += 1

    if seed is not None:
        from hypothesis import seed as hypothesis_seed

        prop = hypothesis_seed(seed)(prop)
    try:
        prop()
    except Exception as exc:  # the shrunk, replayed failure
        check.result = "FAIL"
        check.failure = f"{type(exc).__name__}: {exc}"
        check.example = last_failing[0] if last_failing else None
        # the shrunk example's comparison, or the crash
        check.worst = (
            exc.report if isinstance(exc, Mismatch) else Report(name, (backend, "-"), False, 0, problem=check.failure)
        )
    check.seconds = time.perf_counter() - start
    return check


def find_counterexample(condition: Condition, backend: str, *, max_examples: int, device: str = "cpu") -> Check:
    """P6 for one condition: search states that break only ``condition`` for a wrong forced fusion."""
    from gdn_equiv.strategies import violating

    check = Check(f"P6-necessity-{condition.id}", backend)
    start = time.perf_counter()
    found: list[str] = []

    def wrong(example: Example) -> bool:
        check.examples += 1
        try:
            problem = P.forced_fusion_error(example, device=device)
        except P.NotApplicable:
            check.not_applicable += 1
            return False
        if problem:
            found[:] = [problem]
        return problem is not None

    try:
        check.example = hypothesis_find(
            violating(condition, backends=(backend,)),
            wrong,
            settings=settings(
                max_examples=max_examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
            ),
        )
        check.result = "counterexample"
        check.failure = found[0] if found else ""
    except NoSuchExample:
        check.result = "NONE FOUND"
    except InvalidArgument as exc:  # the state cannot exist on this machine (e.g. one backend only)
        check.result = "n/a"
        check.failure = str(exc)
    check.seconds = time.perf_counter() - start
    return check


REPRO_TEMPLATE = '''#!/usr/bin/env python
"""Standalone reproducer written by gdn-equiv: {name} on backend {backend!r}.

{failure}
"""
from gdn_equiv.example import Example
from gdn_equiv.properties import {function}

EXAMPLE = Example.from_json({example_json!r})

if __name__ == "__main__":
    {function}(EXAMPLE, device={device!r})
    print("no failure: the defect is gone")
'''


def write_report(checks: list[Check], out_dir: Path, *, device: str, meta: dict[str, Any]) -> Path:
    """Summary JSON plus, per failure, the example JSON and a reproducer script."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, check in enumerate(checks):
        entry = check.as_dict()
        if check.example is not None and check.result == "FAIL":
            fn = SPECS[check.name][0].__name__ if check.name in SPECS else P.check_target_guard.__name__
            stem = f"failure-{i:02d}-{check.name}-{_safe(check.backend)}-{check.dtype}"
            failure_json = out_dir / f"{stem}.json"
            failure_json.write_text(
                json.dumps(
                    {
                        "property": check.name,
                        "function": fn,
                        "backend": check.backend,
                        "dtype": check.dtype,
                        "device": device,
                        "failure": check.failure,
                        "example": json.loads(check.example.to_json()),
                    },
                    indent=2,
                )
            )
            script = out_dir / f"{stem}.py"
            script.write_text(
                REPRO_TEMPLATE.format(
                    name=check.name,
                    backend=check.backend,
                    failure=check.failure.replace('"""', "'''"),
                    function=fn,
                    example_json=check.example.to_json(),
                    device=device,
                )
            )
            entry["repro"] = str(script)
            entry["repro_json"] = str(failure_json)
            entry["example"] = json.loads(check.example.to_json())
            check.repro, check.repro_json = str(script), str(failure_json)
        elif check.example is not None:
            entry["example"] = json.loads(check.example.to_json())
        rows.append(entry)
    summary = out_dir / "summary.json"
    summary.write_text(json.dumps({"meta": meta, "checks": rows}, indent=2))
    return summary


def _safe(name: str) -> str:
    """A backend name (``pkg.mod:fn``) as a file-name part."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def write_junit(checks: list[Check], path: Path, *, meta: dict[str, Any]) -> Path:
    """JUnit XML, one testcase per property x backend x dtype row: a failure carries the message, the shrunk
    example and its reproducer; a P6 search that found nothing (or cannot run here) is a skip with the reason."""
    import socket
    import xml.etree.ElementTree as ET
    from datetime import datetime, timezone

    failures = sum(c.result == "FAIL" for c in checks)
    skipped = sum(c.result in ("NONE FOUND", "n/a") for c in checks)
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
            {"classname": f"gdn_equiv.{_safe(check.backend)}", "name": check.row_id, "time": f"{check.seconds:.3f}"},
        )
        worst_diff, tol = check.worst_cells()
        out = (
            f"examples: {check.examples} (n/a: {check.not_applicable}); result: {check.result}; "
            f"worst difference: {worst_diff} ({tol}); guard reasons: {dict(check.reasons)}"
        )
        if check.result == "FAIL":
            text = [check.failure]
            if check.example is not None:
                text += ["", f"Shrunk example: {check.example.short()}", check.example.to_json()]
            if check.repro:
                text += ["", f"Reproducer: python {check.repro}", f"Replay: gdn-equiv repro {check.repro_json}"]
            first = check.failure.splitlines()[0] if check.failure else "failed"
            kind = check.failure.split(":", 1)[0] if ":" in check.failure else "Failure"
            ET.SubElement(case, "failure", {"message": first[:500], "type": kind}).text = "\n".join(text)
        elif check.result in ("NONE FOUND", "n/a"):
            reason = (
                f"no counterexample found in {check.examples} examples: the condition may be unnecessary on "
                f"{check.backend}"
                if check.result == "NONE FOUND"
                else f"cannot run here: {check.failure}"
            )
            ET.SubElement(case, "skipped", {"message": reason})
        ET.SubElement(case, "system-out").text = out
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path


def format_table(checks: list[Check]) -> str:
    header = [
        "property",
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


def replay(path: Path) -> int:
    """Replay a failure JSON written by :func:`write_report`; 1 if it still fails."""
    data = json.loads(Path(path).read_text())
    example = Example.from_json(data["example"])
    fn = getattr(P, data["function"])
    print(f"replaying {data['property']} on {data['backend']}: {example.short()}")
    try:
        fn(example, device=data.get("device", "cpu"))
    except (Mismatch, AssertionError, Exception):
        traceback.print_exc(file=sys.stdout)
        return 1
    print("passes now")
    return 0


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() and os.environ.get("GDN_EQUIV_DEVICE", "") != "cpu" else "cpu"


class _BudgetSpent(BaseException):
    """Raised inside a property when a fuzz budget is spent. Not an ``Exception``: Hypothesis passes it
    straight up (as it does ``KeyboardInterrupt``) instead of shrinking it as a failure."""


def search_gaps(
    target: str,
    *,
    max_examples: int,
    device: str = "cpu",
    seconds: float | None = None,
    database: Any = None,
    clock: Callable[[], float] = time.perf_counter,
    check: Callable[..., Any] = P.check_target_guard,
    **options: Any,
) -> Iterator[Check]:
    """P1 against an upstream target: search its guard's gaps one kind at a time (``options`` configure
    the target, e.g. fla's ``core``). Yields each gap as it is found, then the summary row.

    Each round runs the guard-vs-spec property with the gap kinds found so far counted as known;
    a round that finds a new kind records it (shrunk, with the time since the start) and the search
    goes on, until a round finds nothing new or ``seconds`` are spent (checked before each example: once
    the budget is gone the round ends, though a shrink in progress finishes). Shrinking
    decides from the guards alone; the shrunk example is then run once to show the gap's cost
    (fused vs separate on a GPU, the crash anywhere). ``check`` is the guard comparison
    (``properties.check_target_guard``'s signature; a stand-in lets the search itself be tested).
    """
    from gdn_equiv.strategies import examples

    strategy = st.one_of(examples(fusable=True), examples(fusable=False))
    started = clock()
    known: set[type] = set()
    clean = Check(f"P1-{target}-guard-vs-spec", "-")
    found: list[tuple[type, Example]] = []

    def spent() -> bool:
        return seconds is not None and clock() - started >= seconds

    while not spent():
        found.clear()

        @settings(
            max_examples=max_examples,
            deadline=None,
            database=database,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @given(strategy)
        def prop(example: Example) -> None:
            if not found and spent():
                raise _BudgetSpent  # out of time: ends the round at once (not a failure to shrink)
            clean.examples += 1
            try:
                decision = check(example, device=device, target=target, demonstrate=False, **options)
            except P.UpstreamGap as exc:
                if type(exc) in known:
                    return
                found[:] = [(type(exc), example)]
                raise
            clean.reasons[decision.reason_id] += 1

        try:
            prop()
        except _BudgetSpent:
            break
        except P.UpstreamGap:
            kind, example = found[-1]
            gap = Check(f"P1-{target}-gap-{kind.__name__.removeprefix('Gap')}", "-")
            try:  # the shrunk example, run once: the gap's cost, not just the guards' disagreement
                check(example, device=device, target=target, demonstrate=True, **options)
                message = f"{kind.__name__}: not reproduced when run"
            except P.UpstreamGap as shown:
                message = f"{type(shown).__name__}: {shown}"
            gap.result, gap.failure, gap.example = "FAIL", message, example
            gap.seconds = clock() - started  # time until this gap was found, shrunk and shown
            gap.examples = clean.examples
            known.add(kind)
            yield gap
            continue
        if seconds is None:
            break  # a check: one round with nothing new ends it; a fuzz run spends its budget
    clean.seconds = clock() - started
    yield clean
