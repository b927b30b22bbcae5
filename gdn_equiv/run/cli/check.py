"""``gdn-equiv check``: the property records run once with a profile's budget, and the run machinery
``fuzz`` shares."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import isolation, ledger, registry
from gdn_equiv.harness.interpreter import describe
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.harness.testing import PROFILES
from gdn_equiv.model.families import DEFAULT_FAMILY
from gdn_equiv.run import fuzz_engines, html_report, runner, serving_paths
from gdn_equiv.run import plan as resolve  # the checks every front end shares
from gdn_equiv.run.cli.common import (
    DEFAULT_REPORT,
    DTYPES,
    NECESSITY,
    EnvironmentProblem,
    UsageError,
    at_least,
    backends_option,
    device_option,
    explicit_options,
    families_option,
    make_dirs,
    not_a_directory,
    one_line,
    output_file,
    profile_option,
    subcommand,
)
from gdn_equiv.run.plan import RunPlan
from gdn_equiv.run.report import (
    Check,
    ReportWriter,
    format_table,
)
from gdn_equiv.run.runner import without_seed_hints
from gdn_equiv.targets import get_target
from gdn_equiv.targets.fla_target import REFERENCE_CORE_FAMILIES

if TYPE_CHECKING:
    from gdn_equiv.model.guard import Condition


#: the shortest share of a fuzz budget a row can use (its first examples: imports, a first compile); a
#: budget below rows x this is refused before the first example, naming the minimum
MIN_SECONDS_PER_ROW = 1.0


@dataclass
class Plan:
    """A ``check`` / ``fuzz`` run with every argument checked and resolved: the run's :class:`RunPlan` (as the
    gate's plugin builds it) and what the command adds (rows, budgets, outputs). The fields below ``run`` that
    it holds too are its names, kept for the ledger's rows and the report."""

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
    #: the serving engine paths S1-S7 run on (``--serving-engine``; default the in-house reference)
    serving_engines: list[str] = field(default_factory=lambda: ["reference"])
    isolate: bool = False  # each example in a worker process (gdn_equiv.harness.isolation)
    example_timeout: float | None = None
    sanitize: str | None = None  # each example in a process under compute-sanitizer --tool SANITIZE
    engine: str = "ours"  # fuzz: our loop, or HypoFuzz over the gate's tests (gdn_equiv.run.fuzz_engines)
    workers: int = 1
    dashboard_port: int | None = None
    html: Path | None = None  # the run's page (gdn_equiv.run.html_report)
    #: check: each row's seconds (``--row-seconds``), checked before each example as fuzz's shares are
    row_seconds: float | None = None
    derandomize: bool = False  # check: the same draws on every machine (``--derandomize``)
    run: RunPlan | None = None  # the run plan (plan_run makes it; a test's hand-made plan may leave it out)


def _properties(args: argparse.Namespace) -> tuple[list[str], list[Condition]]:
    """``--property`` names: the example properties of the registry (:mod:`gdn_equiv.harness.registry`), S1-S7,
    ``P6-necessity`` (every condition's search) or ``P6-necessity-G<n>`` (one); all when none is given."""
    names = [r.name for r in registry.property_records()] + [r.name for r in registry.serving_records()]
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


def _serving_engines(option: str | None) -> dict[str, tuple[str, ...]]:
    """``--serving-engine``: each engine asked, with the paths S0-S7 run on. Every name is checked first (an
    unknown one is a usage error naming the known ones), then each must run here: an engine none of whose paths
    runs here is refused naming why (exit 3). An engine's paths that cannot run here while another can are asked
    as ``n/a`` rows with the reason (a GPU path on a CPU)."""
    if option is None:
        return {"reference": ("reference",)}
    names = list(dict.fromkeys(n.strip() for n in option.split(",")))
    if not option.strip() or not all(names):
        raise UsageError(
            f"--serving-engine {option!r}: needs engine names separated by commas (reference, vllm, sglang)"
        )
    asked: dict[str, tuple[str, ...]] = {}
    for name in names:
        try:
            asked.update(resolve.engines([name]))
        except InvalidArgument as exc:
            raise UsageError(f"--serving-engine {name!r}: {exc}") from None
    for name, mine in asked.items():
        why = resolve.engine_unavailable(mine)
        if why is not None:
            raise EnvironmentProblem(f"--serving-engine {name!r} cannot run here: {one_line(why)}")
    return asked


