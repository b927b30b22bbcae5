"""``gdn-equiv bench layer|prologue``: the fused prologue timed against the separate one
(:mod:`gdn_equiv.run.bench`); ``gdn-equiv bench verdict``: the time to a red verdict per planted defect
and driver (:mod:`gdn_equiv.run.verdict`); ``gdn-equiv bench compare OLD.json NEW.json``: a slowdown
between two bench reports, tested row by row (:mod:`gdn_equiv.run.bench_compare`)."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import registry
from gdn_equiv.model.backends import available_backends
from gdn_equiv.model.families import DEFAULT_FAMILY
from gdn_equiv.run import bench, bench_compare, verdict
from gdn_equiv.run import plant as planting
from gdn_equiv.run.cli import catch as cli_catch
from gdn_equiv.run.cli.check import target_problem
from gdn_equiv.run.cli.common import (
    DEFAULT_REPORT,
    DTYPES,
    EXIT_ENVIRONMENT,
    EXIT_FAILED,
    EXIT_OK,
    EnvironmentProblem,
    UsageError,
    at_least,
    backends_option,
    device_option,
    families_option,
    gate_profile,
    one_line,
    positive_seconds,
    subcommand,
)

BENCH_TIMINGS = ("eager", "graph")  # bench --timing (gdn_equiv.run.bench.BenchPlan.timing)


def _bench_output(flag: str, value: str | None, default: Path, suffix: str) -> Path:
    path = Path(value) if value else default
    if path.suffix.lower() != suffix:
        raise UsageError(f"{flag} {value!r} must name a {suffix} file")
    if path.is_dir():
        raise UsageError(f"{flag} {value!r} is a directory; it must be a file")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{flag} {value!r}: {str(parent)!r} is a file, not a directory")
            break
    return path


def _bench_shapes(values: list[str] | None) -> tuple[tuple[int, int], ...]:
    import re

    shapes = []
    for value in values or ():
        match = re.fullmatch(r"(\d+)x(\d+)", value.strip())
        if match is None or min(int(match[1]), int(match[2])) < 1:
            raise UsageError(f"--shape {value!r} must be BxT with integers >= 1, e.g. 2x2048")
        shapes.append((int(match[1]), int(match[2])))
    return tuple(dict.fromkeys(shapes))


def _bench_fla_problem(what: str, device: str, families: list[str]) -> str | None:
    """Why fla's rows cannot run here, or ``None``."""
    import importlib.util

    import torch

    if importlib.util.find_spec("fla") is None:
        return "flash-linear-attention is not installed"
    if torch.device(device).type != "cuda":
        return "fla's Triton kernels autotune, which needs a CUDA device (Triton's interpreter has no benchmarker)"
    if what != "layer":
        return None
    reason = target_problem("fla")
    if reason is not None:
        return (
            f"{one_line(reason)}; without the adapter fla's path could be forced only by patching fla, so this "
            "fla is timed by 'bench prologue' only"
        )

    if not any(bench.fla_fuses(f) for f in families):
        chosen = ",".join(families)
        return f"fla {bench.fla_version()} has no fused prologue the fla adapter can force in --family {chosen}"
    return None


