"""Triton kernels of the ``triton`` conv backend; imported only when that backend first runs.

Kept apart from ``triton_backend.py`` because ``@triton.jit`` decides at decoration time whether to
compile or interpret (``TRITON_INTERPRET=1``): importing this module is what commits to one.

Positions are *relative to the sequence start* ``bos``: ``q >= 0`` is the token ``x[bos + q]``,
``-W <= q < 0`` is the history column ``state[seq, :, W + q]`` (column ``W-1`` is the latest input).
A channel's arithmetic never involves another channel, the block shape or ``D``: that is what keeps
the fused prologue (one call over q|k|v) bitwise equal to the separate one (three calls). Every launch
passes ``enable_fp_fusion=False`` so that ``acc + v * w`` is a rounded multiply then a rounded add in
every kernel (the full-sequence and the step kernel give the same bits, and so does torch's CPU sum).
Time reductions (weight/bias gradients) are per-block ``tl.sum`` over a block shape fixed by the
caller, then a sequential sum over blocks in block order: deterministic and independent of ``D``.

Three backwards, all computing ``g = dy * silu'(a)`` with ``_grad_preact``'s operations and summing dx
in ``_grad_input``'s order: the two passes (``_grad_kernel`` writes g in the compute dtype, then
``_bwd_kernel`` and ``_dstate_kernel`` read it, or ``dy`` itself without an activation), the one-pass
``_bwd_onepass_kernel`` (g for a tile and its halo in registers, shifted with ``tl.gather``) and the
serial ``_bwd_serial_kernel`` (rows walked backwards, later rows' g carried in registers; the default
for W <= 4; its rows read in groups, ``ROWS`` loads in flight); the last two take d(initial_state)
from ``_dstate_onepass_kernel``. Two forwards with the same bits: ``_fwd_kernel`` (a tile and its W
shifted copies) and ``_fwd_rows_kernel`` (rows walked forwards, each input row read once, the last
W-1 carried in registers).

Specialisation: the sequence length ``T`` (and ``_reduce_kernel``'s row count ``P``) is
``do_not_specialize``: it only bounds rows (``t < T`` is one value across a row's channels, so it never
limits a load's vector width) and its ``== 1`` / ``% 16`` classes only multiplied the compiled kernels
(a gate run's 306 specialisations under the interpreter, ``tools/specialisations.py``: 292 without them).
``D`` and the strides stay specialised: ``d < D`` and the row offsets ``t * sx_t`` set how wide the
channel loads can be (a ``D`` or stride not known to be a multiple of 16 makes them scalar).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _window(
    x_ptr,
    s_ptr,
    x_base,
    q,
    bos,
    seq,
    d,
    dmask,
    rmask,
    sx_t,
    sx_d,
    ss_n,
    ss_d,
    ss_w,
    W: tl.constexpr,
    HAS_STATE: tl.constexpr,
    CDT: tl.constexpr,
):
    """The conv input at relative position ``q`` (token or history column), 0 where masked or absent."""
    in_x = q >= 0
    v = tl.load(x_ptr + x_base + (bos + q).to(tl.int64) * sx_t + d * sx_d, mask=rmask & in_x & dmask, other=0.0)
    v = v.to(CDT)
    if HAS_STATE:
        h = tl.load(
            s_ptr + seq.to(tl.int64) * ss_n + d * ss_d + (W + q) * ss_w, mask=rmask & (q < 0) & dmask, other=0.0
        )
        v = tl.where(in_x, v, h.to(CDT))
    return v


@triton.jit
def _preact(
    x_ptr,
    s_ptr,
    w_ptr,
    b_ptr,
    x_base,
    p,
    bos,
    seq,
    d,
    dmask,
    rmask,
    sx_t,
    sx_d,
    ss_n,
    ss_d,
    ss_w,
    sw_d,
    sw_w,
    sb_d,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    CDT: tl.constexpr,
):
    """``sum_j w_j * xwin[p - (W-1) + j]`` in the fixed order j = 0..W-1, then ``+ bias``."""
    w = tl.load(w_ptr + d * sw_d, mask=dmask, other=0.0).to(CDT)
    acc = (
        _window(
            x_ptr,
            s_ptr,
            x_base,
            p - (W - 1),
            bos,
            seq,
            d,
            dmask,
            rmask,
            sx_t,
            sx_d,
            ss_n,
            ss_d,
            ss_w,
            W,
            HAS_STATE,
            CDT,
        )
        * w
    )
    for j in tl.static_range(1, W):
        w = tl.load(w_ptr + d * sw_d + j * sw_w, mask=dmask, other=0.0).to(CDT)
        v = _window(
            x_ptr,
            s_ptr,
            x_base,
            p - (W - 1) + j,
            bos,
            seq,
            d,
            dmask,
            rmask,
            sx_t,
            sx_d,
            ss_n,
            ss_d,
            ss_w,
            W,
            HAS_STATE,
            CDT,
        )
        acc = acc + v * w
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + d * sb_d, mask=dmask, other=0.0).to(CDT)
    return acc


@triton.jit
def _exp_neg(a):
    """``exp(-a)`` as ``tl.exp`` computes it on the GPU (``a * -log2(e)`` rounded to fp32, then
    ``ex2.approx``), but with the flush-to-zero ``ex2.approx.ftz`` that ``tl.exp2`` emits: one
    instruction instead of four (no rescaling of inputs below -126). Used only as ``1 + exp(-a)``, where
    the two differ in nothing: a subnormal ``exp(-a)`` (flushed to 0 here) leaves ``1 + e`` at exactly 1,
    so silu and its derivative keep the bits they had with ``tl.exp`` on the GPU (argued from the PTX,
    which has the same multiply constant; on an H100 every forward, dx and dweight of both came out
    bitwise equal, bf16/fp16/fp32, inputs to +-120). Under the interpreter (numpy) fp32 can move by an ulp."""
    return tl.exp2(a * -1.4426950408889634)


@triton.jit
def _activate(a, ACT: tl.constexpr):
    """The activation by code (``ACT_CODES`` in triton_backend: 0 none, 1 silu, 2 relu, 3 relu2), each
    the registered reference maths of :mod:`gdn_equiv.model.conv_ops` spelled the same way: silu as
    ``a / (1 + exp(-a))``, relu as ``where(a < 0, 0, a)`` (NaN and -0.0 kept), relu2 as ``r * r``.
    Shared by the sequence and step kernels."""
    if ACT == 1:
        a = a / (1.0 + _exp_neg(a))
    elif ACT == 2:
        a = tl.where(a < 0, 0.0, a)
    elif ACT == 3:
        a = tl.where(a < 0, 0.0, a)
        a = a * a
    return a


@triton.jit(do_not_specialize=["T"])
def _fwd_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    s_ptr,
    y_ptr,
    seq_ptr,
    cu_ptr,
    T,
    D,
    sx_b,
    sx_t,
    sx_d,
    sw_d,
    sw_w,
    sb_d,
    ss_n,
    ss_d,
    ss_w,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    ACT: tl.constexpr,
    VARLEN: tl.constexpr,
    CDT: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
):
    pid_t = tl.program_id(0)
    pid_d = tl.program_id(1)
    pid_b = tl.program_id(2)
    r = pid_t * BT + tl.arange(0, BT)[:, None]
    d = pid_d * BD + tl.arange(0, BD)[None, :]
    rmask = r < T
    dmask = d < D
    if VARLEN:
        seq = tl.load(seq_ptr + r, mask=rmask, other=0)
        bos = tl.load(cu_ptr + seq, mask=rmask, other=0)
        x_base = 0
    else:
        seq = pid_b
        bos = 0
        x_base = pid_b.to(tl.int64) * sx_b
    a = _preact(
        x_ptr,
        s_ptr,
        w_ptr,
        b_ptr,
        x_base,
        r - bos,
        bos,
        seq,
        d,
        dmask,
        rmask,
        sx_t,
        sx_d,
        ss_n,
        ss_d,
        ss_w,
        sw_d,
        sw_w,
        sb_d,
        W,
        HAS_BIAS,
        HAS_STATE,
        CDT,
    )
    y = _activate(a, ACT)
    y_off = (pid_b.to(tl.int64) * T + r) * D + d
    tl.store(y_ptr + y_off, y.to(y_ptr.dtype.element_ty), mask=rmask & dmask)


@triton.jit
def _carried_taps(
    k0, k1, k2, carry, fresh, x_ptr, s_ptr, x_base, p, bos, seq, d, dmask, sx_t, sx_d, ss_n, ss_d, ss_w,
    J: tl.constexpr, N: tl.constexpr, W: tl.constexpr, HAS_STATE: tl.constexpr, CDT: tl.constexpr,
):  # fmt: skip
    """Taps J, J+1, J+2 of the row at relative position ``p`` (only those below N; the others keep
    ``k``): the neighbouring row's ``k0..k2`` where ``carry`` (a row of the same sequence, read), else
    read as ``_preact`` reads them (history, 0 or tokens; only where ``fresh``). The same values either
    way, so the same bits as reading every tap of every row."""
    v0 = k0
    v1 = k1
    v2 = k2
    if J < N:
        v = _window(x_ptr, s_ptr, x_base, p - (W - 1) + J, bos, seq, d, dmask, fresh, sx_t, sx_d, ss_n, ss_d, ss_w,
                    W, HAS_STATE, CDT)  # fmt: skip
        v0 = tl.where(carry, k0, v)
    if J + 1 < N:
        v = _window(x_ptr, s_ptr, x_base, p - (W - 2) + J, bos, seq, d, dmask, fresh, sx_t, sx_d, ss_n, ss_d, ss_w,
                    W, HAS_STATE, CDT)  # fmt: skip
        v1 = tl.where(carry, k1, v)
    if J + 2 < N:
        v = _window(x_ptr, s_ptr, x_base, p - (W - 3) + J, bos, seq, d, dmask, fresh, sx_t, sx_d, ss_n, ss_d, ss_w,
                    W, HAS_STATE, CDT)  # fmt: skip
        v2 = tl.where(carry, k2, v)
    return v0, v1, v2


@triton.jit
def _rows_in(
    x_ptr, seq_ptr, cu_ptr, x_base, t, T, pid_b, d, dmask, sx_t, sx_d, VARLEN: tl.constexpr, CDT: tl.constexpr
):  # fmt: skip
    """Row ``t``'s loads for ``_fwd_rows_kernel`` (``t`` a vector over the channels, one value): its
    sequence and its own token, the last tap's input (independent of the rows before it)."""
    rmask = t < T
    if VARLEN:
        seq = tl.load(seq_ptr + t, mask=rmask, other=0)
        bos = tl.load(cu_ptr + seq, mask=rmask, other=0)
    else:
        seq = pid_b + tl.zeros_like(t)
        bos = 0
    v = tl.load(x_ptr + x_base + t.to(tl.int64) * sx_t + d * sx_d, mask=rmask & dmask, other=0.0)
    return t, rmask, seq, bos, v.to(CDT)


