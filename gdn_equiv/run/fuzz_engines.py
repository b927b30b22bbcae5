"""``gdn-equiv fuzz --engine hypofuzz``: the installed gate's property tests under HypoFuzz, one ledger.

Our own loop (``--engine ours``, :mod:`gdn_equiv.run.cli`) shares a time budget out over the rows by hand.
HypoFuzz (``pip install gdn-equiv[hypofuzz]``, AGPL-3.0, never required) runs the same gate tests
(``pytest --pyargs gdn_equiv.suite``: the property records' ``gate_test`` functions, P2-P5) in
``--workers`` processes, schedules them by the coverage they reach, keeps its corpus and its failures in
the Hypothesis example database (``--database``: a directory, or a team's ``redis://`` server) and serves
a dashboard (``--dashboard-port``). It runs until it is stopped; this module stops it when ``--seconds``
are spent and then reads what Hypothesis recorded, never what it assumes ran:

* every executed test case is a line of Hypothesis' observability output (``HYPOTHESIS_EXPERIMENTAL_
  OBSERVABILITY``, one ``*_testcases.jsonl`` per run directory, written by every worker); the gate labels
  each example with its regions (:func:`gdn_equiv.harness.coverage.label_example`: family, dtype, lengths, cache,
  varlen, ...) and marks one that did not meet its premise (``NOT_APPLICABLE``), so a line says which
  ledger row it counts for, and whether it applied;
* a failing line carries the drawn example as JSON (the ``Draw`` of its ``arguments``): the smallest one
  per row (shortlex on its choices, Hypothesis' own order) is the row's shrunk example, written as the
  same failure file and reproducer our loop writes; the database tells whether a worker had shrunk it.

Rows then get the ledger's results (:mod:`gdn_equiv.harness.ledger`, SPEC §10): ``pass``, ``FAIL``, ``not
exercised`` (examples ran, none met the premise), ``not reached`` (no example at all), ``crashed`` (HypoFuzz
ended by itself before the budget), ``n/a``; a failure is one row however many workers
or runs found it (rows are keyed by property, family, backend and dtype).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import ledger, registry
from gdn_equiv.harness.coverage import dimensions
from gdn_equiv.harness.ledger import NOT_APPLICABLE_EVENT as NOT_APPLICABLE
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.harness.testing import hypofuzz_compat, open_database
from gdn_equiv.model.example import Example
from gdn_equiv.run import browser
from gdn_equiv.run.report import ReportWriter
from gdn_equiv.run.rows import Check, format_table

__all__ = [
    "ENGINES",
    "HYPOFUZZ_EXTRA",
    "Observed",
    "coverage_rows",
    "gate_tests",
    "hypofuzz_missing",
    "open_database",
    "read_testcases",
    "tally_rows",
]

ENGINES = ("ours", "hypofuzz")
HYPOFUZZ_EXTRA = "pip install gdn-equiv[hypofuzz]"
#: the gate module whose tests HypoFuzz runs (one per property record with a ``gate_test``)
GATE_MODULE = "gdn_equiv.suite.test_properties"
GATE_PACKAGE = "gdn_equiv.suite"
#: seconds HypoFuzz is given to stop after SIGINT (its workers' database writes are flushed on exit)
STOP_GRACE = 15.0


def hypofuzz_missing() -> str | None:
    """Why HypoFuzz cannot run here (``None``: it can)."""
    if importlib.util.find_spec("hypofuzz") is None:
        return f"HypoFuzz is not installed (an optional extra, AGPL-3.0): {HYPOFUZZ_EXTRA}"
    return None


def gate_tests(properties: Sequence[str]) -> dict[str, str]:
    """``gate test name -> property`` for the ``properties`` the gate module runs; :class:`InvalidArgument`
    naming those it does not (they run under ``--engine ours``)."""
    tests, other = {}, []
    for name in properties:
        record = registry.get_record(name)
        if record.gate_test is None or f"gdn_equiv.suite.{record.gate_module}" != GATE_MODULE:
            other.append(name)
        else:
            tests[record.gate_test] = name
    if other:
        runnable = [
            r.name for r in registry.property_records() if r.gate_test and r.gate_module == GATE_MODULE.split(".")[-1]
        ]
        raise InvalidArgument(
            f"--engine hypofuzz runs the gate's property tests ({', '.join(runnable)}); {', '.join(other)} "
            "run under --engine ours"
        )
    return tests


def launch() -> None:
    """``hypothesis fuzz`` with HypoFuzz made to run on this Hypothesis (:func:`hypofuzz_compat`)."""
    hypofuzz_compat()
    import hypofuzz.entrypoint  # noqa: F401  (registers the fuzz command)
    from hypothesis.extra.cli import main

    main()


# ---- reading what Hypothesis recorded ----------------------------------------------------------


@dataclass
class Observed:
    """The test cases of a run's observability output, and the lines that could not be read (a worker
    killed mid-line)."""

    cases: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0


def read_testcases(directory: Path) -> Observed:
    """Every test-case line of the ``*_testcases.jsonl`` files under ``directory`` (none: an empty run)."""
    out = Observed()
    for path in sorted(directory.glob("**/*_testcases.jsonl")):
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError:
                    out.unreadable += 1
                    continue
                if isinstance(data, dict) and data.get("type") == "test_case":
                    out.cases.append(data)
    return out


def _test_name(nodeid: str) -> str:
    """``path::test_x[param]`` -> ``test_x``."""
    return nodeid.rsplit("::", 1)[-1].split("[", 1)[0]


def _param(nodeid: str) -> str | None:
    """The backend a gate test ran with: its parameter id (``test_x[torch]`` -> ``torch``)."""
    if "[" not in nodeid:
        return None
    return nodeid.rsplit("::", 1)[-1].split("[", 1)[1].rstrip("]")


def _feature(case: dict[str, Any], dimension: str) -> str | None:
    prefix = f"coverage:{dimension}="
    for key in case.get("features") or {}:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return None


def _regions(case: dict[str, Any]) -> list[str]:
    """The ``dimension=region`` labels of one test case (the joint labels left out)."""
    out = []
    for key in case.get("features") or {}:
        if key.startswith("coverage:") and not key.startswith(("coverage:layer.example=", "coverage:conv.call=")):
            out.append(key[len("coverage:") :])
    return out


def _shrunk_phase(case: dict[str, Any]) -> bool:
    return "shrink" in str((case.get("metadata") or {}).get("phase", "")) or "shrink" in str(
        case.get("how_generated", "")
    )


def _example_json(case: dict[str, Any]) -> str | None:
    """The drawn example of a gate test case, as the Example JSON the gate's ``Draw`` holds."""
    for key, value in (case.get("arguments") or {}).items():
        if key.startswith("Draw") and isinstance(value, dict) and isinstance(value.get("example"), str):
            return value["example"]
    return None


