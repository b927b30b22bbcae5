"""Planted Triton conv kernels whose outputs are right but whose memory accesses are not: the teeth of
``--gdn-sanitize`` (:mod:`gdn_equiv.harness.sanitizer_planted` wraps them as backends).

Kept apart because ``@triton.jit`` decides at decoration time whether it runs the interpreter. One
program per (batch row, time step) computes all ``D`` channels of ``y[b, t]`` in one block of ``BD > D``
lanes: the causal ``W``-tap sum in fp32 (the bias added after it), activation left to the caller.

- ``EDGE = 1`` reads one element past the block's valid channels (``d == D``), then masks that value back
  to zero: bitwise the ``EDGE = 0`` result, and at the tensor's last row a read past its allocation
  (compute-sanitizer memcheck: "Invalid __global__ read").
- ``RACE = 1`` stores each thread's accumulator to a shared-memory buffer and loads another warp's slot
  with no barrier between (inline PTX), then stores what it read under a runtime condition that never holds
  (so the compiler keeps the load): bitwise the ``RACE = 0`` result, and
  a read-after-write hazard between warps (compute-sanitizer racecheck). PTX only: it does not run under
  Triton's interpreter.
"""

from __future__ import annotations

import triton
import triton.language as tl

#: the racing store and load: thread ``tid`` writes slot ``tid`` and reads slot ``tid ^ 32`` (another warp's)
#: of a 1024-word shared buffer, no ``bar.sync`` between
RACE_PTX = tl.constexpr("""{
.reg .u32 tid, mine, theirs, base;
.shared .align 4 .b32 gdn_equiv_race[1024];
mov.u32 tid, %tid.x;
and.b32 tid, tid, 1023;
mov.u32 base, gdn_equiv_race;
shl.b32 mine, tid, 2;
add.u32 mine, mine, base;
st.shared.b32 [mine], $1;
xor.b32 theirs, tid, 32;
shl.b32 theirs, theirs, 2;
add.u32 theirs, theirs, base;
ld.shared.b32 $0, [theirs];
}""")


@triton.jit
def planted_conv_fwd_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    T,
    D,
    sx_b,
    sx_t,
    sy_b,
    sy_t,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BD: tl.constexpr,
    EDGE: tl.constexpr,
    RACE: tl.constexpr,
):
    b = tl.program_id(0)
    t = tl.program_id(1)
    d = tl.arange(0, BD)
    valid = d < D
    reach = d < D + EDGE  # EDGE = 1: one lane past the block's edge
    acc = tl.zeros([BD], dtype=tl.float32)
    for w in tl.static_range(W):
        s = t - (W - 1) + w
        xv = tl.load(x_ptr + b * sx_b + s * sx_t + d, mask=reach & (d * 0 + s >= 0), other=0.0).to(tl.float32)
        xv = tl.where(valid, xv, 0.0)  # the value read past the edge masked back
        wv = tl.load(w_ptr + d * W + w, mask=valid, other=0.0).to(tl.float32)
        acc += xv * wv
    if HAS_BIAS:
        acc += tl.load(b_ptr + d, mask=valid, other=0.0).to(tl.float32)
    if RACE:
        raced = tl.inline_asm_elementwise(
            RACE_PTX, "=r,r", [acc.to(tl.int32, bitcast=True)], dtype=tl.int32, is_pure=False, pack=1
        )
        # the racing read must be used where the compiler cannot prove it unused (ptxas dropped the shared
        # load when its value fed a select on d < 0, a condition it could fold: no load, no race, racecheck
        # clean on the H200): stored under T < 0, a runtime condition that never holds
        tl.store(y_ptr + b * sy_b + t * sy_t + d, raced.to(tl.float32, bitcast=True), mask=valid & (T < 0))
    tl.store(y_ptr + b * sy_b + t * sy_t + d, acc, mask=valid)
