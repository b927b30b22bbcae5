"""The GPU lane: the installed gate on each conv backend, cold then warm, written up under docs/gpu/.

One command on a GPU machine with gdn-equiv installed (a wheel, entry points registered)::

    python tools/gpu_lane.py --backends triton,cuda,fla-triton,fla-cuda,fla-gluon --out docs/gpu

For each backend: ``pytest --pyargs gdn_equiv.suite --gdn-backend B`` from a directory outside any checkout
(the installed package, as a kernel repository's CI runs it), once with an empty Triton kernel cache (cold)
and once more on the kernels that run compiled (warm), each with a JUnit file. Then ``lane.json`` (device,
versions, per run and per test file: passed, failed, skipped with reasons, seconds) and ``lane.md`` (the
same as tables). Every failure's report goes to ``<backend>-<cold|warm>-failures.txt`` as it happens.

The lane's verdict is the runs': a run that failed, errored, collected nothing or was cut by its time
limit is red (exit 1), and the table says which; 0 only when every asked run passed. A cut run names the
tests it left unfinished, each with its worker, how long it had run and where that worker was (every process
of the run writes its stacks before it is killed, ``<backend>-<phase>-stacks/``), and leaves no worker behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from importlib import metadata
from pathlib import Path
from typing import Any


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("gdn-equiv", "torch", "triton", "hypothesis", "pytest", "pytest-xdist", "causal-conv1d", "fla-core"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _device() -> str:
    import torch

    if not torch.cuda.is_available():
        return "cpu (no CUDA device)"
    return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"


#: a plugin the lane's pytest loads (``-p lane_timing``): each finished test's outcome and seconds, written by
#: the controller as it arrives, and each test's start, written by the process that runs it, so a run cut by
#: its time limit still says what ran, how long it took and which tests it left unfinished (with their stacks)
TIMING_PLUGIN = r"""
import faulthandler
import os
import signal
import time

import pytest

_STACKS = []  # the open file each process' SIGUSR1 dumps its threads' stacks into (kept open for the handler)
_CONFIG = []


def pytest_configure(config):
    _CONFIG.append(config)
    # a run cut by its time limit gets SIGUSR1 first: every process of the run writes where each thread is
    # (compiling, shrinking, waiting on the device...) before it is killed
    folder = os.environ.get("LANE_STACKS")
    if folder:
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _STACKS.append(open(os.path.join(folder, f"{name}.txt"), "w"))
        faulthandler.register(signal.SIGUSR1, file=_STACKS[-1], all_threads=True)


def pytest_runtest_logstart(nodeid, location):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker or not _CONFIG[0].pluginmanager.hasplugin("dsession"):  # the process that runs it, as it starts
        with open(os.environ["LANE_TIMING"], "a") as out:
            out.write(f"#start\t{nodeid}\t{worker or 'main'}\t{time.time():.2f}\n")


def _collected(n):
    with open(os.environ["LANE_TIMING"], "a") as out:
        out.write(f"#collected\t{n}\n")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    if not os.environ.get("LANE_COLLECTED"):  # every worker collects the same tests: the first says how many
        os.environ["LANE_COLLECTED"] = "1"
        _collected(len(ids))


def pytest_collection_finish(session):
    if not os.environ.get("PYTEST_XDIST_WORKER") and not session.config.pluginmanager.hasplugin("dsession"):
        _collected(len(session.items))


def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER") or not (report.when == "call" or report.outcome != "passed"):
        return
    reason = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])[:160]
    node = getattr(report, "node", None)  # xdist: the worker that ran it
    worker = getattr(getattr(node, "gateway", None), "id", "main")
    start = getattr(report, "start", 0.0)  # when the test's phase began (epoch seconds)
    with open(os.environ["LANE_TIMING"], "a") as out:
        fields = [report.nodeid, report.when, report.outcome, f"{report.duration:.2f}", reason, worker, f"{start:.2f}"]
        out.write("\t".join(fields) + "\n")