def _fuzz_engine(args: argparse.Namespace) -> str:
    """``fuzz --engine`` (default ours), with ``--workers`` / ``--dashboard-port`` for HypoFuzz only; HypoFuzz
    asked for but not installed is the environment's problem (exit 3), naming the extra."""
    engine = args.engine or "ours"
    at_least("--workers", args.workers, 1)
    if args.dashboard_port is not None and not 0 < args.dashboard_port < 65536:
        raise UsageError(f"--dashboard-port must be a port number 1-65535, got {args.dashboard_port}")
    if engine == "ours":
        given = explicit_options(args, "workers", "dashboard_port")
        if given:
            raise UsageError(f"{', '.join(given)} apply to --engine hypofuzz only (our loop runs in one process)")
        return engine
    if args.isolate or args.sanitize:
        flag = "--isolate" if args.isolate else "--sanitize"
        raise UsageError(f"{flag} applies to --engine ours (the gate under HypoFuzz runs examples in its workers)")
    reason = fuzz_engines.hypofuzz_missing()
    if reason is not None:
        raise EnvironmentProblem(f"--engine hypofuzz: {reason}")
    return engine


def _hypofuzz_properties(
    args: argparse.Namespace, properties: list[str], conditions: list[Condition], backends: list[str]
) -> tuple[list[str], list[Condition]]:
    """HypoFuzz runs the gate's property tests: those of ``--property`` (another is refused, naming the
    ones it runs), or all of them that can be asked of one of the ``backends`` (a P7 comparison with torch is
    n/a on torch: not asked by default)."""
    if not args.property:
        gate = [
            r.name
            for r in registry.property_records()
            if r.gate_test and r.gate_module == "test_properties" and any(r.not_applicable(b) is None for b in backends)
        ]
        return gate, []
    if conditions:
        raise UsageError("--engine hypofuzz runs the gate's property tests; the P6 searches run under --engine ours")
    try:
        fuzz_engines.gate_tests(properties)
    except InvalidArgument as exc:
        raise UsageError(one_line(str(exc))) from None
    return properties, []


def target_problem(target: str) -> str | None:
    """Why ``target`` cannot be run here, or ``None`` (for fla: not installed, or a version its
    adapter's table does not know, named with the known ones)."""
    return get_target(target).unavailable()


