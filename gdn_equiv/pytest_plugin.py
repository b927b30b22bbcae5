"""The gdn-equiv pytest plugin: options, fixtures, Hypothesis profiles and the example-count summary.

Installed with the package (``pytest11`` entry point ``gdn_equiv``), so another project can gate
its kernel with::

    pytest --pyargs gdn_equiv.suite --gdn-backend mypkg.kernels:conv

From a source checkout the root ``conftest.py`` loads this module instead (unless the entry point
already did). Installed in an environment, the plugin stays passive for unrelated test runs: it
only adds its command-line options. It switches on (profiles, xdist GPU pinning, the triton
interpreter without a GPU, NaN poisoning of fresh CUDA memory, skips for ``gpu``/``fla``/
``cuda_backend`` tests, the example-count line) when the run asks for it: ``--gdn-backend`` or
``--gdn-target`` or ``--gdn-serving-engine`` given, a test path inside the ``gdn_equiv`` package
(``--pyargs gdn_equiv.suite``), or ``gdn_equiv_suite = true`` in the ini file (as this repository's
``pyproject.toml`` does).

Switched on, it keeps SPEC §10's verdict promises before the first test: names (``--gdn-backend``,
``--gdn-target``, ``--gdn-family``, ``--gdn-serving-engine``) are checked (an unknown one is pytest's usage error),
and a backend, target or serving engine that cannot run on this machine ends the session with status 3 and
one line naming it and why (a run that skipped it would pass having checked nothing it was asked to).
``--gdn-isolate`` runs every check that calls the kernel under test in a worker process
(:mod:`gdn_equiv.harness.isolation`).

The helpers live in :mod:`gdn_equiv.harness.testing`; this module only connects them to pytest hooks.
pytest imports every installed plugin at start-up: importing this one imports gdn_equiv (torch included).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import interpreter, isolation, registry, testing
from gdn_equiv.harness.coverage import RUN_ID_ENV
from gdn_equiv.model.backends import fla_backend, get_backend, off_device
from gdn_equiv.model.backends.fla_backend import AUTOTUNE_ENV
from gdn_equiv.model.families import parse_families
from gdn_equiv.targets import get_target
from gdn_equiv.targets.fla_target import REFERENCE_CORE_FAMILIES

if TYPE_CHECKING:
    from collections.abc import Callable

    from hypothesis.utils.dynamicvariables import DynamicVariable
from gdn_equiv.harness.testing import hypofuzz_compat, open_database
from gdn_equiv.run import html_report
from gdn_equiv.serving.engines import engine_adapters
from gdn_equiv.serving.records import engine_paths, not_applicable

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

_ACTIVE = False
_FAILURE_LOG: Path | None = None
_CONFIG: pytest.Config | None = None
_CUDA: bool | None = None
_COUNTS_KEY = "gdn_equiv_counts"
_TOTALS: dict[str, int] = {"properties": 0, "hypothesis": 0}
#: example counts whose time of reaching the summary line reports (issue #17's cold start: 500 in <= 60 s)
MILESTONES = (100, 500, 1000)
_REACHED: dict[int, float] = {}
_START = time.perf_counter()
_SUITE_ARG = re.compile(r"(^|[/\\.])gdn_equiv([/\\.:]|$)")


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
    """Whether this run is a gdn-equiv run (see the module docstring)."""
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
    global _ACTIVE, _START, _FAILURE_LOG, _CONFIG
    log = config.getoption("gdn_failure_log")
    worker = hasattr(config, "workerinput")  # xdist's own word: the environment may be a parent process'
    _FAILURE_LOG = None if log is None or worker else Path(log)
    if not wanted(config):
        return
    if not worker:
        # started from inside an xdist worker (a test that runs the gate as a subprocess), this process inherited
        # that worker's number and count: it would pin itself to the parent's GPU and size its threads by them
        for name in XDIST_ENV:
            os.environ.pop(name, None)
    _ACTIVE, _CONFIG = True, config
    _START = time.perf_counter()
    # one id for the run, its xdist workers included (they inherit the controller's environment): the coverage
    # labels carry it, so `gdn-equiv coverage` judges this run's observations and nothing older
    os.environ.setdefault(RUN_ID_ENV, f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    # Before anything can initialise CUDA: each xdist worker sees one GPU.
    testing.pin_xdist_worker_device()
    cache = testing.project_triton_cache(config.rootpath, os.environ, gpu=_cuda_available())
    if cache is not None:  # before any kernel compiles; xdist workers inherit it
        os.environ["TRITON_CACHE_DIR"] = cache
    if "TRITON_INTERPRET" not in os.environ and not _cuda_available():
        # no GPU: triton kernels run under the interpreter (set before triton is imported)
        os.environ["TRITON_INTERPRET"] = "1"
    interpreter.make_faithful()  # before any kernel runs (SPEC §10)
    threads = testing.worker_threads(os.environ)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    from hypothesis import settings

    testing.register_profiles()

    try:
        settings.load_profile(testing.default_profile())
    except InvalidArgument as exc:  # refused before any test runs, like a bad option
        raise pytest.UsageError(str(exc)) from exc
    _use_database(config)
    _bound_shrinking(config)
    _STOP.configure(config)
    if "hypofuzz" in sys.modules and sys.modules["hypofuzz"].detection.in_hypofuzz_run():
        # a HypoFuzz worker started some other way than fork keeps no patch of its parent's
        hypofuzz_compat()
    _load_backends(config)
    targets = _load_targets(config)
    engines = _load_engines(config)
    _runnable_here(config, targets, engines)
    _isolate(config, targets)
    _page(config)


def _use_database(config: pytest.Config) -> None:
    """``--gdn-database``: the loaded profile again with that database, set before the test modules are
    imported, so every test's own ``settings(...)`` inherits it (HypoFuzz fuzzes only tests whose database
    is the default one, and its workers and a later replay must read the same keys)."""
    value = config.getoption("gdn_database")
    if value is None:
        return
    from hypothesis import settings

    try:
        database = open_database(value)
    except InvalidArgument as exc:
        raise pytest.UsageError(f"--gdn-database: {exc}") from exc
    name = settings.get_current_profile_name()
    settings.register_profile(f"{name}+database", parent=settings.get_profile(name), database=database)
    settings.load_profile(f"{name}+database")


def _bound_shrinking(config: pytest.Config) -> None:
    """``--gdn-shrink-seconds`` (default by profile, :data:`gdn_equiv.harness.testing.SHRINK_SECONDS`): a failing
    test reports its smallest example found so far once shrinking has taken this long, so a red verdict with
    its shrunk example arrives in bounded time whatever the failure (the green gate never shrinks)."""
    from hypothesis import settings

    seconds = config.getoption("gdn_shrink_seconds")
    if seconds is None:
        seconds = testing.SHRINK_SECONDS.get(settings.get_current_profile_name().split("+")[0], 300.0)
    try:
        why = testing.bound_shrinking(seconds)
    except InvalidArgument as exc:
        raise pytest.UsageError(f"--gdn-shrink-seconds: {exc}") from exc
    if why is not None:
        warnings.warn(f"gdn-equiv: --gdn-shrink-seconds {seconds:g} not applied: {why}", stacklevel=1)


def _isolate(config: pytest.Config, targets: list[str]) -> None:
    timeout = config.getoption("gdn_example_timeout")
    tool = config.getoption("gdn_sanitize")
    if timeout is not None and not config.getoption("gdn_isolate") and tool is None:
        raise pytest.UsageError("--gdn-example-timeout needs --gdn-isolate or --gdn-sanitize")
    if tool is not None:  # before any example: a sanitized run that cannot sanitize would check nothing it was asked
        reason = isolation.sanitizer_missing(tool)
        if reason is not None:
            pytest.exit(f"gdn-equiv: --gdn-sanitize {tool} cannot run here: {reason}", returncode=3)
    if config.getoption("gdn_isolate") or tool is not None:
        # a fresh worker process lacks what this one did to run fla under the interpreter
        setup = (f"{__name__}:{fla_interpreter_ready.__name__}",) if "fla" in targets and _interpreting() else ()
        default = isolation.DEFAULT_TIMEOUT if tool is None else isolation.SANITIZE_TIMEOUT
        try:
            isolation.configure(default if timeout is None else timeout, setup=setup, sanitize=tool)
        except InvalidArgument as exc:
            raise pytest.UsageError(f"--gdn-example-timeout: {exc}") from exc


def _load_backends(config: pytest.Config) -> None:
    """A backend that cannot load (unknown name, import error, wrong signature) stops the run at once."""

    for name in _names(config, "gdn_backend", "torch"):
        try:
            get_backend(name)
        except InvalidArgument as exc:
            raise pytest.UsageError(f"--gdn-backend: {exc}") from exc
    try:
        families(config)
    except InvalidArgument as exc:
        raise pytest.UsageError(f"--gdn-family: {exc}") from exc


def _load_targets(config: pytest.Config) -> list[str]:
    """The targets of ``--gdn-target`` (default: gdn_equiv), each a known name (else a usage error).

    ``--fla-core reference`` restates Gated DeltaNet's core only: with the fla target, another family
    would run with fla's core, not the one asked for; refused, as ``gdn-equiv check`` refuses it."""

    names = _names(config, "gdn_target", "gdn_equiv")
    for name in names:
        try:
            get_target(name)
        except InvalidArgument as exc:
            raise pytest.UsageError(f"--gdn-target: {exc}") from exc
    if "fla" in names and fla_core(config) == "reference":
        other = [f for f in families(config) if f not in REFERENCE_CORE_FAMILIES]
        if other:
            raise pytest.UsageError(
                f"--fla-core reference swaps in the core of {', '.join(REFERENCE_CORE_FAMILIES)} only; --gdn-target "
                f"fla would run --gdn-family {','.join(other)} with fla's core: drop --fla-core, or pick those families"
            )
    return names


