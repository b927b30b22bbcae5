"""The ``triton`` backend: the project's own depthwise causal conv kernels (SPEC §3).

Forward, backward (x, weight, bias, initial_state, and the final-state output's gradient), varlen
``cu_seqlens`` and the single-step update, on CUDA or under ``TRITON_INTERPRET=1`` on CPU. Kernels live
in :mod:`gdn_equiv.model.backends._triton_kernels`, imported on first use, so importing this module (and
asking :func:`unavailable`) never imports triton.

Numerics, per channel and independent of ``D``, of the channel's position and of the block shape:
``acc = xwin[t]*w0; acc = acc + xwin[t+j]*w_j (j = 1..W-1); acc = acc + bias; y = acc / (1 + exp(-acc))``,
in fp32, or fp64 when ``x`` or ``weight`` is fp64 (fp64 is supported, on GPU and in the interpreter).
Multiplies and adds are never contracted into FMAs (``enable_fp_fusion=False``), so the step kernel
reproduces the sequence kernel bit for bit. Block shapes are constants (no autotuning), so the
weight/bias gradient reductions are also independent of ``D``: fixed per-tile sums, then a sequential
sum over tiles. Three backwards (``GDN_EQUIV_TRITON_BACKWARD``, :func:`backward_mode`) form
``g = dy * silu'(a)`` with the same operations and sum dx in the same order, so dx and
d(initial_state) have the same bits in all three: ``serial`` (the default for W <= 4) walks each chunk
of rows backwards carrying the later rows' g in registers; ``two-pass`` writes g to a scratch in the
compute dtype (pass 1) and forms every gradient from it (pass 2); ``one-pass`` recomputes g for a tile
and its halo in registers. Their weight/bias sums differ in order (serial: row by row per chunk). Two
forwards (``GDN_EQUIV_TRITON_FORWARD``, :func:`forward_mode`) give the same y bits: ``tiles`` (the
default under the interpreter, and for W > 4) reads each tile's W shifted copies; ``rows`` (the
default on a GPU for W <= 4) walks each chunk of rows forwards, reading each input row once and
carrying the last W-1 in registers. The step kernel's taps see x at
its own precision;
only the stored state is rounded to the state's dtype (as the torch backend does). Under the
interpreter (triton 3.9) an fp32 -> bf16 cast truncates instead of rounding to nearest even, so bf16
results there can be one bf16 ulp off torch's; on GPU the cast rounds to nearest even.

The input ``x`` may be any strided view (e.g. a channel slice of the q|k|v projection): it is read in
place, never copied.

Activations: the kernels compute ``silu``/``swish``, ``relu`` and ``relu2`` (branch ``conv-relu``) in
the formulas of :mod:`gdn_equiv.model.conv_ops` (``ACT_CODES``); any other registered activation runs the
kernel without one on compute-dtype operands and applies the registered torch maths after it
(``_torch_activation``): same arithmetic, one extra round trip, documented rather than hidden.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from types import ModuleType

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.backends.base import Backend, compute_dtype, token_sequence_ids
from gdn_equiv.model.conv_ops import apply_activation, canonical_activation

Tensor = torch.Tensor

# (time rows, channels, warps) per tile; constants so that no reduction order depends on the shape.
# Picked on an H200 (bf16, B2 T2048, 6144 channels, W4). Forward 16x256x4: 0.0445 ms/call (64x128x4:
# 0.078). The backward runs in two passes: pass 1 (_GPU_GRAD, only with an activation) writes
# g = dy * silu'(a) per token, elementwise like the forward; pass 2 (_GPU_BWD) reads g for dx and sums
# dweight/dbias over its tile (so a new pass-2 shape may change those sums' bits, never dx's).
# tools/bwd_tiles.py, backward kernels alone in a CUDA graph (2026-12-02): pass-1 tiles 0.323-0.336 ms
# with pass 2 at 32x128x4, i.e. pass 1 barely matters; pass 2 16x256x4 0.479, 32x128x4 0.323,
# 32x256x8 0.476, 64x128x4 0.236, 8x512x4 0.437 ms. Nsight Compute on 64x128x4 (2026-12-03): pass 2
# 147 us of 271 us forward+backward, 255 registers/thread, 614k local-memory spill requests, 12.5%
# occupancy, 28% of DRAM bandwidth (latency-bound). Second sweep (2026-12-03): 128x64x4 0.212,
# 64x64x4 0.256, 128x128x8 0.264, 128x64x8 0.279, 32x64x4 0.327, 64x256x8 0.326, 64x128x8 0.356 ms.
# With 128x64x4 (bench, device timing): fused forward+backward 0.2469 ms; ncu: pass 2 129 us, still
# 255 registers/thread and 0.93 M spill requests at 12.5% occupancy: register-bound, not memory-bound.
# Under the interpreter, small tiles keep it fast and make tiny tests cross tile boundaries.
# The one-pass backward (``GDN_EQUIV_TRITON_BACKWARD=one-pass``, _GPU_ONEPASS) recomputes g in
# registers for its tile plus a W-1 row halo and shifts it with tl.gather: no g round trip through
# HBM; its tile sets its dweight/dbias sums' bits as pass 2's does. H200 (2026-12-04): 0.2636 ms at
# 64x64x4 against the two passes' 0.2147, 255 registers/thread (an earlier form that recomputed the
# pre-activation at every shift took 0.535 ms for forward+backward).
_GPU_FWD = (16, 256, 4)
_GPU_GRAD = (16, 256, 4)
_GPU_BWD = (128, 64, 4)
_GPU_ONEPASS = (64, 64, 4)
# The serial backward (the default for W <= 4; wider kernels run the two passes): each program walks a
# chunk of CT rows backwards, carrying the later rows' g in registers. (CT, BD, warps, pipeline stages of
# its row loop). H200, B2 T2048 D6144 W4 bf16 (tools/bwd_tiles.py, CUDA graph, 2026-12-04): 64x256x4x1
# 0.1644 ms, 128x256x4x1 0.1608, 32x256x4x1 0.1700, 64x256x8x1 0.1966, 256x256x4x1 0.2413, 3 stages
# 0.1641, against the two passes' 0.2167 in the same run (1.32x); ncu of an earlier tile: 123
# registers, 25% occupancy, latency-bound (a serial loop), 17% of DRAM bandwidth.
# A fifth constant, ROWS (1, 2, 4 or 8), groups the row loop: a group's rows are all read before the
# first is computed, so ROWS rows' loads are in flight together instead of one (same bits for every
# ROWS). H100 (2026-12-05): 64x256x4x1x1 0.1441 ms, 64x512x4x1x4 0.1250 (-13%), 64x512x4x2x4 0.1277.
# Then trimmed (no per-row sequence checks or dx selects without packed sequences; exp2): sm_90
# 64x256x4x1x1 56 registers and 74.0 SASS/element (from 64 and 105.5), 64x512x4x1x4 128 and 55.1
# (from 142 and 71.0). H100 after the trim (2026-12-05, CUDA graph, one run): 64x256x4x1x1 0.1326 ms,
# 64x512x4x1x4 0.1103, 64x512x4x1x8 0.0980 (two-pass 0.2280); ncu of 64x512x4x1x8: 74.2 us, DRAM 64.6%,
# SM 65.0%, 168 registers, occupancy 16.9%. Chosen on the H100 (same sm_90; the H200 could not be
# started), dx bitwise the two-pass's there and the triton tests passing; the H200 timing is owed.
# Then 128x512x4x1x8 (H100, 2026-12-05, CUDA graph, one run): 0.0812 ms against 64x512x4x1x8's 0.0946
# (-14%; 64x512x4x1x4 0.1085, two-pass 0.2247): half the weight sums' partial rows and of the halo rows
# each chunk re-reads, and 384 programs in one wave (3 blocks per SM x 132) where 768 took two. sm_90:
# 168 registers, no spills. dx keeps its bits; dweight's change (the partial sums group rows by 128).
# Then the dweight/dbias sums compensated (Kahan; a plain 128-row chain was 1.29e-05 from the fp64 truth where the
# gate allows 6.75e-06): H100 (2026-12-07, CUDA graph, old and new alternated in one call) 0.1249 and 0.1287 ms
# against the plain sums' 0.0806 and 0.1179 (two-pass 0.2202-0.2251); sm_90 (tools/sm90_compile.py, Triton 3.9):
# 168 registers and no spills, as the plain sums' build: the cost is the added instructions, not spills.
_GPU_SERIAL = (128, 512, 4, 1, 8)
# with packed sequences the row groups are capped: each row's sequence checks and carried-tap reads
# cost registers, and ROWS 8 reaches 255 on sm_90 and spills with a state and a final-state gradient
# (Triton 3.6: 140 B; ROWS 4: 183 registers, no spills). Same bits for any ROWS.
_SERIAL_VARLEN_ROWS = 4
# under the interpreter the rows go in groups of 4, so the grouping and its rounded-up halo are tested
_INTERP_SERIAL = (8, 32, 1, 1, 4)
SERIAL_MAX_W = 4
#: ``GDN_EQUIV_TRITON_BACKWARD``: which backward the triton backend runs.
BACKWARDS = ("two-pass", "one-pass", "serial")
# The forward in rows (``GDN_EQUIV_TRITON_FORWARD=rows``, the GPU default, W <= 4): each program walks
# CT rows of BD channels in groups of ROWS, reading each input row once and carrying the last W-1 in
# registers, where ``tiles`` (_GPU_FWD; the interpreter's default) reads each tile's W shifted copies
# (the W-1 extra from L1/L2). (CT, BD, warps, ROWS), CT a multiple of ROWS. H100 (2026-12-05):
# 64x512x4x4 0.0523 ms vs the tiles' 0.0529, a tie. Its loop then trimmed (no per-row sequence checks
# without packed sequences; exp2): sm_90 64x512x4x4 48 registers and 26.4 SASS/element (from 78 and
# 35.7), 64x1024x4x4 96 and 24.1, 64x512x4x8 70 and 24.5 (tools/sm90_compile.py --sass). H100 after
# the trim (2026-12-05, one run, CUDA graph): tiles 0.0516-0.0531 ms, rows 64x512x4x4 0.0488,
# 64x1024x4x4 0.0529, 64x512x4x8 0.0448 (2.25 TB/s; torch's copy_ of the same bytes 0.0407-0.0416);
# ncu of 64x512x4x8: 36.7 us, DRAM 68.5%, SM 52.1%, 70 registers. The GPU's default forward since
# (forward_mode); the H200 timing is owed.
_GPU_FWD_ROWS = (64, 512, 4, 8)
_INTERP_FWD_ROWS = (8, 32, 1, 4)
#: ``GDN_EQUIV_TRITON_FORWARD``: which forward kernel the triton backend runs.
FORWARDS = ("tiles", "rows")
_INTERP = (8, 32, 1)
_STEP_BLOCK_D = 256

_KERNELS: ModuleType | None = None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def unavailable() -> str | None:
    """``None`` when triton is importable and can run here (a CUDA device, or the interpreter)."""
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install triton)"
    if _interpreting():
        # the interpreter imports numpy, which triton does not require: without it every launch raises
        # ModuleNotFoundError (a tox env with the triton extra alone had no numpy before the extra named it)
        if importlib.util.find_spec("numpy") is None:
            return "triton's interpreter (TRITON_INTERPRET=1) needs numpy, which is not installed (pip install numpy)"
        return None
    if not torch.cuda.is_available():
        return "triton needs a CUDA device, or TRITON_INTERPRET=1 to run its interpreter on CPU"
    return None


def _kernels() -> ModuleType:
    global _KERNELS
    if _KERNELS is None:
        # lazily: the kernels module imports triton, an optional extra
        from gdn_equiv.model.backends import _triton_kernels

        _KERNELS = _triton_kernels
    return _KERNELS


def _blocks(gpu: tuple[int, int, int]) -> tuple[int, int, int]:
    return _INTERP if _interpreting() else gpu


def _halo(W: int) -> int:
    """Rows the one-pass backward recomputes past its tile: the W-1 its taps read, a power of two, at
    least 2 (Triton 3.6 fails to compile a ``tl.gather`` from one row: "PassManager::run failed" in
    TritonGPUOptimizeThreadLocality, H200, 2026-12-04)."""
    return max(_pow2(W - 1), 2)


def _check_group(rows: int) -> None:
    """The row kernels unroll groups of 1, 2, 4 or 8 rows (a tile constant, set here, not by a user)."""
    if rows not in (1, 2, 4, 8):
        raise ValueError(f"a row group of {rows} rows: the row kernels read groups of 1, 2, 4 or 8 rows")


def serial_tile(tile: tuple[int, int, int, int, int], varlen: bool) -> tuple[int, int, int, int, int]:
    """The serial backward's (CT, BD, warps, stages, ROWS) for a launch: ``tile`` with its row group
    checked, and capped at ``_SERIAL_VARLEN_ROWS`` with packed sequences."""
    CT, BD, warps, stages, rows = tile
    _check_group(rows)
    return CT, BD, warps, stages, min(rows, _SERIAL_VARLEN_ROWS) if varlen else rows


def forward_mode() -> str:
    """The forward chosen by ``GDN_EQUIV_TRITON_FORWARD``: ``tiles`` or ``rows`` (W <= 4; wider kernels
    run ``tiles``). Both give the same y bits. Unset: ``rows`` on a GPU (faster there), ``tiles`` under
    the interpreter (3.3x faster there, where CI runs)."""
    mode = os.environ.get("GDN_EQUIV_TRITON_FORWARD", "") or ("tiles" if _interpreting() else "rows")
    if mode not in FORWARDS:
        raise InvalidArgument(f"GDN_EQUIV_TRITON_FORWARD={mode!r}: the triton forward is one of {', '.join(FORWARDS)}")
    return mode


def backward_mode() -> str:
    """The backward chosen by ``GDN_EQUIV_TRITON_BACKWARD``: ``serial`` (the default; W > 4 runs
    ``two-pass``), ``two-pass`` or ``one-pass``. All three give the same dx and d(initial_state) bits;
    dweight/dbias are sums whose order each one fixes (one-pass and two-pass agree for the same tile)."""
    mode = os.environ.get("GDN_EQUIV_TRITON_BACKWARD", "") or "serial"
    if mode not in BACKWARDS:
        raise InvalidArgument(
            f"GDN_EQUIV_TRITON_BACKWARD={mode!r}: the triton backward is one of {', '.join(BACKWARDS)}"
        )
    return mode


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _check_device(x: Tensor) -> None:
    if x.device.type != "cuda" and not _interpreting():
        raise InvalidArgument(
            f"the triton backend needs CUDA tensors (or TRITON_INTERPRET=1 for CPU), got x on {x.device}"
        )


def _tl_dtype(dtype: torch.dtype):  # -> tl.dtype
    import triton.language as tl

    return tl.float64 if dtype == torch.float64 else tl.float32


def _strides3(t: Tensor | None) -> tuple[int, int, int]:
    return (0, 0, 0) if t is None else (t.stride(0), t.stride(1), t.stride(2))


class _Varlen:
    """Per-token sequence index (``searchsorted``, no host sync) and the sequence bounds."""

    def __init__(self, x: Tensor, cu_seqlens: Tensor | None) -> None:
        self.on = cu_seqlens is not None
        if cu_seqlens is None:
            self.cu = self.seq = x  # never read: VARLEN is off
            self.N = x.shape[0]
        else:
            self.cu = cu_seqlens.to(device=x.device, dtype=torch.int32).contiguous()
            self.seq = token_sequence_ids(cu_seqlens, x.shape[1], x.device)
            self.N = self.cu.numel() - 1


def _forward_impl(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    output_final_state: bool,
    vl: _Varlen,
) -> tuple[Tensor, Tensor | None]:
    k = _kernels()
    B, T, D = x.shape
    W = weight.shape[1]
    cdt = _tl_dtype(compute_dtype(x, weight))
    BT, BD, warps = _blocks(_GPU_FWD)
    y = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    state = initial_state if initial_state is not None else x
    b = bias if bias is not None else weight
    ss = _strides3(initial_state)
    if B * T * D > 0 and forward_mode() == "rows" and W <= SERIAL_MAX_W:
        CT, BDR, warps_r, rows = _INTERP_FWD_ROWS if _interpreting() else _GPU_FWD_ROWS
        _check_group(rows)
        if CT % rows:
            raise ValueError(f"the rows forward's chunk ({CT} rows) must be a multiple of its group ({rows} rows)")
        k._fwd_rows_kernel[(_cdiv(T, CT), _cdiv(D, BDR), B)](
            x, weight, b, state, y, vl.seq, vl.cu, T, D,
            x.stride(0), x.stride(1), x.stride(2), weight.stride(0), weight.stride(1), b.stride(0), *ss,
            W=W, HAS_BIAS=bias is not None, HAS_STATE=initial_state is not None, ACT=_act_code(activation),
            VARLEN=vl.on, CDT=cdt, CT=CT, BD=BDR, ROWS=rows, num_warps=warps_r, enable_fp_fusion=False,
        )  # fmt: skip
    elif B * T * D > 0:
        k._fwd_kernel[(_cdiv(T, BT), _cdiv(D, BD), B)](
            x, weight, b, state, y, vl.seq, vl.cu, T, D,
            x.stride(0), x.stride(1), x.stride(2), weight.stride(0), weight.stride(1), b.stride(0), *ss,
            W=W, HAS_BIAS=bias is not None, HAS_STATE=initial_state is not None, ACT=_act_code(activation),
            VARLEN=vl.on, CDT=cdt, BT=BT, BD=BD, num_warps=warps, enable_fp_fusion=False,
        )  # fmt: skip
    final = None
    if output_final_state:
        state_dtype = x.dtype if initial_state is None else initial_state.dtype
        final = torch.empty((vl.N, D, W), dtype=state_dtype, device=x.device)
        if vl.N * D > 0:
            k._final_state_kernel[(vl.N, _cdiv(D, BD))](
                x, state, final, vl.cu, T, D, x.stride(0), x.stride(1), x.stride(2), *ss,
                W=W, HAS_STATE=initial_state is not None, VARLEN=vl.on, CDT=cdt, BW=_pow2(W), BD=BD,
                num_warps=warps, enable_fp_fusion=False,
            )  # fmt: skip
    return y, final


def _backward_impl(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    vl: _Varlen,
    dy: Tensor,
    dfinal: Tensor | None,
    need_dw: bool,
    need_dstate: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]:
    k = _kernels()
    B, T, D = x.shape
    W = weight.shape[1]
    cdt_torch = compute_dtype(x, weight)
    cdt = _tl_dtype(cdt_torch)
    state = initial_state if initial_state is not None else x
    b = bias if bias is not None else weight
    df = dfinal if dfinal is not None else x
    ss, sdf = _strides3(initial_state), _strides3(dfinal)
    xs, ws = (x.stride(0), x.stride(1), x.stride(2)), (weight.stride(0), weight.stride(1), b.stride(0))
    flags = dict(W=W, HAS_BIAS=bias is not None, ACT=_act_code(activation), HAS_DF=dfinal is not None,
                 VARLEN=vl.on, CDT=cdt, enable_fp_fusion=False)  # fmt: skip
    dx = torch.empty((B, T, D), dtype=x.dtype, device=x.device)
    mode = backward_mode()
    if mode == "serial" and W > SERIAL_MAX_W:
        mode = "two-pass"
    if mode in ("one-pass", "serial"):
        if mode == "serial":
            BT, BD, warps, stages, rows = serial_tile(_INTERP_SERIAL if _interpreting() else _GPU_SERIAL, vl.on)
        else:
            BT, BD, warps = _blocks(_GPU_ONEPASS)
        n_t = _cdiv(T, BT)
        part = torch.empty((B * n_t, W + 1, D), dtype=cdt_torch, device=x.device) if need_dw else x
        sdy = _strides3(dy)
        args = (x, weight, b, state, dy, df, dx, part, vl.seq, vl.cu, T, D, *xs, *ws, *ss, *sdy, *sdf)
        common = dict(HAS_STATE=initial_state is not None, NEED_DW=need_dw, BD=BD, num_warps=warps, **flags)
        if B * T * D > 0 and mode == "serial":
            k._bwd_serial_kernel[(n_t, _cdiv(D, BD), B)](*args, CT=BT, STAGES=stages, ROWS=rows, **common)
        elif B * T * D > 0:
            k._bwd_onepass_kernel[(n_t, _cdiv(D, BD), B)](*args, BT=BT, HB=_halo(W), **common)
        dw, db = _weight_sums(k, part, weight, bias, B * n_t, BD, warps) if need_dw else (None, None)
        dstate = _state_gradient(vl, weight, initial_state if need_dstate else None, lambda ds: (
            k._dstate_onepass_kernel[(vl.N, _cdiv(D, BD))](
                x, weight, b, state, dy, df, ds, vl.cu, T, D, *xs, *ws, *ss, *sdy, *sdf,
                BW=_pow2(W), BD=BD, num_warps=warps, **flags,
            )
        ))  # fmt: skip
        return dx, dw, db, dstate
    BT, BD, warps = _blocks(_GPU_BWD)
    # pass 1: g = dy * act'(a), a computed once per token; without an activation g is dy, read in place
    g = dy
    if activation is not None:
        g = torch.empty((B, T, D), dtype=cdt_torch, device=x.device)
        BT1, BD1, warps1 = _blocks(_GPU_GRAD)
        if B * T * D > 0:
            k._grad_kernel[(_cdiv(T, BT1), _cdiv(D, BD1), B)](
                x, weight, b, state, dy, g, vl.seq, vl.cu, T, D, *xs, *ws, *ss, *_strides3(dy),
                W=W, HAS_BIAS=bias is not None, HAS_STATE=initial_state is not None, VARLEN=vl.on, CDT=cdt,
                BT=BT1, BD=BD1, ACT=_act_code(activation), num_warps=warps1, enable_fp_fusion=False,
            )  # fmt: skip
    sg = _strides3(g)
    n_t = _cdiv(T, BT)
    part = torch.empty((B * n_t, W + 1, D), dtype=cdt_torch, device=x.device) if need_dw else x
    if B * T * D > 0:
        k._bwd_kernel[(n_t, _cdiv(D, BD), B)](
            x, weight, b, state, g, df, dx, part, vl.seq, vl.cu, T, D, *xs, *ws, *ss, *sg, *sdf,
            HAS_STATE=initial_state is not None, NEED_DW=need_dw, BT=BT, BD=BD, num_warps=warps, **flags,
        )  # fmt: skip
    dw, db = _weight_sums(k, part, weight, bias, B * n_t, BD, warps) if need_dw else (None, None)
    dstate = _state_gradient(vl, weight, initial_state if need_dstate else None, lambda ds: (
        k._dstate_kernel[(vl.N, _cdiv(D, BD))](
            weight, b, g, df, ds, vl.cu, T, D, *ws, *sg, *sdf, BW=_pow2(W), BD=BD, num_warps=warps, **flags,
        )
    ))  # fmt: skip
    return dx, dw, db, dstate


def _state_gradient(
    vl: _Varlen, weight: Tensor, initial_state: Tensor | None, launch: Callable[[Tensor], object]
) -> Tensor | None:
    """d(initial_state) ``[N, D, W]`` in the state's dtype, filled by ``launch`` (None without a state)."""
    if initial_state is None:
        return None
    D, W = weight.shape
    dstate = torch.empty((vl.N, D, W), dtype=initial_state.dtype, device=weight.device)
    if vl.N * D > 0:
        launch(dstate)
    return dstate