def plan_run(args: argparse.Namespace) -> Plan:
    """``check`` / ``fuzz`` arguments, every one checked: the run starts only when all are fine."""
    fuzz = args.command == "fuzz"
    if fuzz and not (math.isfinite(args.seconds) and args.seconds > 0):
        raise UsageError(f"--seconds must be a finite number > 0, got {args.seconds}")
    at_least("--examples", args.examples, 1)
    at_least("--necessity-examples", args.necessity_examples, 1)
    at_least("--max-seq-len", args.max_seq_len, 1)
    profile = profile_option(args, "fuzz" if fuzz else "ci")
    engine = _fuzz_engine(args) if fuzz else "ours"
    device = device_option(args.device)
    report = not_a_directory("--report", args.report)
    database = _database_option(args.database)
    if registry.gap_search(args.target) is None:  # ours: its property records are asked
        if args.fla_core is not None:
            raise UsageError(f"--fla-core {args.fla_core!r} applies to --target fla only")
        target_options: dict[str, Any] = {}
        backends = backends_option(args.backend if args.backend is not None else "torch")
        kernels = resolve.backends([b for b in backends if b != "-"])  # "-": a bench baseline, no kernel
        for name, why in resolve.backends_unavailable(kernels, device).items():  # off its declared devices
            raise EnvironmentProblem(f"--backend {name!r} cannot run here: {why}")
        families = families_option(args.family if args.family is not None else DEFAULT_FAMILY)
        properties, conditions = _properties(args)
        engines = _serving_engines(args.serving_engine)
        serving_engines = list(dict.fromkeys(p for paths in engines.values() for p in paths))
        isolate, example_timeout = _isolation(args, backends)
        if args.sanitize is not None:  # before any example: a run that cannot sanitize would check nothing asked
            reason = isolation.sanitizer_missing(args.sanitize)
            if reason is not None:
                raise EnvironmentProblem(f"--sanitize {args.sanitize}: {reason}")
        if engine == "hypofuzz":  # the gate's examples run in HypoFuzz's workers, not ours
            properties, conditions = _hypofuzz_properties(args, properties, conditions, backends)
            isolate, example_timeout = False, None
    else:
        if engine == "hypofuzz":
            raise UsageError(f"--engine hypofuzz runs the gdn_equiv target's gate tests, not --target {args.target}")
        # an upstream layer: its guard against the spec, one gap kind at a time (P1); the in-house
        # properties' options do not apply and are refused rather than ignored
        unused = explicit_options(
            args,
            "backend",
            "property",
            "dtype",
            "max_seq_len",
            "skip_necessity",
            "necessity_examples",
            "isolate",
            "serving_engine",
            "sanitize",
        )
        unused += [] if args.example_timeout is None else ["--example-timeout"]
        if unused:
            raise UsageError(f"--target {args.target} searches its guard's gaps; {', '.join(unused)} do not apply")
        target_options = {"core": args.fla_core or "fla"} if args.target == "fla" else {}
        families = families_option(
            args.family if args.family is not None else DEFAULT_FAMILY, fla_only=args.target == "fla"
        )
        if args.fla_core == "reference":
            other = [f for f in families if f not in REFERENCE_CORE_FAMILIES]
            if other:  # refused here, not at the first gap found (H200, 2026-12-04: every non-GDN demo failed)
                raise UsageError(
                    f"--fla-core reference swaps in the core of {', '.join(REFERENCE_CORE_FAMILIES)} only; "
                    f"--family {','.join(other)} would run with fla's core: drop --fla-core, or pick those families"
                )
        backends, properties, conditions, serving_engines, engines = ["-"], [], [], [], {}
        isolate, example_timeout = False, None
    # the properties' own argument checks need the device settled (triton's interpreter on CPU)
    reason = target_problem(args.target)
    if reason is not None:
        raise EnvironmentProblem(f"--target {args.target}: {one_line(reason)}")
    # the one profile table; a fuzz row runs until its share of the budget is spent
    examples = args.examples if args.examples is not None else registry.examples_per_row(profile)
    junit_xml, json_copy = output_file("--junit-xml", args.junit_xml), output_file("--json", args.json)
    html = output_file("--html", args.html)
    if html is not None and html_report.missing() is not None:
        raise EnvironmentProblem(str(html_report.missing()))
    for dtype in args.dtype or ():  # a dtype no asked backend takes would leave its rows nothing to draw
        if not any(registry.default_dtypes((b,), (dtype,)) == [dtype] for b in backends):
            raise UsageError(f"--dtype {dtype}: no backend asked takes it ({registry.declared_dtypes(backends)})")
    run = RunPlan(
        backends=resolve.backends([b for b in backends if b != "-"]),
        targets=(args.target,),
        families=tuple(families),
        engines=engines,
        serving_engines=tuple(serving_engines),
        profile=profile,
        database=str(database),
        isolate=isolate,
        example_timeout=example_timeout,
        sanitize=args.sanitize,
        device=device,
        shrink_seconds=None,
        html=html,
        fla_core=args.fla_core or "fla",
    )
    plan = Plan(
        command=args.command,
        target=args.target,
        target_options=target_options,
        backends=backends,
        properties=properties,
        conditions=conditions,
        dtypes=list(dict.fromkeys(args.dtype or registry.default_dtypes(backends, DTYPES))),
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
        serving_engines=serving_engines,
        isolate=isolate,
        example_timeout=example_timeout,
        sanitize=args.sanitize,
        engine=engine,
        workers=getattr(args, "workers", None) or 1,
        dashboard_port=getattr(args, "dashboard_port", None),
        html=html,
        run=run,
    )
    if plan.seconds is not None:
        runnable = sum(1 for row in ledger_rows(plan) if row.result != Outcome.NOT_APPLICABLE)
        if plan.seconds < runnable * MIN_SECONDS_PER_ROW:
            raise UsageError(
                f"--seconds {args.seconds:g} is too short for this plan: {runnable} rows need at least "
                f"{runnable * MIN_SECONDS_PER_ROW:g} s ({MIN_SECONDS_PER_ROW:g} s a row); give more seconds or ask "
                "for fewer rows (--property, --dtype, --family, --skip-necessity)"
            )
    make_dirs({
        "--report": report,
        "--database": database if isinstance(database, Path) else None,
        "--junit-xml": junit_xml and junit_xml.parent,
        "--json": json_copy and json_copy.parent,
        "--html": html and html.parent,
    })  # fmt: skip
    return plan