@triton.jit
def _rows_step(
    row, carried, x_ptr, s_ptr, y_ptr, x_base, pid_b, T, D, d, dmask, w0, w1, w2, w3, bias, sx_t, sx_d, ss_n,
    ss_d, ss_w, W: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_STATE: tl.constexpr, ACT: tl.constexpr,
    VARLEN: tl.constexpr, CDT: tl.constexpr,
):  # fmt: skip
    """One output row of ``_fwd_rows_kernel`` from its loads (``_rows_in``) and the earlier row's taps
    (``carried``): taps 0..W-2 are the earlier row's taps 1..W-1 when both rows are of one sequence,
    else read as ``_preact`` reads them (history or 0 before the sequence); the sum in ``_preact``'s
    order, the activation, y stored. Returns this row's taps 1..W-1 and sequence for the next row."""
    t, rmask, seq, bos, vl = row
    k0, k1, k2, prev_seq, prev_ok = carried
    if VARLEN:  # a sequence may start at any row: check, and read the earlier taps where one does
        p = t - bos
        carry = prev_ok & rmask & (seq == prev_seq)
        fresh = rmask & (carry == 0)
        # taps 0..W-2 (the last tap, the row's own token, is vl): the earlier row's taps 1..W-1, or read
        v0, v1, v2 = _carried_taps(k0, k1, k2, carry, fresh, x_ptr, s_ptr, x_base, p, bos, seq, d, dmask, sx_t,
                                   sx_d, ss_n, ss_d, ss_w, 0, W - 1, W, HAS_STATE, CDT)  # fmt: skip
    else:  # one sequence per program: the kernel read the chunk's first row's earlier taps before the loop
        v0, v1, v2 = k0, k1, k2
    if W == 1:
        a = vl * w0
        n0, n1, n2 = k0, k1, k2
    elif W == 2:
        a = v0 * w0 + vl * w1
        n0, n1, n2 = vl, k1, k2
    elif W == 3:
        a = v0 * w0 + v1 * w1 + vl * w2
        n0, n1, n2 = v1, vl, k2
    else:
        a = v0 * w0 + v1 * w1 + v2 * w2 + vl * w3
        n0, n1, n2 = v1, v2, vl
    if HAS_BIAS:
        a = a + bias
    y = _activate(a, ACT)
    tl.store(y_ptr + (pid_b.to(tl.int64) * T + t) * D + d, y.to(y_ptr.dtype.element_ty), mask=rmask & dmask)
    return n0, n1, n2, seq, rmask


