"""Suite-wide pytest wiring: Hypothesis profiles, ``--gdn-backend``/``--gdn-target``, xdist GPU
pinning, NaN poisoning of fresh CUDA memory, GPU skips, and the example-count summary.

The helpers live in :mod:`gdn_equiv.testing`; this file only connects them to pytest hooks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parent


def _alias_strategies() -> None:
    """Make ``gdn_equiv.strategies`` importable from a source checkout.

    Installed, the package-dir mapping in pyproject does this; from the tree, ``strategies/`` is a
    top-level folder, so register it under its installed name (relative imports inside it then
    resolve to ``gdn_equiv.strategies.*``).
    """
    if "gdn_equiv.strategies" in sys.modules:
        return
    try:
        if importlib.util.find_spec("gdn_equiv.strategies") is not None:
            return
    except ImportError:
        pass
    init = _ROOT / "strategies" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "gdn_equiv.strategies", init, submodule_search_locations=[str(init.parent)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gdn_equiv.strategies"] = module
    spec.loader.exec_module(module)
    import gdn_equiv

    gdn_equiv.strategies = module  # type: ignore[attr-defined]


from gdn_equiv import testing  # noqa: E402

# Before anything can initialise CUDA: each xdist worker sees one GPU.
testing.pin_xdist_worker_device()
_alias_strategies()
if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        # no GPU: our triton kernels run under the interpreter (set before triton is imported)
        os.environ["TRITON_INTERPRET"] = "1"
if os.environ.get("TRITON_INTERPRET") == "1":
    import torch

    # CPU examples are tiny: one intra-op thread per xdist worker is ~4x faster than oversubscribing.
    torch.set_num_threads(1)

from hypothesis import settings  # noqa: E402

testing.register_profiles()
settings.load_profile(testing.default_profile())


# ---- options and fixtures ------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gdn-equiv")
    group.addoption(
        "--gdn-backend",
        default="torch",
        help="comma list of conv backends to run the properties on: registered names or module:callable "
        "(default: torch)",
    )
    group.addoption(
        "--gdn-target",
        default="gdn_equiv",
        help="comma list of targets whose layers the properties check (default: gdn_equiv)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, option in (("gdn_backend", "--gdn-backend"), ("gdn_target", "--gdn-target")):
        if fixture in metafunc.fixturenames:
            names = testing.parse_names(metafunc.config.getoption(option))
            metafunc.parametrize(fixture, names, ids=names, indirect=True, scope="session")


@pytest.fixture(scope="session")
def gdn_backend(request: pytest.FixtureRequest) -> str:
    """A conv backend name from ``--gdn-backend``; skips with the backend's own reason if it cannot run here."""
    from gdn_equiv.backends import get_backend
    from gdn_equiv.errors import InvalidArgument

    name = request.param
    try:
        backend = get_backend(name)
    except InvalidArgument as exc:
        raise pytest.UsageError(f"--gdn-backend: {exc}") from exc
    reason = backend.unavailable()
    if reason is not None:
        pytest.skip(f"conv backend {name!r} unavailable: {reason}")
    return name


@pytest.fixture(scope="session")
def gdn_target(request: pytest.FixtureRequest) -> str:
    """A target name from ``--gdn-target``; ``fla`` skips when flash-linear-attention is not installed."""
    name = request.param
    if name == "fla" and importlib.util.find_spec("fla") is None:
        pytest.skip("target 'fla' needs flash-linear-attention (pip install gdn-equiv[fla])")
    return name


_CUDA: bool | None = None


def _cuda_available() -> bool:
    global _CUDA
    if _CUDA is None:
        import torch

        _CUDA = torch.cuda.is_available()
    return _CUDA


@pytest.fixture(scope="session")
def device() -> str:
    """Where layers and inputs live: the (pinned) GPU when there is one, else the CPU."""
    return "cuda" if _cuda_available() else "cpu"


@pytest.fixture(autouse=True)
def _poison_fresh_cuda_memory() -> Any:
    """fla's habit: fresh CUDA tensors from ``torch.empty*`` are NaN, so uninitialised reads show.

    ``GDN_EQUIV_POISON=0`` turns it off (e.g. for profiling).
    """
    if not _cuda_available() or os.environ.get("GDN_EQUIV_POISON", "1") == "0":
        yield
        return
    with testing.nan_poisoned_empty("cuda"):
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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


# ---- counting examples ---------------------------------------------------------------------


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Count the examples of every Hypothesis test, chaining Hypothesis' own statistics callback."""
    from hypothesis.statistics import collector

    previous = collector.value

    def note(stats: Any) -> None:
        testing.count_hypothesis_test_cases(stats)
        if previous is not None:
            previous(stats)

    with collector.with_value(note):
        return (yield)


_WORKER_COUNTS: list[dict[str, int]] = []
_START = time.perf_counter()


def pytest_sessionstart(session: pytest.Session) -> None:
    global _START
    _START = time.perf_counter()


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the counts to the controller
        workeroutput["gdn_equiv_counts"] = json.dumps(testing.counts())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    data = getattr(node, "workeroutput", {}).get("gdn_equiv_counts")
    if data:
        _WORKER_COUNTS.append(json.loads(data))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    totals = testing.counts()
    for worker in _WORKER_COUNTS:
        for key, value in worker.items():
            totals[key] = totals.get(key, 0) + value
    elapsed = time.perf_counter() - _START
    n = totals["hypothesis"]
    rate = n / elapsed if elapsed > 0 else 0.0
    profile = settings.get_current_profile_name()
    terminalreporter.write_line(
        f"gdn-equiv: {n} Hypothesis examples in {elapsed:.1f} s ({rate:.1f} examples/s); "
        f"{totals['properties']} counted by properties (count_example); profile {profile!r}"
    )
