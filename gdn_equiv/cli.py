"""``gdn-equiv``: check, fuzz, repro, bench, families, coverage.

``check`` runs the properties (P2-P7, and the P6 necessity searches) against a backend with a
Hypothesis profile and prints a summary table, one row per property x family x backend x dtype
(examples run, result, the worst difference seen against its tolerance); ``fuzz`` repeats them with
fresh randomness until a time budget is spent; both keep Hypothesis' example database (one key per
row: saved failures replay first) and write a report directory as they go (``rows.jsonl``,
``summary.json``, each failure's shrunk example and a standalone reproducer), and on request
``--junit-xml`` and ``--json`` files for CI systems. ``repro FILE`` replays a failure.
``bench layer`` / ``bench prologue`` time the fused prologue against the separate one (whole layer,
or the convs alone). ``families`` lists the layer families. ``coverage`` counts a pytest run's examples
per input region (channel counts, T against W, states, dtypes, ...) from Hypothesis' observability
output (:mod:`gdn_equiv.coverage`).

Every argument is checked before the first example runs (SPEC §10); the exit status says how the run
ended (:data:`EXIT_STATUS`).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from gdn_equiv import registry
from gdn_equiv.families import DEFAULT_FAMILY
from gdn_equiv.testing import PROFILES

if TYPE_CHECKING:
    from gdn_equiv.guard import Condition
    from gdn_equiv.report import Check, ReportWriter

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130

EXIT_STATUS = """\
exit status:
  0    everything asked for ran, and nothing failed
  1    a property failed (a finding; the report has its shrunk example), or an asked row
       was not checked: not exercised (none of its examples was applicable) or not
       reached (the budget ended first); the ledger in the report lists every row
  2    usage error: an argument, option, profile name (also HYPOTHESIS_PROFILE) or input
       file refused before any example ran; one line on stderr names the value and the rule
  3    the environment cannot run what was asked: an extra that is not installed (fla,
       causal-conv1d, triton), an absent device, a backend that cannot run here, an upstream
       version the adapter does not know
  4    internal error of gdn-equiv itself; the traceback is saved in the report directory
       (internal-error.txt)
  130  interrupted (Ctrl-C or SIGTERM, or its standard output closed: ... | head); the
       report is complete up to the last finished check
