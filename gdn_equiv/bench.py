"""``gdn-equiv bench prologue``: three separate short convs vs one fused conv, per backend.

For each shape and backend: forward, and forward+backward (dx and dweight), of the q/k/v convs as the
separate prologue runs them (three calls on channel slices of one ``[B, T, Dq+Dk+Dv]`` tensor) and as
the fused prologue does (one call over all channels). Times are medians over ``iters`` after
``warmup`` calls, with CUDA events on GPU and ``time.perf_counter`` on CPU (a smoke test there, not a
measurement). Two timings per row on GPU:

- ``eager``: events around one call from Python, the GPU idle before it: host work (argument
  checks, autograd, the launcher) counts whenever it is longer than the kernels.
- ``device``: the same, but with the GPU kept busy by ``torch.cuda._sleep`` queued before the start
  event, so the host has enqueued the whole call before the GPU reaches it: kernel time and the gaps
  between dependent kernels only, as inside a model whose GPU queue is never empty. The HBM fraction
  is meaningful for this row.

Bytes are what the fused call must move at least; the fraction is of the H200's 4.8 TB/s HBM bandwidth.
Operands stay in L2 between iterations where they fit (the first shape's 50 MB x does not).

Backends: this project's registry (``torch``, ``triton``, ``cuda`` where available) and, as an external
baseline called directly, fla 0.6.0's Triton ``causal_conv1d`` when ``fla`` is importable.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from gdn_equiv.backends import available_backends, get_backend

Tensor = torch.Tensor
HBM_BYTES_PER_S = 4.8e12  # H200


@dataclass(frozen=True)
class PrologueShape:
    """The prologue of one GDN layer: q, k (``num_heads*head_dim`` channels) and v (``expand_v`` times that)."""

    B: int
    T: int
    hidden: int
    head_dim: int
    dtype: torch.dtype
    num_heads: int = 6
    expand_v: int = 2
    W: int = 4

    @property
    def dims(self) -> tuple[int, int, int]:
        key_dim = self.num_heads * self.head_dim
        return key_dim, key_dim, key_dim * self.expand_v

    @property
    def label(self) -> str:
        dt = str(self.dtype).removeprefix("torch.").replace("bfloat16", "bf16").replace("float", "fp")
        return f"B{self.B} T{self.T} h{self.hidden} hd{self.head_dim} {dt} D{sum(self.dims)}"


SHAPES = (
    PrologueShape(B=2, T=2048, hidden=2048, head_dim=256, dtype=torch.bfloat16),
    PrologueShape(B=1, T=128, hidden=512, head_dim=64, dtype=torch.bfloat16),
    PrologueShape(B=2, T=100, hidden=512, head_dim=64, dtype=torch.bfloat16),
    PrologueShape(B=2, T=256, hidden=512, head_dim=64, dtype=torch.float16),
)
QUICK_SHAPES = (PrologueShape(B=1, T=16, hidden=16, head_dim=4, num_heads=2, dtype=torch.float32),)

ConvFn = Callable[[Tensor, Tensor], Tensor]  # (x [B,T,D], weight [D,W]) -> y, silu, no bias


def _registry_conv(name: str) -> ConvFn:
    backend = get_backend(name)

    def conv(x: Tensor, weight: Tensor) -> Tensor:
        return backend.forward(x, weight, None, "silu", None, False, None)[0]

    return conv


def _fla_conv() -> ConvFn:
    try:
        from fla.modules.causal_conv1d import causal_conv1d as fla_causal_conv1d
    except ImportError:  # older layouts
        from fla.modules.convolution import causal_conv1d as fla_causal_conv1d
    extra = {"backend": "triton"} if "backend" in inspect.signature(fla_causal_conv1d).parameters else {}

    def conv(x: Tensor, weight: Tensor) -> Tensor:
        return fla_causal_conv1d(x=x, weight=weight, bias=None, activation="silu", **extra)[0]

    return conv


def _convs(backends: Sequence[str] | None) -> dict[str, ConvFn]:
    names = list(backends) if backends is not None else [*available_backends(), "fla"]
    out: dict[str, ConvFn] = {}
    for name in names:
        if name == "fla":
            if importlib.util.find_spec("fla") is not None:
                out["fla"] = _fla_conv()
        elif get_backend(name).unavailable() is None:
            out[name] = _registry_conv(name)
    return out


# ~2 ms of GPU sleep at the H200's ~2 GHz: longer than any one call's host work measured here.
_SLEEP_CYCLES = 4_000_000


def _median_ms(fn: Callable[[], object], device: torch.device, warmup: int, iters: int, *, hide_host: bool) -> float:
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if hide_host:
                torch.cuda._sleep(_SLEEP_CYCLES)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _bench_one(
    conv: ConvFn, shape: PrologueShape, device: torch.device, warmup: int, iters: int, *, hide_host: bool
) -> dict:
    B, T, W, dt = shape.B, shape.T, shape.W, shape.dtype
    dims = shape.dims
    total = sum(dims)
    bounds = [0, dims[0], dims[0] + dims[1], total]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, total, generator=gen).to(device, dt).requires_grad_()
    weights = [(torch.randn(d, W, generator=gen) / W).to(device, dt).requires_grad_() for d in dims]
    w_fused = torch.cat([w.detach() for w in weights]).requires_grad_()
    dy = torch.randn(B, T, total, generator=gen).to(device, dt)
    slices = [slice(a, b) for a, b in itertools.pairwise(bounds)]

    def sep_fwd() -> object:
        with torch.no_grad():
            return [conv(x[..., s], w) for s, w in zip(slices, weights, strict=True)]

    def fused_fwd() -> object:
        with torch.no_grad():
            return conv(x, w_fused)

    def sep_fwd_bwd() -> object:
        ys = [conv(x[..., s], w) for s, w in zip(slices, weights, strict=True)]
        return torch.autograd.grad(ys, [x, *weights], [dy[..., s] for s in slices])

    def fused_fwd_bwd() -> object:
        return torch.autograd.grad(conv(x, w_fused), [x, w_fused], dy)

    row: dict = {"timing": "device" if hide_host else "eager"}
    for name, fn in (
        ("sep_fwd_ms", sep_fwd),
        ("fused_fwd_ms", fused_fwd),
        ("sep_fwd_bwd_ms", sep_fwd_bwd),
        ("fused_fwd_bwd_ms", fused_fwd_bwd),
    ):
        row[name] = _median_ms(fn, device, warmup, iters, hide_host=hide_host)
    esize = torch.finfo(dt).bits // 8
    act = B * T * total * esize
    wbytes = total * W * esize
    row["fwd_bytes"] = 2 * act + wbytes  # read x, write y, read weight
    row["fwd_bwd_bytes"] = row["fwd_bytes"] + 3 * act + wbytes  # + read dy and x, write dx, write dweight
    row["fwd_ratio"] = row["sep_fwd_ms"] / row["fused_fwd_ms"]
    row["fwd_bwd_ratio"] = row["sep_fwd_bwd_ms"] / row["fused_fwd_bwd_ms"]
    row["fwd_hbm_frac"] = row["fwd_bytes"] / (row["fused_fwd_ms"] * 1e-3) / HBM_BYTES_PER_S
    row["fwd_bwd_hbm_frac"] = row["fwd_bwd_bytes"] / (row["fused_fwd_bwd_ms"] * 1e-3) / HBM_BYTES_PER_S
    return row


def bench_prologue(
    shapes: Sequence[PrologueShape] | None = None,
    backends: Sequence[str] | None = None,
    warmup: int = 10,
    iters: int = 50,
    *,
    quick: bool = False,
    device: str | torch.device | None = None,
) -> list[dict]:
    """One row per (shape, backend, timing): separate vs fused times (ms), their ratios, bytes and HBM
    fraction; timing ``eager`` and, on GPU, ``device`` (see the module docstring).

    ``shapes`` defaults to :data:`SHAPES` (:data:`QUICK_SHAPES` with ``quick``); ``backends`` to every
    available registry backend plus ``fla``. A backend that fails on a shape gets an ``error`` row.
    """
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    shapes = shapes if shapes is not None else (QUICK_SHAPES if quick else SHAPES)
    rows = []
    for shape in shapes:
        for name, conv in _convs(backends).items():
            for hide_host in (False, True) if dev.type == "cuda" else (False,):
                row: dict = {"shape": shape.label, "backend": name, "device": str(dev)}
                try:
                    row.update(_bench_one(conv, shape, dev, warmup, iters, hide_host=hide_host))
                except Exception as exc:  # a baseline that cannot run a shape is a result, not a crash
                    row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
                    rows.append(row)
                    break
                rows.append(row)
    return rows


def format_table(rows: Sequence[dict]) -> str:
    head = (
        f"{'shape':<38} {'backend':<7} {'timing':<6} {'sep fwd':>8} {'fused fwd':>9} {'ratio':>5} "
        f"{'sep f+b':>8} {'fused f+b':>9} {'ratio':>5} {'MB fwd':>7} {'MB f+b':>7} {'HBM fwd':>7} {'HBM f+b':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['shape']:<38} {r['backend']:<7} {'':<6} error: {r['error']}")
            continue
        lines.append(
            f"{r['shape']:<38} {r['backend']:<7} {r['timing']:<6} {r['sep_fwd_ms']:8.4f} {r['fused_fwd_ms']:9.4f} "
            f"{r['fwd_ratio']:5.2f} {r['sep_fwd_bwd_ms']:8.4f} {r['fused_fwd_bwd_ms']:9.4f} "
            f"{r['fwd_bwd_ratio']:5.2f} {r['fwd_bytes'] / 1e6:7.1f} {r['fwd_bwd_bytes'] / 1e6:7.1f} "
            f"{r['fwd_hbm_frac']:7.1%} {r['fwd_bwd_hbm_frac']:7.1%}"
        )
    device = rows[0]["device"] if rows else "?"
    lines.append(
        f"times in ms (median), device {device}; eager = one call from Python with the GPU idle before it, "
        "device = host work hidden behind a queued GPU sleep; HBM = fused bytes / time / 4.8 TB/s (H200)"
    )
    return "\n".join(lines)


def print_table(rows: Sequence[dict]) -> None:
    print(format_table(rows))