def plan_bench(args: argparse.Namespace) -> Any:
    """``bench`` arguments, every one checked; fla and the plot are left out with a note where they
    cannot run and were not asked for by name."""
    import torch

    what = args.what
    if what == "catch":
        return cli_catch.plan_catch(args)
    given = [] if args.catch_command is None else ["--command"]
    if given:
        raise UsageError(f"--command: an option of bench catch, not of bench {what}")
    if what == "compare":
        return plan_compare(args)
    given = [f"--{n.replace('_', '-')}" for n in _COMPARE_OPTIONS if getattr(args, n) is not None]
    if args.reports or given:
        what_given = ", ".join([*(repr(r) for r in args.reports), *given])
        raise UsageError(f"{what_given}: report files and these options are bench compare's, not bench {what}'s")
    if what == "verdict":
        return plan_verdict(args)
    given = [f"--{n.replace('_', '-')}" for n in _VERDICT_OPTIONS if getattr(args, n) is not None]
    if given:
        raise UsageError(f"{', '.join(given)}: options of bench verdict, not of bench {what}")
    if args.from_report is not None:
        return _bench_replay(args)
    at_least("--iters", args.iters, 1)
    at_least("--warmup", args.warmup, 0)
    device = device_option(args.device)
    if what == "prologue":
        families = families_option(args.family if args.family is not None else DEFAULT_FAMILY)
        if families != [DEFAULT_FAMILY]:
            raise UsageError(f"--family {args.family!r}: bench prologue has shapes for {DEFAULT_FAMILY} only")
    else:
        families = families_option(args.family if args.family is not None else "all")
    shapes = _bench_shapes(args.shape)
    json_path = _bench_output("--json", args.json, Path(DEFAULT_REPORT) / f"bench-{what}.json", ".json")
    plot_path: Path | None = _bench_output("--plot", args.plot, Path(DEFAULT_REPORT) / f"bench-{what}.png", ".png")
    notes: list[str] = []
    if torch.device(device).type == "cpu" and not args.quick:
        raise EnvironmentProblem(
            f"bench {what} on cpu: only --quick (tiny shapes, wall clock) runs on a CPU; the full shapes need "
            "--device cuda"
        )
    timing = args.timing or "eager"
    if timing == "graph" and what != "prologue":
        raise UsageError(
            f"--timing graph: bench {what} times eagerly only (a layer's core and fla's autotuning run host code "
            "between kernels, which a CUDA graph cannot hold); graph timing is for bench prologue"
        )
    if timing == "graph" and torch.device(device).type != "cuda":
        raise EnvironmentProblem(f"--timing graph needs a CUDA device (CUDA graphs), got --device {device}")
    if args.backend is not None:
        names = backends_option(args.backend, baselines=("fla",))
    elif args.quick and torch.device(device).type == "cpu":
        # a smoke test under a minute: fla's Triton conv in the interpreter takes most of a minute alone
        names = [n for n in available_backends() if not n.startswith("fla")]
        left = [n for n in [*available_backends(), "fla"] if n not in names]
        notes.append(f"--quick on a CPU leaves out {', '.join(left)} (Triton's interpreter); name them with --backend")
    else:
        names = [*available_backends(), "fla"]
    fla = "fla" in names
    if fla:
        reason = _bench_fla_problem(what, device, families)
        if reason is not None and args.backend is not None:
            raise EnvironmentProblem(f"--backend 'fla': {reason}")
        if reason is not None:
            notes.append(f"fla left out: {reason}")
            fla = False
        elif what == "layer":
            others = [f for f in families if not bench.fla_fuses(f)]
            if others:
                notes.append(
                    f"fla {bench.fla_version()}: no fla rows for {', '.join(others)}: this fla has no fused prologue "
                    "the fla adapter can force for them"
                )
    backends = [n for n in names if n != "fla"]
    if not backends and not fla:
        raise UsageError(f"--backend {args.backend!r}: nothing left to time")
    plot_path = _plot_unless_matplotlib_missing(args, plot_path)
    return bench.BenchPlan(
        what=what,
        families=families,
        backends=backends,
        fla=fla,
        dtypes=list(dict.fromkeys(args.dtype or (["bfloat16"] if device.startswith("cuda") else ["float32"]))),
        device=device,
        iters=args.iters
        if args.iters is not None
        else (bench.QUICK_ITERS if args.quick else bench.DEFAULT_ITERS)[what],
        warmup=args.warmup
        if args.warmup is not None
        else (bench.QUICK_WARMUP if args.quick else bench.DEFAULT_WARMUP)[what],
        quick=args.quick,
        json=json_path,
        plot=plot_path,
        shapes=shapes,
        notes=notes,
        timing=timing,
    )


#: the options of ``bench verdict`` alone
_VERDICT_OPTIONS = (
    "defect",
    "driver",
    "runs",
    "profile",
    "jobs",
    "timeout",
    "fuzz_seconds",
    "max_seconds",
    "property",
)
#: the options of ``bench layer|prologue`` that ``bench verdict`` refuses
_TIMING_OPTIONS = ("backend", "dtype", "iters", "warmup", "shape", "timing", "plot", "from_report")


def _names(flag: str, value: str, known: list[str], extra: tuple[str, ...] = ()) -> list[str]:
    names = [n.strip() for n in value.split(",")]
    if not all(names):
        raise UsageError(f"{flag} {value!r}: needs names separated by commas")
    out: list[str] = []
    for name in names:
        if name == "all":
            out += known
        elif name in known or name in extra:
            out.append(name)
        else:
            raise UsageError(f"{flag} {name!r} is not one of: {', '.join([*extra, *known, 'all'])}")
    return list(dict.fromkeys(out))