def _weight_sums(
    k: ModuleType, part: Tensor, weight: Tensor, bias: Tensor | None, rows: int, BD: int, warps: int
) -> tuple[Tensor, Tensor | None]:
    """dweight and dbias: the tiles' partial sums (``rows`` of them) added in row order. The kernel
    writes every sum (no ``zeros`` first) and one cast serves both where their dtypes agree: two
    small kernels fewer on a GPU (ncu on an H100: 2.3 and 2.8 us of a ~100 us backward)."""
    D, W = weight.shape
    if rows * D == 0:  # no partial rows: every sum is 0
        sums = torch.zeros((W + 1, D), dtype=part.dtype, device=part.device)
    else:
        sums = torch.empty((W + 1, D), dtype=part.dtype, device=part.device)
        k._reduce_kernel[(_cdiv(D, BD), W + 1)](part, sums, rows, D, W=W, BD=BD, num_warps=warps)
    if bias is None or bias.dtype == weight.dtype:
        sums = sums.to(weight.dtype)
        return sums[:W].t(), (sums[W] if bias is not None else None)
    return sums[:W].t().to(weight.dtype), sums[W].to(bias.dtype)


class _CausalConv1d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, initial_state, cu_seqlens, activation, output_final_state):
        vl = _Varlen(x, cu_seqlens)
        y, final = _forward_impl(x, weight, bias, activation, initial_state, output_final_state, vl)
        ctx.save_for_backward(x, weight, bias, initial_state)
        ctx.vl = vl
        ctx.activation = activation
        ctx.set_materialize_grads(False)
        return y, final

    @staticmethod
    def backward(ctx, dy, dfinal):
        x, weight, bias, initial_state = ctx.saved_tensors
        if dy is None:
            dy = torch.zeros_like(x)
        need = ctx.needs_input_grad
        dx, dw, db, dstate = _backward_impl(
            x, weight, bias, ctx.activation, initial_state, ctx.vl, dy, dfinal,
            need_dw=need[1] or need[2], need_dstate=need[3],
        )  # fmt: skip
        return (dx if need[0] else None, dw if need[1] else None, db if need[2] else None,
                dstate if need[3] else None, None, None, None)  # fmt: skip


