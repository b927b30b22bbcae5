"""``gdn-equiv bench``: the fused q/k/v prologue against the separate one, measured side by side.

Two benchmarks, one row format, one table, one JSON report, one plot:

- ``layer``: the whole layer, ``prologue="separate"`` vs ``prologue="fused"`` on the same fusable
  state, forward and forward+backward (``dx`` and every parameter gradient), for each layer family x
  conv backend x shape x dtype, through the target protocol (:mod:`gdn_equiv.targets`): our layer
  (``gdn_equiv``) and fla's own layer (``fla``) where the installed fla has a fused prologue the fla
  adapter can force (it replaces fla's decision at the one place its version table names; nothing is
  patched here). fla's core runs where it can; where fla's backward refuses the machine (Hopper with
  Triton < 3.7.1) forward+backward runs the reference core inside fla's layer, and the row says so.
  In-house layers run the torch chunked core, which on a GPU is host-bound Python (tens of ms at the
  PR's shapes): their ratio says little about the prologue; fla's rows and ``prologue`` do.
- ``prologue``: the convs alone: three calls on channel slices of one ``[B, T, Dq+Dk+Dv]`` tensor vs
  one call over all channels, per registry backend and fla's Triton conv.

Each row is checked once before it is timed: the fused forward output equals the separate one
bitwise, and (layer rows) the fused path really ran: one conv launch instead of one per slot,
counted through the backend registry (fla: conv-module calls, 0 instead of 3).

Timing. On CUDA :func:`triton.testing.do_bench` (L2 flushed before every call, events around it,
raw times kept so the median and the 20%/80% quantiles come from exactly ``iters`` calls after
``warmup`` untimed ones). On CPU ``time.perf_counter`` around each call (wall clock, median of
``iters``): a smoke test of the command on tiny shapes (``--quick``), not a measurement of a kernel;
with ``TRITON_INTERPRET=1`` the triton rows time the interpreter. Bandwidth figures (prologue rows)
exist on CUDA only.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import importlib.util
import inspect
import itertools
import json
import math
import os
import platform
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from gdn_equiv import targets  # targets.get_target read per call: a test plants a defect through it
from gdn_equiv.model.backends import get_backend
from gdn_equiv.model.backends.fla_backend import autotune_mode, conv_row
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import get_family
from gdn_equiv.model.fla_versions import (
    fla_version,  # the fla rows' label (and the command line's)
    version_row,
)
from gdn_equiv.run.signals import caused_by_interrupt, interrupt_pending
from gdn_equiv.strategies.layers import family_dims

Tensor = torch.Tensor
#: /2 keeps every timed call's milliseconds (``samples_ms``) beside the median and quantiles, for
#: ``bench compare``'s rank test; /1 reports (medians only) still print and plot (``--from``)
FORMAT = "gdn-equiv-bench/2"
PATHS = ("separate", "fused")
PASSES = ("fwd", "fwd_bwd")
QUANTILES = (0.2, 0.5, 0.8)
#: (B, T) of the benchmark: fla PR #972's layer benchmark runs B2 T2048 by default; its description's
#: table could not be read here, so the sweep is the issue's (1, 2048), (2, 2048), (4, 2048), (2, 4096)
#: plus (4, 4096)
SHAPES: tuple[tuple[int, int], ...] = ((1, 2048), (2, 2048), (4, 2048), (2, 4096), (4, 4096))
QUICK_SHAPES: tuple[tuple[int, int], ...] = ((1, 16), (2, 32))
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: peak HBM bandwidth (bytes/s) by a substring of the device name; other devices get GB/s only
PEAK_HBM = {"H200": 4.8e12, "H100 80GB HBM3": 3.35e12}  # H200, H100 SXM5 (NVIDIA's data sheets)
#: timed calls / untimed calls before them, per benchmark (our layer's forward+backward at B2 T2048 takes
#: ~0.13 s on an H200)
DEFAULT_ITERS = {"layer": 10, "prologue": 50}
DEFAULT_WARMUP = {"layer": 2, "prologue": 10}
#: ``--quick`` is a smoke test of the command (every family, backend and row kind once), not a
#: measurement: a few calls per row keep it under a minute on 2 CPU cores, Triton's interpreter included
QUICK_ITERS = {"layer": 2, "prologue": 3}
QUICK_WARMUP = {"layer": 1, "prologue": 1}


# ---- the plan ------------------------------------------------------------------------------------


@dataclass
class BenchPlan:
    """A ``bench`` run with every argument checked (by :func:`gdn_equiv.run.cli.bench.plan_bench`)."""

    what: str
    families: list[str]
    backends: list[str]  # registry names or module:attr specs
    fla: bool  # fla rows (its layer, or its conv for ``prologue``)
    dtypes: list[str]
    device: str
    iters: int
    warmup: int
    quick: bool
    json: Path | None
    plot: Path | None
    shapes: tuple[tuple[int, int], ...] = ()
    # "eager": each call as a program makes it (host work, autograd, launches included: at small shapes
    # that is what a call costs); "graph": a CUDA graph of it (device time only: what the kernels cost)
    timing: str = "eager"
    notes: list[str] = field(default_factory=list)  # what was left out, and why

    def __post_init__(self) -> None:
        if not self.shapes:
            self.shapes = QUICK_SHAPES if self.quick else SHAPES


# ---- timing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call over ``n`` timed calls, each one kept in ``samples_ms`` (in call order)."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    n: int
    samples_ms: tuple[float, ...] = ()

    @classmethod
    def of(cls, times_ms: Sequence[float]) -> Timing:
        p20, median, p80 = (quantile(times_ms, q) for q in QUANTILES)
        return cls(median_ms=median, p20_ms=p20, p80_ms=p80, n=len(times_ms), samples_ms=tuple(times_ms))


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between the order statistics (numpy's and triton's default)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def time_cpu(fn: Callable[[], object], warmup: int, iters: int) -> Timing:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Timing.of(times)


def time_cuda(fn: Callable[[], object], warmup: int, iters: int) -> Timing:
    """``iters`` calls timed by :func:`triton.testing.do_bench` (L2 flushed before each).

    do_bench sizes its run in milliseconds; the first call's size comes from one timed call, later
    calls (if it fell short) from what the previous one achieved, and the surplus is dropped."""
    from triton.testing import do_bench

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    per_call = max(start.elapsed_time(end), 1e-3)
    times: list[float] = []
    while len(times) < iters:
        rep = (iters - len(times)) * per_call
        got = do_bench(fn, warmup=0, rep=rep, return_mode="all")
        times += got
        per_call = rep / len(got)  # do_bench's own cost per call, flush included
    return Timing.of(times[:iters])


def timer(device: str) -> Callable[[Callable[[], object], int, int], Timing]:
    return time_cuda if torch.device(device).type == "cuda" else time_cpu


def cuda_graph(fn: Callable[[], object], warmup: int = 3) -> Callable[[], object]:
    """``fn`` captured once in a CUDA graph and replayed: ``warmup`` calls first on a side stream (they
    compile and autotune, and let autograd set up its streams, as capture requires), then the capture.
    Replays recompute the same outputs from the same inputs into the graph's own memory."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def timing_method(device: str, timing: str = "eager") -> str:
    if torch.device(device).type == "cuda" and timing == "graph":
        return (
            "triton.testing.do_bench over a CUDA graph of each call (device time: host work and launches left "
            "out), CUDA events around each replay, L2 flushed before each"
        )
    if torch.device(device).type == "cuda":
        return "triton.testing.do_bench: CUDA events around each call, L2 flushed before each"
    interp = " (TRITON_INTERPRET=1: triton rows time the interpreter)" if _interpreting() else ""
    return f"time.perf_counter wall clock around each call on CPU{interp}: a smoke test, not a measurement"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# ---- what is measured: a subject is one row's four calls and its check ---------------------------