def ledger_rows(plan: Plan) -> list[Check]:
    """The ledger: every row the plan's records ask for, in run order; a row that cannot run here carries its
    ``n/a`` result and reason (SPEC §10). An upstream target is asked its gap search (P1, one row per family);
    ours, the property records and P6 searches of the plan."""
    search = registry.gap_search(plan.target)
    if search is not None:
        options = {k: str(v) for k, v in plan.target_options.items()}
        return [
            Check(row.name, row.backend, family=row.family, target=row.target, target_options=options,
                  function=search.function)
            for row in search.rows(plan.target, plan.families)
        ]  # fmt: skip
    records = [registry.get_record(n) for n in plan.properties]
    records += [registry.get_record(registry.necessity_name(c)) for c in plan.conditions]
    rows = []
    for row, record, reason in registry.asked_rows(
        records, families=plan.families, backends=plan.backends, dtypes=plan.dtypes, engines=plan.serving_engines
    ):
        check = Check(row.name, row.backend, row.dtype, family=row.family, function=record.function)
        outcome = ledger.asked(reason)
        if outcome is not None:
            check.result, check.failure = outcome, str(reason)
        rows.append(check)
    return rows


def record_of(row: Check) -> registry.PropertyRecord | registry.ServingRecord | registry.GapSearchRecord | None:
    """The record a row is of (a gap search's rows are named for their target; its gap rows have none)."""
    search = registry.gap_search(row.target)
    if search is not None and row.name == search.name(row.target):
        return search
    return registry.records().get(row.name.partition("#")[0])


def _isolation(args: argparse.Namespace, backends: list[str]) -> tuple[bool, float | None]:
    """``--isolate`` (default: on when a backend is a plug-in, always with ``--sanitize``) and
    ``--example-timeout``, checked."""
    timeout = args.example_timeout
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--example-timeout must be a finite number of seconds > 0, got {timeout}")
    if args.sanitize is not None and args.isolate is False:
        raise UsageError(f"--sanitize {args.sanitize} runs each example in a process of its own: not with --no-isolate")
    isolate = args.isolate if args.isolate is not None else any(isolation.is_plugin(b) for b in backends)
    isolate = isolate or args.sanitize is not None
    if timeout is not None and not isolate:
        raise UsageError("--example-timeout needs --isolate: only an example in a worker can be timed out")
    default = isolation.DEFAULT_TIMEOUT if args.sanitize is None else isolation.SANITIZE_TIMEOUT
    return isolate, (timeout or default) if isolate else None


def _database_option(value: str) -> Path | str:
    """``--database``: a directory, or ``redis://host:port/db`` (a team's shared database), reached now."""
    if not value.startswith(("redis://", "rediss://", "unix://")):
        if "://" in value:
            raise UsageError(f"--database {value!r}: a directory, or redis://HOST:PORT/DB (rediss://, unix:// too)")
        return not_a_directory("--database", value)
    try:
        import redis
    except ImportError:
        raise EnvironmentProblem(f"--database {value!r} needs redis: pip install gdn-equiv[redis]") from None
    try:
        redis.Redis.from_url(value, socket_connect_timeout=5).ping()
    except ValueError as exc:
        raise UsageError(f"--database {value!r}: {one_line(str(exc))}") from None
    except redis.RedisError as exc:
        raise EnvironmentProblem(f"--database {value!r}: cannot reach the server: {one_line(str(exc))}") from None
    return value


