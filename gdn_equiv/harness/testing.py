"""Helpers for running the suite under pytest: example counting, Hypothesis profiles, xdist GPU
pinning and NaN poisoning of fresh CUDA memory.

Everything here is plain Python that the root ``conftest.py`` wires into pytest; property tests only
need :func:`count_example`::

    @given(ex=examples(fusable=True))
    def test_fused_forward_is_bitwise_equal(ex, gdn_backend):
        count_example()
        ...
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, TypeVar

from gdn_equiv.errors import InvalidArgument

if TYPE_CHECKING:
    import torch

T = TypeVar("T")

__all__ = [
    "MISS_BOUND",
    "PROFILES",
    "SHRINK_SECONDS",
    "bound_shrinking",
    "compared_something",
    "count_example",
    "count_hypothesis_test_cases",
    "counts",
    "cu_from_lens",
    "example_scope",
    "first_hit",
    "fuzzing",
    "hypofuzz_compat",
    "nan_poisoned_empty",
    "open_database",
    "parse_names",
    "pin_xdist_worker_device",
    "project_triton_cache",
    "randn",
    "register_profiles",
    "visible_device_count",
    "worker_threads",
]

# ---- example counting ----------------------------------------------------------------------

_COUNTS = {"properties": 0, "hypothesis": 0}
#: one entry per example running inside :func:`example_scope`: whether its property body called count_example()
_PENDING: list[bool] = []


def count_example() -> None:
    """Record that a property body runs for this example; call it once per example, before its comparison.

    Inside :func:`example_scope` (the pytest plugin opens one around every Hypothesis example) the example
    counts only when it ends having compared something (:func:`compared_something`): a backend that refuses
    every call, or a premise that never holds, counts nothing. Outside one it counts at once. The pytest
    session sums the counts over all xdist workers and prints them at the end of the run ("counted by
    properties").
    """
    if _PENDING:
        _PENDING[-1] = True
    else:
        _COUNTS["properties"] += 1


def compared_something(exc: BaseException | None) -> bool:
    """Whether an example that ended with ``exc`` (``None``: it returned) compared something: it returned, or
    a comparison or assertion failed (an ``AssertionError``: a ``Mismatch``, a plain ``assert``). An example
    that raised anything else compared nothing: the call under test refused or raised, a skip, an unmet
    premise (:class:`~gdn_equiv.harness.ledger.PremiseNotMet`), a worker that died before it answered
    (:class:`~gdn_equiv.harness.isolation.WorkerDied`)."""
    if exc is None:
        return True
    # PremiseNotMet and WorkerDied are AssertionErrors that compared nothing: they say so with this class
    # attribute (both live above this module, which the ledger and the isolation worker import)
    return isinstance(exc, AssertionError) and not getattr(exc, "compared_nothing", False)


@contextlib.contextmanager
def example_scope() -> Iterator[None]:
    """One example's count: a :func:`count_example` inside the block counts once the block ends, and only
    where the example compared something (:func:`compared_something` of how the block ended)."""
    _PENDING.append(False)
    ended: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        ended = exc
        raise
    finally:
        if _PENDING.pop() and compared_something(ended):
            _COUNTS["properties"] += 1


def count_hypothesis_test_cases(stats: Mapping[str, Any]) -> int:
    """Examples Hypothesis ran (passing or failing, every phase) according to its run statistics.

    Invalid and overrun test cases are not counted: no property ran for them.
    """
    n = 0
    for key, phase in stats.items():
        if key.endswith("-phase") and isinstance(phase, Mapping):
            n += sum(1 for case in phase.get("test-cases", ()) if case.get("status") in ("valid", "interesting"))
    _COUNTS["hypothesis"] += n
    return n


def counts() -> dict[str, int]:
    """This process' counts: ``{"properties": count_example calls, "hypothesis": examples run}``."""
    return dict(_COUNTS)


# ---- seeded inputs ---------------------------------------------------------------------------


def randn(seed: int, *shape: int, dtype: torch.dtype | None = None, scale: float = 1.0) -> torch.Tensor:
    """``shape`` standard normals from their own generator seeded with ``seed`` (drawn in fp64, times
    ``scale``, then cast to ``dtype``, default fp32): the same values whatever ran before."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype or torch.float32)


def cu_from_lens(lens: list[int], dtype: torch.dtype | None = None) -> torch.Tensor:
    """``cu_seqlens`` (int32 unless ``dtype``) for sequences of ``lens`` tokens: ``[0, l0, l0+l1, ...]``."""
    import torch

    return torch.nn.functional.pad(torch.tensor(lens, dtype=torch.int64).cumsum(0), (1, 0)).to(dtype or torch.int32)


# ---- Hypothesis profiles -------------------------------------------------------------------

# ci is sized for the whole suite (a few dozen @given tests, most cheap) to run >= 2,000 examples
# within about 4 minutes on 2 cores with ``pytest -n auto``; slow properties scale down with
# ``settings(max_examples=...)`` relative to ``settings.default.max_examples``, not absolute numbers.
PROFILES: dict[str, dict[str, Any]] = {
    "dev": {"max_examples": 15, "deadline": None},
    # explores (not derandomized) so CI keeps finding new states; failures replay from the printed blob
    "ci": {"max_examples": 60, "deadline": None, "derandomize": False},
    "gpu": {"max_examples": 50, "deadline": None, "derandomize": True},
    "fuzz": {"max_examples": 10_000, "deadline": None},
}


#: the suffix of a profile registered with a run's own example database (``--gdn-database``/``--database``,
#: :func:`gdn_equiv.run.plan.load_settings`): added there and taken off by :func:`base_profile` only
DATABASE_SUFFIX = "+database"


def base_profile(name: str | None) -> str:
    """A profile's name without the database suffix."""
    return (name or "").split(DATABASE_SUFFIX, 1)[0]


def _profile() -> str:
    """The loaded profile's name, without its database suffix."""
    from hypothesis import settings

    return base_profile(settings.get_current_profile_name())


def fuzzing() -> bool:
    """Whether the ``fuzz`` profile is loaded: where strategies and the runner call ``hypothesis.target()``."""
    return _profile() == "fuzz"


#: how many draws a search that must hit may take before it counts as a miss. Hypothesis does not draw
#: independent examples: each fresh one is followed by up to five mutations of itself, and its first
#: draws are near-minimal, so a region seen on 1 draw in 8 went 117 draws unseen in 1 of 80 measured
#: runs (a heavy tail: CI missed such a region in 200 draws on 2026-12-05). The search stops at its
#: first hit, so a high bound costs nothing while the search hits.
MISS_BOUND = 5_000


def first_hit(max_examples: int = MISS_BOUND) -> Any:
    """Hypothesis settings for a search that stops at its first hit (``hypothesis.find`` of a planted
    defect or a region a strategy must reach): no database, deadline or health checks, and no shrink
    phase, since any hit will do; ``max_examples`` (default :data:`MISS_BOUND`) only bounds a miss.
    Derandomized: the search draws the same examples every run, so whether it hits is a fact of the code
    (a test that must hit fails every run or none), never of what a random run happened to draw."""
    from hypothesis import HealthCheck, Phase, settings

    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )


def register_profiles() -> None:
    """Register the ``dev``, ``ci``, ``gpu`` and ``fuzz`` profiles (idempotent)."""
    from hypothesis import HealthCheck, settings

    # Hypothesis loads its own "ci" profile (derandomized) under CI=true; start from the library
    # defaults instead, so a profile here means only what it says.
    base = settings.get_profile("default")
    for name, values in PROFILES.items():
        settings.register_profile(
            name,
            parent=base,
            print_blob=True,  # every failure prints @reproduce_failure, so it replays exactly
            suppress_health_check=[HealthCheck.too_slow],
            **values,
        )


#: seconds Hypothesis may spend shrinking one test's failures, by profile (``--gdn-shrink-seconds`` overrides):
#: a red verdict arrives at most this long after its first failing example (plus one candidate's run: under
#: ``--gdn-isolate`` up to the example timeout), whatever the failure's kind (a mismatch, a crash of an isolated
#: kernel, a hang). Hypothesis' own bound is 300 s (``fuzz`` keeps it); the partly shrunk example is saved, so a
#: re-run resumes shrinking from it
SHRINK_SECONDS: dict[str, float] = {"dev": 10.0, "ci": 15.0, "gpu": 30.0, "fuzz": 300.0}


def bound_shrinking(seconds: float) -> str | None:
    """Bound Hypothesis' shrink phase in this process to ``seconds``; returns why it could not, or ``None``.

    Hypothesis offers no setting for it: its maintainers keep the shrink phase's time limit internal
    (HypothesisWorks/hypothesis#3243, #3400) and the public ``phases`` can only switch shrinking off, which
    reports unshrunk examples. The limit is the engine's module constant ``MAX_SHRINKING_SECONDS`` (read each
    time a shrink phase starts); a Hypothesis without it keeps its own bound, and the caller says so."""
    if not seconds > 0:
        raise InvalidArgument(f"the shrink bound must be > 0 seconds, got {seconds!r}")
    from hypothesis.internal.conjecture import engine

    if not isinstance(getattr(engine, "MAX_SHRINKING_SECONDS", None), (int, float)):
        return "this Hypothesis has no MAX_SHRINKING_SECONDS: its own shrink bound applies"
    engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    return None


