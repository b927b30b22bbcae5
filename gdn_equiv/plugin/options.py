"""The plugin's options, whether a run is a gdn-equiv run, and its plan.

Installed in an environment, the plugin stays passive for unrelated test runs: it only adds its command-line
options. It switches on (profiles, xdist GPU pinning, the triton interpreter without a GPU, NaN poisoning of
fresh CUDA memory, skips for ``gpu``/``fla``/``cuda_backend`` tests, the example-count line) when the run asks for
it (:func:`wanted`). Switched on, :func:`plan_of` turns the options into the run's
:class:`~gdn_equiv.run.plan.RunPlan` before the first test, keeping SPEC §10's verdict promises: names are
checked (an unknown one is pytest's usage error), and a backend, target or serving engine that cannot run on
this machine ends the session with status 3 and one line naming it and why (a run that skipped it would pass
having checked nothing it was asked to). The plan is kept in ``config.stash`` (:func:`plan`); every other
hook and fixture reads it there.
"""

from __future__ import annotations

import os
import re
import sys
import time
import warnings
from pathlib import Path

import pytest

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import interpreter, isolation, testing
from gdn_equiv.harness.coverage import RUN_ID_ENV
from gdn_equiv.model.backends import fla_backend
from gdn_equiv.model.backends.fla_backend import AUTOTUNE_ENV
from gdn_equiv.model.families import parse_families
from gdn_equiv.plugin import counts, reports, stop
from gdn_equiv.run import html_report
from gdn_equiv.run import plan as run_plan
from gdn_equiv.run.plan import RunPlan
from gdn_equiv.serving.engines import engine_adapters
from gdn_equiv.targets import get_target
from gdn_equiv.targets.fla_target import REFERENCE_CORE_FAMILIES

MARKERS = {
    "gpu": "needs a CUDA device (skipped with a reason without one)",
    "triton": "runs the triton backend (interpreter on CPU)",
    "cuda_backend": "needs the causal-conv1d package",
    "fla": "needs flash-linear-attention",
    "slow": "takes seconds or more (layer properties on a GPU, subprocesses, long searches): started early under xdist",
    "first": "a cheap, broad property test (P2-P5, each conv call kind against torch and fp64 and in every cell, "
    "S1-S7): every worker runs its share of these before anything else, so a defect shows within seconds; "
    "first(rank): lower ranks first (default 0)",
    "teeth": "runs a property against a planted defect and expects it to fail",
}

#: what xdist tells a worker through its environment; in a process that is no worker, left by a parent that was
XDIST_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")

#: where a gdn-equiv run keeps its plan (absent: the plugin is passive in this run)
PLAN = pytest.StashKey[RunPlan]()

_SUITE_ARG = re.compile(r"(^|[/\\.])gdn_equiv([/\\.:]|$)")


def plan(config: pytest.Config) -> RunPlan | None:
    """The run's plan, or ``None`` where the plugin is passive (not a gdn-equiv run)."""
    return config.stash.get(PLAN, None)


def is_worker(config: pytest.Config) -> bool:
    """An xdist worker (xdist's own word: the environment may be a parent process')."""
    return hasattr(config, "workerinput")