def _load_engines(config: pytest.Config) -> dict[str, list[str]]:
    """``--gdn-serving-engine``: each name known (else a usage error naming the known ones), with its engine paths."""
    if config.getoption("gdn_serving_engine") is None:
        return {}

    asked = {}
    for name in _names(config, "gdn_serving_engine", "reference"):
        try:
            asked[name] = engine_paths(name)
        except KeyError as exc:
            raise pytest.UsageError(f"--gdn-serving-engine: {exc.args[0]}") from None
    return asked


def serving_engines(config: pytest.Config) -> list[str]:
    """The engine paths the serving tests run on: those of ``--gdn-serving-engine`` (checked at configure time), else
    every path the version tables list (the reference first)."""
    if config.getoption("gdn_serving_engine") is None:
        return [a.name for a in engine_adapters()]

    return list(
        dict.fromkeys(p for name in _names(config, "gdn_serving_engine", "reference") for p in engine_paths(name))
    )


def _runnable_here(config: pytest.Config, targets: list[str], engines: dict[str, list[str]]) -> None:
    """A backend or target that cannot run on this machine ends the session before the first test, with
    exit status 3 and one line naming it and why (SPEC §10): a run that skipped them would pass having
    checked nothing it was asked to check."""
    problems = []
    for name in _names(config, "gdn_backend", "torch"):
        reason = get_backend(name).unavailable() or off_device(name, "cuda" if _cuda_available() else "cpu")
        if reason is not None:
            problems.append(f"--gdn-backend {name!r} cannot run here: {reason}")
    for name in targets:
        reason = _target_unavailable(config, name)
        if reason is not None:
            problems.append(f"--gdn-target {name!r} cannot run here: {reason}")
    if engines:
        for name, paths in engines.items():
            # an engine is asked when one of its paths runs here; the others' tests skip with their reasons
            reasons = {p: not_applicable(p) for p in paths}
            if all(reasons.values()):
                why = "; ".join(f"{p}: {r}" for p, r in reasons.items()) if len(paths) > 1 else reasons[paths[0]]
                problems.append(f"--gdn-serving-engine {name!r} cannot run here: {why}")
    if problems:
        pytest.exit("gdn-equiv: " + "; ".join(" ".join(p.split()) for p in problems), returncode=3)