def _choices_key(case: dict[str, Any]) -> tuple[int, str]:
    """Hypothesis' shortlex order, approximately: fewer choices first, then the smaller representation."""
    nodes = (case.get("metadata") or {}).get("choice_nodes") or []
    return (len(nodes), json.dumps([n.get("value") for n in nodes if isinstance(n, dict)], default=str))


@dataclass
class RowTally:
    examples: int = 0
    not_applicable: int = 0
    shrink_runs: int = 0
    seconds: float = 0.0  # Hypothesis' timings of its examples (drawing and running), summed
    failures: list[dict[str, Any]] = field(default_factory=list)
    regions: Counter[str] = field(default_factory=Counter)


def tally_rows(
    cases: Iterable[dict[str, Any]], tests: dict[str, str], backends: Sequence[str]
) -> tuple[dict[tuple[str, str, str, str], RowTally], Counter[str]]:
    """Per ledger row ``(property, family, backend, dtype)``: the examples run, those that missed the
    premise, the failures, the regions reached; and what fell outside every gate row (by reason)."""
    rows: dict[tuple[str, str, str, str], RowTally] = defaultdict(RowTally)
    outside: Counter[str] = Counter()
    for case in cases:
        nodeid = str(case.get("property", ""))
        module = nodeid.rsplit("::", 1)[0] if "::" in nodeid else ""
        in_gate = module == "" or module.endswith("test_properties.py")  # "::test_x[...]" from a module argument
        prop = tests.get(_test_name(nodeid)) if in_gate else None
        if prop is None:
            outside["not a gate property test"] += 1
            continue
        backend = _param(nodeid) or (backends[0] if len(backends) == 1 else "?")
        family, dtype = _feature(case, "layer.family"), _feature(case, "layer.dtype")
        if case.get("status") == "gave_up" or family is None or dtype is None:
            outside["no example drawn (invalid or overrun)"] += 1
            continue
        tally = rows[(prop, family, backend, dtype)]
        # every executed example counts, shrinking's too (as Hypothesis' statistics count them for our loop)
        tally.examples += 1
        tally.shrink_runs += _shrunk_phase(case)
        timing = case.get("timing")
        tally.seconds += (
            sum(v for v in timing.values() if isinstance(v, (int, float))) if isinstance(timing, dict) else 0
        )
        tally.regions.update(_regions(case))
        if NOT_APPLICABLE in (case.get("features") or {}):
            tally.not_applicable += 1
        if case.get("status") == "failed":
            tally.failures.append(case)
    return rows, outside


