"""Scheduling under xdist and the order of the tests: the first tier (cheap, broad property tests) first, then
the slow ones, so a defect shows within seconds and no long test starts last."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from gdn_equiv.plugin.options import plan, wanted


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


def first_batch_starts(config: pytest.Config, n: int, workers: int) -> list[int] | None:
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


def order(config: pytest.Config, items: list[pytest.Item]) -> None:
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
    starts = first_batch_starts(config, len(items), workers) if workers > 1 else None
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
    run = plan(config)
    if run is None:
        return
    order(config, items)
    skips = {
        "gpu": None if run.device != "cpu" else "needs a CUDA device (none visible)",
        "cuda_backend": None
        if importlib.util.find_spec("causal_conv1d") is not None
        else "needs the causal-conv1d package",
        "fla": None if importlib.util.find_spec("fla") is not None else "needs flash-linear-attention",
    }
    for item in items:
        for marker, reason in skips.items():
            if reason is not None and item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