@dataclass
class Subject:
    """One row: ``calls[(path, pass)]`` runs that path and pass once; ``check()`` runs each path once
    (untimed) and says what it saw; ``meta`` goes into the row as is."""

    meta: dict[str, Any]
    calls: dict[tuple[str, str], Callable[[], object]]
    check: Callable[[], dict[str, Any]]
    extra: Callable[[dict[str, Any]], None] = lambda row: None  # adds derived figures to a finished row


def _generator(device: str) -> torch.Generator:
    return torch.Generator(torch.device(device)).manual_seed(0)


def _randn(shape: Sequence[int], gen: torch.Generator, device: str, dtype: torch.dtype) -> Tensor:
    return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def _parameters(module: torch.nn.Module) -> list[Tensor]:
    return [p for p in module.parameters() if p.requires_grad]


def _outputs_equal(a: Tensor, b: Tensor) -> bool:
    if torch.equal(a, b):
        return True
    return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num()))


# -- layer: a target's layer (ours for each family; fla's where the fla adapter can force its path)


@cache
def quick_fields(family_name: str) -> dict[str, Any]:
    """The family's smallest valid config fields: Hypothesis' minimal draw of its own ``dims``
    strategy (deterministic; the strategies shrink towards few heads and small dims)."""
    from hypothesis import HealthCheck, find, settings

    family = get_family(family_name)
    quiet = settings(database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    return dict(find(family_dims(family, max_heads=2), lambda fields: True, settings=quiet))


def family_fields(family_name: str, quick: bool) -> dict[str, Any]:
    return quick_fields(family_name) if quick else dict(get_family(family_name).bench)


def family_config(family_name: str, quick: bool, backend: str = "torch") -> Any:
    return get_family(family_name).config_cls(**family_fields(family_name, quick), conv_backend=backend)


def fla_autotune() -> str:
    return autotune_mode()


def fla_fuses(family_name: str) -> bool:
    """Whether the installed fla has a fused prologue for this family (the fla adapter's version
    table), which the adapter can then force."""
    return version_row().fuses(family_name)


def _layer_subject(
    target_name: str, family_name: str, backend: str, B: int, T: int, dtype: str, device: str, quick: bool
) -> Subject:
    """The family's layer as the target builds it, both paths chosen by the target's ``prologue=``
    argument (fla: the adapter pins fla's own decision; nothing here patches anything)."""

    config = family_config(family_name, quick, backend)
    example = Example(config=config, family=family_name, dtype=dtype, batch=B, seq_len=T, grad=True, train=True)
    handle = targets.get_target(target_name).build(example, device)
    inputs = handle.inputs()
    x = inputs.x.requires_grad_()
    dy = _randn(tuple(x.shape), _generator(device), device, x.dtype)
    meta: dict[str, Any] = {"family": family_name, "impl": "gdn_equiv", "backend": backend, "core": "torch chunked"}
    if target_name == "fla":
        meta.update(impl=f"fla {fla_version()}", backend="triton", core="fla")
        if fla_autotune() == "first":
            meta["autotune"] = (
                "first config of each of fla's kernels (GDN_EQUIV_FLA_AUTOTUNE=first), not fla's tuned one"
            )
    handles = {"fwd": handle, "fwd_bwd": handle}  # check() may give fwd+bwd the reference core
    grad_of = {p: [x, *_parameters(handle.layer)] for p in PASSES}

    def call(path: str, p: str) -> Callable[[], object]:
        def once() -> object:
            out = handles[p].run(inputs, prologue=path)[0]
            return out if p == "fwd" else torch.autograd.grad(out, grad_of[p], dy, allow_unused=True)

        return once

    def check() -> dict[str, Any]:
        guard_fuses, _ = handle.decide(handle.call_facts(inputs))
        outs, taken, launches = {}, {}, {}
        for path in PATHS:
            outs[path] = handle.run(inputs, prologue=path)[0].detach()
            taken[path], launches[path] = handle.path_taken(), handle.launches()
        try:
            torch.autograd.grad(handle.run(inputs, prologue="fused")[0], [x], dy)
        except RuntimeError as exc:  # fla's chunked backward refuses Hopper with Triton < 3.7.1
            if target_name != "fla":
                raise

            why = f"fla's own backward did not run here ({_one_line(exc)[:120]})"
            if get_family(family_name).reference_core is None:  # no core of ours to run inside fla's layer
                for path in PATHS:
                    del calls[path, "fwd_bwd"]
                meta["note"] = f"{why}; no fwd+bwd timing (the reference core restates Gated DeltaNet's only)"
            else:
                handles["fwd_bwd"] = targets.get_target("fla", core="reference").build(example, device)
                grad_of["fwd_bwd"] = [x, *_parameters(handles["fwd_bwd"].layer)]
                meta["core"] = "fla; fwd+bwd: the reference core inside fla's layer"
                meta["note"] = why
        return {
            "guard_fuses": bool(guard_fuses),
            "fwd_equal": _outputs_equal(outs["separate"], outs["fused"]),
            "path": {
                **{f"{p}_ran": taken[p] for p in PATHS},
                "launches": launches,
                "ok": taken == {p: p for p in PATHS},
            },
        }

    calls = {(path, p): call(path, p) for path in PATHS for p in PASSES}
    return Subject(meta, calls, check)


# -- prologue: the convs alone

ConvFn = Callable[[Tensor, Tensor], Tensor]  # (x [B,T,D], weight [D,W]) -> y, silu, no bias


def _registry_conv(name: str) -> ConvFn:
    backend = get_backend(name)

    def conv(x: Tensor, weight: Tensor) -> Tensor:
        return backend.forward(x, weight, None, "silu", None, False, None)[0]

    return conv


def _fla_conv() -> ConvFn:
    with warnings.catch_warnings():  # fla's import warns about deprecations and a missing GPU
        warnings.simplefilter("ignore")
        module = importlib.import_module(conv_row().conv)
    fla_causal_conv1d = module.causal_conv1d  # where the installed version keeps it
    extra = {"backend": "triton"} if "backend" in inspect.signature(fla_causal_conv1d).parameters else {}

    def conv(x: Tensor, weight: Tensor) -> Tensor:
        return fla_causal_conv1d(x=x, weight=weight, bias=None, activation="silu", **extra)[0]

    return conv


def _prologue_subject(
    family_name: str, impl: str, backend: str, B: int, T: int, dtype: torch.dtype, device: str, quick: bool
) -> Subject:
    config = family_config(family_name, quick)
    conv = _fla_conv() if impl != "gdn_equiv" else _registry_conv(backend)
    dims = [config.conv_channels(name) for name in config.SLOTS]
    W, total = config.conv_size, sum(dims)
    gen = _generator(device)
    x = _randn((B, T, total), gen, device, dtype).requires_grad_()
    weights = [(_randn((d, W), gen, device, torch.float32) / W).to(dtype).requires_grad_() for d in dims]
    w_fused = torch.cat([w.detach() for w in weights]).requires_grad_()
    dy = _randn((B, T, total), gen, device, dtype)
    bounds = list(itertools.accumulate(dims, initial=0))
    slices = [slice(a, b) for a, b in itertools.pairwise(bounds)]

    def separate() -> list[Tensor]:
        return [conv(x[..., s], w) for s, w in zip(slices, weights, strict=True)]

    calls = {
        ("separate", "fwd"): lambda: separate(),
        ("fused", "fwd"): lambda: conv(x, w_fused),
        ("separate", "fwd_bwd"): lambda: torch.autograd.grad(separate(), [x, *weights], [dy[..., s] for s in slices]),
        ("fused", "fwd_bwd"): lambda: torch.autograd.grad(conv(x, w_fused), [x, w_fused], dy),
    }

    def check() -> dict[str, Any]:
        with torch.no_grad():
            fused = conv(x, w_fused)
            equal = all(_outputs_equal(y, fused[..., s]) for y, s in zip(separate(), slices, strict=True))
        return {"fwd_equal": equal}

    esize = torch.finfo(dtype).bits // 8
    act, wbytes = B * T * total * esize, total * W * esize
    fwd_bytes = 2 * act + wbytes  # read x, write y, read weight
    moved = {"fwd": fwd_bytes, "fwd_bwd": fwd_bytes + 3 * act + wbytes}  # + read dy and x, write dx, dweight

    def bandwidth(row: dict[str, Any]) -> None:
        row["fused_min_bytes"] = moved
        if torch.device(device).type != "cuda":
            return  # a CPU's wall clock says nothing about memory bandwidth
        row.update(bandwidth_figures(moved, {p: row["fused"][p]["median_ms"] for p in PASSES}, peak_hbm(device)))

    meta = {"family": family_name, "impl": impl, "backend": backend}
    return Subject(meta, calls, check, bandwidth)


def bandwidth_figures(moved: dict[str, int], median_ms: dict[str, float], peak: float | None) -> dict[str, Any]:
    """A fused row's ``fused_gb_per_s`` (the bytes it must move over its median time, 1 GB = 1e9 bytes)
    and, where the device's peak is known, ``fused_hbm_fraction``."""
    gbps = {p: moved[p] / (median_ms[p] * 1e-3) / 1e9 for p in moved}
    figures: dict[str, Any] = {"fused_gb_per_s": gbps}
    if peak is not None:
        figures["fused_hbm_fraction"] = {p: gbps[p] * 1e9 / peak for p in moved}
    return figures


def peak_hbm(device: str) -> float | None:
    if torch.device(device).type != "cuda":
        return None
    name = torch.cuda.get_device_name(torch.device(device))
    return next((peak for key, peak in PEAK_HBM.items() if key in name), None)


# ---- running -------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def subjects(plan: BenchPlan) -> Iterable[tuple[dict[str, Any], Callable[[], Subject]]]:
    """``(row identity, builder)`` for every row of the plan, in table order."""
    impls = [("gdn_equiv", b) for b in plan.backends] + ([(f"fla {fla_version()}", "triton")] if plan.fla else [])
    for dtype in plan.dtypes:
        for B, T in plan.shapes:
            for family in plan.families:
                for impl, backend in impls:
                    ident = {"family": family, "impl": impl, "backend": backend, "B": B, "T": T, "dtype": dtype}
                    if plan.what == "prologue":
                        build = partial(_prologue_subject, family, impl, backend, B, T, DTYPES[dtype])
                    elif impl == "gdn_equiv":
                        build = partial(_layer_subject, "gdn_equiv", family, backend, B, T, dtype)
                    elif fla_fuses(family):
                        build = partial(_layer_subject, "fla", family, backend, B, T, dtype)
                    else:
                        continue
                    yield ident, partial(build, plan.device, plan.quick)


def measure(subject: Subject, plan: BenchPlan) -> dict[str, Any]:
    """The row: the check, then each path's forward and forward+backward timed side by side."""
    row: dict[str, Any] = {"check": subject.check()}
    time_fn = timer(plan.device)
    for path in PATHS:
        row[path] = {}
    timed = [p for p in PASSES if all((path, p) in subject.calls for path in PATHS)]  # check() may drop one
    for p in timed:
        for path in PATHS:
            call = subject.calls[path, p]
            if plan.timing == "graph":
                call = cuda_graph(call)
            row[path][p] = dataclasses.asdict(time_fn(call, plan.warmup, plan.iters))
    row["ratio"] = {p: row["separate"][p]["median_ms"] / row["fused"][p]["median_ms"] for p in timed}
    subject.extra(row)
    return {**subject.meta, **row}


def machine(device: str) -> dict[str, Any]:
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    dev = torch.device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
    else:
        name = f"cpu {platform.processor() or platform.machine()} ({torch.get_num_threads()} torch thread(s))"
    return {
        "device": str(dev),
        "device_name": name,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": version("triton"),
        "fla": version("flash-linear-attention"),  # read without importing fla (its import warns on a CPU)
        "causal_conv1d": version("causal-conv1d") or version("causal_conv1d"),
        "gdn_equiv": version("gdn-equiv"),
        "triton_interpret": _interpreting(),
        "peak_hbm_bytes_per_s": peak_hbm(device),
    }


def new_report(plan: BenchPlan) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "command": f"bench {plan.what}",
        "plan": {
            "families": plan.families,
            "backends": plan.backends,
            "fla": plan.fla,
            "device": plan.device,
            "quick": plan.quick,
            "timing": plan.timing,
        },
        "status": "running",
        "machine": machine(plan.device),
        "timing": {
            "method": timing_method(plan.device, plan.timing),
            "warmup": plan.warmup,
            "iters": plan.iters,
            "quantiles": list(QUANTILES),
            "fwd": "the forward of a training step (autograd recording, as upstream's benchmark)",
            "fwd_bwd": "forward, then the gradient of dx and every parameter (prologue: dx and the conv weights)",
        },
        "quick": plan.quick,
        "shapes": [{"B": B, "T": T} for B, T in plan.shapes],
        "dtypes": plan.dtypes,
        "families": {name: _family_record(name, plan.quick) for name in plan.families},
        "notes": list(plan.notes),
        "rows": [],
    }