def coverage_rows(
    rows: dict[tuple[str, str, str, str], RowTally], asked: Iterable[tuple[str, str, str, str]]
) -> list[dict[str, Any]]:
    """Per asked row, every region of the layer dimensions with its count, unreached regions first."""
    out = []
    for key in asked:
        tally = rows.get(key, RowTally())
        regions: list[tuple[str, int]] = []
        for dim in dimensions():
            if dim.kind != "layer" or dim.name in ("layer.family", "layer.dtype"):
                continue  # a row is one family and dtype already
            short = dim.name.split(".", 1)[1]
            names = list(dim.regions) + sorted(
                r.split("=", 1)[1]
                for r in tally.regions
                if r.startswith(f"{dim.name}=") and r.split("=", 1)[1] not in dim.regions
            )
            regions += [(f"{short}={region}", tally.regions.get(f"{dim.name}={region}", 0)) for region in names]
        regions.sort(key=lambda r: r[1] > 0)  # stable: unreached first, each in its dimension's order
        prop, family, backend, dtype = key
        out.append({
            "property": prop, "family": family, "backend": backend, "dtype": dtype, "examples": tally.examples,
            "regions": [{"region": name, "count": count} for name, count in regions],
        })  # fmt: skip
    return out


def format_coverage(table: list[dict[str, Any]]) -> str:
    """The coverage table: one line per row, its unreached regions first, then reached ones with counts."""
    lines = []
    for row in table:
        unreached = [r["region"] for r in row["regions"] if r["count"] == 0]
        reached = [f"{r['region']}:{r['count']}" for r in row["regions"] if r["count"] > 0]
        head = f"{row['property']}[{row['backend']}-{row['dtype']}-{row['family']}]"
        lines.append(
            f"{head}\n    NOT REACHED: {', '.join(unreached) or '-'}\n    reached: {', '.join(reached) or '-'}"
        )
    return "\n".join(lines)