# ---- options -------------------------------------------------------------------------------


def parse_names(option: str) -> list[str]:
    """``"torch, triton,my.mod:conv"`` -> ``["torch", "triton", "my.mod:conv"]`` (order kept, no repeats)."""
    out: list[str] = []
    for part in option.split(","):
        name = part.strip()
        if name and name not in out:
            out.append(name)
    return out


def worker_threads(env: Mapping[str, str] = os.environ, cpus: int | None = None) -> int | None:
    """Torch's intra-op threads for this pytest process, or None to keep torch's default.

    Under Triton's interpreter examples are tiny CPU work: one thread (~4x faster than oversubscribing,
    measured on 2 cores). An xdist worker otherwise gets its share of the cores, ``cpus // workers``
    (at least 1): torch's default, every core in every worker, oversubscribes them ``workers`` times
    over whenever examples do CPU work beside the GPU's.
    """
    if env.get("TRITON_INTERPRET") == "1":
        return 1
    workers = env.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers or not workers.isdigit() or int(workers) < 1:
        return None
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // int(workers))


# ---- xdist GPU pinning ---------------------------------------------------------------------


def visible_device_count() -> int:
    """GPUs this process may see, counted without initialising CUDA.

    ``torch.cuda.device_count()`` asks the CUDA runtime (unless NVML-based checks are enabled),
    which reads ``CUDA_VISIBLE_DEVICES`` once and for all; ``nvidia-smi -L`` runs in a child process.
    """
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _worker_index(worker: str) -> int | None:
    match = re.fullmatch(r"gw(\d+)", worker.strip())
    return int(match.group(1)) if match else None


#: where compiled Triton kernels are kept, under the project's root, when the caller has not chosen
TRITON_CACHE = (".gdn-equiv", "triton")


def project_triton_cache(root: str | os.PathLike[str], env: Mapping[str, str], *, gpu: bool) -> str | None:
    """The ``TRITON_CACHE_DIR`` to set for a run rooted at ``root``: ``<root>/.gdn-equiv/triton`` on a
    GPU, so compiled kernels stay with the project (a CI job can keep the folder, and the next run is
    warm: on the H200 the gate over fla's Triton conv took 185 s on a bare machine and 110 s with the
    kernels on disk); ``None`` where the caller set ``TRITON_CACHE_DIR`` (theirs is kept) or without a
    GPU (the interpreter compiles nothing)."""
    if not gpu or env.get("TRITON_CACHE_DIR"):
        return None
    return os.path.join(os.fspath(root), *TRITON_CACHE)