@triton.jit(do_not_specialize=["T"])
def _fwd_rows_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    s_ptr,
    y_ptr,
    seq_ptr,
    cu_ptr,
    T,
    D,
    sx_b,
    sx_t,
    sx_d,
    sw_d,
    sw_w,
    sb_d,
    ss_n,
    ss_d,
    ss_w,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    ACT: tl.constexpr,
    VARLEN: tl.constexpr,
    CDT: tl.constexpr,
    CT: tl.constexpr,
    BD: tl.constexpr,
    ROWS: tl.constexpr,
):
    """``_fwd_kernel``'s output (the same bits) with each input row read once (W <= 4): a program walks
    CT rows of BD channels forwards in groups of ROWS (1, 2, 4 or 8; CT a multiple), all of a group's
    rows read before its first is computed, and carries the last W-1 inputs in registers; only a
    chunk's or a sequence's first row reads its earlier taps (``_window``: history, 0 or tokens).
    Without packed sequences that is the chunk's first row only, read before the loop, so the loop body
    is loads, the sum, the activation and stores: sm_90 SASS at 64x512x4x4, bf16, silu, bias, 26.4
    instructions per output element, from 35.7 with per-row sequence checks and ``tl.exp`` (the tiles
    forward: 35.8; ``tools/sm90_compile.py --sass``)."""
    pid_t = tl.program_id(0)
    pid_d = tl.program_id(1)
    pid_b = tl.program_id(2)
    d = pid_d * BD + tl.arange(0, BD)
    dmask = d < D
    c0 = pid_t * CT
    if VARLEN:
        x_base = 0
    else:
        x_base = pid_b.to(tl.int64) * sx_b
    w0 = _serial_tap(w_ptr, d, dmask, sw_d, sw_w, 0, W, CDT)
    w1 = _serial_tap(w_ptr, d, dmask, sw_d, sw_w, 1, W, CDT)
    w2 = _serial_tap(w_ptr, d, dmask, sw_d, sw_w, 2, W, CDT)
    w3 = _serial_tap(w_ptr, d, dmask, sw_d, sw_w, 3, W, CDT)
    bias = tl.zeros([BD], dtype=CDT)
    if HAS_BIAS:
        bias = tl.load(b_ptr + d * sb_d, mask=dmask, other=0.0).to(CDT)
    k0 = tl.zeros([BD], dtype=CDT)
    k1 = tl.zeros([BD], dtype=CDT)
    k2 = tl.zeros([BD], dtype=CDT)
    prev_seq = tl.full([BD], -1, dtype=tl.int32)
    prev_ok = tl.zeros([BD], dtype=tl.int1)
    if not VARLEN:  # the chunk's first row's earlier taps, read once here; every later row carries them
        first = c0 + tl.zeros([BD], dtype=tl.int32)
        live = first < T
        k0, k1, k2 = _carried_taps(k0, k1, k2, live == 0, live, x_ptr, s_ptr, x_base, first, 0, pid_b, d, dmask,
                                   sx_t, sx_d, ss_n, ss_d, ss_w, 0, W - 1, W, HAS_STATE, CDT)  # fmt: skip
    ins = (x_ptr, seq_ptr, cu_ptr, x_base)
    at = (T, pid_b, d, dmask, sx_t, sx_d)
    ctx = (x_ptr, s_ptr, y_ptr, x_base, pid_b, T, D, d, dmask, w0, w1, w2, w3, bias, sx_t, sx_d, ss_n, ss_d, ss_w)
    for i in tl.range(0, CT, ROWS):
        t = c0 + i + tl.zeros([BD], dtype=tl.int32)
        r0 = _rows_in(*ins, t, *at, VARLEN, CDT)
        if ROWS > 1:
            r1 = _rows_in(*ins, t + 1, *at, VARLEN, CDT)
        if ROWS > 2:
            r2 = _rows_in(*ins, t + 2, *at, VARLEN, CDT)
            r3 = _rows_in(*ins, t + 3, *at, VARLEN, CDT)
        if ROWS > 4:
            r4 = _rows_in(*ins, t + 4, *at, VARLEN, CDT)
            r5 = _rows_in(*ins, t + 5, *at, VARLEN, CDT)
            r6 = _rows_in(*ins, t + 6, *at, VARLEN, CDT)
            r7 = _rows_in(*ins, t + 7, *at, VARLEN, CDT)
        carried = (k0, k1, k2, prev_seq, prev_ok)
        carried = _rows_step(r0, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, VARLEN, CDT)
        if ROWS > 1:
            carried = _rows_step(r1, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, VARLEN, CDT)
        if ROWS > 2:
            carried = _rows_step(r2, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, VARLEN, CDT)
            carried = _rows_step(r3, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, VARLEN, CDT)
        if ROWS > 4:
            carried = _rows_step(r4, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, VARLEN, CDT)
            carried = _rows_step(r5, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, VARLEN, CDT)
            carried = _rows_step(r6, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, VARLEN, CDT)
            carried = _rows_step(r7, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, VARLEN, CDT)
        k0, k1, k2, prev_seq, prev_ok = carried


@triton.jit(do_not_specialize=["T"])
def _final_state_kernel(
    x_ptr,
    s_ptr,
    f_ptr,
    cu_ptr,
    T,
    D,
    sx_b,
    sx_t,
    sx_d,
    ss_n,
    ss_d,
    ss_w,
    W: tl.constexpr,
    HAS_STATE: tl.constexpr,
    VARLEN: tl.constexpr,
    CDT: tl.constexpr,
    BW: tl.constexpr,
    BD: tl.constexpr,
):
    """``final[seq, :, f]`` = window index ``L + f`` of cat(state, x): the last W inputs of the sequence."""
    seq = tl.program_id(0)
    pid_d = tl.program_id(1)
    f = tl.arange(0, BW)[:, None]
    d = pid_d * BD + tl.arange(0, BD)[None, :]
    dmask = d < D
    if VARLEN:
        bos = tl.load(cu_ptr + seq)
        L = tl.load(cu_ptr + seq + 1) - bos
        x_base = 0
    else:
        bos = 0
        L = T
        x_base = seq.to(tl.int64) * sx_b
    v = _window(
        x_ptr, s_ptr, x_base, L + f - W, bos, seq, d, dmask, f < W, sx_t, sx_d, ss_n, ss_d, ss_w, W, HAS_STATE, CDT
    )
    tl.store(f_ptr + (seq.to(tl.int64) * D + d) * W + f, v.to(f_ptr.dtype.element_ty), mask=(f < W) & dmask)


@triton.jit
def _act_grad(g, a, ACT: tl.constexpr):
    """``g * act'(a)``. silu: ``g * (sig * (1 + a * (1 - sig)))`` with ``sig = 1 / (1 + exp(-a))``;
    relu: ``where(a < 0, 0, g)``; relu2: ``where(a < 0, 0, t + t)`` with ``t = g * relu(a)``, the bits
    torch's autograd gives for ``r * r`` (``g * r`` to each factor, summed)."""
    if ACT == 1:
        sig = 1.0 / (1.0 + _exp_neg(a))
        g = g * (sig * (1.0 + a * (1.0 - sig)))
    elif ACT == 2:
        g = tl.where(a < 0, 0.0, g)
    elif ACT == 3:
        t = g * tl.where(a < 0, 0.0, a)
        g = tl.where(a < 0, 0.0, t + t)
    return g


@triton.jit
def _grad_preact(
    x_ptr,
    s_ptr,
    w_ptr,
    b_ptr,
    dy_ptr,
    x_base,
    dy_base,
    r,
    bos,
    L,
    seq,
    d,
    dmask,
    rmask,
    sx_t,
    sx_d,
    ss_n,
    ss_d,
    ss_w,
    sw_d,
    sw_w,
    sb_d,
    sdy_t,
    sdy_d,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    CDT: tl.constexpr,
    ACT: tl.constexpr,
):
    """``g_r = dy_r * act'(a_r)`` at relative rows ``r`` (0 outside ``[0, L)``), ``a_r`` from ``_preact``."""
    gmask = rmask & (r >= 0) & (r < L)
    g = tl.load(dy_ptr + dy_base + (bos + r).to(tl.int64) * sdy_t + d * sdy_d, mask=gmask & dmask, other=0.0)
    a = _preact(
        x_ptr,
        s_ptr,
        w_ptr,
        b_ptr,
        x_base,
        r,
        bos,
        seq,
        d,
        dmask,
        gmask,
        sx_t,
        sx_d,
        ss_n,
        ss_d,
        ss_w,
        sw_d,
        sw_w,
        sb_d,
        W,
        HAS_BIAS,
        HAS_STATE,
        CDT,
    )
    return _act_grad(g.to(CDT), a, ACT)


@triton.jit
def _grad_outside(
    w_ptr,
    b_ptr,
    d,
    dmask,
    sw_d,
    sw_w,
    sb_d,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    CDT: tl.constexpr,
):
    """``g`` at a row outside its sequence, per channel: ``_grad_preact`` there, where every load is 0.

    ``+0 * silu'(0*w_0 + ... + 0*w_{W-1} + bias)``: +0, but -0 where silu'(bias) < 0 and NaN where a tap
    or the bias is not finite. Rather than a plain 0, so that dx, dweight and dbias keep the bits (signed
    zeros and NaNs included) of recomputing ``g`` at every shift, masked rows and all: the one-pass form.
    """
    w = tl.load(w_ptr + d * sw_d, mask=dmask, other=0.0).to(CDT)
    zero = tl.zeros_like(w)
    g = zero
    if ACT:
        a = zero * w
        for j in tl.static_range(1, W):
            w = tl.load(w_ptr + d * sw_d + j * sw_w, mask=dmask, other=0.0).to(CDT)
            a = a + zero * w
        if HAS_BIAS:
            a = a + tl.load(b_ptr + d * sb_d, mask=dmask, other=0.0).to(CDT)
        g = _act_grad(g, a, ACT)
    return g