def _family_record(name: str, quick: bool) -> dict[str, Any]:
    config = family_config(name, quick)
    return {"fields": family_fields(name, quick), "conv_channels": {s: config.conv_channels(s) for s in config.SLOTS}}


def write_json(report: dict[str, Any], path: Path) -> None:
    """Written whole, then renamed into place: a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    os.replace(tmp, path)


def run(
    plan: BenchPlan, report: dict[str, Any] | None = None, progress: Callable[[str], None] = lambda line: None
) -> dict[str, Any]:
    """Every row of the plan, each checked and timed, appended to ``report`` (default: a new one);
    the report is rewritten to ``plan.json`` after each row, so an interrupted run leaves every
    finished row (status ``interrupted``)."""
    report = new_report(plan) if report is None else report
    todo = list(subjects(plan))
    try:
        for i, (ident, build) in enumerate(todo, 1):
            try:
                row = {**ident, **measure(build(), plan)}
            except Exception as exc:  # a shape a backend cannot run (memory, a kernel's limits) is a row
                if caused_by_interrupt(exc) or interrupt_pending():  # not when a signal caused it
                    raise KeyboardInterrupt(f"a signal arrived during a row ({type(exc).__name__})") from exc
                row = {**ident, "error": _one_line(exc)[:300]}
            finally:
                if torch.device(plan.device).type == "cuda":
                    gc.collect()  # the row's layer and activations, before the next row allocates
                    torch.cuda.empty_cache()
            report["rows"].append(row)
            progress(f"[{i}/{len(todo)}] {progress_line(row)}")
            if plan.json is not None:
                write_json(report, plan.json)
            if interrupt_pending():  # a signal during the row whose KeyboardInterrupt something swallowed
                raise KeyboardInterrupt("a signal arrived during the last row")
    except BaseException:
        report["status"] = "interrupted"
        if plan.json is not None:
            write_json(report, plan.json)
        raise
    report["status"] = "complete"
    if plan.json is not None:
        write_json(report, plan.json)
    return report


# ---- reading the rows ----------------------------------------------------------------------------


def findings(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Rows where the fused path did not compute what the separate one did, or did not run."""
    out = []
    for r in rows:
        check = r.get("check", {})
        if check.get("fwd_equal") is False:
            out.append(f"{_label(r)}: fused forward output differs from the separate one")
        path = check.get("path", {})
        if path.get("ok") is False:
            ran = ", ".join(f"prologue={p} ran {path[f'{p}_ran']}" for p in PATHS)
            out.append(f"{_label(r)}: {ran} (conv launches {path['launches']})")
    return out