def pin_xdist_worker_device(
    env: MutableMapping[str, str] = os.environ, *, device_count: int | None = None
) -> str | None:
    """Give xdist worker ``gwN`` one GPU, round-robin, by setting ``CUDA_VISIBLE_DEVICES``.

    An existing ``CUDA_VISIBLE_DEVICES`` list is respected (its entries are shared out, whatever
    they are: indices, UUIDs or MIG ids); otherwise ``device_count`` GPUs (default: counted by
    :func:`visible_device_count`) are. Outside xdist, with no GPU, or once CUDA is initialised
    (too late to pin) nothing changes. Returns the device entry chosen, or ``None``.
    """
    index = _worker_index(env.get("PYTEST_XDIST_WORKER", ""))
    if index is None:
        return None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return None
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        devices = [d.strip() for d in visible.split(",") if d.strip()]
        if not devices or devices[0] == "-1":  # "" or "-1": CUDA is hidden on purpose
            return None
    else:
        n = visible_device_count() if device_count is None else device_count
        devices = [str(i) for i in range(n)]
    if not devices:
        return None
    chosen = devices[index % len(devices)]
    env["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


# ---- NaN poisoning -------------------------------------------------------------------------


@contextlib.contextmanager
def nan_poisoned_empty(device_type: str = "cuda") -> Iterator[None]:
    """Inside the block, ``torch.empty``/``empty_like``/``Tensor.new_empty`` on ``device_type`` return
    floating tensors filled with NaN, so a kernel that reads memory it never wrote shows it.

    fla's test suite does the same by patching the same three factories. (The caching allocator
    has no fill hook, and deterministic mode's NaN fill changes which algorithms run.)
    """
    import torch

    originals = (torch.empty, torch.empty_like, torch.Tensor.new_empty)

    def poison(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == device_type and (t.is_floating_point() or t.is_complex()):
            with torch.no_grad():
                t.fill_(float("nan"))
        return t

    def empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        return poison(originals[0](*args, **kwargs))

    def empty_like(*args: Any, **kwargs: Any) -> torch.Tensor:
        return poison(originals[1](*args, **kwargs))

    def new_empty(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return poison(originals[2](self, *args, **kwargs))

    torch.empty, torch.empty_like = empty, empty_like
    torch.Tensor.new_empty = new_empty  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.empty, torch.empty_like = originals[0], originals[1]
        torch.Tensor.new_empty = originals[2]  # type: ignore[method-assign]


# ---- Hypothesis' example database and HypoFuzz, for the gate's plugin and `fuzz --engine hypofuzz` alike -----


def open_database(value: str | os.PathLike[str]) -> Any:
    """Hypothesis' example database for ``value``: a directory, or ``redis://HOST:PORT/DB``; one object per
    value in a process. A HypoFuzz worker runs pytest's configuration twice on modules imported once: a
    second Redis database object (equal only to itself) made it skip every test as "differing_database"."""
    return _database_of(os.fspath(value))


@functools.cache
def _database_of(text: str) -> Any:
    if text.startswith(("redis://", "rediss://", "unix://")):
        try:
            import redis
            from hypothesis.extra.redis import RedisExampleDatabase
        except ImportError:
            raise InvalidArgument(f"{text!r} needs redis: pip install gdn-equiv[redis]") from None
        return RedisExampleDatabase(redis.Redis.from_url(text))
    if "://" in text:
        raise InvalidArgument(f"{text!r}: a directory, or redis://HOST:PORT/DB (rediss://, unix:// too)")
    from hypothesis.database import DirectoryBasedExampleDatabase

    return DirectoryBasedExampleDatabase(text)


def hypofuzz_compat() -> None:
    """HypoFuzz 25.11.1 copies ``ConjectureResult.slice_comments`` (explain-phase comments) onto the data it
    replays after shrinking a failure; Hypothesis 6.170 no longer has that attribute, so the worker died
    with ``AttributeError`` right after its first shrink, before saving the shrunk failure (seen here,
    2026-12-06). An empty one: the failure is saved and the worker goes on; only the comments are lost."""
    from hypothesis.internal.conjecture.data import ConjectureResult

    if not hasattr(ConjectureResult, "slice_comments"):
        ConjectureResult.slice_comments = {}  # type: ignore[attr-defined]