def _target_unavailable(config: pytest.Config, name: str) -> str | None:
    """Why ``name``'s layers cannot run here (``None``: they can), and for fla under Triton's interpreter,
    this process made ready for them (:func:`fla_interpreter_ready`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla's import warns about deprecations and a missing GPU
        reason = get_target(name).unavailable()
    if reason is not None or name != "fla" or _cuda_available():
        return reason
    if not _interpreting():
        return "fla's layer runs Triton kernels: it needs a CUDA device, or TRITON_INTERPRET=1 on a CPU"
    if fla_core(config) != "reference":
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


def fla_core(config: pytest.Config) -> str:
    """``--fla-core``, else ``$GDN_FLA_CORE``, else ``fla``."""
    return config.getoption("fla_core") or os.environ.get("GDN_FLA_CORE", "fla")


def families(config: pytest.Config) -> list[str]:
    """The families of ``--gdn-family`` (default: all), checked."""
    return parse_families(config.getoption("gdn_family") or "all")


# ---- fixtures ------------------------------------------------------------------------------


def _names(config: pytest.Config, option: str, default: str) -> list[str]:
    value = config.getoption(option)
    return testing.parse_names(default if value is None else value)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gdn_backend" in metafunc.fixturenames:
        names = _names(metafunc.config, "gdn_backend", "torch")
        metafunc.parametrize("gdn_backend", names, ids=names, indirect=True, scope="session")
    # one target (the usual run) is not parametrised: test ids stay those of a run without --gdn-target
    targets = _names(metafunc.config, "gdn_target", "gdn_equiv")
    if "gdn_target" in metafunc.fixturenames and len(targets) > 1:
        metafunc.parametrize("gdn_target", targets, ids=targets, indirect=True, scope="session")
    if "gdn_families" in metafunc.fixturenames and metafunc.config.getoption("gdn_split_families"):
        names = families(metafunc.config)
        metafunc.parametrize("gdn_families", [(n,) for n in names], ids=names, scope="session")
    if "gdn_serving_engine" in metafunc.fixturenames:
        names = serving_engines(metafunc.config)
        metafunc.parametrize("gdn_serving_engine", names, ids=names, indirect=True, scope="module")
    if "gdn_family" in metafunc.fixturenames:
        names = families(metafunc.config)
        metafunc.parametrize("gdn_family", names, ids=names, scope="session")


@pytest.fixture(scope="session")
def gdn_families(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """Every family of ``--gdn-family``: properties draw their examples across them (shrinking towards
    the first), so one test covers all without multiplying its examples. ``--gdn-split-families``
    parametrises this fixture instead, one family per test."""
    return tuple(families(request.config))


@pytest.fixture(scope="session")
def gdn_backend(request: pytest.FixtureRequest) -> str:
    """A conv backend name from ``--gdn-backend``, checked at configure time: it loads and can run here."""
    return cast("str", request.param)


@pytest.fixture(scope="module")
def gdn_serving_engine(request: pytest.FixtureRequest) -> str:
    """A serving engine path (``--gdn-serving-engine``, default every path): the serving tests' adapter by name."""
    return cast("str", request.param)