def _checks(plan: Plan, rows: list[Check], *, database: object, deadline: float | None) -> Iterator[Check]:
    """Each asked row's result as it finishes (with each further kind of failure as a row of its own).
    With a ``deadline`` (fuzz) every row gets a share: row i may run until ``start + (i + 1) x budget /
    rows``, so time a quick row leaves passes to the next, and no row is left without one."""
    runnable = [row for row in rows if row.result != Outcome.NOT_APPLICABLE]
    start = time.perf_counter()
    for i, row in enumerate(runnable):
        share = None if deadline is None else start + (i + 1) * (deadline - start) / len(runnable)
        if share is not None and time.perf_counter() >= deadline:  # type: ignore[operator]
            return  # the rest stay "not reached"
        if plan.row_seconds is not None:  # check --row-seconds: this row's own
            share = time.perf_counter() + plan.row_seconds
        record = record_of(row)
        assert record is not None, f"an asked row has a record: {row.row_id}"
        if isinstance(record, registry.GapSearchRecord):
            # its gap rows as they are found, then the search's own row; the share as seconds from now
            seconds = None if share is None else max(0.0, share - time.perf_counter())
            yield from runner.search_gaps(
                plan.target,
                max_examples=plan.examples,
                device=plan.device,
                seconds=seconds,
                database=database,
                family=row.family,
                **plan.target_options,
            )
            continue
        if record.condition is not None:
            check = runner.find_counterexample(
                record.condition,
                row.backend,
                max_examples=plan.necessity_examples,
                device=plan.device,
                family=row.family,
                deadline=share,
                derandomize=plan.derandomize or None,  # else the profile's
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
                derandomize=plan.derandomize,
            )
        yield check
        yield from check.also  # each further kind of failure, a row of its own


def _repeatable(record: object) -> bool:
    """Whether another round of a row of ``record`` can find more: an example property's (not a search's)."""
    return isinstance(record, registry.PropertyRecord) and record.condition is None


def _progress(check: Check) -> None:
    print(
        f"  {check.name:<24} {check.family:<15} {check.backend:<8} {check.dtype:<8} {check.result:<15} "
        f"{check.examples:>5} examples {check.seconds:6.1f}s",
        flush=True,
    )


def plan_writer(plan: Plan) -> ReportWriter:
    plan.meta = {
        "mode": plan.command,
        **({"engine": plan.engine} if plan.command == "fuzz" else {}),
        "target": plan.target,
        **({"target_options": plan.target_options} if plan.target_options else {}),
        "backend": ",".join(plan.backends),
        **({"serving_engine": ",".join(plan.serving_engines)} if plan.serving_engines else {}),
        "family": ",".join(plan.families),
        "profile": plan.profile,
        "device": plan.device,
        "examples": plan.examples,
    }
    return ReportWriter(
        plan.report, device=plan.device, meta=plan.meta, json_copy=plan.json, junit_xml=plan.junit_xml, html=plan.html
    )


def _database(plan: Plan) -> object:
    from hypothesis.database import DirectoryBasedExampleDatabase

    if isinstance(plan.database, str):
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase

        return RedisExampleDatabase(redis.Redis.from_url(plan.database))
    return DirectoryBasedExampleDatabase(str(plan.database))


def run_plan(plan: Plan, header: str, deadline: float | None = None) -> int:
    """Run the plan's rows and compute the exit status from the ledger: 0 only when every asked row
    ran at least one applicable example (or cannot be asked here, with the reason) and none failed."""
    with without_seed_hints():
        return _run_ledger(plan, header, deadline)


