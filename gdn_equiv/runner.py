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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import find as hypothesis_find
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from gdn_equiv import properties as P
from gdn_equiv.compare import Mismatch
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.example import Example
from gdn_equiv.guard import Condition


@dataclass
class Check:
    """One row of the summary: a property run against a backend."""

    name: str
    backend: str
    examples: int = 0
    not_applicable: int = 0
    result: str = "pass"
    reasons: Counter[str] = field(default_factory=Counter)
    failure: str = ""
    example: Example | None = None
    seconds: float = 0.0
    repro: str = ""

    def row(self) -> list[str]:
        reasons = ", ".join(f"{k}:{v}" for k, v in sorted(self.reasons.items()))
        return [
            self.name,
            self.backend,
            str(self.examples),
            str(self.not_applicable),
            self.result,
            f"{self.seconds:.1f}",
            reasons,
        ]


def _strategy(kind: str, backend: str, max_seq_len: int) -> st.SearchStrategy[Example]:
    from gdn_equiv.strategies import examples

    fusable = {"fusable": True, "refused": False, "any": None}[kind]
    return examples(backends=(backend,), fusable=fusable, max_seq_len=max_seq_len)


# property name -> (function, which states to draw)
SPECS: dict[str, tuple[Callable[..., Any], str]] = {
    "P2-path-taken": (P.check_path_taken, "any"),
    "P3-forward-exact": (P.check_forward_exact, "fusable"),
    "P4-gradients": (P.check_gradients, "fusable"),
    "P5-fallback-exact": (P.check_fallback_exact, "refused"),
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
) -> Check:
    """Run one property for ``max_examples`` examples; the shrunk failure lands in ``check.example``."""
    fn, kind = SPECS[name]
    check = Check(name, backend)
    last_failing: list[Example] = []
    start = time.perf_counter()

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=database,
        suppress_health_check=list(HealthCheck),
        phases=list(Phase),
    )
    @given(_strategy(kind, backend, max_seq_len))
    def prop(example: Example) -> None:
        check.examples += 1
        try:
            decision = fn(example, device=device)
        except P.NotApplicable:
            check.not_applicable += 1
            return
        except BaseException:
            last_failing[:] = [example]
            raise
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
        entry: dict[str, Any] = {
            "property": check.name,
            "backend": check.backend,
            "examples": check.examples,
            "not_applicable": check.not_applicable,
            "result": check.result,
            "seconds": round(check.seconds, 2),
            "reasons": dict(check.reasons),
            "failure": check.failure,
        }
        if check.example is not None and check.result == "FAIL":
            fn = SPECS[check.name][0].__name__
            stem = f"failure-{i:02d}-{check.name}-{check.backend}"
            (out_dir / f"{stem}.json").write_text(
                json.dumps(
                    {
                        "property": check.name,
                        "function": fn,
                        "backend": check.backend,
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
            entry["example"] = json.loads(check.example.to_json())
            check.repro = str(script)
        elif check.example is not None:
            entry["example"] = json.loads(check.example.to_json())
        rows.append(entry)
    summary = out_dir / "summary.json"
    summary.write_text(json.dumps({"meta": meta, "checks": rows}, indent=2))
    return summary


def format_table(checks: list[Check]) -> str:
    header = ["property", "backend", "examples", "n/a", "result", "seconds", "guard reasons"]
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