def plan_verdict(args: argparse.Namespace) -> verdict.VerdictPlan:
    """``bench verdict`` arguments, every one checked before any run starts."""
    given = [
        f"--{n.replace('_', '-')}" if n != "from_report" else "--from" for n in _TIMING_OPTIONS if getattr(args, n)
    ]
    if args.quick:
        given.append("--quick")
    if given:
        raise UsageError(f"{', '.join(given)}: bench verdict times whole driver runs; these options time kernels")
    defects = _names(
        "--defect", "none,all" if args.defect is None else args.defect, planting.teeth(), extra=(verdict.NONE,)
    )
    drivers = _names("--driver", "all" if args.driver is None else args.driver, list(verdict.DRIVERS))
    runs = 3 if args.runs is None else args.runs
    at_least("--runs", runs, 1)
    jobs = 2 if args.jobs is None else args.jobs
    at_least("--jobs", jobs, 1)
    profile = gate_profile(args.profile, hint=" (fuzz runs by --fuzz-seconds)")
    timeout = positive_seconds("--timeout", args.timeout, 600.0)
    fuzz_seconds = 60.0 if args.fuzz_seconds is None else args.fuzz_seconds
    if not fuzz_seconds > 0:
        raise UsageError(f"--fuzz-seconds {fuzz_seconds!r} must be > 0")
    if args.max_seconds is not None and not args.max_seconds > 0:
        raise UsageError(f"--max-seconds {args.max_seconds!r} must be > 0")
    family = None
    if args.family is not None:
        family = ",".join(families_option(args.family))
    properties = None
    if args.property is not None:
        gates = [d for d in drivers if d.startswith("pytest")]
        if gates:
            raise UsageError(f"--property: the gate ({', '.join(gates)}) runs every property; it picks check/fuzz rows")
        properties = ",".join(_names("--property", args.property, [*registry.records(), registry.NECESSITY]))
    device = device_option(args.device if args.device is not None else "cpu")
    json_path = _bench_output("--json", args.json, Path(DEFAULT_REPORT) / "bench-verdict.json", ".json")
    return verdict.VerdictPlan(
        defects=defects,
        drivers=drivers,
        runs=runs,
        device=device,
        profile=profile,
        jobs=jobs,
        timeout=timeout,
        fuzz_seconds=fuzz_seconds,
        family=family,
        json=json_path,
        properties=properties,
        max_seconds=args.max_seconds,
    )


def cmd_verdict(plan: verdict.VerdictPlan) -> int:
    print(
        f"gdn-equiv bench verdict: {len(plan.defects)} defect(s) x driver {','.join(plan.drivers)}, {plan.runs} "
        f"run(s) each, device={plan.device} profile={plan.profile} jobs={plan.jobs} timeout={plan.timeout:g}s",
        flush=True,
    )
    report = verdict.new_report(plan)
    try:
        verdict.run(plan, report, progress=lambda line: print(line, file=sys.stderr, flush=True))
    finally:  # the table once, also of an interrupted run's finished rows
        print()
        print(verdict.format_table(report), flush=True)
    print(f"report: {plan.json}")
    found = verdict.findings(report, plan.max_seconds)
    for line in found:
        print(f"FINDING {line}")
    errors = [r for r in report["rows"] if r["verdict"] == "error"]
    if errors:
        print(f"{len(errors)} row(s) ended in an error (their output's tail is in the JSON)")
    return EXIT_FAILED if found else EXIT_ENVIRONMENT if errors else EXIT_OK


#: the options of ``bench compare`` alone
_COMPARE_OPTIONS = ("max_slowdown", "alpha", "markdown", "pair")


@dataclass
class ComparePlan:
    """``bench compare``: two reports read and found comparable, the thresholds checked."""

    old: Path
    new: Path
    old_report: dict[str, Any]
    new_report: dict[str, Any]
    max_slowdown: float
    alpha: float
    pairs: dict[str, str]
    markdown: Path | None


def _percent(flag: str, value: str) -> float:
    """``5`` or ``5%``: five percent, as a fraction; finite and in [0, 100)."""
    text = value.strip().removesuffix("%")
    try:
        number = float(text)
    except ValueError:
        raise UsageError(f"{flag} {value!r} must be a percentage, e.g. 5 or 5%") from None
    if not (math.isfinite(number) and 0 <= number < 100):
        raise UsageError(f"{flag} {value!r} must be a percentage >= 0 and < 100")
    return number / 100