"""


#: the fields of a finished test's line in the timing file: node id, phase, outcome, seconds, skip reason,
#: worker, start (the timing plugin's ``pytest_runtest_logreport``)
FIELDS = 7


def _lines(path: Path, mark: str | None = None) -> list[list[str]]:
    """The timing file's lines split into fields: each finished test's (``mark`` None, padded to
    :data:`FIELDS`), or those the plugin wrote under ``#<mark>`` (``start``, ``collected``), without the mark."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split("\t")
        if mark is None and not line.startswith("#"):
            out.append((parts + [""] * FIELDS)[:FIELDS])
        elif mark is not None and parts[0] == f"#{mark}":
            out.append(parts[1:])
    return out


def summarise_timing(path: Path) -> dict[str, dict]:
    """Per test file: passed, failed (failures and errors), skipped, seconds, and the skip reasons (n/a)."""
    files: dict[str, dict] = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0, "seconds": 0.0, "n/a": {}})
    for nodeid, _when, outcome, seconds, reason, *_ in _lines(path):
        row = files[nodeid.split("::")[0].rsplit("/", 1)[-1]]
        row["seconds"] += float(seconds or 0)
        if outcome == "failed":
            row["failed"] += 1
        elif outcome == "skipped":
            row["skipped"] += 1
            row["n/a"][reason] = row["n/a"].get(reason, 0) + 1
        else:
            row["passed"] += 1
    return {k: {**v, "seconds": round(v["seconds"], 1)} for k, v in sorted(files.items())}


def _names_backend(param: str, backend: str) -> bool:
    parts = f"-{param}-"
    return f"-{backend}-" in parts


def per_backend(path: Path, backends: list[str]) -> dict[str, dict]:
    """In a run over several backends: each backend's rows (tests whose parameter id names it; the longest
    name wins, so ``fla-triton`` is not ``triton``), passed / failed / skipped and worker-seconds; the rest
    (backend-independent tests, run once) under ``(shared)``."""
    rows: dict[str, dict] = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0, "seconds": 0.0})
    names = sorted(backends, key=len, reverse=True)
    for nodeid, _when, outcome, seconds, *_ in _lines(path):
        param = nodeid.rsplit("[", 1)[1].rstrip("]") if nodeid.endswith("]") else ""
        owner = "(shared)"
        for name in names:
            if _names_backend(param, name):
                owner = name
                break
        row = rows[owner]
        row["seconds"] += float(seconds or 0)
        row[{"failed": "failed", "skipped": "skipped"}.get(outcome, "passed")] += 1
    return {k: {**v, "seconds": round(v["seconds"], 1)} for k, v in sorted(rows.items())}


def slowest(path: Path, n: int = 15) -> list[tuple[str, float]]:
    rows = [(parts[0], float(parts[3] or 0)) for parts in _lines(path)]
    return sorted(rows, key=lambda r: -r[1])[:n]