@pytest.fixture(scope="session")
def gdn_target(request: pytest.FixtureRequest) -> str:
    """A target name from ``--gdn-target`` (default ``gdn_equiv``), checked at configure time: it is known
    and can run here. Parametrised only when several are named."""
    return cast("str", getattr(request, "param", None) or _names(request.config, "gdn_target", "gdn_equiv")[0])


@pytest.fixture(name="fla_core", scope="session")
def _fla_core_fixture(request: pytest.FixtureRequest) -> str:
    """``--fla-core`` (else ``$GDN_FLA_CORE``, else ``fla``): the core inside the fla target's layers."""
    return fla_core(request.config)


def _cuda_available() -> bool:
    global _CUDA
    if _CUDA is None:
        import torch

        _CUDA = torch.cuda.is_available()
    return _CUDA


@pytest.fixture(scope="session")
def allow_missed_fusion(pytestconfig: pytest.Config) -> bool:
    """``--gdn-allow-missed-fusion``: P1's missed fusions are reported, not failed (an unsafe fusion always fails)."""
    return bool(pytestconfig.getoption("gdn_allow_missed_fusion"))


@pytest.fixture(scope="session")
def device() -> str:
    """Where layers and inputs live: the (pinned) GPU when there is one, else the CPU."""
    return "cuda" if _cuda_available() else "cpu"


@pytest.fixture(autouse=True)
def _poison_fresh_cuda_memory() -> Any:
    """fla's habit: fresh CUDA tensors from ``torch.empty*`` are NaN, so uninitialised reads show.

    ``GDN_EQUIV_POISON=0`` turns it off (e.g. for profiling); unrelated test runs never see it.
    """
    if not _ACTIVE or not _cuda_available() or os.environ.get("GDN_EQUIV_POISON", "1") == "0":
        yield
        return
    with testing.nan_poisoned_empty("cuda"):
        yield


def _page(config: pytest.Config) -> None:
    """``--gdn-html``: the run's page, written by the controller (or the one process) at the session's end;
    without Jinja2 the session ends before the first test with status 3."""
    path = config.getoption("gdn_html")
    if path is None or hasattr(config, "workerinput"):
        return
    reason = html_report.missing()
    if reason is not None:
        pytest.exit(f"gdn-equiv: {reason}", returncode=3)
    if Path(path).is_dir():
        raise pytest.UsageError(f"--gdn-html {path!r} is a directory; it must be a file")
    config.pluginmanager.register(_GatePage(config, Path(path)), "gdn-equiv-html")