# ---- activation ----------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gdn-equiv")
    group.addoption(
        "--gdn-backend",
        default=None,
        help="comma list of conv backends to run the gdn-equiv properties on: registered names, "
        "entry points of the gdn_equiv.backends group, or module:callable (default: torch)",
    )
    group.addoption(
        "--gdn-target",
        default=None,
        help="comma list of targets whose layers the layer properties (P2-P5) check: gdn_equiv (ours, the "
        "default) or fla (the installed flash-linear-attention's layers, its own guard deciding; without a "
        "GPU only with --fla-core reference --gdn-family gated_deltanet, under Triton's interpreter)",
    )
    group.addoption(
        "--gdn-family",
        default=None,
        help="comma list of layer families the properties draw from (or 'all', the default): built-ins and "
        "entry points of the gdn_equiv.families group; `gdn-equiv families` lists them",
    )
    group.addoption(
        "--gdn-split-families",
        action="store_true",
        default=False,
        help="run each layer-level property once per family (each with the profile's examples) instead of "
        "once across all: more tests for `pytest -n` to share out (a GPU run's layer properties)",
    )
    group.addoption(
        "--fla-core",
        default=None,
        choices=("fla", "reference"),
        help="core inside fla's layer for the fla target: fla's own kernels, or our reference core (fla's "
        "prologue, guard and convs untouched; fla's chunked backward does not run on Hopper with Triton 3.6, "
        "and its cores do not run under Triton's interpreter on a CPU; Gated DeltaNet only). "
        "Default: $GDN_FLA_CORE, else fla",
    )
    group.addoption(
        "--gdn-failure-log",
        default=None,
        metavar="PATH",
        help="append each failing test's report to PATH the moment it fails (for time-boxed runs that may be "
        "cut off before pytest's summary, e.g. a cold GPU); with xdist the controller writes it",
    )
    group.addoption(
        "--gdn-isolate",
        action="store_true",
        default=False,
        help="run each example of the suite's properties in a worker process: a kernel that crashes or hangs "
        "fails that example (shrunk by Hypothesis) instead of ending the run",
    )
    group.addoption(
        "--gdn-example-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --gdn-isolate or --gdn-sanitize: an example running longer fails and its worker is killed "
        "(default 60; under --gdn-sanitize 300)",
    )
    group.addoption(
        "--gdn-sanitize",
        default=None,
        choices=isolation.SANITIZER_TOOLS,
        metavar="TOOL",
        help="run each example's kernel calls in a fresh process under NVIDIA compute-sanitizer --tool TOOL ("
        + ", ".join(isolation.SANITIZER_TOOLS)
        + "): a sanitizer report fails that example, the report attached, and Hypothesis shrinks it; needs "
        "compute-sanitizer and a CUDA device (status 3 without them)",
    )
    group.addoption(
        "--gdn-serving-engine",
        default=None,
        help="comma list of serving engines the S0-S7 tests (gdn_equiv.suite.test_serving) run on: reference "
        "(the in-house pool), vllm, sglang (each path of the installed release and of every release in "
        ".engines/<engine>-<version>/), one path (vllm-interpret, vllm-0.33.0-gpu-ds, ...), a "
        "gdn_equiv.serving_engines entry point, or a plug-in module:attr. Default: every path, each one that "
        "cannot run here skipped with why",
    )
    group.addoption(
        "--gdn-database",
        default=None,
        metavar="DIR|redis://HOST:PORT/DB",
        help="Hypothesis example database of every test (a directory, or a team's redis server): what a "
        "`gdn-equiv fuzz` run saved there is replayed first; HypoFuzz workers share it the same way",
    )
    group.addoption(
        "--gdn-html",
        default=None,
        metavar="PATH",
        help="write the run's page to PATH: every collected test with its status (filters by status, property, "
        "family, backend), each failure with Hypothesis' falsifying example and the command that reruns it, the "
        "environment; one static HTML file (needs gdn-equiv[html])",
    )
    group.addoption(
        "--gdn-shrink-seconds",
        type=float,
        default=None,
        metavar="SECONDS",
        help="bound on the time Hypothesis spends shrinking a test's failures before it reports the smallest "
        "example found so far (re-running resumes from the example database); default by profile: "
        + ", ".join(f"{k} {v:g} s" for k, v in testing.SHRINK_SECONDS.items()),
    )
    group.addoption(
        "--gdn-allow-missed-fusion",
        action="store_true",
        default=False,
        help="P1: a guard that falls back where fusion is exact (a missed fusion) is reported as 'missed fusion "
        "(allowed)', a strict xfail with its states, instead of failing; an unsafe fusion always fails",
    )
    parser.addini("gdn_equiv_suite", type="bool", default=False, help="switch the gdn-equiv pytest plugin on")


