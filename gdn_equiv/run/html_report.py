"""One static HTML page per run: the ledger, the findings, the coverage and the environment.

``gdn-equiv check --html PATH``, ``gdn-equiv fuzz --html PATH`` and the pytest gate's ``--gdn-html PATH`` write
it. The page is made from what the run already recorded (the summary of :mod:`gdn_equiv.run.report`: each
asked row with its result, the failure files, ``coverage.json``/``coverage.png``, ``bench-*.png``); it judges
nothing itself: every status on it is the ledger's. It is self-contained (its style, its filter script and its
pictures inline) and links the files the report directory holds (failure JSON, reproducer) by relative path.

The template is package data (``report_page.html.j2`` beside this module), rendered by Jinja2, the ``html``
extra: :func:`missing` says why the page cannot be written, so a run refuses ``--html`` before its first
example rather than at its end.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.metadata
import importlib.resources
import json
import math
import os
import platform
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.harness.testing import PROFILES
from gdn_equiv.model.example import Example

HTML_EXTRA = "pip install gdn-equiv[html]"
TEMPLATE = "report_page.html.j2"
#: the packages whose versions the page names (absent ones are said to be absent)
VERSIONED = ("gdn-equiv", "torch", "hypothesis", "triton", "flash-linear-attention", "fla-core", "causal-conv1d")


def missing() -> str | None:
    """Why the page cannot be written here (Jinja2 is not installed), or ``None``."""
    import importlib.util

    if importlib.util.find_spec("jinja2") is None:
        return f"--html needs Jinja2: {HTML_EXTRA}"
    return None


def environment(*, device: str, profile: str | None, seed: str | None = None) -> dict[str, str]:
    """What the run ran on: versions, the device (its name on a GPU), the Hypothesis profile and seed."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["device"] = device
    if device.startswith("cuda") and "torch" in sys.modules:
        torch = sys.modules["torch"]
        with contextlib.suppress(Exception):  # a device the run could not name: its id is still the truth
            out["device"] = f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    if os.environ.get("TRITON_INTERPRET") == "1":
        out["triton"] += " (interpreter)"
    out["profile"] = profile or "-"
    out["seed"] = seed or _profile_seed(profile)
    return out


def _profile_seed(profile: str | None) -> str:
    values = PROFILES.get(profile or "", {})
    if values.get("derandomize"):
        return "derandomized (the profile's fixed seed per test)"
    return "fresh randomness (not derandomized); findings replay from the example database"


def _data_uri(path: Path) -> str | None:
    try:
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    except OSError:
        return None


def _link(target: str | os.PathLike[str] | None, page: Path) -> str | None:
    """A relative link from the page to ``target``, if the file is there."""
    if not target:
        return None
    path = Path(target)
    if not path.is_file():
        return None
    return Path(os.path.relpath(path.resolve(), page.resolve().parent)).as_posix()


def _short(example: dict[str, Any] | None) -> str:
    if example is None:
        return ""
    try:
        return Example.from_json(json.dumps(example)).short()
    except Exception:  # an example this version cannot rebuild (a serving case): its JSON says it all
        return ""