def run_gate(backend: str, phase: str, args: argparse.Namespace, cache: Path, out: Path) -> dict:
    stem = f"{backend}-{phase}"
    asked = backend.replace("+", ",")  # an entry joined by + is one run over those backends
    junit, failures, log = out / f"{stem}.xml", out / f"{stem}-failures.txt", out / f"{stem}.log"
    timing = out / f"{stem}-tests.tsv"
    for stale in (junit, failures, timing):
        stale.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", "pytest", "-p", "lane_timing", "--pyargs", args.suite, "--gdn-backend", asked,
        "-n", str(args.workers), "-p", "no:cacheprovider", "-q", "-rfE", f"--junitxml={junit}",
        f"--gdn-failure-log={failures}", "--durations=25", *args.pytest_args,
    ]  # fmt: skip
    # a pytest process' own markers are not inherited: started from inside an xdist worker, the run's controller
    # would take itself for a worker (PYTEST_XDIST_WORKER) and its timing plugin would record no finished test
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    env |= {"TRITON_CACHE_DIR": str(cache), "HYPOTHESIS_PROFILE": args.profile, "PYTHONUNBUFFERED": "1"}
    env["LANE_TIMING"] = str(timing.resolve())
    stacks = out / f"{stem}-stacks"
    shutil.rmtree(stacks, ignore_errors=True)
    stacks.mkdir()
    env["LANE_STACKS"] = str(stacks.resolve())
    started, epoch = time.perf_counter(), time.time()
    with tempfile.TemporaryDirectory() as elsewhere, log.open("w") as sink:  # outside any checkout
        Path(elsewhere, "lane_timing.py").write_text(TIMING_PLUGIN)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (elsewhere, os.environ.get("PYTHONPATH", "")) if p)
        status = _run_cut_at(argv, elsewhere, env, sink, args.limit)
    seconds = round(time.perf_counter() - started, 1)
    files = summarise_timing(timing)
    totals = {k: sum(f[k] for f in files.values()) for k in ("passed", "failed", "skipped")}
    totals["collected"] = _collected_count(timing)
    green = status == 0 and totals["passed"] > 0
    tail = log.read_text(errors="replace").splitlines()[-3:]
    left = unfinished(timing, stacks, epoch, epoch + args.limit) if isinstance(status, str) else []
    by_name = _kernels_by_name(cache)  # one walk of the cache: the total is their sum
    print(f"[lane] {stem}: {'green' if green else 'RED'} status={status} {totals} in {seconds} s", flush=True)
    return {"backend": backend, "phase": phase, "status": status, "green": green, "seconds": seconds,
            "totals": totals, "files": files, "tail": tail, "kernels": sum(by_name.values()),
            "kernels_by_name": by_name, "per_backend": per_backend(timing, asked.split(",")),
            "slowest": slowest(timing), "unfinished": left}  # fmt: skip


#: seconds the processes of a cut run get to write their stacks between SIGUSR1 and SIGKILL
DUMP_SECONDS = 3.0