@triton.jit(do_not_specialize=["T"])
def _grad_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    s_ptr,
    dy_ptr,
    g_ptr,
    seq_ptr,
    cu_ptr,
    T,
    D,
    sx_b,
    sx_t,
    sx_d,
    sw_d,
    sw_w,
    sb_d,
    ss_n,
    ss_d,
    ss_w,
    sdy_b,
    sdy_t,
    sdy_d,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    VARLEN: tl.constexpr,
    CDT: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    ACT: tl.constexpr,
):
    """Backward pass 1 (with an activation): ``g = dy * act'(a)`` for every token, into ``g [B, T, D]`` (CDT)."""
    pid_t = tl.program_id(0)
    pid_d = tl.program_id(1)
    pid_b = tl.program_id(2)
    r = pid_t * BT + tl.arange(0, BT)[:, None]
    d = pid_d * BD + tl.arange(0, BD)[None, :]
    rmask = r < T
    dmask = d < D
    if VARLEN:
        seq = tl.load(seq_ptr + r, mask=rmask, other=0)
        bos = tl.load(cu_ptr + seq, mask=rmask, other=0)
        L = tl.load(cu_ptr + seq + 1, mask=rmask, other=0) - bos
        x_base = 0
        dy_base = 0
    else:
        seq = pid_b
        bos = 0
        L = T
        x_base = pid_b.to(tl.int64) * sx_b
        dy_base = pid_b.to(tl.int64) * sdy_b
    g = _grad_preact(
        x_ptr,
        s_ptr,
        w_ptr,
        b_ptr,
        dy_ptr,
        x_base,
        dy_base,
        r - bos,
        bos,
        L,
        seq,
        d,
        dmask,
        rmask,
        sx_t,
        sx_d,
        ss_n,
        ss_d,
        ss_w,
        sw_d,
        sw_w,
        sb_d,
        sdy_t,
        sdy_d,
        W,
        HAS_BIAS,
        HAS_STATE,
        CDT,
        ACT,
    )
    tl.store(g_ptr + (pid_b.to(tl.int64) * T + r) * D + d, g, mask=rmask & dmask)


@triton.jit
def _grad_at(g_ptr, g_base, q, bos, L, d, dmask, rmask, sg_t, sg_d, z, CDT: tl.constexpr):
    """``g`` at relative rows ``q``: pass 1's (or ``dy`` without an activation) inside ``[0, L)``, ``z`` outside."""
    inside = rmask & (q >= 0) & (q < L)
    g = tl.load(g_ptr + g_base + (bos + q).to(tl.int64) * sg_t + d * sg_d, mask=inside & dmask, other=0.0)
    return tl.where(inside, g.to(CDT), z)


@triton.jit
def _grad_input(
    g_ptr,
    w_ptr,
    df_ptr,
    g_base,
    p,
    bos,
    L,
    seq,
    d,
    dmask,
    rmask,
    z,
    sg_t,
    sg_d,
    sw_d,
    sw_w,
    sdf_n,
    sdf_d,
    sdf_w,
    W: tl.constexpr,
    HAS_DF: tl.constexpr,
    CDT: tl.constexpr,
):
    """Gradient of the conv input at relative position ``p`` (a token, or a history column when p < 0).

    ``xwin[p]`` feeds outputs ``p + k`` through tap ``W-1-k``; summed k = 0..W-1, then the final-state
    gradient for the column it lands in (``W + p - L``). Returns ``(dx, g_p)``.
    """
    g0 = _grad_at(g_ptr, g_base, p, bos, L, d, dmask, rmask, sg_t, sg_d, z, CDT)
    dx = g0 * tl.load(w_ptr + d * sw_d + (W - 1) * sw_w, mask=dmask, other=0.0).to(CDT)
    for k in tl.static_range(1, W):
        g = _grad_at(g_ptr, g_base, p + k, bos, L, d, dmask, rmask, sg_t, sg_d, z, CDT)
        dx = dx + g * tl.load(w_ptr + d * sw_d + (W - 1 - k) * sw_w, mask=dmask, other=0.0).to(CDT)
    if HAS_DF:
        dx = dx + _final_grad(df_ptr, p, L, seq, d, dmask, rmask, sdf_n, sdf_d, sdf_w, W, CDT)
    return dx, g0


@triton.jit
def _final_grad(df_ptr, p, L, seq, d, dmask, rmask, sdf_n, sdf_d, sdf_w, W: tl.constexpr, CDT: tl.constexpr):
    """The final-state gradient reaching the input at relative position ``p``: column ``W + p - L``, 0 elsewhere."""
    col = W + p - L
    df = tl.load(
        df_ptr + seq.to(tl.int64) * sdf_n + d * sdf_d + col * sdf_w,
        mask=rmask & (col >= 0) & (col < W) & dmask,
        other=0.0,
    )
    return df.to(CDT)


@triton.jit(do_not_specialize=["T"])
def _bwd_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    s_ptr,
    g_ptr,
    df_ptr,
    dx_ptr,
    part_ptr,
    seq_ptr,
    cu_ptr,
    T,
    D,
    sx_b,
    sx_t,
    sx_d,
    sw_d,
    sw_w,
    sb_d,
    ss_n,
    ss_d,
    ss_w,
    sg_b,
    sg_t,
    sg_d,
    sdf_n,
    sdf_d,
    sdf_w,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    ACT: tl.constexpr,
    HAS_DF: tl.constexpr,
    VARLEN: tl.constexpr,
    NEED_DW: tl.constexpr,
    CDT: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
):
    """Backward pass 2: dx for a (time block x channel block) tile from ``g``, and the tile's dweight/dbias sums."""
    pid_t = tl.program_id(0)
    pid_d = tl.program_id(1)
    pid_b = tl.program_id(2)
    r = pid_t * BT + tl.arange(0, BT)[:, None]
    d1 = pid_d * BD + tl.arange(0, BD)
    d = d1[None, :]
    rmask = r < T
    dmask = d < D
    if VARLEN:
        seq = tl.load(seq_ptr + r, mask=rmask, other=0)
        bos = tl.load(cu_ptr + seq, mask=rmask, other=0)
        L = tl.load(cu_ptr + seq + 1, mask=rmask, other=0) - bos
        x_base = 0
        g_base = 0
    else:
        seq = pid_b
        bos = 0
        L = T
        x_base = pid_b.to(tl.int64) * sx_b
        g_base = pid_b.to(tl.int64) * sg_b
    p = r - bos
    z = _grad_outside(w_ptr, b_ptr, d, dmask, sw_d, sw_w, sb_d, W, HAS_BIAS, ACT, CDT)
    dx, g = _grad_input(
        g_ptr,
        w_ptr,
        df_ptr,
        g_base,
        p,
        bos,
        L,
        seq,
        d,
        dmask,
        rmask,
        z,
        sg_t,
        sg_d,
        sw_d,
        sw_w,
        sdf_n,
        sdf_d,
        sdf_w,
        W,
        HAS_DF,
        CDT,
    )
    tl.store(dx_ptr + (pid_b.to(tl.int64) * T + r) * D + d, dx.to(dx_ptr.dtype.element_ty), mask=rmask & dmask)
    if NEED_DW:
        prow = pid_b * tl.num_programs(0) + pid_t
        _tile_sums(
            x_ptr, s_ptr, part_ptr, prow, g, x_base, p, bos, seq, d, d1, dmask, rmask, D,
            sx_t, sx_d, ss_n, ss_d, ss_w, W, HAS_STATE, CDT,
        )  # fmt: skip


@triton.jit
def _tile_sums(
    x_ptr,
    s_ptr,
    part_ptr,
    prow,
    g,
    x_base,
    p,
    bos,
    seq,
    d,
    d1,
    dmask,
    rmask,
    D,
    sx_t,
    sx_d,
    ss_n,
    ss_d,
    ss_w,
    W: tl.constexpr,
    HAS_STATE: tl.constexpr,
    CDT: tl.constexpr,
):
    """A tile's dweight (``sum_rows g * xwin[p - (W-1) + j]``, each tap j) and dbias (``sum_rows g``) into
    row ``prow`` of the partial sums, which ``_reduce_kernel`` adds in row order."""
    base = part_ptr + prow.to(tl.int64) * (W + 1) * D
    for j in tl.static_range(W):
        v = _window(
            x_ptr, s_ptr, x_base, p - (W - 1) + j, bos, seq, d, dmask, rmask, sx_t, sx_d, ss_n, ss_d, ss_w, W,
            HAS_STATE, CDT,
        )  # fmt: skip
        tl.store(base + j * D + d1, tl.sum(g * v, axis=0), mask=d1 < D)
    tl.store(base + W * D + d1, tl.sum(g, axis=0), mask=d1 < D)


