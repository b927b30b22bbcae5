"""How often a command catches a planted defect in fresh runs: run it N times, each with an empty
Hypothesis example database (so no run replays another's failure), and count exit status 1.

    python tools/catch_rate.py --runs 100 -- pytest -q -p no:cacheprovider --pyargs gdn_equiv.suite \\
        --gdn-backend example-wide-rounding -k fused_forward

Prints ``caught k of N`` and the seconds per run; exit 0. A status other than 0/1 (collection error,
usage error) stops the count: it is not a catch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.runs < 1:
        ap.error("give --runs >= 1 and a command after --")
    caught, seconds = 0, []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as home:
            env = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": home}
            t0 = time.perf_counter()
            status = subprocess.run(command, env=env, cwd=home, capture_output=True, text=True)
            seconds.append(time.perf_counter() - t0)
        if status.returncode not in (0, 1):
            print(status.stdout[-2000:], status.stderr[-2000:], sep="\n")
            sys.exit(f"run {i + 1}: exit status {status.returncode}, not a verdict")
        caught += status.returncode == 1
        print(f"run {i + 1}: {'caught' if status.returncode else 'missed'} in {seconds[-1]:.1f} s", flush=True)
    print(f"caught {caught} of {args.runs} ({sum(seconds) / len(seconds):.1f} s per run): {' '.join(command)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
