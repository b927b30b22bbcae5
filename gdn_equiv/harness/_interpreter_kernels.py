"""The kernels :mod:`gdn_equiv.harness.interpreter` probes Triton's interpreter with: one conversion each.

Plain functions, not ``@triton.jit``: the probe wraps them in the interpreter itself
(``InterpretedFunction``), whatever ``TRITON_INTERPRET`` says, so importing this module compiles
nothing. A module of their own because the interpreter runs a kernel in its module's globals and
copies its own globals into them.
"""

from __future__ import annotations

from typing import Any

import triton.language as tl

Ptr = Any  # a pointer argument; the interpreter hands the kernel a tensor of addresses


def store_implicit(src: Ptr, dst: Ptr, n: tl.constexpr) -> None:
    """``tl.store`` of the loaded values into ``dst``'s dtype: the implicit cast a kernel's output store makes."""
    offs = tl.arange(0, n)
    tl.store(dst + offs, tl.load(src + offs))


def to_bf16_rtne(src: Ptr, dst: Ptr, n: tl.constexpr) -> None:
    offs = tl.arange(0, n)
    tl.store(dst + offs, tl.load(src + offs).to(tl.bfloat16, fp_downcast_rounding="rtne"))


def to_bf16_rtz(src: Ptr, dst: Ptr, n: tl.constexpr) -> None:
    offs = tl.arange(0, n)
    tl.store(dst + offs, tl.load(src + offs).to(tl.bfloat16, fp_downcast_rounding="rtz"))


def to_fp32(src: Ptr, dst: Ptr, n: tl.constexpr) -> None:
    offs = tl.arange(0, n)
    tl.store(dst + offs, tl.load(src + offs).to(tl.float32))