"""
REPRO_EXIT_STATUS = """\
exit status:
  0    the example no longer fails
  1    it still fails, or it can no longer be judged (the example no longer meets the
       property's premise)
  2    the file is missing, unreadable, of an unknown format version or does not validate
  3    the environment cannot run it (backend, device or target missing here)
  4    internal error of gdn-equiv itself; the traceback is saved in gdn-equiv-report/
  130  interrupted
"""
COVERAGE_EXIT_STATUS = """\
exit status:
  0    the report was printed (with --require-all: and every expected region and every
       promised combination of regions was reached)
  1    with --require-all: an expected region or a promised combination was NOT REACHED
       (the report lists them)
  2    --observed is missing, holds no *_testcases.jsonl file or no test case, or has a line
       that is not JSON; --json names a directory; one line on stderr names the path
  4    internal error of gdn-equiv itself; the traceback is saved in gdn-equiv-report/
  130  interrupted
"""

# one summary row per dtype the examples are drawn in (conv weights may still carry another, G9)
DTYPES = registry.DTYPES
#: the shortest share of a fuzz budget a row can use (its first examples: imports, a first compile); a
#: budget below rows x this is refused before the first example, naming the minimum
MIN_SECONDS_PER_ROW = 1.0
BENCH_TIMINGS = ("eager", "graph")  # bench --timing (gdn_equiv.bench.BenchPlan.timing)
DEFAULT_REPORT = "gdn-equiv-report"
NECESSITY = registry.NECESSITY


class UsageError(Exception):
    """An argument refused before any example runs (exit status 2)."""


class EnvironmentProblem(Exception):
    """What was asked cannot run on this machine (exit status 3)."""


@dataclass
class Plan:
    """A ``check`` / ``fuzz`` run with every argument checked and resolved."""

    command: str
    target: str
    target_options: dict[str, Any]
    backends: list[str]
    properties: list[str]
    conditions: list[Condition]
    dtypes: list[str]
    families: list[str]
    device: str
    profile: str
    examples: int
    necessity_examples: int | None  # None: the registry's budget per backend
    max_seq_len: int
    seconds: float | None
    report: Path
    database: Path | str  # a directory, or a redis:// URL
    junit_xml: Path | None
    json: Path | None
    meta: dict[str, Any] = field(default_factory=dict)
    isolate: bool = False  # each example in a worker process (gdn_equiv.isolation)
    example_timeout: float | None = None


# ---- checking arguments (before anything runs) ------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _at_least(flag: str, value: int | None, low: int) -> None:
    if value is not None and value < low:
        raise UsageError(f"{flag} must be >= {low}, got {value}")


def _explicit(args: argparse.Namespace, *names: str) -> list[str]:
    """The options among ``names`` that were given (their defaults are ``None`` / ``False``)."""
    return [f"--{n.replace('_', '-')}" for n in names if getattr(args, n, None) not in (None, False)]


def _profile(args: argparse.Namespace, default: str) -> str:
    env = os.environ.get("HYPOTHESIS_PROFILE")
    if env is not None and env != "" and env not in PROFILES:
        raise UsageError(f"HYPOTHESIS_PROFILE={env!r} is not a profile; known profiles: {', '.join(sorted(PROFILES))}")
    return args.profile or env or default


def _device(name: str, flag: str = "--device") -> str:
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise UsageError(f"{flag} {name!r} is not a device; use cpu or cuda[:N]") from None
    if device.type == "cpu":
        return name
    if device.type != "cuda":
        raise UsageError(f"{flag} {name!r}: gdn-equiv runs on cpu or cuda[:N]")
    if not torch.cuda.is_available():
        raise EnvironmentProblem(f"{flag} {name!r}: no CUDA device here (torch {torch.__version__})")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise EnvironmentProblem(f"{flag} {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return name


def _backends(option: str, *, flag: str = "--backend", baselines: tuple[str, ...] = ()) -> list[str]:
    """Each comma-separated name (or ``module:attr`` spec) loaded and asked whether it can run here,
    so that a typo costs a second, not a run of failing rows."""
    from gdn_equiv.backends import get_backend, known_backends

    names = [n.strip() for n in option.split(",")]
    if not option.strip() or not all(names):
        raise UsageError(
            f"{flag} {option!r}: needs backend names or module:attr specs separated by commas; "
            f"known backends: {', '.join([*known_backends(), *baselines])}"
        )
    for name in dict.fromkeys(names):
        if name in baselines:
            continue
        try:
            backend = get_backend(name)
        except Exception as exc:  # unknown name, or a plug-in whose import or protocol check failed
            raise UsageError(f"{flag} {name!r}: {_one_line(str(exc)) or type(exc).__name__}") from None
        reason = backend.unavailable()
        if reason is not None:
            raise EnvironmentProblem(f"{flag} {name!r} cannot run here: {_one_line(reason)}")
    return list(dict.fromkeys(names))


def _families(option: str, *, fla_only: bool = False) -> list[str]:
    """``--family``: in-house families; with ``fla_only`` (``--target fla``) the fla-only ones too."""
    from gdn_equiv.errors import InvalidArgument
    from gdn_equiv.families import parse_families

    try:
        return parse_families(option, fla_only=fla_only)
    except InvalidArgument as exc:
        raise UsageError(f"--family {option!r}: {_one_line(str(exc))}") from None


def _properties(args: argparse.Namespace) -> tuple[list[str], list[Condition]]:
    """``--property`` names: the example properties of the registry (:mod:`gdn_equiv.registry`),
    ``P6-necessity`` (every condition's search) or ``P6-necessity-G<n>`` (one); all when none is given."""
    names = [r.name for r in registry.property_records()]
    searches = {r.name: r.condition for r in registry.necessity_records() if r.condition is not None}
    if not args.property:
        return names, [] if args.skip_necessity else list(searches.values())
    properties: list[str] = []
    conditions: list[Condition] = []
    for name in dict.fromkeys(args.property):
        if name in names:
            properties.append(name)
        elif name == NECESSITY:
            conditions += [c for c in searches.values() if c not in conditions]
        elif name in searches:
            conditions += [searches[name]] if searches[name] not in conditions else []
        else:
            known = [*names, NECESSITY, *searches]
            raise UsageError(f"--property {name!r} is not a property; known: {', '.join(known)}")
    if conditions and args.skip_necessity:
        raise UsageError(f"--skip-necessity contradicts --property {NECESSITY}...: drop one of them")
    return properties, conditions


def _not_a_directory(flag: str, value: str) -> Path:
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {value!r} is a file; it must be a directory")
    return path


def _output_file(flag: str, value: str | None) -> Path | None:
    """A file the run writes at its end: not a directory (its directory is made by :func:`_make_dirs`)."""
    if not value:
        return None
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {value!r} is a directory; it must be a file")
    _not_a_directory(flag, str(path.parent))
    return path


def _make_dirs(outputs: dict[str, Path | None]) -> None:
    """Create the directories the run will write into, once every other argument was accepted: a path
    it cannot write is refused before the first example, not found at the end with findings unsaved
    (``os.access`` cannot tell: root passes it for ``/proc``). A refusal leaves nothing behind."""
    made: list[Path] = []
    for flag, path in outputs.items():
        if path is None:
            continue
        new = [p for p in (path, *path.parents) if not p.exists()]
        try:
            path.mkdir(parents=True, exist_ok=True)
            made.extend(new)
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as exc:
            for p in sorted(made, key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    p.rmdir()
            raise UsageError(f"{flag} {str(path)!r}: cannot write there: {exc.strerror or exc}") from None


def _target_problem(target: str) -> str | None:
    """Why ``target`` cannot be run here, or ``None`` (for fla: not installed, or a version its
    adapter's table does not know, named with the known ones)."""
    from gdn_equiv.targets import get_target

    return get_target(target).unavailable()


def plan_run(args: argparse.Namespace) -> Plan:
    """``check`` / ``fuzz`` arguments, every one checked: the run starts only when all are fine."""
    fuzz = args.command == "fuzz"
    if fuzz and not (math.isfinite(args.seconds) and args.seconds > 0):
        raise UsageError(f"--seconds must be a finite number > 0, got {args.seconds}")
    _at_least("--examples", args.examples, 1)
    _at_least("--necessity-examples", args.necessity_examples, 1)
    _at_least("--max-seq-len", args.max_seq_len, 1)
    profile = _profile(args, "fuzz" if fuzz else "ci")
    device = _device(args.device)
    report = _not_a_directory("--report", args.report)
    database = _database_option(args.database)
    if args.target == "gdn_equiv":
        if args.fla_core is not None:
            raise UsageError(f"--fla-core {args.fla_core!r} applies to --target fla only")
        target_options: dict[str, Any] = {}
        backends = _backends(args.backend if args.backend is not None else "torch")
        families = _families(args.family if args.family is not None else DEFAULT_FAMILY)
        properties, conditions = _properties(args)
        isolate, example_timeout = _isolation(args, backends)
    else:
        # an upstream layer: its guard against the spec, one gap kind at a time (P1); the in-house
        # properties' options do not apply and are refused rather than ignored
        unused = _explicit(
            args, "backend", "property", "dtype", "max_seq_len", "skip_necessity", "necessity_examples", "isolate"
        )
        unused += [] if args.example_timeout is None else ["--example-timeout"]
        if unused:
            raise UsageError(f"--target {args.target} searches its guard's gaps; {', '.join(unused)} do not apply")
        target_options = {"core": args.fla_core or "fla"} if args.target == "fla" else {}
        families = _families(args.family if args.family is not None else DEFAULT_FAMILY, fla_only=args.target == "fla")
        if args.fla_core == "reference":
            from gdn_equiv.targets.fla_target import REFERENCE_CORE_FAMILIES

            other = [f for f in families if f not in REFERENCE_CORE_FAMILIES]
            if other:  # refused here, not at the first gap found (H200, 2026-12-04: every non-GDN demo failed)
                raise UsageError(
                    f"--fla-core reference swaps in the core of {', '.join(REFERENCE_CORE_FAMILIES)} only; "
                    f"--family {','.join(other)} would run with fla's core: drop --fla-core, or pick those families"
                )
        backends, properties, conditions = ["-"], [], []
        isolate, example_timeout = False, None
    # the properties' own argument checks need the device settled (triton's interpreter on CPU)
    reason = _target_problem(args.target)
    if reason is not None:
        raise EnvironmentProblem(f"--target {args.target}: {_one_line(reason)}")
    # the one profile table; a fuzz row runs until its share of the budget is spent
    examples = args.examples if args.examples is not None else registry.examples_per_row(profile)
    junit_xml, json_copy = _output_file("--junit-xml", args.junit_xml), _output_file("--json", args.json)
    plan = Plan(
        command=args.command,
        target=args.target,
        target_options=target_options,
        backends=backends,
        properties=properties,
        conditions=conditions,
        dtypes=list(dict.fromkeys(args.dtype or DTYPES)),
        families=families,
        device=device,
        profile=profile,
        examples=examples,
        necessity_examples=args.necessity_examples,
        max_seq_len=args.max_seq_len or registry.MAX_SEQ_LEN,
        seconds=args.seconds if fuzz else None,
        report=report,
        database=database,
        junit_xml=junit_xml,
        json=json_copy,
        isolate=isolate,
        example_timeout=example_timeout,
    )
    if plan.seconds is not None:
        runnable = sum(1 for row in ledger_rows(plan) if row.result != "n/a")
        if plan.seconds < runnable * MIN_SECONDS_PER_ROW:
            raise UsageError(
                f"--seconds {args.seconds:g} is too short for this plan: {runnable} rows need at least "
                f"{runnable * MIN_SECONDS_PER_ROW:g} s ({MIN_SECONDS_PER_ROW:g} s a row); give more seconds or ask "
                "for fewer rows (--property, --dtype, --family, --skip-necessity)"
            )
    _make_dirs({
        "--report": report,
        "--database": database if isinstance(database, Path) else None,
        "--junit-xml": junit_xml and junit_xml.parent,
        "--json": json_copy and json_copy.parent,
    })  # fmt: skip
    return plan


def ledger_rows(plan: Plan) -> list[Check]:
    """The ledger: every row the plan asks for, in run order; a row that cannot run here carries its
    ``n/a`` result and reason (SPEC §10)."""
    from gdn_equiv.report import Check

    if plan.target != "gdn_equiv":
        name = f"P1-{plan.target}-guard-vs-spec"
        options = {k: str(v) for k, v in plan.target_options.items()}
        return [
            Check(name, "-", family=f, target=plan.target, target_options=options, function="check_target_guard")
            for f in plan.families
        ]
    records = [registry.get_record(n) for n in plan.properties]
    records += [registry.get_record(registry.necessity_name(c)) for c in plan.conditions]
    rows = []
    for row, record, reason in registry.asked_rows(
        records, families=plan.families, backends=plan.backends, dtypes=plan.dtypes
    ):
        check = Check(row.name, row.backend, row.dtype, family=row.family, function=record.function)
        if reason is not None:
            check.result, check.failure = "n/a", reason
        rows.append(check)
    return rows


def _isolation(args: argparse.Namespace, backends: list[str]) -> tuple[bool, float | None]:
    """``--isolate`` (default: on when a backend is a plug-in) and ``--example-timeout``, checked."""
    from gdn_equiv import isolation

    timeout = args.example_timeout
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--example-timeout must be a finite number of seconds > 0, got {timeout}")
    isolate = args.isolate if args.isolate is not None else any(isolation.is_plugin(b) for b in backends)
    if timeout is not None and not isolate:
        raise UsageError("--example-timeout needs --isolate: only an example in a worker can be timed out")
    return isolate, (timeout or isolation.DEFAULT_TIMEOUT) if isolate else None


def _database_option(value: str) -> Path | str:
    """``--database``: a directory, or ``redis://host:port/db`` (a team's shared database), reached now."""
    if not value.startswith(("redis://", "rediss://", "unix://")):
        if "://" in value:
            raise UsageError(f"--database {value!r}: a directory, or redis://HOST:PORT/DB (rediss://, unix:// too)")
        return _not_a_directory("--database", value)
    try:
        import redis
    except ImportError:
        raise EnvironmentProblem(f"--database {value!r} needs redis: pip install gdn-equiv[redis]") from None
    try:
        redis.Redis.from_url(value, socket_connect_timeout=5).ping()
    except ValueError as exc:
        raise UsageError(f"--database {value!r}: {_one_line(str(exc))}") from None
    except redis.RedisError as exc:
        raise EnvironmentProblem(f"--database {value!r}: cannot reach the server: {_one_line(str(exc))}") from None
    return value


# ---- check / fuzz --------------------------------------------------------------------------------


def _checks(plan: Plan, rows: list[Check], *, database: object, deadline: float | None) -> Iterator[Check]:
    """Each asked row's result as it finishes (with each further kind of failure as a row of its own).
    With a ``deadline`` (fuzz) every row gets a share: row i may run until ``start + (i + 1) x budget /
    rows``, so time a quick row leaves passes to the next, and no row is left without one."""
    from gdn_equiv import runner

    if plan.target != "gdn_equiv":
        # one gap search per family; a time budget is shared out evenly over the families left
        for i, family in enumerate(plan.families):
            seconds = None
            if deadline is not None:
                seconds = max(0.0, deadline - time.perf_counter()) / (len(plan.families) - i)
            yield from runner.search_gaps(
                plan.target,
                max_examples=plan.examples,
                device=plan.device,
                seconds=seconds,
                database=database,
                family=family,
                **plan.target_options,
            )
        return
    runnable = [row for row in rows if row.result != "n/a"]
    start = time.perf_counter()
    for i, row in enumerate(runnable):
        share = None if deadline is None else start + (i + 1) * (deadline - start) / len(runnable)
        if share is not None and time.perf_counter() >= deadline:  # type: ignore[operator]
            return  # the rest stay "not reached"
        record = registry.get_record(row.name)
        if record.condition is not None:
            check = runner.find_counterexample(
                record.condition,
                row.backend,
                max_examples=plan.necessity_examples,
                device=plan.device,
                family=row.family,
                deadline=share,
            )
        else:
            check = runner.run_property(
                row.name,
                row.backend,
                max_examples=plan.examples,
                device=plan.device,
                max_seq_len=plan.max_seq_len,
                database=database,
                dtype=None if row.dtype == "any" else row.dtype,
                family=row.family,
                deadline=share,
                record=record,
            )
        yield check
        yield from check.also  # each further kind of failure, a row of its own


def _progress(check: Check) -> None:
    print(
        f"  {check.name:<24} {check.family:<15} {check.backend:<8} {check.dtype:<8} {check.result:<15} "
        f"{check.examples:>5} examples {check.seconds:6.1f}s",
        flush=True,
    )


def _writer(plan: Plan) -> ReportWriter:
    from gdn_equiv.report import ReportWriter

    plan.meta = {
        "mode": plan.command,
        "target": plan.target,
        **({"target_options": plan.target_options} if plan.target_options else {}),
        "backend": ",".join(plan.backends),
        "family": ",".join(plan.families),
        "profile": plan.profile,
        "device": plan.device,
        "examples": plan.examples,
    }
    return ReportWriter(plan.report, device=plan.device, meta=plan.meta, json_copy=plan.json, junit_xml=plan.junit_xml)


def _database(plan: Plan) -> object:
    from hypothesis.database import DirectoryBasedExampleDatabase

    if isinstance(plan.database, str):
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase

        return RedisExampleDatabase(redis.Redis.from_url(plan.database))
    return DirectoryBasedExampleDatabase(str(plan.database))


def _run(plan: Plan, header: str, deadline: float | None = None) -> int:
    """Run the plan's rows and compute the exit status from the ledger: 0 only when every asked row
    ran at least one applicable example (or cannot be asked here, with the reason) and none failed."""
    from gdn_equiv.runner import without_seed_hints

    with without_seed_hints():
        return _run_ledger(plan, header, deadline)


def _run_ledger(plan: Plan, header: str, deadline: float | None) -> int:
    from gdn_equiv import isolation
    from gdn_equiv.interpreter import describe

    started = time.perf_counter()
    print(header, flush=True)
    environment = describe()
    database = _database(plan)
    rows = ledger_rows(plan)
    with _writer(plan) as writer:
        if environment is not None:  # what this machine changes about the kernels' arithmetic, said up front
            writer.meta["environment"] = environment
            print(environment, flush=True)
        writer.ask(rows)
        na = [r for r in rows if r.result == "n/a"]
        print(f"ledger: {len(rows)} rows asked, {len(rows) - len(na)} to run, {len(na)} n/a", flush=True)
        isolation.configure(plan.example_timeout if plan.isolate else None)
        try:
            budget = None if deadline is None else started + deadline
            todo = [r for r in rows if r.result != "n/a"]
            while todo:
                for check in _checks(plan, todo, database=database, deadline=budget):
                    writer.add(check)
                    _progress(check)
                if budget is None or time.perf_counter() >= budget or plan.target != "gdn_equiv":
                    break
                # fuzz: time left after every row had its share goes to another round of the example rows
                # still green (a search needs one run; a failed row has its finding)
                todo = [r for r in writer.rows if r.result == "pass" and registry.get_record(r.name).condition is None]
                writer.meta["rounds"] = writer.meta.get("rounds", 1) + 1
        finally:
            isolation.configure(None)
        writer.meta["seconds"] = round(time.perf_counter() - started, 1)
        summary = writer.finish("complete")
    rows = writer.rows
    from gdn_equiv.report import format_table

    print()
    print(format_table(rows))
    total = sum(c.examples for c in rows)
    failed = writer.failed
    print(
        f"\n{total} examples in {writer.meta['seconds']} s on {plan.device}; {len(rows)} rows asked, "
        f"{len(failed)} failing; report: {summary}"
    )
    for c in rows:
        if c.result in ("none found", "n/a"):
            print(f"{c.result}: {c.row_id}: {c.failure}")
    for c in failed:
        if c.result != "FAIL":
            print(f"\n{c.result.upper()} {c.row_id}: {c.failure}")
            continue
        example = "" if c.example is None else f"\nshrunk example: {c.example.to_json()}"
        print(f"\nFAIL {c.row_id}\n{c.failure}{example}")
        if c.repro:
            print(f"reproducer: python {c.repro}\nreplay: gdn-equiv repro {c.repro_json}")
    unchecked = [c for c in failed if c.result != "FAIL"]
    if unchecked:
        print(
            f"\nnot green: {len(unchecked)} of {len(rows)} asked rows were not checked (not reached or not exercised)"
        )
    return EXIT_FAILED if failed else EXIT_OK


def _what(plan: Plan) -> str:
    core = f" (fla core: {plan.target_options['core']})" if "core" in plan.target_options else ""
    return (
        f"target={plan.target}{core} family={','.join(plan.families)} backend={','.join(plan.backends)} "
        f"device={plan.device} profile={plan.profile}"
        + (f" isolated (example timeout {plan.example_timeout:g} s)" if plan.isolate else "")
    )


def cmd_check(plan: Plan) -> int:
    return _run(plan, f"gdn-equiv check: {_what(plan)} ({plan.examples} examples per property row)")


def cmd_fuzz(plan: Plan) -> int:
    assert plan.seconds is not None
    header = f"gdn-equiv fuzz: {_what(plan)} for {plan.seconds:g}s, shared over the rows"
    return _run(plan, header, deadline=plan.seconds)


# ---- repro / bench / families ----------------------------------------------------------------------


@dataclass
class ReproPlan:
    failure: Any  # gdn_equiv.report.Failure


def plan_repro(args: argparse.Namespace) -> ReproPlan:
    from gdn_equiv import runner
    from gdn_equiv.report import InvalidFailureFile, read_failure

    try:
        failure = read_failure(Path(args.file), functions=runner.replayable_functions())
    except InvalidFailureFile as exc:
        raise UsageError(_one_line(str(exc))) from None
    where = f"{args.file}:"
    _device(failure.device, f"{where} device")
    config = failure.example.config
    backends = {failure.backend, config.conv_backend}
    for slot in getattr(config, "SLOTS", ("q", "k", "v")):
        backends.add(str(getattr(getattr(config, f"{slot}_conv", None), "backend", None) or ""))
    for name in sorted(b for b in backends if b and b != "-"):
        _backends(name, flag=f"{where} backend")
    if failure.target != "gdn_equiv":
        reason = _target_problem(failure.target)
        if reason is not None:
            raise EnvironmentProblem(f"target {failure.target}: {_one_line(reason)}")
    return ReproPlan(failure)


def cmd_repro(plan: ReproPlan) -> int:
    from gdn_equiv import runner

    return runner.replay(plan.failure)


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
    reason = _target_problem("fla")
    if reason is not None:
        return (
            f"{_one_line(reason)}; without the adapter fla's path could be forced only by patching fla, so this "
            "fla is timed by 'bench prologue' only"
        )
    from gdn_equiv import bench

    if not any(bench.fla_fuses(f) for f in families):
        chosen = ",".join(families)
        return f"fla {bench.fla_version()} has no fused prologue the fla adapter can force in --family {chosen}"
    return None


def plan_bench(args: argparse.Namespace) -> Any:
    """``bench`` arguments, every one checked; fla and the plot are left out with a note where they
    cannot run and were not asked for by name."""
    import torch

    from gdn_equiv import bench
    from gdn_equiv.backends import available_backends

    what = args.what
    if args.from_report is not None:
        return _bench_replay(args)
    _at_least("--iters", args.iters, 1)
    _at_least("--warmup", args.warmup, 0)
    device = _device(args.device)
    if what == "prologue":
        families = _families(args.family if args.family is not None else DEFAULT_FAMILY)
        if families != [DEFAULT_FAMILY]:
            raise UsageError(f"--family {args.family!r}: bench prologue has shapes for {DEFAULT_FAMILY} only")
    else:
        families = _families(args.family if args.family is not None else "all")
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
        names = _backends(args.backend, baselines=("fla",))
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

    from gdn_equiv import bench

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
    from gdn_equiv import bench

    if matplotlib_missing := bench.matplotlib_missing():
        if args.plot is not None:
            raise EnvironmentProblem(f"--plot {args.plot!r}: {matplotlib_missing}")
        return None
    return path


def cmd_bench(plan: Any) -> int:
    from gdn_equiv import bench

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
    from gdn_equiv import bench

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


def cmd_families(args: argparse.Namespace) -> int:
    """One aligned row per family: its fla layer, mask handling, conv channels and activations (for its
    default config), the targets that run it, and what it computes."""
    from gdn_equiv.families import fla_only_families, get_family, known_families

    fla_only = fla_only_families()
    rows = [["family", "fla layer", "mask", "q / k / v channels", "activation", "targets", "what it is"]]
    for name in [*known_families(), *fla_only]:
        try:
            family: Any = get_family(name)
        except ImportError as exc:  # a family whose module (or its extra) is not installed
            rows.append([name, "-", "-", "-", "-", "-", f"cannot be loaded here: {_one_line(str(exc))}"])
            continue
        c = family.config_cls()
        if name in fla_only:  # fla's class with another family's examples (its channels are fla's)
            channels = [family.conv_channels(c, n) for n in c.SLOTS]
            targets = f"[fla-only] fla, {family.like}'s examples"
        else:
            channels = [c.conv_channels(n) for n in c.SLOTS]
            targets = "gdn_equiv, fla" if family.fla_class else "gdn_equiv"
        activations = [str(c.conv_spec(n).activation or "none") for n in c.SLOTS]
        activation = activations[0] if len(set(activations)) == 1 else " / ".join(activations)
        fla_layer = family.fla_class or "-"
        rows.append(
            [name, fla_layer, family.mask, " / ".join(map(str, channels)), activation, targets, family.description]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rows.insert(1, ["-" * w for w in widths])
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return EXIT_OK


# ---- coverage ---------------------------------------------------------------------------------------


@dataclass
class CoveragePlan:
    observations: list[tuple[Path, dict[str, Any]]]
    json: Path | None
    require_all: bool


def plan_coverage(args: argparse.Namespace) -> CoveragePlan:
    """``coverage`` arguments: ``--observed`` (default: Hypothesis' own ``observed`` directory) read in
    full, so a missing directory, one without test cases or a line that is not JSON is refused before
    anything is printed."""
    from gdn_equiv import coverage
    from gdn_equiv.errors import InvalidArgument

    observed = args.observed
    if observed is None:  # where Hypothesis writes: its storage directory, .hypothesis unless set
        observed = str(Path(os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or ".hypothesis") / "observed")
    json_path = _output_file("--json", args.json)
    try:
        observations = coverage.read_observed(Path(observed))
    except InvalidArgument as exc:
        raise UsageError(f"--observed: {_one_line(str(exc))}") from None
    _make_dirs({"--json": json_path and json_path.parent})
    return CoveragePlan(observations=observations, json=json_path, require_all=args.require_all)


def cmd_coverage(plan: CoveragePlan) -> int:
    """Print the report (and write its JSON); with ``--require-all``, exit 1 when a region or a promised
    combination (:data:`gdn_equiv.coverage.PROMISED`) was not reached. Without it the report only
    informs: a rare region (1,025+ channels is one conformance draw in 75 on a CPU) can miss one
    randomized ``ci`` run without anything being wrong."""
    import json

    from gdn_equiv import coverage

    tally = coverage.tally(plan.observations)
    print(coverage.format_report(tally))
    if plan.json is not None:
        plan.json.write_text(json.dumps(coverage.report_json(tally), indent=2) + "\n")
        print(f"json: {plan.json}")
    missing = coverage.not_reached(tally) or coverage.unreached_promised(tally)
    return EXIT_FAILED if plan.require_all and missing else EXIT_OK


# ---- the parser and main ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="gdn-equiv", description=__doc__.split("\n")[0], epilog=EXIT_STATUS, formatter_class=formatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, epilog: str = EXIT_STATUS) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, epilog=epilog, formatter_class=formatter)

    def common(p: argparse.ArgumentParser) -> None:
        # options whose default is None are refused where they do not apply, so they must be told apart
        # from their defaults
        p.add_argument(
            "--backend", default=None, help="conv backend(s), comma separated, or module:attr (default: torch)"
        )
        p.add_argument(
            "--family",
            default=None,
            metavar="NAME[,NAME]|all",
            help=f"layer famil(y/ies) to draw examples for (default: {DEFAULT_FAMILY}; see: gdn-equiv families)",
        )
        p.add_argument("--target", default="gdn_equiv", choices=["gdn_equiv", "fla"], help="layer under test")
        p.add_argument(
            "--fla-core",
            default=None,
            choices=["fla", "reference"],
            help="target fla only: the core inside fla's layer (default fla; reference: ours, with fla's "
            "prologue, guard and convs untouched)",
        )
        p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda when present)")
        p.add_argument(
            "--profile",
            default=None,
            choices=sorted(PROFILES),
            help="Hypothesis profile and example budget (default: $HYPOTHESIS_PROFILE, else "
            f"{'fuzz' if p.prog.endswith('fuzz') else 'ci'})",
        )
        p.add_argument(
            "--examples",
            type=int,
            default=None,
            help="examples per property row, >= 1 (fuzz: per round; default from --profile)",
        )
        p.add_argument(
            "--necessity-examples",
            type=int,
            default=None,
            help="example cap of each P6 necessity search, >= 1 (default: max(200, 5 x --examples))",
        )
        p.add_argument(
            "--property",
            action="append",
            help=f"run only this property (repeatable): P2...P7 names, {NECESSITY} (every P6 search) or "
            f"{NECESSITY}-G<n>",
        )
        p.add_argument(
            "--dtype", action="append", choices=DTYPES, help="run only examples of this dtype (repeatable; default all)"
        )
        p.add_argument("--max-seq-len", type=int, default=None, help="longest generated sequence, >= 1 (default 20)")
        p.add_argument("--skip-necessity", action="store_true", help="skip the P6 counterexample searches")
        p.add_argument("--report", default=DEFAULT_REPORT, help="report directory, written as the run goes")
        p.add_argument(
            "--database",
            default=".hypothesis/examples",
            help="Hypothesis example database: a directory, or redis://HOST:PORT/DB to share findings with a team "
            "(needs gdn-equiv[redis])",
        )
        p.add_argument(
            "--isolate",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="run each example in a worker process, so a kernel that crashes or hangs is a failure of that "
            "example (shrunk and reported), not the end of the run (default: on for plug-in backends)",
        )
        p.add_argument(
            "--example-timeout",
            type=float,
            default=None,
            metavar="SECONDS",
            help="with --isolate: an example running longer fails, its worker killed (> 0; default 60)",
        )
        p.add_argument("--junit-xml", default=None, metavar="FILE", help="also write JUnit XML (one testcase per row)")
        p.add_argument("--json", default=None, metavar="FILE", help="also write the summary JSON here")

    p = command("check", "run the properties once with a profile's budget; saved failures replay first")
    common(p)
    p.set_defaults(prepare=plan_run, run=cmd_check)
    p = command("fuzz", "run the properties with fresh randomness until the time budget is spent")
    common(p)
    p.add_argument("--seconds", type=float, default=60.0, help="time budget, checked before each example (> 0)")
    p.set_defaults(prepare=plan_run, run=cmd_fuzz)
    p = command("repro", "replay a failure JSON from a report", REPRO_EXIT_STATUS)
    p.add_argument("file")
    p.set_defaults(prepare=plan_repro, run=cmd_repro)
    p = command("bench", "time the fused prologue against the separate one, side by side (a command, never a test)")
    p.add_argument(
        "what",
        choices=["layer", "prologue"],
        help="layer: the whole layer per family, separate vs fused prologue; prologue: the convs alone",
    )
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
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda when present; cpu needs --quick)")
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
    p.set_defaults(prepare=plan_bench, run=cmd_bench)
    p = command("families", "list the layer families --family accepts")
    p.set_defaults(prepare=lambda args: args, run=cmd_families)
    p = command(
        "coverage",
        "count a pytest run's examples per input region (channel counts, T against W, states, dtypes) from "
        "Hypothesis' observability output: run the tests with HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1 first",
        COVERAGE_EXIT_STATUS,
    )
    p.add_argument(
        "--observed",
        default=None,
        metavar="DIR",
        help="the run's observations: a directory of *_testcases.jsonl files (default: .hypothesis/observed, "
        "or $HYPOTHESIS_STORAGE_DIRECTORY/observed); Hypothesis appends to one file a day, so empty it before "
        "the run to report that run alone",
    )
    p.add_argument("--json", default=None, metavar="FILE", help="also write the counts as JSON")
    p.add_argument(
        "--require-all",
        action="store_true",
        help="exit 1 when an expected region or a promised combination of regions was not reached (default: report)",
    )
    p.set_defaults(prepare=plan_coverage, run=cmd_coverage)
    return parser


def _prepare_process(args: argparse.Namespace) -> None:
    if hasattr(args, "device") and args.device is None:
        from gdn_equiv.runner import default_device

        args.device = default_device()
    if getattr(args, "device", "cpu") == "cpu":
        import torch

        # without a GPU our triton kernels run in the interpreter (set before triton is imported, and
        # before a backend is asked whether it can run), which also gives the G5 necessity search its
        # second backend
        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
        torch.set_num_threads(1)  # examples are tiny; threads cost more than they give
    __import__("gdn_equiv.interpreter").interpreter.make_faithful()  # before any kernel runs (SPEC §10)


@contextmanager
def _signals_as_interrupt() -> Iterator[None]:
    """Ctrl-C and SIGTERM (a CI job cancelled, a pod stopped) end the run, the report closed: each
    raises ``KeyboardInterrupt`` and is remembered, so the runners stop before their next example even
    if that exception was swallowed on its way up (seen once under load: a fuzz run went on for 30 s
    after its SIGINT)."""
    from gdn_equiv.report import clear_interrupts, note_interrupt

    def interrupt(signum: int, frame: FrameType | None) -> None:
        note_interrupt(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    clear_interrupts()
    # a SIGINT its parent ignores (a background job of a non-interactive shell) stays ignored
    signals = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN]
    try:
        previous = {s: signal.signal(s, interrupt) for s in signals}
    except ValueError:  # not the main thread: the caller owns the signals
        yield
        return
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def _hypothesis_profile(name: str | None) -> Iterator[None]:
    """The profile's Hypothesis settings for the run (strategies read it, e.g. fuzz's ``target()``)."""
    if name is None:
        yield
        return
    from hypothesis import settings

    from gdn_equiv import testing

    testing.register_profiles()
    previous = settings.get_current_profile_name()
    settings.load_profile(name)
    try:
        yield
    finally:
        settings.load_profile(previous)


def _save_traceback(report: Path) -> Path | None:
    from gdn_equiv.report import INTERNAL_ERROR_FILE

    try:
        report.mkdir(parents=True, exist_ok=True)
        path = report / INTERNAL_ERROR_FILE
        path.write_text(traceback.format_exc())
        return path
    except OSError:
        return None


def _quiet_stdout(stream: Any = None) -> None:
    """Standard output (or ``stream``) pointed at /dev/null, so that the interpreter's last flush at
    exit does not raise on the closed pipe again ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (stream or sys.stdout).fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def _report_so_far(command: str, report: Path) -> str:
    """``"; report so far: PATH"`` for a check or fuzz run cut short that has written its summary."""
    summary = report / "summary.json"
    return f"; report so far: {summary}" if command in ("check", "fuzz") and summary.exists() else ""


def main(argv: list[str] | None = None) -> int:
    from gdn_equiv.report import caused_by_interrupt, stdout_closed

    parser = build_parser()
    args = parser.parse_args(argv)  # a malformed option exits with argparse's own status 2
    prog = f"gdn-equiv {args.command}"
    report = Path(getattr(args, "report", DEFAULT_REPORT))
    try:
        with _signals_as_interrupt():
            try:
                _prepare_process(args)
                plan = args.prepare(args)
            except UsageError as exc:
                print(f"{prog}: error: {exc}", file=sys.stderr)
                return EXIT_USAGE
            except EnvironmentProblem as exc:
                print(f"{prog}: cannot run here: {exc}", file=sys.stderr)
                return EXIT_ENVIRONMENT
            with _hypothesis_profile(getattr(plan, "profile", None)):
                try:
                    return int(args.run(plan))
                except Exception as exc:
                    if caused_by_interrupt(exc):
                        raise KeyboardInterrupt from exc
                    raise
    except KeyboardInterrupt:
        print(f"{prog}: interrupted{_report_so_far(args.command, report)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if stdout_closed(exc):  # the reader of our output went away (... | head): stopped from outside
            _quiet_stdout()
            # with 2>&1 the same reader held stderr: saying so must not turn 130 into Python's own 1
            with contextlib.suppress(OSError):
                print(
                    f"{prog}: stopped: its standard output was closed{_report_so_far(args.command, report)}",
                    file=sys.stderr,
                    flush=True,
                )
            _quiet_stdout(sys.stderr)
            return EXIT_INTERRUPTED
        saved = _save_traceback(report)
        where = f"; traceback saved to {saved}" if saved else ""
        print(f"{prog}: internal error: {type(exc).__name__}: {_one_line(str(exc))}{where}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