def _worst_lines(worst: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not worst:
        return []
    keys = ("name", "problem", "max_abs", "max_rel", "rtol", "atol", "tol_used", "mismatched", "numel", "paths")
    return [(k, _fmt(worst[k])) for k in keys if k in worst and worst[k] not in (None, "", [])]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def _coverage(report_dir: Path) -> dict[str, Any] | None:
    """``coverage.json`` (a HypoFuzz run's examples per row and region) as a heat table, if the run wrote one."""
    try:
        table = json.loads((report_dir / "coverage.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(table, list) or not table:
        return None
    regions = list(dict.fromkeys(g["region"] for row in table for g in row.get("regions", [])))
    top = max((g["count"] for row in table for g in row.get("regions", [])), default=0)
    rows = []
    for row in table:
        counts = {g["region"]: g["count"] for g in row.get("regions", [])}
        cells = []
        for region in regions:
            c = counts.get(region)
            shade = 0.0 if not c or not top else math.log10(1 + c) / math.log10(1 + top)
            cells.append({"count": c, "shade": round(shade, 3)})
        label = f"{row['property']}[{row['backend']}-{row['dtype']}-{row['family']}]"
        rows.append({"label": label, "examples": row.get("examples", 0), "cells": cells})
    return {"regions": regions, "rows": rows}


def render(
    summary: dict[str, Any],
    *,
    page: Path,
    report_dir: Path | None,
    title: str,
    env: dict[str, str],
    failing: tuple[str, ...],
    exit_note: str | None = None,
    extra_findings: list[dict[str, Any]] | None = None,
) -> str:
    """The page's HTML from a run's ``summary`` (the dict :class:`gdn_equiv.run.report.ReportWriter` writes
    as ``summary.json``): its rows in ledger order, each with the ledger's result; ``failing`` names the results
    that fail a run (the ledger's definition, handed in: the page decides nothing)."""
    import jinja2

    rows, findings = [], []
    for i, check in enumerate(summary.get("checks", [])):
        result = str(check.get("result", ""))
        row_id = check.get("row_id") or _row_id(check)
        row = {
            "i": i,
            "id": row_id,
            "anchor": f"finding-{i}",
            "property": check.get("property", ""),
            "family": check.get("family", ""),
            "backend": check.get("backend", ""),
            "dtype": check.get("dtype", ""),
            "examples": check.get("examples", 0),
            "not_applicable": check.get("not_applicable", 0),
            "result": result,
            "failing": result in failing,
            "seconds": check.get("seconds", 0),
            "worst": (check.get("worst") or {}).get("name", ""),
            "note": (check.get("failure") or "").splitlines()[0][:160] if check.get("failure") else "",
        }
        rows.append(row)
        if result in failing and (check.get("failure") or check.get("example")):
            example = check.get("example")
            findings.append({
                **row,
                "failure": check.get("failure", ""),
                "example_short": _short(example) or check.get("example_text", ""),
                "example_json": json.dumps(example, indent=2) if example is not None else "",
                "worst_lines": _worst_lines(check.get("worst")),
                "repro": _link(check.get("repro"), page),
                "repro_json": _link(check.get("repro_json"), page),
                "repro_path": check.get("repro", ""),
                "repro_json_path": check.get("repro_json", ""),
                "commands": check.get("commands", []),
            })  # fmt: skip
    findings += extra_findings or []
    pictures = []
    coverage = None
    if report_dir is not None:
        coverage = _coverage(report_dir)
        for name in ["coverage.png", "dashboard.png", *sorted(p.name for p in report_dir.glob("bench-*.png"))]:
            uri = _data_uri(report_dir / name)
            if uri is not None:
                pictures.append({"name": name, "uri": uri, "link": _link(report_dir / name, page)})
    files = []
    if report_dir is not None:
        for name in ("summary.json", "rows.jsonl", "coverage.txt", "dashboard.html", "internal-error.txt"):
            link = _link(report_dir / name, page)
            if link is not None:
                files.append({"name": name, "link": link})
    counts = Counter(r["result"] for r in rows)
    options = {k: sorted({str(r[k]) for r in rows}) for k in ("result", "property", "family", "backend")}
    meta = {k: (json.dumps(v) if isinstance(v, (dict, list)) else str(v)) for k, v in summary.get("meta", {}).items()}
    text = importlib.resources.files("gdn_equiv.run").joinpath(TEMPLATE).read_text(encoding="utf-8")
    templates = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return templates.from_string(text).render(
        title=title,
        status=summary.get("status", ""),
        rows=rows,
        failing=sum(r["failing"] for r in rows),
        counts=sorted(counts.items()),
        options=options,
        findings=findings,
        env=env,
        meta=meta,
        coverage=coverage,
        pictures=pictures,
        files=files,
        exit_note=exit_note,
        written=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _row_id(check: dict[str, Any]) -> str:
    return f"{check.get('property')}[{check.get('backend')}-{check.get('dtype')}-{check.get('family')}]"


def write(path: Path, html: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, path)
    return path


# ---- the pytest gate's page ------------------------------------------------------------------------------

#: pytest's own result the ledger has no word for: an error in a test's setup or teardown (a fixture's, not the
#: property's); skipped and xfailed tests keep pytest's words too
ERROR = "error"
#: the gate's results that fail its run: a failure, an error in setup or teardown, a test never reached
GATE_FAILING = (Outcome.FAILED, Outcome.MISSED_FUSION, ERROR, Outcome.NOT_REACHED)
#: the outcome the plugin hands :meth:`GateLedger.reported` for a test the run's stop (-x) kept from running
#: or from finishing (pytest reports it skipped, "not reached: ...")
NOT_REACHED = str(Outcome.NOT_REACHED)


class GateLedger:
    """The pytest gate's ledger for its page: every collected test is an asked row, ``not reached`` until
    pytest reports it; its status is pytest's outcome (``pass``, ``FAIL``, ``error``, ``skipped`` with the
    reason, ``xfailed``), or ``not reached`` for a test the run's stop kept from running or finishing. A gate
    property test is filed under its record's name; any other test under its module. Knows nothing of pytest:
    the plugin hands it node ids and reports' fields."""

    def __init__(self, *, records: dict[str, str], backends: list[str], families: list[str]) -> None:
        self.records = records  # gate test function -> property record name
        self.backends = backends
        self.families = families
        self.rows: dict[str, dict[str, Any]] = {}

    def collected(self, nodeids: list[str]) -> None:
        for nodeid in nodeids:
            if nodeid in self.rows:
                continue
            path, _, name = nodeid.partition("::")
            function, _, params = name.partition("[")
            params = params.rstrip("]")
            backend = _param(params, self.backends) or "-"
            family = _param(params, self.families) or ",".join(self.families) or "-"
            prop = self.records.get(function) or Path(path).stem
            self.rows[nodeid] = {
                "row_id": nodeid, "property": prop, "family": family, "backend": backend, "dtype": "any",
                "examples": 0, "not_applicable": 0, "result": Outcome.NOT_REACHED, "seconds": 0.0,
                "failure": "the session ended before this test ran", "commands": [],
            }  # fmt: skip

    def reported(
        self, nodeid: str, *, when: str, outcome: str, longrepr: str, duration: float, examples: int, xfail: bool
    ) -> None:
        """One of pytest's reports (setup, call or teardown) of ``nodeid``."""
        if nodeid not in self.rows:
            self.collected([nodeid])
        row = self.rows[nodeid]
        row["seconds"] += duration
        row["examples"] += examples
        if row["result"] in (Outcome.FAILED, Outcome.MISSED_FUSION, ERROR):
            return  # a failure stays, whatever its teardown does
        if outcome == "failed":
            row["result"] = Outcome.FAILED if when == "call" else ERROR
            if when == "call" and "MissedFusion" in longrepr:  # P1: a finding of its own kind
                row["result"] = Outcome.MISSED_FUSION
            row["failure"] = (f"error in {when}: " if when != "call" else "") + longrepr
            row["example_text"], replay = _falsifying(longrepr)
            row["commands"] = [f"python -m pytest {_quote(nodeid)}", *replay]
        elif outcome == NOT_REACHED:
            row["result"], row["failure"] = Outcome.NOT_REACHED, longrepr
        elif outcome == "skipped":
            row["result"] = "xfailed" if xfail else "skipped"
            if xfail and str(Outcome.MISSED_FUSION) in longrepr.partition("\n")[0]:
                row["result"] = Outcome.MISSED_FUSION_ALLOWED  # --gdn-allow-missed-fusion: reported, not failed
            row["failure"] = longrepr
        elif when == "call":
            row["result"], row["failure"] = Outcome.PASSED, ""

    def summary(self, *, status: str, meta: dict[str, Any]) -> dict[str, Any]:
        checks = list(self.rows.values())
        return {"status": status, "meta": meta, "counts": dict(Counter(c["result"] for c in checks)), "checks": checks}


def _param(params: str, names: list[str]) -> str | None:
    """The name among ``names`` that is one of the dash-joined parts of a test id's ``params`` (a name may
    hold dashes itself: ``fla-triton``), the longest first."""
    wrapped = f"-{params}-"
    return next((n for n in sorted(names, key=len, reverse=True) if f"-{n}-" in wrapped), None)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _falsifying(longrepr: str) -> tuple[str, list[str]]:
    """Hypothesis' shrunk example in a failure's report (its ``Failing test case:`` / ``Falsifying example:``
    block) and its ``@reproduce_failure`` line."""
    lines = [line[1:].strip() if line.startswith("E ") else line.strip() for line in longrepr.splitlines()]
    example: list[str] = []
    replay = []
    for i, line in enumerate(lines):
        if line.startswith(("Falsifying example", "Failing test case")) and not example:
            example = [line]
            for more in lines[i + 1 :]:
                if not more or more.startswith(("You can", "Falsifying", "Failing")):
                    break
                example.append(more)
        elif "@reproduce_failure(" in line:
            replay.append(line)
    return "\n".join(example), replay