def plan_compare(args: argparse.Namespace) -> ComparePlan:
    """``bench compare OLD NEW``: every option checked, both files read, and two reports from different
    machines or versions refused by name, before anything is compared."""
    given = [
        f"--{n.replace('_', '-')}" if n != "from_report" else "--from"
        for n in (*_VERDICT_OPTIONS, *_TIMING_OPTIONS, "family", "json")
        if getattr(args, n)
    ]
    if args.quick:
        given.append("--quick")
    if given:
        raise UsageError(f"{', '.join(given)}: bench compare reads two reports and times nothing")
    if len(args.reports) != 2:
        raise UsageError(f"bench compare needs two reports, OLD.json NEW.json; got {len(args.reports)}")
    max_slowdown = bench_compare.DEFAULT_MAX_SLOWDOWN
    if args.max_slowdown is not None:
        max_slowdown = _percent("--max-slowdown", args.max_slowdown)
    alpha = bench_compare.DEFAULT_ALPHA if args.alpha is None else args.alpha
    if not (math.isfinite(alpha) and 0 < alpha < 0.5):
        raise UsageError(f"--alpha {alpha!r} must be > 0 and < 0.5")
    markdown = None
    if args.markdown is not None:
        markdown = _bench_output("--markdown", args.markdown, Path(args.markdown), ".md")
    paths = [Path(r) for r in args.reports]
    try:
        old, new = (bench_compare.load_report(f, p) for f, p in zip(("OLD", "NEW"), paths, strict=True))
    except InvalidArgument as exc:
        raise UsageError(one_line(str(exc))) from None
    why = bench_compare.refusal(old, new)
    if why is not None:
        raise UsageError(f"{paths[0]} vs {paths[1]}: {why}")
    pairs: dict[str, str] = {}
    for value in args.pair or ():
        a, eq, b = value.partition("=")
        if not (eq and a.strip() and b.strip()):
            raise UsageError(f"--pair {value!r} must be OLD_BACKEND=NEW_BACKEND")
        a, b = a.strip(), b.strip()
        for side, report, name in (("OLD", old, a), ("NEW", new, b)):
            names = sorted({str(r.get("backend")) for r in report["rows"]})
            if name not in names:
                raise UsageError(f"--pair {value!r}: {side} has no rows of backend {name!r}; its backends: {names}")
        pairs[a] = b
    return ComparePlan(paths[0], paths[1], old, new, max_slowdown, alpha, pairs, markdown)


def cmd_compare(plan: ComparePlan) -> int:
    result = bench_compare.compare(
        plan.old,
        plan.new,
        plan.old_report,
        plan.new_report,
        max_slowdown=plan.max_slowdown,
        alpha=plan.alpha,
        pairs=plan.pairs,
    )
    text = bench_compare.format_markdown(result)
    print(text, flush=True)
    if plan.markdown is not None:
        plan.markdown.parent.mkdir(parents=True, exist_ok=True)
        plan.markdown.write_text(text + "\n")
        print(f"markdown: {plan.markdown}")
    for m in result.slower:
        print(f"FINDING {m.row} {m.path} {m.pass_}: NEW/OLD {m.ratio:.3f}, p {m.p_holm:.2g} (Holm)")
    if not result.measured:
        print("nothing compared: no row of one report was timed in the other")
    elif result.not_compared:
        print(f"{len(result.not_compared)} row(s) or measurement(s) not compared: not a pass")
    return EXIT_FAILED if result.slower or result.not_compared or not result.measured else EXIT_OK


@dataclass
class BenchReplay:
    """``bench --from``: an earlier report to print and plot again, nothing timed."""

    source: Path
    report: dict[str, Any]
    plot: Path | None


#: the timing and selection options of ``bench``, which ``--from`` leaves to the report it reads
#: (``--device`` is filled in before the command sees it, so it cannot be told apart from its default)
_BENCH_RUN_OPTIONS = ("family", "backend", "dtype", "iters", "warmup", "shape", "json", "timing")


