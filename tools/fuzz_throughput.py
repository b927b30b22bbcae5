"""Our fuzz loop against HypoFuzz on this machine, side by side in one run (issue #37):

* throughput: examples per second per worker with 1 and 2 workers (our loop has no workers: "2" is two of
  its processes side by side, each on its own report and database), over the gate's property tests P2-P5;
* time to find each planted defect the gate's P2-P5 tests can be given (a planted *backend*: the layer
  defects of the teeth tests are options of the gdn_equiv target, which the pytest gate cannot take), the
  median of ``--runs`` fresh runs, each with an empty example database so none replays another's finding.

Both engines are measured the same way, from Hypothesis' own observability lines (one per executed
example; ours with ``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY`` set, HypoFuzz's by the engine): examples are
the valid lines, time to find is the wall time from the command's start to its first failing line
(imports and collection included, which is most of what HypoFuzz costs on a short run).

    python tools/fuzz_throughput.py --seconds 40 --runs 3 --json fuzz-throughput.json

Prints two tables and the exact commands it ran; exit 0 (3 when HypoFuzz is not installed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gdn_equiv.run import fuzz_engines

ASK = ["--family", "gated_deltanet", "--dtype", "float32", "--no-isolate"]
#: the planted backends P2-P5 catch, with the property that catches each
DEFECTS = {"gdn_equiv.harness.planted:wide_rounding": "P3-forward-exact"}
GATE = ["P2-path-taken", "P2-no-short-conv", "P3-forward-exact", "P4-gradients", "P5-fallback-exact"]


def _command(engine: str, workers: int, seconds: float, properties: list[str], backend: str) -> list[str]:
    cmd = [sys.executable, "-m", "gdn_equiv", "fuzz", "--engine", engine, "--seconds", f"{seconds:g}", *ASK]
    cmd += ["--backend", backend, "--database", "db"]
    for p in properties:
        cmd += ["--property", p]
    if engine == "hypofuzz":
        cmd = [c for c in cmd if c != "--no-isolate"] + ["--workers", str(workers)]
    return cmd


def _lines(where: Path) -> list[dict[str, object]]:
    return fuzz_engines.read_testcases(where).cases


def _launch(cmd: list[str], where: Path) -> subprocess.Popen[bytes]:
    where.mkdir(parents=True)
    env = dict(os.environ)
    env.pop("HYPOTHESIS_PROFILE", None)
    env["HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY"] = "1"  # ours; HypoFuzz's run sets its own storage
    env["HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER"] = "1"  # no line tracing in ours (HypoFuzz turns it off)
    env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(where / "storage")
    return subprocess.Popen(cmd, cwd=where, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _watch(
    processes: list[subprocess.Popen[bytes]], dirs: list[Path], timeout: float, first: list[float] | None = None
) -> tuple[float, float | None]:
    """Wait for the processes; return (wall seconds, seconds to the first failing line or None); ``first``
    gets the seconds to the first line of all (imports, collection and start-up before it)."""
    start, found = time.perf_counter(), None
    while any(p.poll() is None for p in processes):
        lines = [c for d in dirs for c in _lines(d)]
        if first is not None and not first and lines:
            first.append(time.perf_counter() - start)
        if found is None and any(c.get("status") == "failed" for c in lines):
            found = time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            for p in processes:
                p.kill()
            break
        time.sleep(0.5)
    if found is None and any(c.get("status") == "failed" for d in dirs for c in _lines(d)):
        found = time.perf_counter() - start  # found in the last half second
    return time.perf_counter() - start, found


def throughput(root: Path, seconds: float, workers: int, engine: str, log: list[str]) -> dict[str, float]:
    copies = workers if engine == "ours" else 1
    dirs = [root / f"{engine}-{workers}-{i}" for i in range(copies)]
    cmd = _command(engine, workers, seconds, GATE, "torch")
    log.append(f"{copies} x (cd <dir>; {' '.join(cmd[1:])})")
    procs = [_launch(cmd, d) for d in dirs]
    first: list[float] = []
    wall, _ = _watch(procs, dirs, seconds + 120, first)
    valid = [c for d in dirs for c in _lines(d) if c.get("status") in ("passed", "failed")]
    # after the first example the run fuzzes until its budget ends (the engine stops HypoFuzz then; the
    # seconds it takes to stop and to read the ledger are not fuzzing)
    fuzzing = seconds - first[0] if first and first[0] < seconds else None
    return {
        "engine": engine,
        "workers": workers,
        "budget_s": seconds,
        "wall_s": round(wall, 1),
        "first_example_s": round(first[0], 1) if first else None,
        "examples": len(valid),
        "per_second_per_worker": round(len(valid) / seconds / workers, 2),
        "after_first_per_second_per_worker": round(len(valid) / fuzzing / workers, 2) if fuzzing else None,
    }


def time_to_find(root: Path, engine: str, backend: str, prop: str, cap: float, runs: int, log: list[str]) -> dict:
    times = []
    cmd = _command(engine, 1, cap, [prop], backend)
    log.append(f"{runs} x (cd <fresh dir>; {' '.join(cmd[1:])})")
    for i in range(runs):
        where = root / f"find-{engine}-{i}"
        proc = _launch(cmd, where)
        _, found = _watch([proc], [where], cap + 120)
        times.append(found)
    hits = [t for t in times if t is not None]
    median = round(statistics.median(hits), 1) if hits else None
    return {"engine": engine, "defect": backend, "property": prop, "found": f"{len(hits)}/{runs}",
            "median_s": median, "runs_s": [None if t is None else round(t, 1) for t in times]}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="budget of each throughput run")
    ap.add_argument("--runs", type=int, default=3, help="fresh runs per engine and defect (median); 0: none")
    ap.add_argument("--cap", type=float, default=90.0, help="budget of each time-to-find run")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    reason = fuzz_engines.hypofuzz_missing()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 3
    log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fuzz-throughput-") as tmp:
        root = Path(tmp)
        rates = [throughput(root, args.seconds, w, e, log) for w in (1, 2) for e in ("ours", "hypofuzz")]
        finds = (
            []
            if args.runs == 0
            else [
                time_to_find(root, e, backend, prop, args.cap, args.runs, log)
                for backend, prop in DEFECTS.items()
                for e in ("ours", "hypofuzz")
            ]
        )
    print(f"machine: {os.cpu_count()} CPUs (shared); gate properties {', '.join(GATE)}; {' '.join(ASK)}")
    print(
        "\nengine    workers  budget s  wall s  first example s  examples  /s/worker (budget)  /s/worker (after first)"
    )
    for r in rates:
        print(
            f"{r['engine']:<9} {r['workers']:>7}  {r['budget_s']:>8g}  {r['wall_s']:>6}  {r['first_example_s']!s:>15}  "
            f"{r['examples']:>8}  {r['per_second_per_worker']:>18}  {r['after_first_per_second_per_worker']!s:>23}"
        )
    print("\nengine    defect                             property           found  median s  runs (s)")
    for f in finds:
        print(
            f"{f['engine']:<9} {f['defect']:<34} {f['property']:<18} {f['found']:>5}  {f['median_s']!s:>8}  "
            f"{f['runs_s']}"
        )
    print("\ncommands:\n  " + "\n  ".join(log))
    if args.json:
        Path(args.json).write_text(json.dumps({"throughput": rates, "time_to_find": finds, "commands": log}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