def _run_ledger(plan: Plan, header: str, deadline: float | None) -> int:

    started = time.perf_counter()
    print(header, flush=True)
    environment = describe()
    database = _database(plan)
    rows = ledger_rows(plan)
    with plan_writer(plan) as writer:
        if environment is not None:  # what this machine changes about the kernels' arithmetic, said up front
            writer.meta["environment"] = environment
            print(environment, flush=True)
        writer.ask(rows)
        na = [r for r in rows if r.result == Outcome.NOT_APPLICABLE]
        print(f"ledger: {len(rows)} rows asked, {len(rows) - len(na)} to run, {len(na)} n/a", flush=True)
        _say_serving_paths(plan, rows, writer)
        isolation.configure(plan.example_timeout if plan.isolate else None, sanitize=plan.sanitize)
        try:
            budget = None if deadline is None else started + deadline
            todo = [r for r in rows if r.result != Outcome.NOT_APPLICABLE]
            while todo:
                for check in _checks(plan, todo, database=database, deadline=budget):
                    writer.add(check)
                    _progress(check)
                if budget is None or time.perf_counter() >= budget:
                    break
                # fuzz: time left after every row had its share goes to another round of the example rows
                # still green (a search needs one run, a gap search spent its share; a failed row has its finding)
                todo = [r for r in writer.rows if r.result == Outcome.PASSED and _repeatable(record_of(r))]
                writer.meta["rounds"] = writer.meta.get("rounds", 1) + 1
        finally:
            isolation.configure(None)
        writer.meta["seconds"] = round(time.perf_counter() - started, 1)
        summary = writer.finish("complete")
    rows = writer.rows

    print()
    print(format_table(rows))
    total = sum(c.examples for c in rows)
    failed = writer.failed
    print(
        f"\n{total} examples in {writer.meta['seconds']} s on {plan.device}; {len(rows)} rows asked, "
        f"{len(failed)} failing; report: {summary}"
    )
    return print_findings(writer)


def _say_serving_paths(plan: Plan, rows: list[Check], writer: ReportWriter) -> None:
    """Each engine path asked by ``--serving-engine`` with a row to run: a line (version, runs here, the first
    call's seconds) and ``meta["serving_paths"]`` (:mod:`gdn_equiv.run.serving_paths`)."""
    asked = [p for p in plan.serving_engines if p != "reference"]
    paths = [p for p in asked if any(r.backend == p and r.result != Outcome.NOT_APPLICABLE for r in rows)]
    for path in paths:
        t0 = time.perf_counter()
        said = serving_paths.describe([path])[path]
        writer.meta.setdefault("serving_paths", {})[path] = said
        print(f"{path} {said['version']}: {said['runs']} ({time.perf_counter() - t0:.2f} s)", flush=True)


def print_findings(writer: ReportWriter) -> int:
    """The lines after the table (one format whichever fuzz engine ran); the exit status, from the ledger."""
    rows, failed = writer.rows, writer.failed
    for c in rows:
        if Outcome(c.result) in (Outcome.NONE_FOUND, Outcome.NOT_APPLICABLE):
            print(f"{c.result}: {c.row_id}: {c.failure}")
    for c in failed:
        if c.result not in (Outcome.FAILED, Outcome.MISSED_FUSION):
            print(f"\n{c.result.upper()} {c.row_id}: {c.failure}")
            continue
        example = "" if c.example is None else f"\nshrunk example: {c.example.to_json()}"
        print(f"\n{'FAIL' if c.result == Outcome.FAILED else c.result.upper()} {c.row_id}\n{c.failure}{example}")
        record = registry.records().get(c.name.partition("#")[0])  # None: a gap search's row
        if c.repro and record is not None and record.serving:
            print(f"reproducer: python {c.repro}")  # its script is the replay: `repro` reads layer examples
        elif c.repro:
            print(f"reproducer: python {c.repro}\nreplay: gdn-equiv repro {c.repro_json}")
    unchecked = [c for c in failed if c.result not in (Outcome.FAILED, Outcome.MISSED_FUSION)]
    if unchecked:
        print(
            f"\nnot green: {len(unchecked)} of {len(rows)} asked rows were not checked "
            f"({', '.join(sorted({str(c.result) for c in unchecked}))})"
        )
    return ledger.exit_status(c.result for c in rows)