def _bench_replay(args: argparse.Namespace) -> BenchReplay:
    import json

    given = [f"--{name}" for name in _BENCH_RUN_OPTIONS if getattr(args, name) is not None]
    if args.quick:
        given.append("--quick")
    if given:
        raise UsageError(f"--from {args.from_report!r} times nothing: {', '.join(given)} cannot apply")
    source = Path(args.from_report)
    if not source.is_file():
        raise UsageError(f"--from {args.from_report!r} must name an existing bench report (.json)")
    try:
        report = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--from {args.from_report!r} is not a JSON file: {exc}") from exc
    kind = bench.FORMAT.rsplit("/", 1)[0] + "/"  # any version of the report format
    if not isinstance(report, dict) or not str(report.get("format", "")).startswith(kind):
        raise UsageError(f"--from {args.from_report!r} is not a gdn-equiv bench report (no {kind!r} format)")
    if report.get("command") != f"bench {args.what}" or not isinstance(report.get("rows"), list):
        raise UsageError(
            f"--from {args.from_report!r} is a report of {report.get('command')!r}, not of 'bench {args.what}'"
        )
    plot = _bench_output("--plot", args.plot, Path(DEFAULT_REPORT) / f"bench-{args.what}.png", ".png")
    return BenchReplay(source, report, _plot_unless_matplotlib_missing(args, plot))


def _plot_unless_matplotlib_missing(args: argparse.Namespace, path: Path | None) -> Path | None:
    """``path``, or None (the plot skipped) where matplotlib is missing and no ``--plot`` asked for one;
    an explicit ``--plot`` without matplotlib is refused."""
    if matplotlib_missing := bench.matplotlib_missing():
        if args.plot is not None:
            raise EnvironmentProblem(f"--plot {args.plot!r}: {matplotlib_missing}")
        return None
    return path


def cmd_bench(plan: Any) -> int:
    if cli_catch.is_plan(plan):
        return cli_catch.cmd_catch(plan)
    if isinstance(plan, ComparePlan):
        return cmd_compare(plan)
    if isinstance(plan, verdict.VerdictPlan):
        return cmd_verdict(plan)
    if isinstance(plan, BenchReplay):
        print(f"gdn-equiv bench: {plan.source} ({plan.report.get('status')}, {len(plan.report['rows'])} rows)")
        print()
        print(bench.format_table(plan.report), flush=True)
        return _bench_outcome(plan.report, plan.plot, plan.source)
    impls = [*plan.backends, *(["fla"] if plan.fla else [])]
    print(
        f"gdn-equiv bench {plan.what}: family={','.join(plan.families)} backend={','.join(impls)} "
        f"dtype={','.join(plan.dtypes)} device={plan.device} shapes={len(plan.shapes)}"
        f"{' (quick)' if plan.quick else ''} iters={plan.iters} warmup={plan.warmup}",
        flush=True,
    )
    report = bench.new_report(plan)
    try:
        bench.run(plan, report, progress=lambda line: print(line, file=sys.stderr, flush=True))
    finally:  # the table once, also of an interrupted run's finished rows
        print()
        print(bench.format_table(report), flush=True)
    return _bench_outcome(report, plan.plot, plan.json)


def _bench_outcome(report: dict[str, Any], plot: Path | None, json_path: Path | None) -> int:
    """The plot, the report's path, the findings and the exit status of a bench report."""
    if plot is not None:
        bench.write_plot(report, plot)
        print(f"plot: {plot}")
    else:
        print(f"plot skipped: {bench.matplotlib_missing()}")
    print(f"report: {json_path}")
    found, errors = bench.findings(report["rows"]), bench.errors(report["rows"])
    for line in found:
        print(f"FINDING {line}")
    if errors:
        print(f"{len(errors)} row(s) could not run here (see the table's error cells)")
    return EXIT_FAILED if found else EXIT_ENVIRONMENT if errors else EXIT_OK


