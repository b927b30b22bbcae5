"""Time the triton conv backend's backward on one GPU for a few tile constants (to tune ``_GPU_GRAD``/``_GPU_BWD``).

Shape: B=2, T=2048, D=6144, W=4, bf16, bias, silu, no state (the fused q|k|v prologue of the bench layer).
Each candidate line is the backward kernels alone (``_backward_impl`` captured in a CUDA graph and replayed,
so host launch overhead is out), median of 50 replays after 10 warm-ups; a pass-1 candidate runs with
pass 2 at its default tile and the other way round. The last line is forward+backward through
``triton_backend.forward`` + ``torch.autograd.grad`` with the default tiles, eager (host work included),
per call over 20 back-to-back calls, median of 50. Under a minute on an H200, compilation included::

    PYTHONPATH=$PWD python3 tools/bwd_tiles.py                      # both passes, CANDIDATES
    PYTHONPATH=$PWD python3 tools/bwd_tiles.py --pass2 64x128x8 128x64x4  # pass 2 only, these tiles
    PYTHONPATH=$PWD python3 tools/bwd_tiles.py --onepass 64x64x4 32x128x4  # the one-pass backward
    PYTHONPATH=$PWD python3 tools/bwd_tiles.py --serial 64x256x4x1x4 64x256x4x1x8  # CT x BD x warps x stages x rows
    PYTHONPATH=$PWD python3 tools/bwd_tiles.py --forward 16x256x4 32x512x8  # the forward kernel's tile
    PYTHONPATH=$PWD python3 tools/bwd_tiles.py --forward-rows 64x512x4x4 32x512x4x8  # CT x BD x warps x rows

A tile ``BTxBDxW`` is (tokens, channels, num_warps) per program.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable

import torch

CANDIDATES = [(32, 128, 4), (64, 128, 4), (128, 64, 4), (64, 64, 4), (128, 128, 8)]
B, T, D, W = 2, 2048, 6144, 4


def _median_ms(fn: Callable[[], object], *, calls: int = 1, warmup: int = 10, reps: int = 50) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def _graphed(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` captured once (after a compiling call on a side stream) and replayed."""
    from gdn_equiv.run.bench import cuda_graph

    return cuda_graph(fn, warmup=1)


def main() -> None:
    from gdn_equiv.model.backends import triton_backend as tb

    if not torch.cuda.is_available() or tb.unavailable() is not None:
        raise SystemExit("needs a CUDA device and triton")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, T, D, device="cuda", generator=gen).to(torch.bfloat16)
    weight = torch.randn(D, W, device="cuda", generator=gen).to(torch.bfloat16)
    bias = torch.randn(D, device="cuda", generator=gen).to(torch.bfloat16)
    dy = torch.randn(B, T, D, device="cuda", generator=gen).to(torch.bfloat16)
    vl = tb._Varlen(x, None)

    def backward() -> object:
        return tb._backward_impl(x, weight, bias, "silu", None, vl, dy, None, need_dw=True, need_dstate=False)

    print(f"B={B} T={T} D={D} W={W} bf16 silu bias; {torch.cuda.get_device_name()}")
    print(f"defaults: pass 1 _GPU_GRAD={tb._GPU_GRAD}, pass 2 _GPU_BWD={tb._GPU_BWD}")
    print(f"one-pass: _GPU_ONEPASS={tb._GPU_ONEPASS}; serial: _GPU_SERIAL={tb._GPU_SERIAL}")
    args = sys.argv[1:]
    if "--forward" in args or "--forward-rows" in args:
        tiles = [tuple(int(v) for v in a.split("x")) for a in args if a[0] != "-"]
        _forward_tiles(tb, x, weight, bias, tiles, rows="--forward-rows" in args)
        return
    if "--pass2" in args:
        names: tuple[str, ...] = ("_GPU_BWD",)
    elif "--onepass" in args:
        names = ("_GPU_ONEPASS",)
    elif "--serial" in args:
        names = ("_GPU_SERIAL",)
    else:
        names = ("_GPU_GRAD", "_GPU_BWD", "_GPU_ONEPASS")
    mode_of = {"_GPU_ONEPASS": "one-pass", "_GPU_SERIAL": "serial"}
    tiles = [tuple(int(v) for v in a.split("x")) for a in args if not a.startswith("--")] or CANDIDATES
    if "--serial" in args:  # CT x BD x warps x stages, and the row group (1 when left out)
        tiles = [(*tile, 1)[:5] if len(tile) == 4 else tile for tile in tiles]
    os.environ["GDN_EQUIV_TRITON_BACKWARD"] = "two-pass"
    print(f"backward kernels, two-pass at its defaults: {_median_ms(_graphed(backward)):.4f} ms", flush=True)
    for name in names:
        default = getattr(tb, name)
        os.environ["GDN_EQUIV_TRITON_BACKWARD"] = mode_of.get(name, "two-pass")
        for tile in tiles:
            setattr(tb, name, tile)
            try:
                ms = _median_ms(_graphed(backward))
            except Exception as exc:  # a tile that does not compile (registers, shared memory) is reported
                print(f"backward kernels, {name}={tile}: failed, {type(exc).__name__}: {str(exc)[:200]}")
                continue
            finally:
                setattr(tb, name, default)
            print(f"backward kernels, {name}={tile}: {ms:.4f} ms", flush=True)
    os.environ["GDN_EQUIV_TRITON_BACKWARD"] = "two-pass"
    two = backward()
    for mode in ("one-pass", "serial"):
        os.environ["GDN_EQUIV_TRITON_BACKWARD"] = mode
        other = backward()
        print(
            f"{mode} vs two-pass at the default tiles: dx bitwise equal {torch.equal(other[0], two[0])}, "
            f"dweight max |diff| {float((other[1].float() - two[1].float()).abs().max()):.3g} (sum order)"
        )

    xg, wg, bg = (t.detach().requires_grad_() for t in (x, weight, bias))

    def forward_backward() -> object:
        y, _ = tb.forward(xg, wg, bg, "silu", None, False, None)
        return torch.autograd.grad(y, (xg, wg, bg), dy)

    fwd = _median_ms(lambda: tb.forward(x, weight, bias, "silu", None, False, None), calls=20)
    print(f"forward alone (eager, defaults): {fwd:.4f} ms")
    for mode in tb.BACKWARDS:
        os.environ["GDN_EQUIV_TRITON_BACKWARD"] = mode
        print(f"forward+backward (eager, defaults, {mode}): {_median_ms(forward_backward, calls=20):.4f} ms")


