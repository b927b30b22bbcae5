"""``gdn-equiv``: check, fuzz, repro, bench.

``check`` runs the properties (P2-P7) against a backend with a Hypothesis profile and prints a
summary table, one row per property x backend x dtype (examples run, result, the worst difference
seen against its tolerance), exiting 1 on any failure; ``fuzz`` repeats them with fresh seeds for
a time budget; both keep Hypothesis' example database and write a report directory (summary.json,
each failure's shrunk example and a standalone reproducer), and on request ``--junit-xml`` and
``--json`` files for CI systems. ``repro FILE`` replays a failure. ``bench prologue`` times the prologue.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gdn_equiv.runner import Check

# examples per property x dtype row for each profile (the pytest profiles live in gdn_equiv/testing.py)
PROFILE_EXAMPLES = {"dev": 10, "ci": 40, "gpu": 30, "fuzz": 200}
# one summary row per dtype the examples are drawn in (conv weights may still carry another, G9)
DTYPES = ("float32", "float16", "bfloat16")


def _checks(args: argparse.Namespace, max_examples: int, seed: int | None, database: object) -> list:
    from gdn_equiv import runner
    from gdn_equiv.guard import Condition

    checks = []
    if args.target != "gdn_equiv":
        # an upstream layer: its guard against the spec, one gap kind at a time (P1); the in-house
        # properties need our layer's prologue argument
        budget = getattr(args, "seconds", None)
        options = {"core": args.fla_core} if args.target == "fla" else {}
        for check in runner.search_gaps(
            args.target, max_examples=max_examples, device=args.device, seconds=budget, database=database, **options
        ):
            checks.append(check)
            _progress(check)
        return checks
    for backend in args.backend.split(","):
        for name in args.property or list(runner.SPECS):
            for dtype in args.dtype or DTYPES:
                checks.append(
                    runner.run_property(
                        name,
                        backend,
                        max_examples=max_examples,
                        device=args.device,
                        max_seq_len=args.max_seq_len,
                        seed=seed,
                        database=database,
                        dtype=dtype,
                    )
                )
                _progress(checks[-1])
        if not args.skip_necessity:
            # a search stops at its first counterexample, so a generous cap costs little; the
            # profile's per-property count (10 for dev) is too small to find the rarer ones
            necessity_budget = max(200, 5 * max_examples)
            for condition in Condition:
                checks.append(
                    runner.find_counterexample(condition, backend, max_examples=necessity_budget, device=args.device)
                )
                _progress(checks[-1])
    return checks


def _progress(check: Check) -> None:
    print(
        f"  {check.name:<24} {check.backend:<8} {check.dtype:<8} {check.result:<15} {check.examples:>5} examples "
        f"{check.seconds:6.1f}s",
        flush=True,
    )


def _finish(args: argparse.Namespace, checks: list, started: float, mode: str) -> int:
    from gdn_equiv import runner

    failed = [c for c in checks if c.result == "FAIL"]
    meta = {
        "mode": mode,
        "target": args.target,
        "backend": args.backend,
        "profile": args.profile,
        "device": args.device,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.target == "fla":
        meta["fla_core"] = args.fla_core
    summary = runner.write_report(checks, Path(args.report), device=args.device, meta=meta)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(summary.read_text())
    if args.junit_xml:
        runner.write_junit(checks, Path(args.junit_xml), meta=meta)
    print()
    print(runner.format_table(checks))
    total = sum(c.examples for c in checks)
    print(f"\n{total} examples in {meta['seconds']} s on {args.device}; {len(failed)} failing; report: {summary}")
    for c in checks:
        if c.result == "NONE FOUND":
            print(f"note: {c.name}: no counterexample found, the condition may be unnecessary on {c.backend}")
    for c in failed:
        example = "" if c.example is None else f"\nshrunk example: {c.example.to_json()}"
        print(f"\nFAIL {c.row_id}\n{c.failure}{example}")
        print(f"reproducer: python {c.repro}\nreplay: gdn-equiv repro {c.repro_json}")
    return 1 if failed else 0


def _core(args: argparse.Namespace) -> str:
    return f" (fla core: {args.fla_core})" if args.target == "fla" else ""


def cmd_check(args: argparse.Namespace) -> int:
    from hypothesis.database import DirectoryBasedExampleDatabase

    started = time.perf_counter()
    examples = args.examples or PROFILE_EXAMPLES[args.profile]
    print(
        f"gdn-equiv check: target={args.target}{_core(args)} backend={args.backend} device={args.device} "
        f"profile={args.profile} ({examples} examples per property)"
    )
    db = DirectoryBasedExampleDatabase(args.database)
    return _finish(args, _checks(args, examples, None, db), started, "check")


def cmd_fuzz(args: argparse.Namespace) -> int:
    import random

    from hypothesis.database import DirectoryBasedExampleDatabase

    started = time.perf_counter()
    deadline = started + args.seconds
    db = DirectoryBasedExampleDatabase(args.database)
    print(
        f"gdn-equiv fuzz: target={args.target}{_core(args)} backend={args.backend} device={args.device} "
        f"for {args.seconds}s"
    )
    checks: list = []
    rounds = 0
    while time.perf_counter() < deadline:
        rounds += 1
        batch = _checks(args, args.examples or PROFILE_EXAMPLES["fuzz"] // 4, random.getrandbits(32), db)
        checks = _merge(checks, batch)
        if any(c.result == "FAIL" for c in batch):
            break
        args.skip_necessity = True  # necessity needs one search, not one per round
    print(f"{rounds} fuzz round{'s' if rounds != 1 else ''} (a round ends early at its first failure)")
    return _finish(args, checks, started, "fuzz")


def _merge(total: list, batch: list) -> list:
    from gdn_equiv.compare import worst

    by_key = {(c.name, c.backend, c.dtype): c for c in total}
    for c in batch:
        old = by_key.get((c.name, c.backend, c.dtype))
        if old is None:
            by_key[(c.name, c.backend, c.dtype)] = c
            continue
        old.worst = c.worst if c.result == "FAIL" else worst([c.worst] if c.worst else [], old.worst)
        old.examples += c.examples
        old.not_applicable += c.not_applicable
        old.seconds += c.seconds
        old.reasons.update(c.reasons)
        if c.result == "FAIL":
            old.result, old.failure, old.example = c.result, c.failure, c.example
    return list(by_key.values())


def cmd_repro(args: argparse.Namespace) -> int:
    from gdn_equiv import runner

    return runner.replay(Path(args.file))


def cmd_bench(args: argparse.Namespace) -> int:
    from gdn_equiv import bench

    results: list[dict] = []
    for shape in bench.QUICK_SHAPES if args.quick else bench.SHAPES:
        # one shape at a time, printed as it completes: a cold run compiles kernels for minutes
        results += bench.bench_prologue(
            shapes=[shape],
            backends=args.backend.split(",") if args.backend else None,
            iters=args.iters,
            warmup=args.warmup,
        )
        print(bench.format_table(results), flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from gdn_equiv.runner import default_device

    parser = argparse.ArgumentParser(prog="gdn-equiv", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--backend", default="torch", help="conv backend(s), comma separated, or module:callable")
        p.add_argument("--target", default="gdn_equiv", choices=["gdn_equiv", "fla"], help="layer under test")
        p.add_argument(
            "--fla-core",
            default="fla",
            choices=["fla", "reference"],
            help="target fla: the core inside fla's layer (reference: ours; fla's prologue, guard and convs untouched)",
        )
        p.add_argument("--device", default=default_device(), help="cpu or cuda (default: cuda when present)")
        p.add_argument("--profile", default="ci", choices=sorted(PROFILE_EXAMPLES))
        p.add_argument("--examples", type=int, default=None, help="examples per property (overrides the profile)")
        p.add_argument(
            "--property", action="append", help="run only this property (repeatable; P6: see --skip-necessity)"
        )
        p.add_argument(
            "--dtype", action="append", choices=DTYPES, help="run only examples of this dtype (repeatable; default all)"
        )
        p.add_argument("--max-seq-len", type=int, default=20, help="longest generated sequence")
        p.add_argument("--skip-necessity", action="store_true", help="skip the P6 counterexample searches")
        p.add_argument("--report", default="gdn-equiv-report", help="report directory")
        p.add_argument("--database", default=".hypothesis/examples", help="Hypothesis example database")
        p.add_argument("--junit-xml", default=None, metavar="FILE", help="also write JUnit XML (one testcase per row)")
        p.add_argument("--json", default=None, metavar="FILE", help="also write the summary JSON here")

    p = sub.add_parser("check", help="run the properties once with a profile's budget")
    common(p)
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("fuzz", help="run the properties with fresh seeds until the time budget is spent")
    common(p)
    p.add_argument("--seconds", type=float, default=60.0, help="time budget")
    p.set_defaults(func=cmd_fuzz)
    p = sub.add_parser("repro", help="replay a failure JSON from a report")
    p.add_argument("file")
    p.set_defaults(func=cmd_repro)
    p = sub.add_parser("bench", help="benchmarks (a command, never a test)")
    p.add_argument("what", choices=["prologue"])
    p.add_argument("--backend", default=None, help="backends to time (default: all available)")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="tiny shapes (smoke test on CPU)")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "device", "cpu") == "cpu":
        import os

        import torch

        # without a GPU our triton kernels run in the interpreter (set before triton is imported),
        # which also gives the G5 necessity search its second backend
        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
        torch.set_num_threads(1)  # examples are tiny; threads cost more than they give
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