def add_parser(sub: Any) -> None:
    """``bench``'s parser."""
    p = subcommand(
        sub, "bench", "time the fused prologue against the separate one, side by side (a command, never a test)"
    )
    p.add_argument(
        "what",
        choices=["layer", "prologue", "verdict", "compare", "catch"],
        help="layer: the whole layer per family, separate vs fused prologue; prologue: the convs alone; verdict: the "
        "time to a red verdict per planted defect (the registry's teeth) and driver, each run a fresh process; "
        "compare OLD.json NEW.json: a slowdown of NEW against OLD, row by row (exit 1: a significant slowdown past "
        "--max-slowdown, or a row not compared; exit 2: reports of different devices or versions); catch: how often "
        "--defect (or --command) is caught in --runs fresh runs, each with an empty example database",
    )
    p.add_argument("reports", nargs="*", metavar="OLD.json NEW.json", help="compare: the two bench reports")
    p.add_argument(
        "--family",
        default=None,
        metavar="NAME[,NAME]|all",
        help=f"layer: families to time (default all; see: gdn-equiv families); prologue: {DEFAULT_FAMILY} only",
    )
    p.add_argument(
        "--backend",
        default=None,
        help="conv backends, comma separated, or module:attr; 'fla' adds fla's own layer (layer: where the fla "
        "adapter can force its path) or fla's conv (prologue) (default: every available one, fla where it runs)",
    )
    p.add_argument(
        "--dtype", action="append", choices=DTYPES, help="repeatable (default: bfloat16 on cuda, float32 on cpu)"
    )
    p.add_argument(
        "--device",
        default=None,
        help="cpu or cuda[:N] (layer/prologue default: cuda when present, cpu needs --quick; verdict default: cpu)",
    )
    p.add_argument(
        "--iters", type=int, default=None, help="timed calls per measurement, >= 1 (default layer 10, prologue 50)"
    )
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first, >= 0 (default layer 2, prologue 10)")
    p.add_argument(
        "--shape",
        action="append",
        metavar="BxT",
        help="batch x sequence length, repeatable (default: 1x2048 2x2048 4x2048 2x4096 4x4096; --quick: 1x16 2x32)",
    )
    p.add_argument("--quick", action="store_true", help="tiny configs and shapes (a smoke test; the only mode on cpu)")
    p.add_argument(
        "--timing",
        choices=BENCH_TIMINGS,
        default=None,
        help="eager (default): each call as a program makes it, host work and launches included; graph (prologue, "
        "cuda): a CUDA graph of each call replayed, device time only (what the kernels cost)",
    )
    p.add_argument(
        "--json", default=None, metavar="FILE.json", help=f"report (default {DEFAULT_REPORT}/bench-WHAT.json)"
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help=f"speedup plot, needs matplotlib (default {DEFAULT_REPORT}/bench-WHAT.png; skipped without matplotlib)",
    )
    p.add_argument(
        "--from",
        dest="from_report",
        default=None,
        metavar="FILE.json",
        help="time nothing: print the table and write the plot of an earlier report of the same kind (e.g. one "
        "a time limit cut short: its finished rows are in the JSON)",
    )
    v = p.add_argument_group("bench verdict")
    v.add_argument(
        "--defect",
        default=None,
        metavar="NAME[,NAME]|all|none",
        help="planted defects (the registry's teeth: backend:NAME, layer defects, planted engines) and 'none', the "
        "green run with nothing planted (default: none,all)",
    )
    v.add_argument(
        "--driver",
        default=None,
        metavar="NAME[,NAME]|all",
        help="check, pytest (the gate, every test), pytest-x (the gate with -x), fuzz (default: all)",
    )
    v.add_argument(
        "--property",
        default=None,
        metavar="NAME[,NAME]",
        help="check/fuzz drivers only: the properties of their rows (default every one; the gate runs all)",
    )
    v.add_argument("--runs", type=int, default=None, help="fresh runs per defect x driver, median reported (default 3)")
    v.add_argument("--profile", default=None, help="Hypothesis profile of every run: dev, ci or gpu (default ci)")
    v.add_argument(
        "--jobs", type=int, default=None, help="pytest -n for the gate drivers; 1 runs without xdist (default 2)"
    )
    v.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds a run may take before it is stopped: no verdict (default 600)",
    )
    v.add_argument("--fuzz-seconds", type=float, default=None, help="the fuzz driver's --seconds (default 60)")
    v.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="a planted defect whose red verdict takes longer (median) is a finding (exit 1); without it only a "
        "defect that is not red is one",
    )
    c = p.add_argument_group("bench compare")
    c.add_argument(
        "--max-slowdown",
        default=None,
        metavar="PERCENT",
        help="a slowdown up to this is allowed: NEW is flagged only when its calls are significantly slower than "
        "OLD's times 1 + PERCENT/100 (default 5)",
    )
    c.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="significance level over all the measurements compared (Holm-corrected; default 0.05)",
    )
    c.add_argument("--markdown", default=None, metavar="FILE.md", help="write the comparison's table there too")
    c.add_argument(
        "--pair",
        action="append",
        metavar="OLD_BACKEND=NEW_BACKEND",
        help="match OLD's rows of one backend with NEW's rows of another (a kernel under review against the one it "
        "replaces); repeatable",
    )
    cli_catch.add_options(p)
    p.set_defaults(prepare=plan_bench, run=cmd_bench)