#: Activations the kernels compute (``ACT`` constexpr), by canonical name. Any other registered
#: activation (:func:`gdn_equiv.model.conv_ops.register_activation`) runs through :func:`_torch_activation`.
ACT_CODES: dict[str | None, int] = {None: 0, "silu": 1, "relu": 2, "relu2": 3}


def _act_code(activation: str | None) -> int:
    return ACT_CODES[canonical_activation(activation)]


def _torch_activation(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    output_final_state: bool,
    cu_seqlens: Tensor | None,
) -> tuple[Tensor, Tensor | None]:
    """A registered activation the kernels have no code for: the kernel computes the pre-activation
    in the compute dtype (operands cast up, so the taps are the same fp32 arithmetic), then the
    registered torch maths runs on it and the result is cast to ``x.dtype``; autograd carries the
    gradient through the torch part. Slower (a compute-dtype round trip), never silently different
    maths: before the registry, any activation other than ``None`` ran as silu here."""
    cdt = compute_dtype(x, weight)
    b = None if bias is None else bias.to(cdt)
    h0 = None if initial_state is None else initial_state.to(cdt)
    a, final = forward(x.to(cdt), weight.to(cdt), b, None, h0, output_final_state, cu_seqlens)
    y = apply_activation(a, activation).to(x.dtype)
    if final is not None:  # the state holds inputs: the cast back is exact
        final = final.to(x.dtype if initial_state is None else initial_state.dtype)
    return y, final