@triton.jit(do_not_specialize=["T"])
def _bwd_onepass_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    s_ptr,
    dy_ptr,
    df_ptr,
    dx_ptr,
    part_ptr,
    seq_ptr,
    cu_ptr,
    T,
    D,
    sx_b,
    sx_t,
    sx_d,
    sw_d,
    sw_w,
    sb_d,
    ss_n,
    ss_d,
    ss_w,
    sdy_b,
    sdy_t,
    sdy_d,
    sdf_n,
    sdf_d,
    sdf_w,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    ACT: tl.constexpr,
    HAS_DF: tl.constexpr,
    VARLEN: tl.constexpr,
    NEED_DW: tl.constexpr,
    CDT: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    HB: tl.constexpr,
):
    """The backward in one pass (no ``g`` through memory): ``g = dy * act'(a)`` recomputed in registers
    for the tile's BT rows and for a halo of the HB >= W-1 rows after it, shifted to each tap with
    ``tl.gather``; then dx and the tile's dweight/dbias sums exactly as pass 2 forms them. Each ``g`` is
    ``_grad_preact``'s, as pass 1 writes it, and rows outside the row's own sequence read ``z``, as
    ``_grad_at`` does: the same bits as the two passes for the same tile shape."""
    pid_t = tl.program_id(0)
    pid_d = tl.program_id(1)
    pid_b = tl.program_id(2)
    i = tl.arange(0, BT)[:, None]
    r = pid_t * BT + i
    rh = pid_t * BT + BT + tl.arange(0, HB)[:, None]
    d1 = pid_d * BD + tl.arange(0, BD)
    d = d1[None, :]
    rmask = r < T
    hmask = rh < T
    dmask = d < D
    if VARLEN:
        seq = tl.load(seq_ptr + r, mask=rmask, other=0)
        bos = tl.load(cu_ptr + seq, mask=rmask, other=0)
        L = tl.load(cu_ptr + seq + 1, mask=rmask, other=0) - bos
        seq_h = tl.load(seq_ptr + rh, mask=hmask, other=0)
        bos_h = tl.load(cu_ptr + seq_h, mask=hmask, other=0)
        L_h = tl.load(cu_ptr + seq_h + 1, mask=hmask, other=0) - bos_h
        x_base = 0
        dy_base = 0
    else:
        seq = pid_b
        bos = 0
        L = T
        seq_h = pid_b
        bos_h = 0
        L_h = T
        x_base = pid_b.to(tl.int64) * sx_b
        dy_base = pid_b.to(tl.int64) * sdy_b
    p = r - bos
    g = _grad_preact(
        x_ptr, s_ptr, w_ptr, b_ptr, dy_ptr, x_base, dy_base, p, bos, L, seq, d, dmask, rmask, sx_t, sx_d,
        ss_n, ss_d, ss_w, sw_d, sw_w, sb_d, sdy_t, sdy_d, W, HAS_BIAS, HAS_STATE, CDT, ACT,
    )  # fmt: skip
    dx = g * tl.load(w_ptr + d * sw_d + (W - 1) * sw_w, mask=dmask, other=0.0).to(CDT)
    if W > 1:
        gh = _grad_preact(
            x_ptr, s_ptr, w_ptr, b_ptr, dy_ptr, x_base, dy_base, rh - bos_h, bos_h, L_h, seq_h, d, dmask, hmask,
            sx_t, sx_d, ss_n, ss_d, ss_w, sw_d, sw_w, sb_d, sdy_t, sdy_d, W, HAS_BIAS, HAS_STATE, CDT, ACT,
        )  # fmt: skip
        z = _grad_outside(w_ptr, b_ptr, d, dmask, sw_d, sw_w, sb_d, W, HAS_BIAS, ACT, CDT)
        at = i + tl.zeros([BT, BD], dtype=tl.int32)
        for k in tl.static_range(1, W):
            shifted = tl.where(
                at + k < BT,
                tl.gather(g, tl.minimum(at + k, BT - 1), 0),
                tl.gather(gh, tl.minimum(tl.maximum(at + k - BT, 0), HB - 1), 0),
            )
            gk = tl.where(rmask & (p + k < L), shifted, z)
            dx = dx + gk * tl.load(w_ptr + d * sw_d + (W - 1 - k) * sw_w, mask=dmask, other=0.0).to(CDT)
    if HAS_DF:
        dx = dx + _final_grad(df_ptr, p, L, seq, d, dmask, rmask, sdf_n, sdf_d, sdf_w, W, CDT)
    tl.store(dx_ptr + (pid_b.to(tl.int64) * T + r) * D + d, dx.to(dx_ptr.dtype.element_ty), mask=rmask & dmask)
    if NEED_DW:
        prow = pid_b * tl.num_programs(0) + pid_t
        _tile_sums(
            x_ptr, s_ptr, part_ptr, prow, g, x_base, p, bos, seq, d, d1, dmask, rmask, D,
            sx_t, sx_d, ss_n, ss_d, ss_w, W, HAS_STATE, CDT,
        )  # fmt: skip


@triton.jit
def _serial_pick(w0, w1, w2, w3, j: tl.constexpr):
    """Tap ``j``'s weight from the four loaded before the row loop (``_serial_tap``: 0 past W)."""
    if j == 0:
        w = w0
    elif j == 1:
        w = w1
    elif j == 2:
        w = w2
    else:
        w = w3
    return w


@triton.jit
def _serial_tap(w_ptr, d, dmask, sw_d, sw_w, j: tl.constexpr, W: tl.constexpr, CDT: tl.constexpr):
    """Tap ``j``'s weight per channel (0 for a tap the kernel does not have)."""
    if j < W:
        w = tl.load(w_ptr + d * sw_d + j * sw_w, mask=dmask, other=0.0).to(CDT)
    else:
        w = tl.zeros_like(d).to(CDT)
    return w


@triton.jit
def _serial_in(
    x_ptr, s_ptr, dy_ptr, seq_ptr, cu_ptr, x_base, dy_base, t, hi, T, pid_b, d, dmask, sx_t, sx_d, ss_n, ss_d,
    ss_w, sdy_t, sdy_d, W: tl.constexpr, HAS_STATE: tl.constexpr, VARLEN: tl.constexpr, CDT: tl.constexpr,
):  # fmt: skip
    """Row ``t``'s loads for the serial backward (``t`` a vector over the channels, one value: the
    interpreter cannot mask with a scalar), all of them independent of the carried values, so that a
    group's rows are read together: its sequence, ``dy`` and tap 0's input. Rows at or past ``hi``
    (past the chunk's W-1 row halo) or ``T`` read nothing."""
    rmask = (t < T) & (t < hi)
    if VARLEN:
        seq = tl.load(seq_ptr + t, mask=rmask, other=0)
        bos = tl.load(cu_ptr + seq, mask=rmask, other=0)
        L = tl.load(cu_ptr + seq + 1, mask=rmask, other=0) - bos
    else:
        seq = pid_b + tl.zeros_like(t)
        bos = 0
        L = T
    p = t - bos
    gmask = rmask & (p >= 0) & (p < L)
    dy = tl.load(dy_ptr + dy_base + (bos + p).to(tl.int64) * sdy_t + d * sdy_d, mask=gmask & dmask, other=0.0)
    v0 = _window(x_ptr, s_ptr, x_base, p - (W - 1), bos, seq, d, dmask, gmask, sx_t, sx_d, ss_n, ss_d, ss_w, W,
                 HAS_STATE, CDT)  # fmt: skip
    return t, rmask, seq, bos, L, p, gmask, dy, v0


