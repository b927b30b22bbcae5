"""``gdn-equiv bench verdict``: the time from starting a driver to its red verdict, per planted defect.

A gate people skip is no gate: a kernel engineer runs it to learn whether a change broke something,
so the time to a red verdict is a figure to guard. This benchmark measures it for every tooth the
registry's records name (:func:`gdn_equiv.run.plant.teeth`: planted conv backends, layer defects,
planted serving engines), per driver:

- ``check``: ``gdn-equiv check`` (its verdict: its exit status, after every asked row);
- ``pytest``: the gate, ``pytest --pyargs gdn_equiv.suite -n JOBS``, every test run;
- ``pytest-x``: the same gate with ``-x``, which stops at the first failure;
- ``fuzz``: ``gdn-equiv fuzz --seconds S``.

Each run is a fresh subprocess in a fresh working directory (so a fresh Hypothesis database: a run
never replays the failure an earlier run saved), timed by the wall clock from its start:

- ``first_red_s``: when the first failure reached the driver's report (the gate's ``--gdn-failure-log``,
  appended the moment a failure arrives; ``rows.jsonl`` of check and fuzz);
- ``exit_s``: when the process ended; with its exit status 1 and a failure reported, that is the red
  verdict. A run that ends 0 is ``green (no red verdict)``, never a time; one killed at ``--timeout``
  is ``no verdict within T s``; any other status is an error, with the tail of its output.

The cell of a defect x driver is the median over ``--runs`` runs (and their range). Defect ``none``
is the green run: the same driver with nothing planted, whose wall time and example count show
what checking each driver bought (the gate prints its Hypothesis examples; check and fuzz their rows).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gdn_equiv.run import plant as planting

FORMAT = "gdn-equiv-bench-verdict/1"
DRIVERS = ("check", "pytest", "pytest-x", "fuzz")
#: the green run's name: the driver with nothing planted
NONE = "none"
GREEN = "green (no red verdict)"
_POLL_S = 0.1
_EXAMPLES = re.compile(r"gdn-equiv: (\d+) Hypothesis examples in")
_XDIST_STOP = "xdist.dsession.Interrupted: stopping after"
_FAILED = re.compile(r"^==== FAILED (\S+)", re.MULTILINE)


@dataclass
class VerdictPlan:
    defects: list[str]
    drivers: list[str]
    runs: int
    device: str
    profile: str
    jobs: int
    timeout: float
    fuzz_seconds: float
    family: str | None
    json: Path
    #: check and fuzz only: the rows' properties (``--property``), else every one
    properties: str | None = None
    max_seconds: float | None = None
    python: str = sys.executable
    notes: list[str] = field(default_factory=list)


def command(plan: VerdictPlan, defect: str, driver: str, work: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of one run of ``driver`` on ``defect`` in the directory ``work``."""
    env = dict(os.environ)
    # the profile reaches the child once: the gate's through its environment, check's and fuzz's as --profile
    env.pop("HYPOTHESIS_PROFILE", None)
    env.pop("CI", None)
    env.pop(planting.ENV, None)
    if plan.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the gate picks cuda where it sees one
    what = planting.kind(defect) if defect != NONE else None
    backend = planting.backend_spec(defect) if what == "backend" else None
    if driver.startswith("pytest"):
        argv = [plan.python, "-m", "pytest", "--pyargs", "gdn_equiv.suite", "-q", "-p", "no:cacheprovider"]
        env["HYPOTHESIS_PROFILE"] = plan.profile
        argv += ["-n", str(plan.jobs)] if plan.jobs > 1 else ["-p", "no:xdist"]
        argv += ["--gdn-failure-log", str(work / "failures.log"), "--junit-xml", str(work / "junit.xml")]
        argv += ["-x"] if driver == "pytest-x" else []
        argv += ["--gdn-backend", backend] if backend else []
        argv += ["--gdn-family", plan.family] if plan.family else []
        if what in ("layer", "engine"):
            argv += ["-p", planting.__name__]
            env[planting.ENV] = defect
        return argv, env
    sub = [driver, "--device", plan.device, "--profile", plan.profile, "--report", str(work / "report")]
    sub += ["--seconds", f"{plan.fuzz_seconds:g}"] if driver == "fuzz" else []
    sub += ["--backend", backend] if backend else []
    sub += ["--family", plan.family] if plan.family else []
    for name in plan.properties.split(",") if plan.properties else ():
        sub += ["--property", name]
    if what in ("layer", "engine"):
        return [plan.python, "-m", planting.__name__, defect, *sub], env
    return [plan.python, "-m", "gdn_equiv", *sub], env