def forward(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    output_final_state: bool,
    cu_seqlens: Tensor | None,
) -> tuple[Tensor, Tensor | None]:
    _check_device(x)
    if canonical_activation(activation) not in ACT_CODES:
        return _torch_activation(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, initial_state))
    if grads:
        return _CausalConv1d.apply(x, weight, bias, initial_state, cu_seqlens, activation, output_final_state)
    return _forward_impl(x, weight, bias, activation, initial_state, output_final_state, _Varlen(x, cu_seqlens))


def update(
    x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None
) -> tuple[Tensor, Tensor]:
    """One step for ``N`` sequences; returns a new state (``state`` is only read)."""
    _check_device(x)
    kernel_act = canonical_activation(activation) in ACT_CODES
    if not kernel_act or (
        torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, state, weight, bias))
    ):
        # differentiable path: the sequence kernel over one token computes the same bits
        y, new_state = forward(x.unsqueeze(1), weight, bias, activation, state, True, None)
        assert new_state is not None
        return y[:, 0], new_state
    N, D = x.shape
    W = weight.shape[1]
    y = torch.empty((N, D), dtype=x.dtype, device=x.device)
    new_state = torch.empty((N, D, W), dtype=state.dtype, device=x.device)
    if N * D > 0:
        b = bias if bias is not None else weight
        _kernels()._update_kernel[(N, _cdiv(D, _STEP_BLOCK_D))](
            x, state, weight, b, y, new_state, D, x.stride(0), x.stride(1), *_strides3(state),
            weight.stride(0), weight.stride(1), b.stride(0),
            W=W, HAS_BIAS=bias is not None, ACT=_act_code(activation), CDT=_tl_dtype(compute_dtype(x, weight)),
            BD=_STEP_BLOCK_D, num_warps=4, enable_fp_fusion=False,
        )  # fmt: skip
    return y, new_state


BACKEND = Backend(
    name="triton",
    forward=forward,
    update=update,
    unavailable=unavailable,
    description="the project's Triton kernels (tiled forward/backward, varlen, step); CUDA or TRITON_INTERPRET=1",
)