class _GatePage:
    """The hooks that feed :class:`gdn_equiv.run.html_report.GateLedger` and write the page."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        records = {r.gate_test: r.name for r in registry.records().values() if r.gate_test}
        backends = _names(config, "gdn_backend", "torch")
        self.path, self.config = path, config
        self.ledger = html_report.GateLedger(records=records, backends=backends, families=families(config))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.ledger.collected([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.ledger.collected(list(ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        examples = sum(
            int(v.get("hypothesis", 0)) for k, v in report.user_properties if k == _COUNTS_KEY and isinstance(v, dict)
        )
        longrepr = report.longreprtext
        outcome: str = report.outcome
        if report.skipped and isinstance(report.longrepr, tuple):
            longrepr = str(report.longrepr[2])
            if longrepr.removeprefix("Skipped: ").startswith(NOT_REACHED_SKIP):
                outcome = html_report.NOT_REACHED  # the stop's skip (-x/--maxfail): the test never ran whole
        if getattr(report, "wasxfail", ""):  # an xfail's reason (P1's known gaps, an allowed missed fusion)
            longrepr = str(report.wasxfail)
        self.ledger.reported(
            report.nodeid, when=report.when, outcome=outcome, longrepr=longrepr, duration=report.duration,
            examples=examples, xfail=hasattr(report, "wasxfail"),
        )  # fmt: skip

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from hypothesis import settings

        profile = settings.get_current_profile_name()
        seed = self.config.getoption("hypothesis_seed", None)
        # the process' exit status is the session's as the last hook left it (this plugin's own sessionfinish
        # turns xdist's "interrupted" of a -x stop into "tests failed"), not the status this hook was called with
        exitstatus = session.exitstatus
        status = "interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else "complete"
        if _STOP.first_failure is not None and _STOP.reason() is not None:
            maxfail = self.config.getoption("maxfail")
            status = "stopped at its first failure (-x)" if maxfail == 1 else f"stopped at --maxfail {maxfail}"
        args = " ".join(str(a) for a in self.config.invocation_params.args)
        meta = {"mode": "pytest gate", "arguments": args, "profile": profile}
        html = html_report.render(
            self.ledger.summary(status=status, meta=meta),
            page=self.path,
            report_dir=None,
            title=f"gdn-equiv pytest gate · {args}"[:200],
            env=html_report.environment(
                device="cuda" if _cuda_available() else "cpu", profile=profile, seed=None if seed is None else str(seed)
            ),
            failing=html_report.GATE_FAILING,
            exit_note=f"pytest exit status {int(exitstatus)}",
        )
        html_report.write(self.path, html)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"gdn-equiv: page {self.path}")


# ---- scheduling under xdist -----------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Any:
    """``pytest -n N`` without ``--dist`` schedules by work stealing in a gdn-equiv run: its long tests
    (layer properties on a GPU, subprocess gates, interpreter kernels) otherwise leave workers idle at
    the end; on 2 CPU cores the repository's test command took 167 s instead of 189 s (issue #17).
    A wrapper, so it runs before pytest-xdist turns ``-n`` into ``--dist load`` whatever order the
    plugins were registered in; an explicit ``--dist`` is kept."""
    option = config.option
    if getattr(option, "numprocesses", None) and getattr(option, "dist", None) == "no" and wanted(config):
        option.dist = "worksteal"
    return (yield)


def _first_batch_starts(config: pytest.Config, n: int, workers: int) -> list[int] | None:
    """Where each worker's first batch of tests begins in the collected order, as xdist deals them, or ``None``
    where the order does not decide it. ``worksteal`` (this plugin's default for ``-n``) hands worker ``w`` the
    contiguous share ``[w * n // workers, ...)`` and later moves tests from the back of the longest queue;
    ``load`` sends each worker in turn a chunk of ``max(2, min(n // workers // 4, --maxschedchunk))``
    consecutive tests, then more as queues run low; ``loadscope``/``loadfile``/``loadgroup`` deal whole
    modules or groups. Workers see the command line, not the controller's options: ``--dist`` not given
    (``no`` there) is the worksteal this plugin chose."""
    dist = getattr(config.option, "dist", "no") or "no"
    if dist in ("no", "worksteal"):
        share = n // workers
        return [w * share for w in range(workers)]
    if dist == "load":
        chunk = n // workers // 4
        most = getattr(config.option, "maxschedchunk", None)
        chunk = max(2, min(chunk, most) if most else chunk)
        return [w * chunk for w in range(workers)] if chunk * workers <= n else None
    return None


def _first_rank(item: pytest.Item) -> int:
    marker = item.get_closest_marker("first")
    return int(marker.args[0]) if marker is not None and marker.args else 0


def _order(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order for the time to a red verdict as well as for wall time.

    First the ``first`` tier: cheap, broad property tests (P2-P5, each conv call kind against torch and
    fp64 and in every cell of T against W x state x packing x grad, S1-S7) that catch the planted defects
    within their first examples; then the ``slow`` tests (seconds or minutes each: layer properties on a GPU,
    subprocess gates, long searches), so none starts last and leaves the other workers idle at the end; then
    the rest. Under xdist each worker's first batch begins with its round-robin share of the first tier, then
    of the slow tests, so every worker starts on the first tier whatever the dealing (worksteal or load); every worker
    collects and orders the same way, as xdist requires. One process runs the first tier first, then the
    rest in collection order (slow-first buys nothing there)."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    # the first tier by its rank (``first(rank)``, lowest first; collection order within a rank)
    first = sorted((item for item in items if item.get_closest_marker("first")), key=_first_rank)
    slow = [item for item in items if item.get_closest_marker("slow") and not item.get_closest_marker("first")]
    if not first and not slow:
        return
    tiered = {id(item) for item in (*first, *slow)}
    rest = [item for item in items if id(item) not in tiered]
    starts = _first_batch_starts(config, len(items), workers) if workers > 1 else None
    if starts is None:  # one process (or dealing by module): the first tier first, the rest as collected
        chosen = {id(item) for item in first}
        items[:] = first + [item for item in items if id(item) not in chosen]
        return
    ordered: list[pytest.Item] = []
    for w in range(workers):
        end = starts[w + 1] if w + 1 < workers else len(items)
        # this worker's first batch [starts[w], end): its share of each tier, then the rest fills it up
        mine = first[w::workers] + slow[w::workers]
        take = max(0, end - len(ordered) - len(mine))
        ordered += mine + rest[:take]
        rest = rest[take:]
    items[:] = ordered + rest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _ACTIVE:
        return
    _order(config, items)
    skips = {
        "gpu": None if _cuda_available() else "needs a CUDA device (none visible)",
        "cuda_backend": None
        if importlib.util.find_spec("causal_conv1d") is not None
        else "needs the causal-conv1d package",
        "fla": None if importlib.util.find_spec("fla") is not None else "needs flash-linear-attention",
    }
    for item in items:
        for marker, reason in skips.items():
            if reason is not None and item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


# ---- stopping at the first failure under xdist -------------------------------------------------


#: how the skip of a test that the stop kept from running (or from finishing) begins
NOT_REACHED_SKIP = "not reached: "


class _StopFlag:
    """``-x`` / ``--maxfail`` that stops every xdist worker at once, and a report that says what did not run.

    pytest-xdist handles ``-x`` in the controller: when enough failures have arrived it sends each worker a
    shutdown that the worker reads only after every test already queued to it (pytest-xdist #420, open since
    2019; #1024: the stop must travel controller -> worker, so no worker-local fix suffices), and a worksteal
    queue holds a whole share of the suite. So the controller writes a flag file the moment the failure that
    reaches ``--maxfail`` arrives (its path travels to the workers in ``workerinput``); each worker checks it
    before every test and between the examples of a Hypothesis test, and on seeing it ends the running test as
    skipped ("not reached", never a pass: the examples it ran are not the test's budget) and stops
    (``session.shouldstop``), which ends its loop after that test.

    The report stays complete: every collected test that sent no report is reported as skipped, "not reached"
    (the terminal's count, JUnit XML), and the controller's exit status is pytest's "tests failed" (1), as for
    ``-x`` without xdist, not the "interrupted" (2) that xdist's own stop gives."""

    KEY = "gdn_equiv_stop_flag"

    def __init__(self) -> None:
        self.path: Path | None = None
        self.owner = False  # the controller (or the single process) that created the flag's directory
        self.seen: str | None = None
        self.failures = 0
        self.first_failure: tuple[str, float] | None = None
        self.collected: list[str] = []
        self.reported: set[str] = set()
        self.stopped_mid_run = 0
        self.never_started = 0

    def configure(self, config: pytest.Config) -> None:
        worker = getattr(config, "workerinput", None)
        if worker is not None:
            value = worker.get(self.KEY)
            self.path = Path(value) if value else None
        elif (config.getoption("maxfail") or 0) > 0:
            import tempfile

            self.path = Path(tempfile.mkdtemp(prefix="gdn-equiv-stop-")) / "stop"
            self.owner = True

    def unconfigure(self) -> None:
        if self.owner and self.path is not None:
            import shutil

            shutil.rmtree(self.path.parent, ignore_errors=True)

    def reason(self) -> str | None:
        """Why this worker must stop (the flag's text), or ``None``; cheap enough to ask per example."""
        if self.seen is None and self.path is not None and self.path.exists():
            self.seen = self.path.read_text(encoding="utf-8").strip() or "the run stopped"
        return self.seen

    def raise_if_stopped(self, item: pytest.Item, *, mid_run: bool) -> None:
        why = self.reason()
        if why is None:
            return
        item.session.shouldstop = f"gdn-equiv: {why}"
        if mid_run:
            item.user_properties.append(("gdn_equiv_stopped_mid_run", True))
        where = "stopped mid-run" if mid_run else "not started"
        pytest.skip(f"{NOT_REACHED_SKIP}{where}, {why}")

    def skip_if_stopped_mid_run(self, item: pytest.Item, exc: BaseException) -> None:
        """The stop raised between two examples of a Hypothesis test comes out of Hypothesis as the cause of
        another error (the run drew less than the same choices drew before: ``FlakyStrategyDefinition``), since
        a stopped example is one Hypothesis cannot replay. Such an error whose chain holds this flag's skip is
        the stop, nothing else: the test is reported skipped, "not reached", as the flag's skip says."""
        if isinstance(exc, pytest.skip.Exception) or self.seen is None:
            return
        seen: set[int] = set()
        todo: list[BaseException | None] = [exc]
        while todo:
            e = todo.pop()
            if e is None or id(e) in seen:
                continue
            seen.add(id(e))
            if isinstance(e, pytest.skip.Exception) and str(e.msg).startswith(f"{NOT_REACHED_SKIP}stopped mid-run"):
                raise pytest.skip.Exception(e.msg) from None
            todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]

    def note_report(self, config: pytest.Config, report: pytest.TestReport) -> None:
        """Controller (or single process): count failures as pytest does, raise the flag at ``--maxfail``."""
        self.reported.add(report.nodeid)
        if report.when == "call" and any(k == "gdn_equiv_stopped_mid_run" for k, _ in report.user_properties):
            self.stopped_mid_run += 1
        if not report.failed or not self.owner or self.path is None:
            return
        self.failures += 1
        if self.first_failure is None:
            self.first_failure = (report.nodeid, time.perf_counter() - _START)
        if self.failures >= config.getoption("maxfail") and not self.path.exists():
            nodeid, at = self.first_failure
            text = f"the run stopped at its first failure (-x): FAILED {nodeid} at {at:.1f} s"
            if config.getoption("maxfail") > 1:
                text = f"the run stopped at --maxfail {config.getoption('maxfail')} failures (first: FAILED {nodeid})"
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(text + "\n", encoding="utf-8")
            tmp.replace(self.path)  # whole or absent for a worker that reads it

    def not_reached(self, session: pytest.Session) -> list[str]:
        """Collected tests without any report: never started (in collection order)."""
        ids = self.collected or [item.nodeid for item in session.items]
        return [i for i in ids if i not in self.reported]


_STOP = _StopFlag()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: each worker gets the path of the controller's stop flag."""
    if _ACTIVE and _STOP.path is not None:
        node.workerinput[_StopFlag.KEY] = str(_STOP.path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist: what the workers collected (every worker collects the same), for the "not reached" rows."""
    if _ACTIVE and not _STOP.collected:
        _STOP.collected = list(ids)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _ACTIVE:
        _STOP.raise_if_stopped(item, mid_run=False)


#: the test whose call runs now (pytest_runtest_call)
_RUNNING_ITEM: list[pytest.Item] = []


def _wrap_examples(item: pytest.Item) -> None:
    """Every example of a Hypothesis test runs in its own count (:func:`gdn_equiv.harness.testing.example_scope`:
    a ``count_example`` counts once the example compared something), and asks the stop flag first where one
    exists (``-x``/``--maxfail``). Wrapped once per test function (its parametrisations share it: the stop is
    the running item's, :data:`_RUNNING_ITEM`)."""
    handle = getattr(getattr(item, "obj", None), "hypothesis", None)
    inner = getattr(handle, "inner_test", None)
    if handle is None or inner is None or getattr(inner, "_gdn_equiv_wrapped", False):
        return

    @functools.wraps(inner)  # the same source, signature and digest: the same database key
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if _STOP.path is not None and _RUNNING_ITEM:
            _STOP.raise_if_stopped(_RUNNING_ITEM[-1], mid_run=True)
        with testing.example_scope():
            return inner(*args, **kwargs)

    wrapped._gdn_equiv_wrapped = True  # type: ignore[attr-defined]
    handle.inner_test = wrapped


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Controller (or single process) of a run that ``-x``/``--maxfail`` stopped: every test that never ran is
    reported skipped, "not reached" (before JUnit XML is written), and the status is "tests failed"."""
    if not _ACTIVE or hasattr(session.config, "workerinput") or not _STOP.owner or _STOP.first_failure is None:
        return
    reason = _STOP.reason() or "the run stopped at its first failure (-x)"
    missing = _STOP.not_reached(session)
    for nodeid in missing:
        path = nodeid.split("::")[0]
        report = pytest.TestReport(
            nodeid=nodeid,
            location=(path, None, nodeid.split("::", 1)[-1]),
            keywords={},
            outcome="skipped",
            longrepr=(path, 0, f"Skipped: {NOT_REACHED_SKIP}never started, {reason}"),
            when="setup",
        )
        session.config.hook.pytest_runtest_logreport(report=report)
    _STOP.never_started = len(missing)
    if session.exitstatus == pytest.ExitCode.INTERRUPTED and session.testsfailed:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    _STOP.unconfigure()


# ---- counting examples ---------------------------------------------------------------------


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Count the examples of every Hypothesis test, chaining Hypothesis' own statistics callback.

    The test's counts travel with its report (``user_properties``), so under xdist the controller
    sums them as reports arrive and knows when the run reached each :data:`MILESTONES` count.
    """
    if not _ACTIVE:
        return (yield)
    _wrap_examples(item)
    _key_by_node_id(item)
    from hypothesis.statistics import collector as _collector

    collector = cast("DynamicVariable[Callable[[Any], None] | None]", _collector)
    previous = collector.value
    before = testing.counts()

    def note(stats: Any) -> None:
        testing.count_hypothesis_test_cases(stats)
        if previous is not None:
            previous(stats)

    _RUNNING_ITEM.append(item)
    try:
        with collector.with_value(note):
            return (yield)
    except BaseException as exc:
        _STOP.skip_if_stopped_mid_run(item, exc)
        raise
    finally:
        _RUNNING_ITEM.remove(item)
        after = testing.counts()
        item.user_properties.append((_COUNTS_KEY, {k: after[k] - before[k] for k in after}))


def _key_by_node_id(item: pytest.Item) -> None:
    """A gate test's examples are saved under its node id (``test_properties.py::test_x[torch]``): one key per
    backend it is parametrised with, and the key HypoFuzz uses for it, so what a ``gdn-equiv fuzz --engine
    hypofuzz`` run saved replays first here. Hypothesis adds the node id itself only to tests parametrised by
    a marker or a fixture's params; ``--gdn-backend`` parametrises through ``pytest_generate_tests``, so every
    backend shared one key (the record's name) and HypoFuzz's findings were never replayed (issue #37)."""
    obj = getattr(item, "obj", None)
    inner = getattr(getattr(obj, "hypothesis", None), "inner_test", None)
    if inner is not None and str(getattr(obj, "__module__", "")).startswith("gdn_equiv.suite"):
        inner._hypothesis_internal_add_digest = item.nodeid.encode()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum the examples of each finished test (controller and single process alike); and
    ``--gdn-failure-log``: a failure's full report, appended and flushed as soon as it arrives."""
    if _ACTIVE and _CONFIG is not None and not hasattr(_CONFIG, "workerinput"):
        _STOP.note_report(_CONFIG, report)
    if _ACTIVE and report.when == "call":
        for key, value in report.user_properties:
            if key == _COUNTS_KEY and isinstance(value, dict):
                _count_report(value)
    if _FAILURE_LOG is None or not report.failed:
        return
    with _FAILURE_LOG.open("a", encoding="utf-8") as log:
        log.write(f"==== FAILED {report.nodeid} ({report.when}, {report.duration:.1f} s)\n{report.longreprtext}\n\n")


def _count_report(counts: dict[str, int]) -> None:
    before = _TOTALS["hypothesis"]
    for key, value in counts.items():
        _TOTALS[key] = _TOTALS.get(key, 0) + int(value)
    for milestone in MILESTONES:
        if before < milestone <= _TOTALS["hypothesis"]:
            _REACHED[milestone] = time.perf_counter() - _START
            # said as it happens too, so a run cut short by a time limit still tells its cold start
            reporter = _CONFIG.pluginmanager.get_plugin("terminalreporter") if _CONFIG is not None else None
            if reporter is not None:
                if getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):
                    reporter.write("\n")  # after the progress dots of -q
                reporter.write_line(f"gdn-equiv: {milestone:,} examples by {_REACHED[milestone]:.1f} s")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _ACTIVE or hasattr(config, "workerinput"):
        return
    from hypothesis import settings

    totals = _TOTALS
    elapsed = time.perf_counter() - _START
    n = totals["hypothesis"]
    rate = n / elapsed if elapsed > 0 else 0.0
    profile = settings.get_current_profile_name()
    terminalreporter.write_line(
        f"gdn-equiv: {n} Hypothesis examples in {elapsed:.1f} s ({rate:.1f} examples/s); "
        f"{totals['properties']} counted by properties (count_example); profile {profile!r}"
    )
    if _STOP.first_failure is not None and _STOP.reason() is not None:
        terminalreporter.write_line(
            f"gdn-equiv: stopped: {_STOP.reason()}; every worker stopped at once: {_STOP.stopped_mid_run} test(s) "
            f"stopped mid-run, {_STOP.never_started} never started (reported skipped, 'not reached': none passed)"
        )
    if _REACHED:
        reached = ", ".join(f"{m:,} by {t:.1f} s" for m, t in sorted(_REACHED.items()))
        first, at = min(_REACHED.items())
        # past the start-up (workers, imports, device contexts, the first compiles): the warm rate
        after = f"; {(n - first) / (elapsed - at):.1f} examples/s after the {first:,}th" if elapsed > at else ""
        terminalreporter.write_line(f"gdn-equiv: examples reached {reached} (since pytest started){after}")