def wanted(config: pytest.Config) -> bool:
    """Whether this run is a gdn-equiv run: ``--gdn-backend``, ``--gdn-target``, ``--gdn-serving-engine``,
    ``--gdn-html`` or ``--gdn-sanitize`` given, a test path inside the ``gdn_equiv`` package (``--pyargs
    gdn_equiv.suite``), or ``gdn_equiv_suite = true`` in the ini file (as this repository's ``pyproject.toml``)."""
    if config.getini("gdn_equiv_suite"):
        return True
    if any(
        config.getoption(o) is not None
        for o in ("gdn_backend", "gdn_target", "gdn_serving_engine", "gdn_html", "gdn_sanitize")
    ):
        return True
    return any(_SUITE_ARG.search(str(arg).split("::")[0]) for arg in config.args)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    log = config.getoption("gdn_failure_log")
    if log is not None and not is_worker(config):  # with xdist the controller writes it
        config.pluginmanager.register(reports.FailureLog(Path(log)), "gdn-equiv-failure-log")
    if not wanted(config):
        return
    if not is_worker(config):
        # started from inside an xdist worker (a test that runs the gate as a subprocess), this process inherited
        # that worker's number and count: it would pin itself to the parent's GPU and size its threads by them
        for name in XDIST_ENV:
            os.environ.pop(name, None)
    started = time.perf_counter()  # the run's clock: the stop's first failure, the examples' milestones
    # one id for the run, its xdist workers included (they inherit the controller's environment): the coverage
    # labels carry it, so `gdn-equiv coverage` judges this run's observations and nothing older
    os.environ.setdefault(RUN_ID_ENV, f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    # Before anything can initialise CUDA: each xdist worker sees one GPU.
    testing.pin_xdist_worker_device()
    import torch

    cuda = torch.cuda.is_available()
    cache = testing.project_triton_cache(config.rootpath, os.environ, gpu=cuda)
    if cache is not None:  # before any kernel compiles; xdist workers inherit it
        os.environ["TRITON_CACHE_DIR"] = cache
    if "TRITON_INTERPRET" not in os.environ and not cuda:
        # no GPU: triton kernels run under the interpreter (set before triton is imported)
        os.environ["TRITON_INTERPRET"] = "1"
    interpreter.make_faithful()  # before any kernel runs (SPEC §10)
    threads = testing.worker_threads(os.environ)
    if threads is not None:
        torch.set_num_threads(threads)
    config.stash[PLAN] = plan = plan_of(config, device="cuda" if cuda else "cpu")
    why = run_plan.load_settings(plan)
    if why is not None:
        warnings.warn(f"gdn-equiv: --gdn-shrink-seconds {plan.shrink_seconds:g} not applied: {why}", stacklevel=1)
    flag = stop.StopFlag(started)
    flag.configure(config)
    config.pluginmanager.register(flag, stop.StopFlag.NAME)
    config.pluginmanager.register(
        counts.ExampleCounts(config, flag, plan.hypothesis_profile), counts.ExampleCounts.NAME
    )
    if "hypofuzz" in sys.modules and sys.modules["hypofuzz"].detection.in_hypofuzz_run():
        # a HypoFuzz worker started some other way than fork keeps no patch of its parent's
        testing.hypofuzz_compat()
    _runnable_here(plan)
    _isolate(config, plan)
    _page_ready(config, plan)
    if plan.html is not None and not is_worker(config):  # the controller (or the one process) writes it
        config.pluginmanager.register(reports.GatePage(config, plan, flag), reports.GatePage.NAME)


def _usage(flag: str, exc: InvalidArgument) -> pytest.UsageError:
    return pytest.UsageError(f"{flag}: {exc}")


def plan_of(config: pytest.Config, *, device: str) -> RunPlan:
    """The run's plan from the plugin's options, every name checked (an unknown one is pytest's usage error,
    refused before any test runs, like a bad option); what cannot run here is left to :func:`_runnable_here`."""
    try:  # refused before any test runs, like a bad option
        profile = run_plan.profile(None, run_plan.pytest_default_profile())
    except InvalidArgument as exc:
        raise pytest.UsageError(str(exc)) from exc
    database = config.getoption("gdn_database")
    if database is not None:
        try:  # opened now: a bad value is refused here, and the settings share this one object
            testing.open_database(database)
        except InvalidArgument as exc:
            raise _usage("--gdn-database", exc) from exc
    try:
        shrink = run_plan.shrink_seconds(config.getoption("gdn_shrink_seconds"), profile)
    except InvalidArgument as exc:
        raise _usage("--gdn-shrink-seconds", exc) from exc
    try:
        backends = run_plan.backends(run_plan.names(config.getoption("gdn_backend"), "torch"))
    except InvalidArgument as exc:
        raise _usage("--gdn-backend", exc) from exc
    try:
        families = parse_families(config.getoption("gdn_family") or "all")
    except InvalidArgument as exc:
        raise _usage("--gdn-family", exc) from exc
    targets = run_plan.names(config.getoption("gdn_target"), "gdn_equiv")
    for name in targets:
        try:
            get_target(name)
        except InvalidArgument as exc:
            raise _usage("--gdn-target", exc) from exc
    core = config.getoption("fla_core") or os.environ.get("GDN_FLA_CORE", "fla")
    if "fla" in targets and core == "reference":
        # --fla-core reference restates Gated DeltaNet's core only: with the fla target, another family would run
        # with fla's core, not the one asked for; refused, as `gdn-equiv check` refuses it
        other = [f for f in families if f not in REFERENCE_CORE_FAMILIES]
        if other:
            raise pytest.UsageError(
                f"--fla-core reference swaps in the core of {', '.join(REFERENCE_CORE_FAMILIES)} only; --gdn-target "
                f"fla would run --gdn-family {','.join(other)} with fla's core: drop --fla-core, or pick those families"
            )
    engines: dict[str, tuple[str, ...]] = {}
    if config.getoption("gdn_serving_engine") is not None:
        try:
            engines = run_plan.engines(run_plan.names(config.getoption("gdn_serving_engine"), "reference"))
        except InvalidArgument as exc:
            raise _usage("--gdn-serving-engine", exc) from exc
    # the engine paths the serving tests run on: those asked, else every path the version tables list
    paths = dict.fromkeys(p for mine in engines.values() for p in mine) or {a.name: None for a in engine_adapters()}
    tool = config.getoption("gdn_sanitize")
    isolate = bool(config.getoption("gdn_isolate")) or tool is not None
    timeout = config.getoption("gdn_example_timeout")
    html = config.getoption("gdn_html")
    return RunPlan(
        backends=backends,
        targets=tuple(targets),
        families=tuple(families),
        engines=engines,
        serving_engines=tuple(paths),
        profile=profile,
        database=database,
        isolate=isolate,
        example_timeout=None if not isolate else timeout,
        sanitize=tool,
        device=device,
        shrink_seconds=shrink,
        html=None if html is None else Path(html),
        fla_core=core,
        split_families=bool(config.getoption("gdn_split_families")),
        allow_missed_fusion=bool(config.getoption("gdn_allow_missed_fusion")),
    )


def _isolate(config: pytest.Config, plan: RunPlan) -> None:
    timeout = config.getoption("gdn_example_timeout")
    tool = plan.sanitize
    if timeout is not None and not plan.isolate:
        raise pytest.UsageError("--gdn-example-timeout needs --gdn-isolate or --gdn-sanitize")
    if tool is not None:  # before any example: a sanitized run that cannot sanitize would check nothing it was asked
        reason = isolation.sanitizer_missing(tool)
        if reason is not None:
            pytest.exit(f"gdn-equiv: --gdn-sanitize {tool} cannot run here: {reason}", returncode=3)
    if plan.isolate:
        # a fresh worker process lacks what this one did to run fla under the interpreter
        ready = f"{__name__}:{fla_interpreter_ready.__name__}"
        setup = (ready,) if "fla" in plan.targets and _interpreting() else ()
        default = isolation.DEFAULT_TIMEOUT if tool is None else isolation.SANITIZE_TIMEOUT
        try:
            isolation.configure(default if timeout is None else timeout, setup=setup, sanitize=tool)
        except InvalidArgument as exc:
            raise _usage("--gdn-example-timeout", exc) from exc


def _page_ready(config: pytest.Config, plan: RunPlan) -> None:
    """``--gdn-html``: the page is written by the controller (or the one process) at the session's end;
    without Jinja2 the session ends before the first test with status 3."""
    if plan.html is not None and not is_worker(config):
        reason = html_report.missing()
        if reason is not None:
            pytest.exit(f"gdn-equiv: {reason}", returncode=3)
        if plan.html.is_dir():
            raise pytest.UsageError(f"--gdn-html {str(plan.html)!r} is a directory; it must be a file")


def _runnable_here(plan: RunPlan) -> None:
    """A backend or target that cannot run on this machine ends the session before the first test, with
    exit status 3 and one line naming it and why (SPEC §10): a run that skipped them would pass having
    checked nothing it was asked to check."""
    problems = [
        f"--gdn-backend {name!r} cannot run here: {reason}"
        for name, reason in run_plan.backends_unavailable(plan.backends, plan.device).items()
    ]
    for name in plan.targets:
        reason = _target_unavailable(plan, name)
        if reason is not None:
            problems.append(f"--gdn-target {name!r} cannot run here: {reason}")
    for name, paths in plan.engines.items():
        why = run_plan.engine_unavailable(paths)
        if why is not None:
            problems.append(f"--gdn-serving-engine {name!r} cannot run here: {why}")
    if problems:
        pytest.exit("gdn-equiv: " + "; ".join(" ".join(p.split()) for p in problems), returncode=3)


def _target_unavailable(plan: RunPlan, name: str) -> str | None:
    """Why ``name``'s layers cannot run here (``None``: they can), and for fla under Triton's interpreter,
    this process made ready for them (:func:`fla_interpreter_ready`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla's import warns about deprecations and a missing GPU
        reason = get_target(name).unavailable()
    if reason is not None or name != "fla" or plan.device != "cpu":
        return reason
    if not _interpreting():
        return "fla's layer runs Triton kernels: it needs a CUDA device, or TRITON_INTERPRET=1 on a CPU"
    if plan.fla_core != "reference":
        return (
            "fla's own cores do not run under Triton's interpreter (no CUDA device here); --fla-core reference "
            "--gdn-family gated_deltanet runs fla's layer (its guard, prologue, convs and norms) with our core"
        )

    if os.environ.setdefault(AUTOTUNE_ENV, "first") != "first":
        return f"{AUTOTUNE_ENV}={os.environ[AUTOTUNE_ENV]} asks fla to autotune, which Triton's interpreter cannot"
    fla_interpreter_ready()
    return None


def fla_interpreter_ready() -> None:
    """fla's Triton kernels made runnable under the interpreter in this process: the conv's autotuned
    kernels pinned to one config and int32 masks accepted
    (:func:`gdn_equiv.model.backends.fla_backend.interpreter_ready`);
    the fla target pins the rest of fla's kernels as it builds layers (``GDN_EQUIV_FLA_AUTOTUNE=first``,
    set by the plugin). Each ``--gdn-isolate`` worker calls it too."""
    fla_backend.interpreter_ready(fla_backend.conv_row())


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"