def heat_map(table: list[dict[str, Any]], path: Path) -> str:
    """A heat map, property x region (examples summed over families, dtypes and backends), saved to
    ``path``; returns a line saying where, or why not (matplotlib is the ``bench`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "coverage picture skipped: matplotlib is not installed (pip install gdn-equiv[bench])"

    props = list(dict.fromkeys(r["property"] for r in table))
    # the rows' own family and dtype first (a row is one of each), then the regions inside rows
    regions = list(dict.fromkeys([f"family={r['family']}" for r in table] + [f"dtype={r['dtype']}" for r in table]))
    inside = list(dict.fromkeys(g["region"] for r in table for g in r["regions"]))
    order = [f"{d.name.split('.', 1)[1]}={region}" for d in dimensions() if d.kind == "layer" for region in d.regions]
    regions += sorted(inside, key=lambda r: order.index(r) if r in order else len(order))  # dimension by dimension
    counts = [[0] * len(regions) for _ in props]
    for row in table:
        i = props.index(row["property"])
        counts[i][regions.index(f"family={row['family']}")] += row["examples"]
        counts[i][regions.index(f"dtype={row['dtype']}")] += row["examples"]
        for g in row["regions"]:
            counts[i][regions.index(g["region"])] += g["count"]
    import math

    shade = [[math.log10(1 + c) for c in line] for line in counts]
    fig, ax = plt.subplots(figsize=(max(8, 0.42 * len(regions)), 1.2 + 0.55 * len(props)))
    image = ax.imshow(shade, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(regions)), regions, rotation=70, ha="right", fontsize=7)
    ax.set_yticks(range(len(props)), props, fontsize=8)
    for i, line in enumerate(counts):
        for j, c in enumerate(line):
            ax.text(j, i, "0" if c == 0 else str(c), ha="center", va="center", fontsize=6,
                    color="red" if c == 0 else "white")  # fmt: skip
    fig.colorbar(image, ax=ax, label="log10(1 + examples)")
    ax.set_title("examples per property x region (0 in red: not reached)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"coverage picture: {path}"


# ---- the run -----------------------------------------------------------------------------------


def _hypofuzz_command(
    tests: Sequence[str], *, workers: int, port: int | None, backends: Sequence[str], families: Sequence[str],
    database: str, device: str,
) -> list[str]:  # fmt: skip
    dashboard = ["--no-dashboard"] if port is None else ["--port", str(port)]
    # the whole gate package, as a team's `pytest --pyargs gdn_equiv.suite` collects it: Hypothesis and HypoFuzz
    # key a parametrised test's examples by its pytest node id, which follows the arguments and the rootdir
    # (`gdn_equiv.suite.test_properties` gave "::test_x[torch]", the package "test_properties.py::test_x[torch]")
    pytest_args = [
        "--pyargs",
        GATE_PACKAGE,
        "-k",
        " or ".join(tests),
        "--gdn-backend",
        ",".join(backends),
        "--gdn-family",
        ",".join(families),
        "--gdn-database",
        database,
        "-p",
        "no:cacheprovider",
    ]
    launcher = "from gdn_equiv.run.fuzz_engines import launch; launch()"
    return [sys.executable, "-c", launcher, "fuzz", "-n", str(workers), *dashboard, "--", *pytest_args]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT to HypoFuzz's process group (hub, workers, dashboard), then SIGKILL after the grace."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # a worker that outlived its hub


def _snapshot_dashboard(port: int, out: Path) -> list[str]:
    """Save the dashboard's page and its tests' JSON, and its picture (``dashboard.png``) where a browser is
    installed (:mod:`gdn_equiv.run.browser`); what could not be saved is said with why."""
    saved = []
    for path, name in (("/", "dashboard.html"), ("/api/tests/", "dashboard-tests.json")):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as reply:
                (out / name).write_bytes(reply.read())
            saved.append(str(out / name))
        except OSError as exc:
            saved.append(f"{name}: not saved ({exc})")
    reason = browser.missing()
    if reason is not None:
        return [*saved, f"dashboard.png: not taken ({reason})"]
    try:  # the dashboard draws itself from its API: let its first charts arrive
        saved.append(str(browser.screenshot(f"http://127.0.0.1:{port}/", out / "dashboard.png", settle_ms=4000)))
    except Exception as exc:  # a picture is a convenience: the run's results never depend on it
        saved.append(f"dashboard.png: not taken ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})")
    return saved


def _wait_for_port(port: int, seconds: float) -> bool:
    import socket

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.5)
    return False


def run_hypofuzz(
    plan: Any,
    *,
    rows: list[Check],
    header: str,
    writer: ReportWriter,
    findings: Callable[[ReportWriter], int],
    workers: int,
    dashboard_port: int | None,
) -> int:
    """``gdn-equiv fuzz --engine hypofuzz``: HypoFuzz for ``plan.seconds``, then the ledger. The command line
    hands over the plan's asked ``rows``, its report ``writer`` and how it prints ``findings`` (which gives the
    exit status), so one format serves both engines."""
    started = time.perf_counter()
    # the gate tests of the rows that can run (an n/a row's test would only skip in HypoFuzz's workers)
    runnable = {r.name for r in rows if r.result != Outcome.NOT_APPLICABLE}
    tests = {test: prop for test, prop in gate_tests(plan.properties).items() if prop in runnable}
    if not tests:  # every asked row is n/a here: nothing for HypoFuzz to run, and the ledger says why
        with writer:
            writer.ask(rows)
            print(f"ledger: {len(rows)} rows asked, 0 to run, {len(rows)} n/a; HypoFuzz not started", flush=True)
            writer.finish("complete")
        print(format_table(writer.rows))
        return findings(writer)
    run_dir = plan.report / "hypofuzz"
    storage = run_dir / "storage"
    if run_dir.exists():
        for old in run_dir.glob("**/*.jsonl"):
            old.unlink()  # a report holds this run's examples only
    storage.mkdir(parents=True, exist_ok=True)
    database = str(plan.database if isinstance(plan.database, str) else Path(plan.database).resolve())
    command = _hypofuzz_command(
        list(tests), workers=workers, port=dashboard_port, backends=plan.backends, families=plan.families,
        database=database, device=plan.device,
    )  # fmt: skip
    env = dict(os.environ)
    env.update({
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY": "1",
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_CHOICES": "1",  # a failure's choices: the smallest is the shrunk one
        "HYPOTHESIS_STORAGE_DIRECTORY": str(storage.resolve()),
        "HYPOTHESIS_PROFILE": "fuzz",
    })  # fmt: skip
    print(
        f"gdn-equiv fuzz (engine: hypofuzz, {workers} worker{'s' * (workers != 1)}): {header}; "
        f"gate tests {', '.join(tests)}; database {database}",
        flush=True,
    )
    log = run_dir / "hypofuzz.log"
    meta_extra: dict[str, Any] = {"engine": "hypofuzz", "workers": workers, "hypofuzz_log": str(log)}
    writer.meta.update(meta_extra)
    with writer:
        writer.ask(rows)
        na = [r for r in rows if r.result == Outcome.NOT_APPLICABLE]
        print(f"ledger: {len(rows)} rows asked, {len(rows) - len(na)} to run, {len(na)} n/a", flush=True)
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                if dashboard_port is not None:
                    up = _wait_for_port(dashboard_port, min(60.0, plan.seconds))
                    print(
                        f"dashboard: http://127.0.0.1:{dashboard_port}/" + ("" if up else " (not up yet)"), flush=True
                    )
                deadline = started + plan.seconds
                while time.perf_counter() < deadline and process.poll() is None:
                    time.sleep(min(1.0, max(0.0, deadline - time.perf_counter())))
                if dashboard_port is not None and process.poll() is None:
                    writer.meta["dashboard_snapshot"] = _snapshot_dashboard(dashboard_port, plan.report)
            finally:
                ended_itself = process.poll() is not None
                _stop(process)
        writer.meta["hypofuzz_exit"] = process.returncode if ended_itself else "stopped at the budget"
        checks, coverage, outside, unreadable, failures_in_db = _ledger(plan, rows, tests, storage)
        early = f"HypoFuzz ended by itself with status {process.returncode}" if ended_itself else None
        judge_engine_end(checks, early, failures_in_db, tests, plan.backends)
        for check in checks:
            writer.add(check)
        writer.meta["seconds"] = round(time.perf_counter() - started, 1)
        writer.meta["outside_rows"] = dict(outside)
        writer.meta["unreadable_lines"] = unreadable
        writer.meta["failures_in_database"] = failures_in_db
        (plan.report / "coverage.json").write_text(json.dumps(coverage, indent=1))
        (plan.report / "coverage.txt").write_text(format_coverage(coverage) + "\n")
        picture = heat_map(coverage, plan.report / "coverage.png")
        writer.meta["coverage_picture"] = picture
        summary = writer.finish("complete")
    print()
    print(format_table(writer.rows))
    total = sum(c.examples for c in writer.rows)
    plural = f"{workers} worker{'s' * (workers != 1)}"
    print(
        f"\n{total} examples in {writer.meta['seconds']} s on {plan.device} (engine hypofuzz, {plural}); "
        f"{len(writer.rows)} rows asked, {len(writer.failed)} failing; report: {summary}"
    )
    print(f"coverage per row (unreached regions first): {plan.report / 'coverage.txt'}; {picture}")
    if ended_itself:  # before the budget: a crash or a refusal, never a pass (its rows say so)
        print(f"HypoFuzz ended by itself with status {process.returncode} before the budget: see {log}")
    if total == 0:  # say why, from HypoFuzz's own words (a test it did not collect says so)
        skipped = [line for line in log.read_text(errors="replace").splitlines() if "(because:" in line]
        print(f"HypoFuzz ran no example; its log: {log}" + "".join(f"\n  {line[:300]}" for line in skipped))
    return findings(writer)


def _ledger(
    plan: Any, rows: list[Check], tests: dict[str, str], storage: Path
) -> tuple[list[Check], list[dict[str, Any]], Counter[str], int, dict[str, int]]:
    """The asked rows' results from the observations (every asked row gets one)."""
    import dataclasses

    observed = read_testcases(storage)
    tallies, outside = tally_rows(observed.cases, tests, plan.backends)
    asked = [(r.name, r.family, r.backend, r.dtype) for r in rows if r.result != Outcome.NOT_APPLICABLE]
    for key in set(tallies) - set(asked):
        outside[f"row not asked: {key[0]}[{key[2]}-{key[3]}-{key[1]}]"] += tallies[key].examples
    checks = []
    for row in rows:
        if row.result == Outcome.NOT_APPLICABLE:
            continue
        tally = tallies.get((row.name, row.family, row.backend, row.dtype), RowTally())
        check = dataclasses.replace(row, also=[], examples=tally.examples, not_applicable=tally.not_applicable)
        check.seconds = tally.seconds
        check.budget_spent = True
        check.result = ledger.row_outcome(
            examples=tally.examples,
            not_applicable=tally.not_applicable,
            failed=bool(tally.failures),
            budget_spent=True,
        )
        if check.result == Outcome.FAILED:
            smallest = min(tally.failures, key=_choices_key)
            origins = {
                json.dumps((f.get("metadata") or {}).get("interesting_origin"), sort_keys=True) for f in tally.failures
            }
            check.failure = str(smallest.get("status_reason") or "failed") + (
                f" ({len(tally.failures)} failing test cases, {len(origins)} distinct error{'s' * (len(origins) != 1)})"
            )
            text = _example_json(smallest)
            check.example = None if text is None else Example.from_json(text)
        elif check.result == Outcome.NOT_REACHED:
            check.failure = "HypoFuzz ran no example of this row before the budget ended"
        elif check.result == Outcome.NOT_EXERCISED:
            check.failure = f"none of the {tally.examples} examples met the premise"
        else:
            check.failure = ""
        checks.append(check)
    coverage = coverage_rows(tallies, asked)
    nodeids = {str(c.get("property")) for c in observed.cases if _test_name(str(c.get("property", ""))) in tests}
    return checks, coverage, outside, observed.unreadable, _failures_in_database(plan, nodeids)