def errors(rows: Sequence[dict[str, Any]]) -> list[str]:
    return [f"{_label(r)}: {r['error']}" for r in rows if "error" in r]


def _label(r: dict[str, Any]) -> str:
    return f"{r['family']} {r['impl']}/{r['backend']} B{r['B']} T{r['T']} {r['dtype']}"


def progress_line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{_label(r)}: error: {r['error']}"
    s, f = r["separate"], r["fused"]
    parts = [
        f"{p.replace('_', '+')} {s[p]['median_ms']:.4g} -> {f[p]['median_ms']:.4g} ms ({r['ratio'][p]:.2f}x)"
        for p in PASSES
        if p in r["ratio"]
    ]
    return f"{_label(r)}: " + ", ".join(parts)


def _ms(t: dict[str, Any]) -> str:
    return f"{t['median_ms']:.4g} ({t['p20_ms']:.4g}-{t['p80_ms']:.4g})"


def _check_cell(r: dict[str, Any]) -> str:
    c = r["check"]
    equal = "bitwise" if c["fwd_equal"] else "DIFFERS"
    if "path" not in c:
        return equal
    p = c["path"]
    ran = f"{p['launches']['separate']} vs {p['launches']['fused']}"
    return f"{equal}; {ran}" if p["ok"] else f"{equal}; {ran}: ran {p['separate_ran']} / {p['fused_ran']}"