def _forward_tiles(
    tb: object, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, tiles: list, rows: bool = False
) -> None:
    """The forward kernel alone (CUDA graph) at each tile (BT x BD x warps; with ``rows``, the rows
    forward's CT x BD x warps x ROWS, after the tiles forward's default), and its share of the HBM
    bandwidth: x read once and y written once (the W-1 halo rows and the weights are noise). First the
    ceiling: torch's copy and silu over the same tensor, elementwise kernels that move the same bytes."""
    moved = 2 * x.numel() * x.element_size()
    name = "_GPU_FWD_ROWS" if rows else "_GPU_FWD"
    default = getattr(tb, name)

    def forward() -> object:
        return tb.forward(x, weight, bias, "silu", None, False, None)  # type: ignore[attr-defined]

    os.environ["GDN_EQUIV_TRITON_FORWARD"] = "tiles"
    reference = forward()[0]
    # what an elementwise kernel moving the same bytes reaches on this card: the practical ceiling
    out = torch.empty_like(x)
    for what, fn in (
        ("torch copy_ (x to y)", lambda: out.copy_(x)),
        ("torch silu (x to y)", lambda: torch.nn.functional.silu(x)),
    ):
        ms = _median_ms(_graphed(fn))
        print(f"ceiling, {what}: {ms:.4f} ms, {moved / ms / 1e9:.2f} TB/s", flush=True)
    if rows:  # the baseline, side by side (without --forward-rows the loop's first tile is it)
        print(f"forward, tiles at _GPU_FWD={tb._GPU_FWD}: {_median_ms(_graphed(forward)):.4f} ms")  # type: ignore[attr-defined]
        os.environ["GDN_EQUIV_TRITON_FORWARD"] = "rows"
    for tile in [default, *tiles]:
        setattr(tb, name, tile)
        try:
            ms = _median_ms(_graphed(forward))
            same = torch.equal(forward()[0], reference)
        except Exception as exc:  # a tile that does not compile is reported
            print(f"forward, {name}={tile}: failed, {type(exc).__name__}: {str(exc)[:200]}")
            continue
        finally:
            setattr(tb, name, default)
        print(f"forward, {name}={tile}: {ms:.4f} ms, {moved / ms / 1e9:.2f} TB/s, output bitwise {same}", flush=True)


if __name__ == "__main__":
    main()
