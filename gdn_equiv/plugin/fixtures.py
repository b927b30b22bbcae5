"""Parametrisation and fixtures: each reads the run's plan (:func:`gdn_equiv.plugin.options.plan`), resolved
once at configure time, never the options again. A test outside a gdn-equiv run is not parametrised."""

from __future__ import annotations

import os
from typing import Any, cast

import pytest

from gdn_equiv.harness import testing
from gdn_equiv.plugin.options import plan
from gdn_equiv.run.plan import RunPlan


def _plan(config: pytest.Config) -> RunPlan:
    run = plan(config)
    if run is None:
        raise pytest.UsageError("gdn-equiv's fixtures need a gdn-equiv run (see gdn_equiv.plugin.options.wanted)")
    return run


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    run = plan(metafunc.config)
    if run is None:
        return
    if "gdn_backend" in metafunc.fixturenames:
        names = list(run.backend_names)
        metafunc.parametrize("gdn_backend", names, ids=names, indirect=True, scope="session")
    # one target (the usual run) is not parametrised: test ids stay those of a run without --gdn-target
    if "gdn_target" in metafunc.fixturenames and len(run.targets) > 1:
        metafunc.parametrize("gdn_target", run.targets, ids=run.targets, indirect=True, scope="session")
    if "gdn_families" in metafunc.fixturenames and run.split_families:
        metafunc.parametrize("gdn_families", [(n,) for n in run.families], ids=run.families, scope="session")
    if "gdn_serving_engine" in metafunc.fixturenames:
        names = list(run.serving_engines)
        metafunc.parametrize("gdn_serving_engine", names, ids=names, indirect=True, scope="module")
    if "gdn_family" in metafunc.fixturenames:
        metafunc.parametrize("gdn_family", run.families, ids=run.families, scope="session")


@pytest.fixture(scope="session")
def gdn_plan(pytestconfig: pytest.Config) -> RunPlan:
    """The run's plan: its backends as objects, targets, families, engines, profile, device."""
    return _plan(pytestconfig)


@pytest.fixture(scope="session")
def gdn_families(pytestconfig: pytest.Config) -> tuple[str, ...]:
    """Every family of ``--gdn-family``: properties draw their examples across them (shrinking towards
    the first), so one test covers all without multiplying its examples. ``--gdn-split-families``
    parametrises this fixture instead, one family per test."""
    return _plan(pytestconfig).families


@pytest.fixture(scope="session")
def gdn_backend(request: pytest.FixtureRequest) -> str:
    """A conv backend name from ``--gdn-backend``, checked at configure time: it loads and can run here
    (its object: ``gdn_plan.backend(name)``)."""
    return cast("str", request.param)


@pytest.fixture(scope="module")
def gdn_serving_engine(request: pytest.FixtureRequest) -> str:
    """A serving engine path (``--gdn-serving-engine``, default every path): the serving tests' adapter by name."""
    return cast("str", request.param)


@pytest.fixture(scope="session")
def gdn_target(request: pytest.FixtureRequest) -> str:
    """A target name from ``--gdn-target`` (default ``gdn_equiv``), checked at configure time: it is known
    and can run here. Parametrised only when several are named."""
    return cast("str", getattr(request, "param", None) or _plan(request.config).targets[0])


@pytest.fixture(name="fla_core", scope="session")
def _fla_core_fixture(pytestconfig: pytest.Config) -> str:
    """``--fla-core`` (else ``$GDN_FLA_CORE``, else ``fla``): the core inside the fla target's layers."""
    return _plan(pytestconfig).fla_core


@pytest.fixture(scope="session")
def allow_missed_fusion(pytestconfig: pytest.Config) -> bool:
    """``--gdn-allow-missed-fusion``: P1's missed fusions are reported, not failed (an unsafe fusion always fails)."""
    return _plan(pytestconfig).allow_missed_fusion


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> str:
    """Where layers and inputs live: the (pinned) GPU when there is one, else the CPU."""
    return _plan(pytestconfig).device


@pytest.fixture(autouse=True)
def _poison_fresh_cuda_memory(pytestconfig: pytest.Config) -> Any:
    """fla's habit: fresh CUDA tensors from ``torch.empty*`` are NaN, so uninitialised reads show.

    ``GDN_EQUIV_POISON=0`` turns it off (e.g. for profiling); unrelated test runs never see it.
    """
    run = plan(pytestconfig)
    if run is None or run.device == "cpu" or os.environ.get("GDN_EQUIV_POISON", "1") == "0":
        yield
        return
    with testing.nan_poisoned_empty("cuda"):
        yield