def format_table(report: dict[str, Any]) -> str:
    """The report as one markdown table, with what it measured and how under it."""
    rows = report["rows"]
    layer = report["command"] == "bench layer"
    bandwidth = any("fused_gb_per_s" in r for r in rows)
    head = ["family", "impl", "backend", "B", "T", "dtype", "separate fwd ms", "fused fwd ms", "fwd x"]
    head += ["separate fwd+bwd ms", "fused fwd+bwd ms", "fwd+bwd x"]
    if bandwidth:
        head += ["fused GB/s fwd / fwd+bwd"]
    head += ["fused = separate" + ("; conv launches sep vs fused" if layer else "")]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for r in rows:
        cells = [r["family"], r["impl"], r["backend"], str(r["B"]), str(r["T"]), r["dtype"]]
        if "error" in r:
            cells += [f"error: {r['error']}"] + [""] * (len(head) - len(cells) - 1)
        else:
            s, f = r["separate"], r["fused"]
            for p in PASSES:
                if p in r["ratio"]:
                    cells += [_ms(s[p]), _ms(f[p]), f"{r['ratio'][p]:.2f}"]
                else:
                    cells += ["n/a (see note)", "", ""]
            if bandwidth:
                g = r.get("fused_gb_per_s")
                h = r.get("fused_hbm_fraction")
                cell = "" if g is None else f"{g['fwd']:.0f} / {g['fwd_bwd']:.0f}"
                cells += [cell + ("" if h is None else f" ({h['fwd']:.0%} / {h['fwd_bwd']:.0%} of HBM)")]
            cells += [_check_cell(r)]
        lines.append("| " + " | ".join(cells) + " |")
    m, t = report["machine"], report["timing"]
    versions = ", ".join(f"{k} {m[k]}" for k in ("torch", "triton", "fla", "causal_conv1d") if m.get(k))
    lines += [
        "",
        f"ms per call: median (20%-80%) of {t['iters']} calls after {t['warmup']} warm-up; x = separate / fused "
        f"median. {m['device_name']}; {versions}. Timing: {t['method']}.",
    ]
    if layer:
        lines.append(
            "fwd = a training step's forward; fwd+bwd adds dx and every parameter gradient. gdn_equiv rows run "
            "the torch chunked core; fla rows run fla's layer with its decision pinned by the fla adapter. A "
            "layer whose time does not grow with B*T is host-bound (Python, launches): its ratio is mostly host "
            "jitter, not the prologue."
        )
    lines += [f"note: {n}" for n in report["notes"]]
    lines += [f"note: {_label(r)}: {r[key]}" for key in ("note", "autotune") for r in rows if key in r]
    return "\n".join(lines)