def describe_plan(plan: Plan) -> str:
    core = f" (fla core: {plan.target_options['core']})" if "core" in plan.target_options else ""
    return (
        f"target={plan.target}{core} family={','.join(plan.families)} backend={','.join(plan.backends)} "
        f"device={plan.device} profile={plan.profile}"
        + (f" serving-engine={','.join(plan.serving_engines)}" if plan.serving_engines else "")
        + (f" isolated (example timeout {plan.example_timeout:g} s)" if plan.isolate else "")
    )


def cmd_check(plan: Plan) -> int:
    return run_plan(plan, f"gdn-equiv check: {describe_plan(plan)} ({plan.examples} examples per property row)")


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options ``check`` and ``fuzz`` share."""
    # options whose default is None are refused where they do not apply, so they must be told apart
    # from their defaults
    p.add_argument("--backend", default=None, help="conv backend(s), comma separated, or module:attr (default: torch)")
    p.add_argument(
        "--family",
        default=None,
        metavar="NAME[,NAME]|all",
        help=f"layer famil(y/ies) to draw examples for (default: {DEFAULT_FAMILY}; see: gdn-equiv families)",
    )
    p.add_argument("--target", default="gdn_equiv", choices=["gdn_equiv", "fla"], help="layer under test")
    p.add_argument(
        "--serving-engine",
        default=None,
        help="serving engine(s) S0-S7 run on, comma separated: reference (ours, the default), vllm, sglang "
        "(each path of the installed release and of every release in .engines/<engine>-<version>/), one path "
        "(vllm-interpret, vllm-0.33.0-gpu-ds, ...), a gdn_equiv.serving_engines entry point, or a plug-in "
        "module:attr (an engine adapter, or a class or factory making one)",
    )
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
        help=f"run only this property (repeatable): P2...P7 names, {NECESSITY} (every P6 search) or {NECESSITY}-G<n>",
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
        help="with --isolate: an example running longer fails, its worker killed (> 0; default 60, 300 with "
        "--sanitize)",
    )
    p.add_argument(
        "--sanitize",
        default=None,
        choices=isolation.SANITIZER_TOOLS,
        metavar="TOOL",
        help="run each example in a fresh process under NVIDIA compute-sanitizer --tool TOOL ("
        + ", ".join(isolation.SANITIZER_TOOLS)
        + "): a sanitizer report fails the example, report attached, shrunk; needs compute-sanitizer and a CUDA "
        "device (exit 3 without them)",
    )
    p.add_argument("--junit-xml", default=None, metavar="FILE", help="also write JUnit XML (one testcase per row)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the summary JSON here")
    p.add_argument(
        "--html",
        default=None,
        metavar="FILE",
        help="also write the run's page: the ledger with filters, each finding with its shrunk example and "
        "reproducer, coverage, pictures, environment; one static file (needs gdn-equiv[html])",
    )


def add_parser(sub: Any) -> None:
    """``check``'s parser."""
    p = subcommand(sub, "check", "run the properties once with a profile's budget; saved failures replay first")
    add_run_options(p)
    p.add_argument(
        "--row-seconds",
        type=float,
        default=None,
        metavar="SECONDS",
        help="each row may run this long (> 0), checked before each example: a row cut before its first is not "
        "reached, one cut later keeps what it ran (budget_spent in the report); a failure being shrunk is not cut",
    )
    p.add_argument(
        "--derandomize",
        action="store_true",
        help="the same draws on every machine and every run (a fixed sequence per row; the example database is "
        "then neither read nor written)",
    )
    p.set_defaults(prepare=plan_check, run=cmd_check)


def plan_check(args: argparse.Namespace) -> Plan:
    """``check``'s plan: :func:`plan_run`'s, with ``--row-seconds`` and ``--derandomize``."""
    seconds = args.row_seconds
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"--row-seconds must be a finite number of seconds > 0, got {seconds}")
    if registry.gap_search(args.target) is not None:
        given = explicit_options(args, "row_seconds", "derandomize")
        if given:
            raise UsageError(f"{', '.join(given)} apply to the gdn_equiv target's rows, not --target {args.target}")
    plan = plan_run(args)
    plan.row_seconds, plan.derandomize = seconds, args.derandomize
    return plan