def judge_engine_end(
    checks: list[Check],
    early: str | None,
    failures_in_db: dict[str, int],
    tests: dict[str, str],
    backends: Sequence[str],
) -> None:
    """What the rows' own observations cannot say, put in them (SPEC §10: a crash is never a pass):

    - ``early``, HypoFuzz ending by itself before the budget (a crash, a collection error): a row that would
      pass ``crashed`` (its budget was not spent) with that reason;
    - a shrunk failure HypoFuzz keeps in the database for a gate test (a worker's finding whose observation
      this run did not read, or an earlier run's): every row of that test's property and backend that is
      not already failing fails, naming the test and the count (replay it with ``pytest NODEID
      --gdn-database DB``)."""
    for nodeid, count in failures_in_db.items():
        prop = tests.get(_test_name(nodeid))
        backend = _param(nodeid) or (backends[0] if len(backends) == 1 else None)
        if not count or prop is None:
            continue
        for check in checks:
            if check.name == prop and backend in (None, check.backend) and check.result != Outcome.FAILED:
                check.result = Outcome.FAILED
                check.failure = (
                    f"HypoFuzz's database holds {count} shrunk failure{'s' * (count != 1)} of {nodeid} that this "
                    f"run's observations do not show; replay: pytest {nodeid} --gdn-database <the run's database>"
                )
    if early is None:
        return
    for check in checks:
        outcome = ledger.ended_early(Outcome(check.result))
        if outcome != check.result:
            check.result = outcome
            check.failure = f"{early} before the budget ended: {check.examples} examples ran, the rest did not"