def _run_cut_at(argv: list[str], cwd: str, env: dict[str, str], sink: Any, limit: float) -> int | str:
    """Run pytest in a session of its own; past ``limit`` seconds, every process of it (the controller, its
    xdist workers, what they started) writes its threads' stacks (SIGUSR1, the timing plugin's handler) and
    is then killed. Killing the controller alone would leave its workers running into the next run (a busy
    worker reads no "shutdown" from the controller), sharing the device with it."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        for sig, pause in ((signal.SIGUSR1, DUMP_SECONDS), (signal.SIGKILL, 0.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            time.sleep(pause)
        proc.wait()
        return f"cut at {limit} s"


def unfinished(timing: Path, stacks: Path, epoch: float, cut: float, frames: int = 12) -> list[dict]:
    """The tests a cut run started and never reported: each with its worker, how long it had run when the run
    was cut (``epoch``: the run's start, ``cut``: its end, both epoch seconds), and where that worker's main
    thread was then (its innermost ``frames`` frames, from the dump the cut asked for; ``None`` where the
    process wrote none, e.g. it was stuck outside Python's reach)."""
    started = {p[0]: (p[1], float(p[2])) for p in _lines(timing, "start") if len(p) >= 3}
    finished = {p[0] for p in _lines(timing)}
    left = []
    for nodeid, (worker, at) in sorted(started.items(), key=lambda kv: kv[1][1]):
        if nodeid not in finished:
            stack = _main_thread(stacks / f"{worker}.txt", frames)
            left.append({"test": nodeid, "worker": worker, "started_s": round(at - epoch, 1),
                         "ran_s": round(cut - at, 1), "stack": stack})  # fmt: skip
    return left


def _main_thread(dump: Path, frames: int) -> list[str] | None:
    """The innermost ``frames`` lines of the thread that received the signal (faulthandler names it "Current
    thread"; Python runs signal handlers in the main thread, where pytest runs the test)."""
    text = dump.read_text(errors="replace") if dump.exists() else ""
    if not text.strip():
        return None
    blocks = text.split("\n\n")
    current = next((b for b in blocks if b.lstrip().startswith("Current thread")), blocks[0])
    return [line.strip() for line in current.splitlines()[1 : frames + 1]]


def _collected_count(path: Path) -> int | None:
    """How many tests the run collected (None where it never got that far)."""
    counts = [int(parts[0]) for parts in _lines(path, "collected")]
    return counts[0] if counts else None


def _kernels_by_name(cache: Path) -> dict[str, int]:
    """Specialisations compiled per kernel name, one cache folder each that holds a cubin (a name with many
    is a kernel whose constexprs and argument specialisations the drawn calls spread out: where a cold run's
    compile time goes)."""
    if not cache.exists():
        return {}
    names: dict[str, int] = defaultdict(int)
    for cubin in cache.rglob("*.cubin"):
        names[cubin.stem] += 1
    return dict(sorted(names.items(), key=lambda kv: -kv[1]))


#: the gate's time targets on one GPU: one backend cold and warm, every backend in one session
TARGETS = {"cold": 120.0, "warm": 30.0, "all five": 600.0}
ALL_FIVE = {"triton", "cuda", "fla-triton", "fla-cuda", "fla-gluon"}


def targets(runs: list[dict]) -> list[str]:
    """Each run against its target: one backend's cold <= 120 s and warm <= 30 s; a run over all five
    backends (``+``-joined) <= 600 s. Only a finished green run can meet one; a cut run is "not measured"."""
    out = []
    for r in runs:
        names = set(r["backend"].split("+"))
        limit = TARGETS["all five"] if names == ALL_FIVE else TARGETS[r["phase"]] if len(names) == 1 else None
        if limit is None:
            out.append(f"{r['backend']} {r['phase']}: no target for this set of backends ({r['seconds']} s)")
        elif isinstance(r["status"], str):
            out.append(f"{r['backend']} {r['phase']}: not measured ({r['status']}; target {limit:.0f} s)")
        else:
            met = r["green"] and r["seconds"] <= limit
            verdict = "met" if met else "NOT met" + ("" if r["green"] else " (red)")
            out.append(f"{r['backend']} {r['phase']}: {r['seconds']} s against {limit:.0f} s: {verdict}")
    return out


#: a warm run's longest single test: xdist cannot share out one test, so a long one is the run's floor
#: (2026-12-07 on an H100: a block-edge sweep 109 s, a combination part 62 s)
LONGEST_TEST = 10.0


def longest_tests(runs: list[dict]) -> list[str]:
    """Each warm run's longest single test against :data:`LONGEST_TEST` (a cold one compiles: no target)."""
    out = []
    for r in runs:
        if r["phase"] != "warm" or not r.get("slowest"):
            continue
        name, seconds = r["slowest"][0]
        verdict = "met" if seconds <= LONGEST_TEST else "NOT met"
        test = name.split("::")[-1]
        out.append(f"{r['backend']} warm: longest test {test} {seconds:.1f} s against {LONGEST_TEST:.0f} s: {verdict}")
    return out


def write_markdown(report: dict, path: Path) -> None:
    lines = [
        "# The installed gate on the GPU",
        "",
        f"Device: {report['device']}. Profile `{report['profile']}`, `-n {report['workers']}`, fla's autotuned "
        f"kernels: {report.get('fla_autotune', 'full')} (`GDN_EQUIV_FLA_AUTOTUNE`). Versions: "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v),
        "",
        "| backend | run | verdict | passed | failed | skipped (n/a) | of collected | seconds | kernels compiled |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["runs"]:
        t = r["totals"]
        verdict = "green" if r["green"] else f"RED ({r['status']})"
        lines.append(
            f"| {r['backend']} | {r['phase']} | {verdict} | {t['passed']} | {t['failed']} | {t['skipped']} | "
            f"{t.get('collected') or '?'} | {r['seconds']} | {r['kernels']} |"
        )
    lines += ["", "Time targets (a cut run or a red one meets none):", ""]
    lines += [f"- {line}" for line in targets(report["runs"]) + longest_tests(report["runs"])]
    for r in report["runs"]:
        lines += ["", f"## {r['backend']}, {r['phase']}", "", "| test file | passed | failed | n/a | seconds (sum) |"]
        lines.append("| --- | --- | --- | --- | --- |")
        for name, f in r["files"].items():
            lines.append(f"| {name} | {f['passed']} | {f['failed']} | {f['skipped']} | {f['seconds']} |")
        if len(r.get("per_backend") or {}) > 1:
            lines += ["", "| backend's rows | passed | failed | n/a | worker-seconds |"]
            lines.append("| --- | --- | --- | --- | --- |")
            for name, b in r["per_backend"].items():
                lines.append(f"| {name} | {b['passed']} | {b['failed']} | {b['skipped']} | {b['seconds']} |")
        if r.get("kernels_by_name"):
            top = list(r["kernels_by_name"].items())[:10]
            lines += ["", "specialisations compiled, by kernel: " + "; ".join(f"{n} {c}" for n, c in top)]
        if r["slowest"]:
            lines += ["", "slowest tests: " + "; ".join(f"{n.split('::')[-1]} {t:.1f} s" for n, t in r["slowest"][:8])]
        if r.get("unfinished"):
            lines += ["", "Unfinished when the run was cut (where each worker was, innermost frame first):", ""]
            for u in r["unfinished"]:
                where = " <- ".join((u["stack"] or ["no stack written"])[:6])
                when = f"started at {u['started_s']} s, ran {u['ran_s']} s"
                lines.append(f"- `{u['test']}` ({u['worker']}, {when}): {where}")
        reasons = {why: n for f in r["files"].values() for why, n in f["n/a"].items()}
        if reasons:
            lines += ["", "n/a, with the reasons the tests gave:", ""]
            lines += [f"- {n} x {why}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backends",
        default="triton,cuda,fla-triton,fla-cuda,fla-gluon",
        help="one run per comma-separated entry; an entry joined by + (triton+cuda) is one run of the gate over "
        "those backends together (each backend's rows once, the backend-independent tests once)",
    )
    parser.add_argument("--out", type=Path, default=Path("docs/gpu"))
    parser.add_argument("--suite", default="gdn_equiv.suite", help="the installed package of tests to run")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--profile", default="gpu")
    parser.add_argument("--phases", default="cold,warm", help="cold (an empty kernel cache), warm, or both")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds a run may take before it is cut (red)")
    parser.add_argument(
        "--cache",
        type=Path,
        help="keep each backend's Triton kernel cache in CACHE/<backend> (a cold phase empties it first), so a "
        "later call runs warm on it; without it each backend's cache is a temporary folder",
    )
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    phases = args.phases.split(",")
    if not set(phases) <= {"cold", "warm"} or args.workers < 1 or args.limit <= 0:
        parser.error(f"--phases takes cold,warm; --workers >= 1; --limit > 0 (got {args.phases}, {args.workers})")
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"device": _device(), "versions": _versions(), "profile": args.profile, "workers": args.workers,
              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "runs": [],
              "fla_autotune": os.environ.get("GDN_EQUIV_FLA_AUTOTUNE", "full")}  # fmt: skip
    for backend in args.backends.split(","):
        if args.cache is None:
            cache = Path(tempfile.mkdtemp(prefix=f"lane-{backend}-"))
        else:
            cache = args.cache / backend
            if "cold" in phases:
                shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir(parents=True, exist_ok=True)
        try:
            for phase in phases:
                report["runs"].append(run_gate(backend, phase, args, cache, args.out))
                (args.out / "lane.json").write_text(json.dumps(report, indent=1) + "\n")  # as it goes
        finally:
            if args.cache is None:
                shutil.rmtree(cache, ignore_errors=True)
    write_markdown(report, args.out / "lane.md")
    return 0 if report["runs"] and all(r["green"] for r in report["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
