"""How often ``gdn-equiv bench compare`` cries wolf, and whether it sees a planted 20% slowdown.

Runs ``bench prologue`` N+1 times on the same backend and M times on the same kernel made slower
(:func:`gdn_equiv.harness.planted.slowed`: bitwise the same outputs, about 20% more forward work),
interleaved, each a fresh process; then compares each run with the next (N self-comparisons: a flag
is a false alarm) and each slowed run with the plain run before it (M planted comparisons: a miss is
a blind spot). Prints one line per comparison and the two counts; exit 1 when a self-comparison
flagged or a planted one did not. A command, never a test (its verdict depends on the machine)::

    python tools/bench_compare_alarms.py --runs 10 --planted 3 --out /tmp/alarms            # CPU
    python tools/bench_compare_alarms.py --device cuda --backend triton --iters 200 \\
        --shape 2x2048 --out /tmp/alarms                                                        # GPU
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def bench(backend: str, json_path: Path, args: argparse.Namespace) -> None:
    argv = [sys.executable, "-m", "gdn_equiv", "bench", "prologue", "--backend", backend, "--device", args.device]
    argv += ["--iters", str(args.iters), "--warmup", str(args.warmup), "--json", str(json_path)]
    argv += ["--plot", str(json_path.with_suffix(".png"))] if args.plot else []
    argv += ["--quick"] if args.device == "cpu" else []
    argv += ["--timing", args.timing] if args.timing else []
    for shape in args.shape or ():
        argv += ["--shape", shape]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def compare(old: Path, new: Path, pair: str | None, out: Path) -> tuple[int, str]:
    argv = [sys.executable, "-m", "gdn_equiv", "bench", "compare", str(old), str(new), "--markdown", str(out)]
    argv += ["--pair", pair] if pair else []
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    slower = [line for line in done.stdout.splitlines() if line.startswith("FINDING")]
    return done.returncode, f"{len(slower)} measurement(s) flagged" + "".join(f"\n    {s}" for s in slower)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="self-comparisons N (N+1 plain runs)")
    parser.add_argument("--planted", type=int, default=3, help="planted comparisons M")
    parser.add_argument("--backend", default="torch", help="torch (CPU) or triton (GPU)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--shape", action="append", help="BxT, repeatable (default: bench's own)")
    parser.add_argument(
        "--timing",
        help="bench prologue's --timing (graph on a GPU: the kernels' device time; eager timings carry the host's "
        "launch and autograd work, which on an H100 differed by up to 1.4x between two processes of one kernel)",
    )
    parser.add_argument("--plot", action="store_true", help="keep each run's plot")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    slow = f"gdn_equiv.harness.planted:SLOW_{args.backend.upper()}"
    plain = [args.out / f"plain-{i}.json" for i in range(args.runs + 1)]
    slowed = [args.out / f"slow-{j}.json" for j in range(args.planted)]
    for i, path in enumerate(plain):
        bench(args.backend, path, args)
        if i < len(slowed):
            bench(slow, slowed[i], args)
        print(f"benched {i + 1}/{len(plain)}", file=sys.stderr, flush=True)
    false_alarms = 0
    for i in range(args.runs):
        status, what = compare(plain[i], plain[i + 1], None, args.out / f"self-{i}.md")
        false_alarms += status != 0
        print(f"self {i} vs {i + 1}: exit {status}, {what}")
    caught = 0
    for j in range(args.planted):
        status, what = compare(plain[j], slowed[j], f"{args.backend}={slow}", args.out / f"planted-{j}.md")
        caught += status == 1 and "0 measurement" not in what
        print(f"planted {j}: exit {status}, {what}")
    print(f"self-comparisons flagged: {false_alarms}/{args.runs}; planted 20% slower flagged: {caught}/{args.planted}")
    return 0 if false_alarms == 0 and caught == args.planted else 1


if __name__ == "__main__":
    sys.exit(main())