# ---- the plot ------------------------------------------------------------------------------------


def matplotlib_missing() -> str | None:
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed (pip install 'gdn-equiv[bench]')"
    return None


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Speedup of the fused prologue (separate / fused median) per shape: one bar per family x impl x
    backend (x dtype when several), forward and forward+backward one above the other, a line at 1.0."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    rows = [r for r in report["rows"] if "error" not in r]
    several_dtypes = len(report["dtypes"]) > 1
    shapes = list(dict.fromkeys((r["B"], r["T"]) for r in rows))

    def series_of(r: dict[str, Any]) -> str:
        impl = "" if r["impl"] == "gdn_equiv" else f"{r['impl']} "
        return f"{r['family']} {impl}{r['backend']}" + (f" {r['dtype']}" if several_dtypes else "")

    series = list(dict.fromkeys(series_of(r) for r in rows))
    by_key = {(series_of(r), r["B"], r["T"]): r for r in rows}
    width = 0.8 / max(len(series), 1)
    colors = colormaps["tab20"]
    wide = min(max(8.0, 2.0 + 0.25 * len(shapes) * len(series)), 24.0)
    fig = Figure(figsize=(wide, 9.0), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True)
    for ax, p, title in zip(axes, PASSES, ("forward", "forward + backward"), strict=True):
        for i, name in enumerate(series):
            xs, ys = [], []
            for j, (B, T) in enumerate(shapes):
                r = by_key.get((name, B, T))
                if r is not None and p in r["ratio"]:
                    xs.append(j - 0.4 + width * (i + 0.5))
                    ys.append(r["ratio"][p])
            ax.bar(xs, ys, width, label=name, color=colors(i % 20))
        ax.axhline(1.0, color="black", linewidth=1.0)
        ax.set_ylabel("speedup: separate ms / fused ms")
        ax.set_title(title)
    axes[-1].set_xticks(range(len(shapes)), [f"B{B} T{T}" for B, T in shapes])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(series), 5), fontsize="small")
    m = report["machine"]
    how = "CUDA events, L2 flushed" if m["device"].startswith("cuda") else "CPU wall clock: a smoke test"
    fig.suptitle(
        f"gdn-equiv {report['command']}: fused q/k/v prologue vs separate\n"
        f"{m['device_name']}, {', '.join(report['dtypes'])}, median of {report['timing']['iters']} ({how})"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