@triton.jit
def _serial_step(
    row, carried, c0, end, x_ptr, s_ptr, df_ptr, dx_ptr, x_base, pid_b, T, D, d, dmask, w0, w1, w2, w3, wl1, wl2,
    wl3, bias, z, sx_t, sx_d, ss_n, ss_d, ss_w, sdf_n, sdf_d, sdf_w, W: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr, ACT: tl.constexpr, HAS_DF: tl.constexpr, NEED_DW: tl.constexpr, VARLEN: tl.constexpr,
    CDT: tl.constexpr,
):  # fmt: skip
    """One row of the serial backward from its loads (``_serial_in``) and what the later row left
    (``carried``): g, dx (stored), the dweight/dbias sums; returns what the earlier row needs.
    ``wl1..wl3`` are taps W-1, W-2, W-3 (dx's weights). Few nested calls: under the interpreter each
    one costs more than the row's arithmetic."""
    t, rmask, seq, bos, L, p, gmask, dy, v0 = row
    g1, g2, g3, u0, u1, u2, prev_seq, prev_ok, a0, a1, a2, a3, ab, k0, k1, k2, k3, kb = carried
    if VARLEN:
        carry = prev_ok & gmask & (seq == prev_seq)
        fresh = gmask & (carry == 0)
        # the later row's window, carried: row t-1's tap j input is row t's tap j-1 input when both rows
        # are of one sequence and row t was read, so only tap 0 is read from memory (the others' loads
        # are masked off). A tap the kernel does not have keeps any value: its sum is never stored
        v1, v2, v3 = _carried_taps(u0, u1, u2, carry, fresh, x_ptr, s_ptr, x_base, p, bos, seq, d, dmask, sx_t,
                                   sx_d, ss_n, ss_d, ss_w, 1, W, W, HAS_STATE, CDT)  # fmt: skip
    else:  # one sequence: the walk's first row read its taps before the loop, every later row carries
        v1, v2, v3 = u0, u1, u2
    # the pre-activation in _preact's order: tap 0, then + each later tap, then + bias
    a = v0 * w0
    if W > 1:
        a = a + v1 * w1
    if W > 2:
        a = a + v2 * w2
    if W > 3:
        a = a + v3 * w3
    if HAS_BIAS:
        a = a + bias
    g = _act_grad(dy.to(CDT), a, ACT)
    mine = rmask & (t >= c0) & (t < end)  # a row of this chunk (not its halo)
    # dx in _grad_input's order: g(p) * w[W-1], + g(p+k) * w[W-1-k], z past the sequence's end
    h1 = g1
    h2 = g2
    h3 = g3
    if VARLEN:  # without packed sequences the walk starts with z carried as the rows past the end's g
        h1 = tl.where(p + 1 < L, g1, z)
        h2 = tl.where(p + 2 < L, g2, z)
        h3 = tl.where(p + 3 < L, g3, z)
    dx = g * wl1
    if W > 1:
        dx = dx + h1 * wl2
    if W > 2:
        dx = dx + h2 * wl3
    if W > 3:
        dx = dx + h3 * w0
    if HAS_DF:
        dx = dx + _final_grad(df_ptr, p, L, seq, d, dmask, mine, sdf_n, sdf_d, sdf_w, W, CDT)
    dx_at = dx_ptr + (pid_b.to(tl.int64) * T + t) * D + d
    tl.store(dx_at, dx.to(dx_ptr.dtype.element_ty), mask=mine & dmask)
    if NEED_DW:  # compensated (Kahan) sums: k holds what the last add lost, taken off the next term; a sum
        # past the largest finite value keeps k at 0 (inf - inf would make every later sum NaN, not inf)
        y0 = g * v0 - k0
        y1 = g * v1 - k1
        y2 = g * v2 - k2
        y3 = g * v3 - k3
        yb = g - kb
        s0 = a0 + y0
        s1 = a1 + y1
        s2 = a2 + y2
        s3 = a3 + y3
        sb = ab + yb
        k0 = tl.where(mine, tl.where(s0 - s0 == 0, (s0 - a0) - y0, 0.0), k0)
        k1 = tl.where(mine, tl.where(s1 - s1 == 0, (s1 - a1) - y1, 0.0), k1)
        k2 = tl.where(mine, tl.where(s2 - s2 == 0, (s2 - a2) - y2, 0.0), k2)
        k3 = tl.where(mine, tl.where(s3 - s3 == 0, (s3 - a3) - y3, 0.0), k3)
        kb = tl.where(mine, tl.where(sb - sb == 0, (sb - ab) - yb, 0.0), kb)
        a0 = tl.where(mine, s0, a0)
        a1 = tl.where(mine, s1, a1)
        a2 = tl.where(mine, s2, a2)
        a3 = tl.where(mine, s3, a3)
        ab = tl.where(mine, sb, ab)
    return g, g1, g2, v0, v1, v2, seq, gmask, a0, a1, a2, a3, ab, k0, k1, k2, k3, kb