def _failures_in_database(plan: Any, nodeids: Iterable[str]) -> dict[str, int]:
    """Shrunk failures HypoFuzz keeps in the (shared) database, per gate test node id: a team's findings
    read back, under the keys :func:`gate_keys` computes."""
    from hypofuzz.database import FailureState, HypofuzzDatabase

    database = HypofuzzDatabase(open_database(plan.database))
    return {
        nodeid: len(list(database.failures(state=FailureState.SHRUNK).fetch(key)))
        for nodeid, key in gate_keys(nodeids).items()
    }


#: run in a process of its own by :func:`gate_keys`: the gate module's tests, keyed as HypoFuzz keys them
_GATE_KEYS = """
import json, sys
from hypothesis.internal.reflection import function_digest
from gdn_equiv.suite import test_properties as gate

out = {}
for nodeid in json.loads(sys.argv[1]):
    test = getattr(gate, nodeid.rsplit("::", 1)[-1].split("[", 1)[0], None)
    if test is None:
        continue
    inner = test.hypothesis.inner_test
    before = getattr(inner, "_hypothesis_internal_add_digest", None)
    inner._hypothesis_internal_add_digest = nodeid.encode()
    try:
        out[nodeid] = function_digest(inner).hex()
    finally:
        inner._hypothesis_internal_add_digest = before
print(json.dumps(out))
"""


def gate_keys(nodeids: Iterable[str]) -> dict[str, bytes]:
    """Each gate test node id's key in Hypothesis' database: Hypothesis' digest of the test with its node id
    added, as HypoFuzz and the pytest plugin of Hypothesis both key a parametrised test. Computed in a process
    of its own, as HypoFuzz runs the gate: the gate sits above this module, which never imports it."""
    argv = [sys.executable, "-c", _GATE_KEYS, json.dumps(sorted(set(nodeids)))]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the gate's test keys could not be computed: {done.stderr.strip()[-2000:]}")
    keys = json.loads(done.stdout.strip().splitlines()[-1])
    return {nodeid: bytes.fromhex(key) for nodeid, key in keys.items()}