def _first_red(driver: str, work: Path) -> bool:
    if driver.startswith("pytest"):
        log = work / "failures.log"
        return log.exists() and log.stat().st_size > 0
    rows = work / "report" / "rows.jsonl"
    return rows.exists() and '"result": "FAIL"' in rows.read_text(encoding="utf-8", errors="replace")


def run_once(plan: VerdictPlan, defect: str, driver: str) -> dict[str, Any]:
    """One fresh subprocess of ``driver`` on ``defect``: its times, exit status and verdict."""
    work = Path(tempfile.mkdtemp(prefix="gdn-verdict-"))
    try:
        argv, env = command(plan, defect, driver, work)
        out = work / "output.txt"
        first = None
        start = time.perf_counter()
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                argv, cwd=work, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                while True:
                    rc = proc.poll()
                    now = time.perf_counter() - start
                    if first is None and _first_red(driver, work):
                        first = now
                    if rc is not None:
                        break
                    if now > plan.timeout:
                        _stop(proc)
                        rc = None
                        break
                    time.sleep(_POLL_S)
            except BaseException:
                _stop(proc)
                raise
        wall = time.perf_counter() - start
        if first is None and rc is not None and _first_red(driver, work):
            first = wall
        text = out.read_text(encoding="utf-8", errors="replace")
        return _result(driver, rc, wall, first, text, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the run's own process group (it was started in a session of its own), then wait for it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _result(driver: str, rc: int | None, wall: float, first: float | None, text: str, work: Path) -> dict[str, Any]:
    result: dict[str, Any] = {
        "exit": rc,
        "exit_s": round(wall, 2),
        "first_red_s": None if first is None else round(first, 2),
    }
    if rc is None:
        result["verdict"] = "timeout"
    elif first is not None and (rc == 1 or (rc == 2 and driver == "pytest-x" and _XDIST_STOP in text)):
        # pytest-xdist ends a run its -x stopped as interrupted (status 2), though a test failed
        result["verdict"] = "red"
    elif rc == 0:
        result["verdict"] = "green"
    else:
        result["verdict"] = "error"
        result["tail"] = text[-1500:]
    if driver.startswith("pytest"):
        found = _EXAMPLES.findall(text)
        result["examples"] = int(found[-1]) if found else None
        log = work / "failures.log"
        failed = _FAILED.search(log.read_text(encoding="utf-8", errors="replace")) if log.exists() else None
        result["first_failure"] = failed.group(1) if failed else None
        result["stopped_line"] = next((ln for ln in text.splitlines() if "gdn-equiv: stopped" in ln), None)
    else:
        summary = work / "report" / "summary.json"
        if summary.exists():
            rows = json.loads(summary.read_text(encoding="utf-8")).get("checks", [])
            fails = [r for r in rows if r.get("result") == "FAIL"]
            result["rows"] = len(rows)
            result["examples"] = sum(int(r.get("examples") or 0) for r in rows)
            result["first_failure"] = _row_name(fails[0]) if fails else None
    return result


def _row_name(row: dict[str, Any]) -> str:
    return f"{row.get('property')}[{row.get('family')}-{row.get('backend')}-{row.get('dtype')}]"


def cell(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The median and range over the runs of one defect x driver, and its verdict."""
    verdicts = [r["verdict"] for r in runs]
    summary: dict[str, Any] = {"runs": len(runs), "verdicts": verdicts}
    for key in ("exit_s", "first_red_s", "examples"):
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            summary[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    summary["verdict"] = verdicts[0] if len(set(verdicts)) == 1 else "mixed"
    return summary


def new_report(plan: VerdictPlan) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "command": "bench verdict",
        "status": "running",
        "machine": {
            "device": plan.device,
            "device_name": torch.cuda.get_device_name(0) if plan.device.startswith("cuda") else platform.processor(),
            "cpus": os.cpu_count(),
            "load_at_start": _load(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "settings": {
            "profile": plan.profile,
            "jobs": plan.jobs,
            "runs": plan.runs,
            "timeout_s": plan.timeout,
            "fuzz_seconds": plan.fuzz_seconds,
            "family": plan.family,
            "property": plan.properties,
        },
        "defects": plan.defects,
        "drivers": plan.drivers,
        "notes": list(plan.notes),
        "rows": [],
    }


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def run(plan: VerdictPlan, report: dict[str, Any], progress: Callable[[str], None] = print) -> None:
    """Every defect x driver, ``plan.runs`` fresh runs each; the report rewritten after each row."""
    try:
        for defect in plan.defects:
            for driver in plan.drivers:
                runs = []
                for i in range(plan.runs):
                    result = run_once(plan, defect, driver)
                    runs.append(result)
                    progress(f"{defect} x {driver} run {i + 1}/{plan.runs}: {describe_run(result)}")
                row = {"defect": defect, "kind": "green" if defect == NONE else planting.kind(defect), "driver": driver}
                report["rows"].append({**row, **cell(runs), "each": runs})
                write(report, plan.json)
        report["status"] = "complete"
    except KeyboardInterrupt:
        report["status"] = "interrupted"
        raise
    finally:
        report["machine"]["load_at_end"] = _load()
        write(report, plan.json)


def write(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def describe_run(r: dict[str, Any]) -> str:
    if r["verdict"] == "red":
        return f"red: first failure at {r['first_red_s']:.1f} s, exit at {r['exit_s']:.1f} s ({r.get('first_failure')})"
    if r["verdict"] == "green":
        n = r.get("examples")
        return f"{GREEN} in {r['exit_s']:.1f} s" + (f", {n} examples" if n is not None else "")
    if r["verdict"] == "timeout":
        first = "" if r["first_red_s"] is None else f" (first failure at {r['first_red_s']:.1f} s)"
        return f"no verdict within {r['exit_s']:.0f} s{first}"
    return f"error: exit {r['exit']} after {r['exit_s']:.1f} s"


def findings(report: dict[str, Any], max_seconds: float | None) -> list[str]:
    """A planted defect that did not come out red, or (``--max-seconds``) whose red verdict's median took longer."""
    out = []
    for row in report["rows"]:
        if row["defect"] == NONE:
            if row["verdict"] != "green":
                out.append(f"{row['driver']} with nothing planted: {row['verdict']}, not green")
            continue
        where = f"{row['defect']} x {row['driver']}"
        if row["verdict"] != "red":
            out.append(f"{where}: {row['verdict']}, not red")
        elif max_seconds is not None and row["exit_s"]["median"] > max_seconds:
            out.append(
                f"{where}: red after {row['exit_s']['median']:.1f} s (median), over --max-seconds {max_seconds:g}"
            )
    return out


def format_cell(row: dict[str, Any], timeout: float) -> str:
    """A table cell: the red verdict's time (median, and the first failure where it came earlier), else
    what the runs said instead of a time."""
    verdict = row["verdict"]
    if verdict == "green":
        n = row.get("examples", {}).get("median")
        return f"{GREEN}, {row['exit_s']['median']:.1f} s" + (f", {n:g} ex" if n is not None else "")
    if verdict == "timeout":
        first = row.get("first_red_s")
        return f"no verdict in {timeout:g} s" + (f" (first failure {first['median']:.1f} s)" if first else "")
    if verdict == "error":
        return "error (see JSON)"
    if verdict == "mixed":
        return "mixed: " + ",".join(row["verdicts"])
    exit_s, first = row["exit_s"], row["first_red_s"]
    spread = f" [{exit_s['min']:.1f}-{exit_s['max']:.1f}]" if row["runs"] > 1 else ""
    text = f"red {exit_s['median']:.1f} s{spread}"
    if first["median"] < exit_s["median"] - 1:
        text += f" (first failure {first['median']:.1f} s)"
    return text


def format_table(report: dict[str, Any]) -> str:
    """One row per defect, one column per driver (markdown)."""
    drivers = report["drivers"]
    timeout = report["settings"]["timeout_s"]
    by = {(r["defect"], r["driver"]): r for r in report["rows"]}
    lines = [
        "| defect | kind | " + " | ".join(_driver_label(d, report) for d in drivers) + " |",
        "| --- | --- |" + " --- |" * len(drivers),
    ]
    for defect in report["defects"]:
        kind = "green" if defect == NONE else planting.kind(defect)
        cells = [format_cell(by[(defect, d)], timeout) if (defect, d) in by else "not run" for d in drivers]
        lines.append(f"| {defect} | {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _driver_label(driver: str, report: dict[str, Any]) -> str:
    jobs = report["settings"]["jobs"]
    n = f" -n {jobs}" if jobs > 1 else ""
    return {
        "check": "check",
        "pytest": f"pytest{n}",
        "pytest-x": f"pytest -x{n}",
        "fuzz": f"fuzz {report['settings']['fuzz_seconds']:g}s",
    }[driver]