@triton.jit(do_not_specialize=["T"])
def _bwd_serial_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    s_ptr,
    dy_ptr,
    df_ptr,
    dx_ptr,
    part_ptr,
    seq_ptr,
    cu_ptr,
    T,
    D,
    sx_b,
    sx_t,
    sx_d,
    sw_d,
    sw_w,
    sb_d,
    ss_n,
    ss_d,
    ss_w,
    sdy_b,
    sdy_t,
    sdy_d,
    sdf_n,
    sdf_d,
    sdf_w,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    ACT: tl.constexpr,
    HAS_DF: tl.constexpr,
    VARLEN: tl.constexpr,
    NEED_DW: tl.constexpr,
    CDT: tl.constexpr,
    CT: tl.constexpr,
    BD: tl.constexpr,
    STAGES: tl.constexpr,
    ROWS: tl.constexpr,
):
    """The backward walking time backwards, one row at a time, for a chunk of CT rows and BD channels
    (W <= 4): ``g`` of each row recomputed as pass 1 forms it, the W-1 later rows' ``g`` carried in
    registers (``g1..g3``), so no shift ever crosses threads. dx as ``_grad_input`` sums it (same order,
    ``z`` outside the row's sequence); dweight/dbias summed row by row (latest row first) per chunk, each
    sum compensated (Kahan: a chunk of 128 rows summed plainly lost up to 8x torch's error against the
    fp64 truth on the H100, T=262), then the chunks in order: other bits than the two passes' sums, still
    per channel only.

    The rows go in groups of ROWS (1, 2, 4 or 8): a group's loads (``_serial_in``) are all issued
    before its first row is computed and stored, so ROWS rows' reads are in flight together (one row's
    at a time leaves the loop waiting on memory latency). The chunk's W-1 halo rows round up to whole
    groups; the rows past the halo read nothing. ROWS changes no bit: each row's arithmetic is the same.
    Without packed sequences the walk starts at the halo's (or the sequence's) last row, whose taps
    1..W-1 are read before the loop, and every later row carries them: no per-row sequence checks or
    masked tap loads, and z is carried in as the g past the sequence's end, so dx needs no selects
    (sm_90 SASS at 64x512x4x1x4: 55.1 instructions per element, from 67.1)."""
    pid_t = tl.program_id(0)
    pid_d = tl.program_id(1)
    pid_b = tl.program_id(2)
    d = pid_d * BD + tl.arange(0, BD)
    dmask = d < D
    c0 = pid_t * CT
    end = tl.minimum(c0 + CT, T)
    hi = c0 + CT + W - 1  # the halo's end: rows past it read nothing
    if VARLEN:
        x_base = 0
        dy_base = 0
    else:
        x_base = pid_b.to(tl.int64) * sx_b
        dy_base = pid_b.to(tl.int64) * sdy_b
    w0 = _serial_tap(w_ptr, d, dmask, sw_d, sw_w, 0, W, CDT)
    w1 = _serial_tap(w_ptr, d, dmask, sw_d, sw_w, 1, W, CDT)
    w2 = _serial_tap(w_ptr, d, dmask, sw_d, sw_w, 2, W, CDT)
    w3 = _serial_tap(w_ptr, d, dmask, sw_d, sw_w, 3, W, CDT)
    bias = tl.zeros([BD], dtype=CDT)
    if HAS_BIAS:
        bias = tl.load(b_ptr + d * sb_d, mask=dmask, other=0.0).to(CDT)
    z = _grad_outside(w_ptr, b_ptr, d, dmask, sw_d, sw_w, sb_d, W, HAS_BIAS, ACT, CDT)
    # one tl.zeros per loop-carried value: the H200 build gave a wrong dx wherever the farthest carried g
    # was read when all started as one tensor (the interpreter did not); distinct values compile right
    g1 = tl.zeros([BD], dtype=CDT)
    g2 = tl.zeros([BD], dtype=CDT)
    g3 = tl.zeros([BD], dtype=CDT)
    a0 = tl.zeros([BD], dtype=CDT)
    a1 = tl.zeros([BD], dtype=CDT)
    a2 = tl.zeros([BD], dtype=CDT)
    a3 = tl.zeros([BD], dtype=CDT)
    ab = tl.zeros([BD], dtype=CDT)
    k0 = tl.zeros([BD], dtype=CDT)
    k1 = tl.zeros([BD], dtype=CDT)
    k2 = tl.zeros([BD], dtype=CDT)
    k3 = tl.zeros([BD], dtype=CDT)
    kb = tl.zeros([BD], dtype=CDT)
    u0 = tl.zeros([BD], dtype=CDT)
    u1 = tl.zeros([BD], dtype=CDT)
    u2 = tl.zeros([BD], dtype=CDT)
    prev_seq = tl.full([BD], -1, dtype=tl.int32)
    prev_ok = tl.zeros([BD], dtype=tl.int1)
    # the runtime arguments of every row's two calls (the constexprs are passed on their own)
    ins = (x_ptr, s_ptr, dy_ptr, seq_ptr, cu_ptr, x_base, dy_base)
    at = (hi, T, pid_b, d, dmask, sx_t, sx_d, ss_n, ss_d, ss_w, sdy_t, sdy_d)
    wl1 = _serial_pick(w0, w1, w2, w3, W - 1)  # dx's taps, in _grad_input's order
    wl2 = _serial_pick(w0, w1, w2, w3, W - 2)
    wl3 = _serial_pick(w0, w1, w2, w3, W - 3)
    ctx = (c0, end, x_ptr, s_ptr, df_ptr, dx_ptr, x_base, pid_b, T, D, d, dmask, w0, w1, w2, w3, wl1, wl2, wl3,
           bias, z, sx_t, sx_d, ss_n, ss_d, ss_w, sdf_n, sdf_d, sdf_w)  # fmt: skip
    if VARLEN:  # the chunk and its halo in whole groups, from the top (rows past the halo read nothing)
        rows = ((CT + W - 2) // ROWS + 1) * ROWS
        top = c0 + rows - 1
    else:  # from the halo's (or the sequence's) last row down to the chunk's first, in whole groups: the
        # rows below c0 that the last group reaches are not this chunk's (no dx, no sums) and those below
        # 0 read nothing. The first row's taps 1..W-1 are read here, once; every later row carries them.
        # The g carried into the first row is z (one value each, as above): right for the sequence's last
        # rows, and the halo's rows (where it is not) store no dx
        g1 = _grad_outside(w_ptr, b_ptr, d, dmask, sw_d, sw_w, sb_d, W, HAS_BIAS, ACT, CDT)
        g2 = _grad_outside(w_ptr, b_ptr, d, dmask, sw_d, sw_w, sb_d, W, HAS_BIAS, ACT, CDT)
        g3 = _grad_outside(w_ptr, b_ptr, d, dmask, sw_d, sw_w, sb_d, W, HAS_BIAS, ACT, CDT)
        top = tl.minimum(hi, T) - 1
        rows = top - c0 + 1
        first = top + tl.zeros([BD], dtype=tl.int32)
        u0, u1, u2 = _carried_taps(u0, u1, u2, first < 0, first >= 0, x_ptr, s_ptr, x_base, first, 0, pid_b, d, dmask,
                                   sx_t, sx_d, ss_n, ss_d, ss_w, 1, W, W, HAS_STATE, CDT)  # fmt: skip
    for i in tl.range(0, rows, ROWS, num_stages=STAGES):
        t = top - i + tl.zeros([BD], dtype=tl.int32)
        r0 = _serial_in(*ins, t, *at, W, HAS_STATE, VARLEN, CDT)
        if ROWS > 1:
            r1 = _serial_in(*ins, t - 1, *at, W, HAS_STATE, VARLEN, CDT)
        if ROWS > 2:
            r2 = _serial_in(*ins, t - 2, *at, W, HAS_STATE, VARLEN, CDT)
            r3 = _serial_in(*ins, t - 3, *at, W, HAS_STATE, VARLEN, CDT)
        if ROWS > 4:
            r4 = _serial_in(*ins, t - 4, *at, W, HAS_STATE, VARLEN, CDT)
            r5 = _serial_in(*ins, t - 5, *at, W, HAS_STATE, VARLEN, CDT)
            r6 = _serial_in(*ins, t - 6, *at, W, HAS_STATE, VARLEN, CDT)
            r7 = _serial_in(*ins, t - 7, *at, W, HAS_STATE, VARLEN, CDT)
        carried = (g1, g2, g3, u0, u1, u2, prev_seq, prev_ok, a0, a1, a2, a3, ab, k0, k1, k2, k3, kb)
        carried = _serial_step(r0, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, HAS_DF, NEED_DW, VARLEN, CDT)
        if ROWS > 1:
            carried = _serial_step(r1, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, HAS_DF, NEED_DW, VARLEN, CDT)
        if ROWS > 2:
            carried = _serial_step(r2, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, HAS_DF, NEED_DW, VARLEN, CDT)
            carried = _serial_step(r3, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, HAS_DF, NEED_DW, VARLEN, CDT)
        if ROWS > 4:
            carried = _serial_step(r4, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, HAS_DF, NEED_DW, VARLEN, CDT)
            carried = _serial_step(r5, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, HAS_DF, NEED_DW, VARLEN, CDT)
            carried = _serial_step(r6, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, HAS_DF, NEED_DW, VARLEN, CDT)
            carried = _serial_step(r7, carried, *ctx, W, HAS_BIAS, HAS_STATE, ACT, HAS_DF, NEED_DW, VARLEN, CDT)
        g1, g2, g3, u0, u1, u2, prev_seq, prev_ok, a0, a1, a2, a3, ab, k0, k1, k2, k3, kb = carried
    if NEED_DW:
        prow = pid_b * tl.num_programs(0) + pid_t
        base = part_ptr + prow.to(tl.int64) * (W + 1) * D
        tl.store(base + d, a0 - k0, mask=dmask)
        if W > 1:
            tl.store(base + D + d, a1 - k1, mask=dmask)
        if W > 2:
            tl.store(base + 2 * D + d, a2 - k2, mask=dmask)
        if W > 3:
            tl.store(base + 3 * D + d, a3 - k3, mask=dmask)
        tl.store(base + W * D + d, ab - kb, mask=dmask)


@triton.jit(do_not_specialize=["T"])
def _dstate_onepass_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    s_ptr,
    dy_ptr,
    df_ptr,
    ds_ptr,
    cu_ptr,
    T,
    D,
    sx_b,
    sx_t,
    sx_d,
    sw_d,
    sw_w,
    sb_d,
    ss_n,
    ss_d,
    ss_w,
    sdy_b,
    sdy_t,
    sdy_d,
    sdf_n,
    sdf_d,
    sdf_w,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_DF: tl.constexpr,
    VARLEN: tl.constexpr,
    CDT: tl.constexpr,
    BW: tl.constexpr,
    BD: tl.constexpr,
):
    """``_dstate_kernel`` with ``g`` recomputed (``_grad_preact``) at the W-1 first rows it reads, rather
    than read from pass 1's buffer; the same sum in the same order."""
    seq = tl.program_id(0)
    pid_d = tl.program_id(1)
    c = tl.arange(0, BW)[:, None]
    d = pid_d * BD + tl.arange(0, BD)[None, :]
    cmask = c < W
    dmask = d < D
    if VARLEN:
        bos = tl.load(cu_ptr + seq)
        L = tl.load(cu_ptr + seq + 1) - bos
        x_base = 0
        dy_base = 0
    else:
        bos = 0
        L = T
        x_base = seq.to(tl.int64) * sx_b
        dy_base = seq.to(tl.int64) * sdy_b
    p = c - W
    ds = _grad_preact(
        x_ptr, s_ptr, w_ptr, b_ptr, dy_ptr, x_base, dy_base, p, bos, L, seq, d, dmask, cmask, sx_t, sx_d,
        ss_n, ss_d, ss_w, sw_d, sw_w, sb_d, sdy_t, sdy_d, W, HAS_BIAS, True, CDT, ACT,
    ) * tl.load(w_ptr + d * sw_d + (W - 1) * sw_w, mask=dmask, other=0.0).to(CDT)  # fmt: skip
    for k in tl.static_range(1, W):
        g = _grad_preact(
            x_ptr, s_ptr, w_ptr, b_ptr, dy_ptr, x_base, dy_base, p + k, bos, L, seq, d, dmask, cmask, sx_t, sx_d,
            ss_n, ss_d, ss_w, sw_d, sw_w, sb_d, sdy_t, sdy_d, W, HAS_BIAS, True, CDT, ACT,
        )  # fmt: skip
        ds = ds + g * tl.load(w_ptr + d * sw_d + (W - 1 - k) * sw_w, mask=dmask, other=0.0).to(CDT)
    if HAS_DF:
        ds = ds + _final_grad(df_ptr, p, L, seq, d, dmask, cmask, sdf_n, sdf_d, sdf_w, W, CDT)
    tl.store(ds_ptr + (seq.to(tl.int64) * D + d) * W + c, ds.to(ds_ptr.dtype.element_ty), mask=cmask & dmask)


@triton.jit(do_not_specialize=["T"])
def _dstate_kernel(
    w_ptr,
    b_ptr,
    g_ptr,
    df_ptr,
    ds_ptr,
    cu_ptr,
    T,
    D,
    sw_d,
    sw_w,
    sb_d,
    sg_b,
    sg_t,
    sg_d,
    sdf_n,
    sdf_d,
    sdf_w,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_DF: tl.constexpr,
    VARLEN: tl.constexpr,
    CDT: tl.constexpr,
    BW: tl.constexpr,
    BD: tl.constexpr,
):
    """Gradient of ``initial_state[seq]``: the input gradient at the history positions p = c - W."""
    seq = tl.program_id(0)
    pid_d = tl.program_id(1)
    c = tl.arange(0, BW)[:, None]
    d = pid_d * BD + tl.arange(0, BD)[None, :]
    cmask = c < W
    dmask = d < D
    if VARLEN:
        bos = tl.load(cu_ptr + seq)
        L = tl.load(cu_ptr + seq + 1) - bos
        g_base = 0
    else:
        bos = 0
        L = T
        g_base = seq.to(tl.int64) * sg_b
    z = _grad_outside(w_ptr, b_ptr, d, dmask, sw_d, sw_w, sb_d, W, HAS_BIAS, ACT, CDT)
    ds, _ = _grad_input(
        g_ptr,
        w_ptr,
        df_ptr,
        g_base,
        c - W,
        bos,
        L,
        seq,
        d,
        dmask,
        cmask,
        z,
        sg_t,
        sg_d,
        sw_d,
        sw_w,
        sdf_n,
        sdf_d,
        sdf_w,
        W,
        HAS_DF,
        CDT,
    )
    tl.store(ds_ptr + (seq.to(tl.int64) * D + d) * W + c, ds.to(ds_ptr.dtype.element_ty), mask=cmask & dmask)


@triton.jit(do_not_specialize=["P"])
def _reduce_kernel(part_ptr, out_ptr, P, D, W: tl.constexpr, BD: tl.constexpr):
    """``out[j, d] = sum_i part[i, j, d]`` summed i = 0, 1, ... in order (one program per (channel block, j)).
    The rows are read four at a time before they are added (in order, so the same bits): one row per
    trip left each trip waiting on a load (H100, 64 rows of 512 channels: 17.2 us, 13.7% of DRAM)."""
    pid_d = tl.program_id(0)
    j = tl.program_id(1)
    d = pid_d * BD + tl.arange(0, BD)
    dmask = d < D
    step = (W + 1) * D
    ptrs = part_ptr + j * D + d
    acc = tl.load(ptrs, mask=dmask, other=0.0)
    for _ in range(0, (P - 1) // 4):
        v1 = tl.load(ptrs + step, mask=dmask, other=0.0)
        v2 = tl.load(ptrs + 2 * step, mask=dmask, other=0.0)
        v3 = tl.load(ptrs + 3 * step, mask=dmask, other=0.0)
        v4 = tl.load(ptrs + 4 * step, mask=dmask, other=0.0)
        ptrs += 4 * step
        acc = acc + v1
        acc = acc + v2
        acc = acc + v3
        acc = acc + v4
    for _ in range(0, (P - 1) % 4):
        ptrs += step
        acc = acc + tl.load(ptrs, mask=dmask, other=0.0)
    tl.store(out_ptr + j * D + d, acc, mask=dmask)


@triton.jit
def _update_kernel(
    x_ptr,
    s_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    ns_ptr,
    D,
    sx_n,
    sx_d,
    ss_n,
    ss_d,
    ss_w,
    sw_d,
    sw_w,
    sb_d,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    CDT: tl.constexpr,
    BD: tl.constexpr,
):
    """One decode step: window = (state[:, :, 1:], x); same tap order and activation as ``_fwd_kernel``."""
    n = tl.program_id(0)
    pid_d = tl.program_id(1)
    d = pid_d * BD + tl.arange(0, BD)
    dmask = d < D
    # taps see x at its own precision (as forward's do); only the stored state is rounded to its dtype
    xv = tl.load(x_ptr + n.to(tl.int64) * sx_n + d * sx_d, mask=dmask, other=0.0)
    s_base = s_ptr + n.to(tl.int64) * ss_n + d * ss_d
    ns_base = ns_ptr + (n.to(tl.int64) * D + d) * W
    w = tl.load(w_ptr + d * sw_d, mask=dmask, other=0.0).to(CDT)
    if W == 1:
        acc = xv.to(CDT) * w
    else:
        v = tl.load(s_base + ss_w, mask=dmask, other=0.0)
        tl.store(ns_base, v, mask=dmask)
        acc = v.to(CDT) * w
        for j in tl.static_range(1, W - 1):
            w = tl.load(w_ptr + d * sw_d + j * sw_w, mask=dmask, other=0.0).to(CDT)
            v = tl.load(s_base + (j + 1) * ss_w, mask=dmask, other=0.0)
            tl.store(ns_base + j, v, mask=dmask)
            acc = acc + v.to(CDT) * w
        w = tl.load(w_ptr + d * sw_d + (W - 1) * sw_w, mask=dmask, other=0.0).to(CDT)
        acc = acc + xv.to(CDT) * w
    tl.store(ns_base + (W - 1), xv.to(ns_ptr.dtype.element_ty), mask=dmask)
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + d * sb_d, mask=dmask, other=0.0).to(CDT)
    y = _activate(acc, ACT)
    tl.store(y_ptr + n.to(tl.int64) * D + d, y.to(y_ptr.dtype.element_ty), mask=dmask)
