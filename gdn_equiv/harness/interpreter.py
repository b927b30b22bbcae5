"""Triton's interpreter converted floats unlike a GPU; here it is probed, corrected, and described.

On a CPU our Triton kernels (and fla's) run under ``TRITON_INTERPRET=1``. Triton 3.9's interpreter
converts fp32 to bf16 (a ``tl.store`` into a bf16 output, ``.to(tl.bfloat16)``) by truncating, where a
GPU rounds to nearest even: a correct kernel's bf16 outputs were one ulp off on about half the elements,
and P7 (backend vs torch) failed against a correct backend (SPEC §10: no false alarm on a correct
kernel). Its rounding branch rounds ties up and loses the carry into the exponent, and it mishandles
subnormals in both directions and NaNs whose payload lies in the low 16 bits (they became inf).

- :func:`probe` runs one tiny kernel per conversion in the interpreter and compares the bits with
  what a GPU gives (ties to even, carries, subnormals, max finite, ±inf, NaN): ``None`` or the reason.
- :func:`make_faithful` replaces the interpreter's fp32↔bf16 conversion with an exact one (round to
  nearest even by default and for ``rtne``, truncation for ``rtz``), once, and only where the
  interpreter's internals are the ones this was written against; otherwise the probe's reason stands.
- :func:`describe` is the one line a run header prints: what was corrected, or the environment limit.

Nothing here imports triton, numpy or torch unless ``TRITON_INTERPRET=1``: the pytest plugin and
the command line call :func:`make_faithful` at start-up.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import Callable
from typing import Any

__all__ = ["describe", "make_faithful", "probe"]

NAN = -1  # expected bits meaning "any NaN": GPUs and torch disagree on the NaN they produce
# (src bits, what a GPU stores): fp32 -> bf16 round to nearest, ties to even (cvt.rn.bf16.f32)
F32_TO_BF16_RNE = (
    (0x3F808000, 0x3F80),  # 1 + 2^-8: a tie, rounds down to the even 1.0
    (0x3F818000, 0x3F82),  # a tie above an odd mantissa: rounds up (truncation gives 0x3F81)
    (0x3F80C000, 0x3F81),  # above half
    (0x3F807FFF, 0x3F80),  # below half
    (0xBF8CCCCD, 0xBF8D),  # -1.1
    (0x3FFF8000, 0x4000),  # a tie that carries into the exponent
    (0x7F7F7FFF, 0x7F7F),  # just below the midpoint above bf16's max finite: stays finite
    (0x7F7FFFFF, 0x7F80),  # fp32's max finite rounds to inf
    (0x00018000, 0x0002),  # subnormal tie, rounds to even
    (0x00008000, 0x0000),  # subnormal tie between 0 and the least subnormal
    (0x00400000, 0x0040),  # subnormal, exact
    (0x007FFFFF, 0x0080),  # the largest subnormal carries into the least normal
    (0x807FFFFF, 0x8080),
    (0x80000000, 0x8000),  # -0
    (0x7F800000, 0x7F80),  # inf
    (0xFF800000, 0xFF80),  # -inf
    (0x7FC00000, NAN),
    (0x7F800001, NAN),  # a NaN whose payload lies in the bits rounding drops (truncation gives inf)
    (0xFFFFFFFF, NAN),
)
# the same inputs truncated, as a kernel that asks for ``rtz`` gets (cvt.rz.bf16.f32)
F32_TO_BF16_RTZ = tuple(
    (src, want if want == NAN else ((src >> 16) if (src & 0x7FFFFFFF) <= 0x7F800000 else NAN))
    for src, want in F32_TO_BF16_RNE
)
F32_TO_F16_RNE = (
    (0x3F803000, 0x3C02),  # 1 + 3*2^-11: a tie above an odd mantissa, rounds up
    (0x3F801000, 0x3C00),  # 1 + 2^-11: a tie, rounds down to the even 1.0
    (0x477FE000, 0x7BFF),  # 65504, fp16's max finite
    (0x477FF000, 0x7C00),  # 65520: the tie above it rounds to inf
    (0x33800000, 0x0001),  # 2^-24, the least fp16 subnormal
    (0x33000000, 0x0000),  # 2^-25: a tie, rounds to the even 0
    (0x33C00000, 0x0002),  # 1.5 * 2^-24: a tie, rounds to the even 2^-23
    (0x00000001, 0x0000),
    (0x80000000, 0x8000),
    (0x7F800000, 0x7C00),
    (0xFF800000, 0xFC00),
    (0x7F800001, NAN),
)
BF16_TO_F32 = (  # exact: the bits move up by 16
    (0x3F80, 0x3F800000),
    (0x0040, 0x00400000),  # subnormals stay what they are
    (0x0001, 0x00010000),
    (0x807F, 0x807F0000),
    (0xFF7F, 0xFF7F0000),
    (0x7F80, 0x7F800000),
    (0x7FC1, NAN),
)
F16_TO_F32 = (
    (0x3C00, 0x3F800000),
    (0x0001, 0x33800000),  # fp16's least subnormal, 2^-24
    (0x7BFF, 0x477FE000),
    (0xFC00, 0xFF800000),
    (0x7E00, NAN),
)
# (what a kernel does, its kernel, source dtype, destination dtype, cases)
CHECKS = (
    ("fp32→bf16 (tl.store, .to)", "store_implicit", "float32", "bfloat16", F32_TO_BF16_RNE),
    ("fp32→bf16 (rtne)", "to_bf16_rtne", "float32", "bfloat16", F32_TO_BF16_RNE),
    ("fp32→bf16 (rtz)", "to_bf16_rtz", "float32", "bfloat16", F32_TO_BF16_RTZ),
    ("fp32→fp16 (tl.store, .to)", "store_implicit", "float32", "float16", F32_TO_F16_RNE),
    ("bf16→fp32", "to_fp32", "bfloat16", "float32", BF16_TO_F32),
    ("fp16→fp32", "to_fp32", "float16", "float32", F16_TO_F32),
)

_ORIGINAL = "_gdn_equiv_original"  # on our replacement: the interpreter's own conversion
_line: str | None = None  # what make_faithful did, once it has run


def _triton() -> Any:
    """Triton's interpreter module, or None where triton (or numpy, which it needs) is not installed."""
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("numpy") is None:
        return None
    from triton.runtime import interpreter

    return interpreter


_EXPONENT = {"float32": 0x7F800000, "bfloat16": 0x7F80, "float16": 0x7C00}


def _is_nan(bits: int, dtype: str) -> bool:
    exponent = _EXPONENT[dtype]
    return bits & exponent == exponent and bits & (exponent - 1) & ~exponent != 0


def _run(kernel: Any, src_dtype: str, dst_dtype: str, sources: list[int]) -> list[int]:
    """The bits ``kernel`` stores for ``sources`` (bit patterns of ``src_dtype``) under the interpreter."""
    import numpy as np
    import torch

    int_of = {"float32": (np.uint32, np.int32, torch.int32), "bfloat16": (np.uint16, np.int16, torch.int16)}
    int_of["float16"] = int_of["bfloat16"]
    n = 1 << max(len(sources) - 1, 1).bit_length()  # tl.arange wants a power of two
    unsigned, signed, _ = int_of[src_dtype]
    raw = np.zeros(n, dtype=unsigned)
    raw[: len(sources)] = sources
    src = torch.from_numpy(raw.view(signed)).view(getattr(torch, src_dtype))
    dst = torch.zeros(n, dtype=getattr(torch, dst_dtype))
    with np.errstate(all="ignore"):  # numpy's fp16 cast warns of the overflow to inf it is asked for
        kernel[(1,)](src, dst, n)
    unsigned, _, as_int = int_of[dst_dtype]
    return [int(b) for b in dst.view(as_int).numpy().view(unsigned)[: len(sources)]]


def _mismatches() -> dict[str, str]:
    """Each conversion that differs from a GPU's, with its first differing case."""
    interpreter = _triton()
    if interpreter is None:
        return {}
    # lazily: the probe kernels import triton, an optional extra
    from gdn_equiv.harness import _interpreter_kernels as kernels

    found: dict[str, str] = {}
    for what, name, src_dtype, dst_dtype, cases in CHECKS:
        try:
            got = _run(
                interpreter.InterpretedFunction(getattr(kernels, name)), src_dtype, dst_dtype, [s for s, _ in cases]
            )
        except Exception as exc:  # an interpreter that cannot run the probe is a limit of its own
            found[what] = f"{what}: the probe kernel raised {type(exc).__name__}: {exc}"
            continue
        wrong = [
            (src, want, bits)
            for (src, want), bits in zip(cases, got, strict=True)
            if not (_is_nan(bits, dst_dtype) if want == NAN else bits == want)
        ]
        if wrong:
            src, want, bits = wrong[0]
            gpu = "a NaN" if want == NAN else f"{want:#x}"
            found[what] = f"{what} {src:#x} → {bits:#x}, a GPU gives {gpu} ({len(wrong)} of {len(cases)} cases)"
    return found


def probe() -> str | None:
    """Why the running Triton interpreter's float conversions differ from a GPU's, or None where they agree.

    Runs a tiny kernel per conversion in the interpreter, whatever ``TRITON_INTERPRET`` says; None
    too where triton is not installed (there is no interpreter to differ).
    """
    found = _mismatches()
    if not found:
        return None
    import triton

    return f"Triton {triton.__version__}'s interpreter converts unlike a GPU: " + "; ".join(found.values())


def _unknown_internals(interpreter: Any) -> str | None:
    """Why the interpreter is not the one :func:`_faithful` was written against (Triton 3.9), or None."""
    convert = getattr(interpreter, "_convert_float", None)
    builder = getattr(interpreter, "InterpreterBuilder", None)
    modes = getattr(getattr(interpreter, "_ir", None), "ROUNDING_MODE", None)
    if convert is None or builder is None or not all(hasattr(modes, m) for m in ("RTNE", "RTZ")):
        return "it has no _convert_float, InterpreterBuilder or ROUNDING_MODE"
    if list(inspect.signature(convert).parameters) != ["input", "input_dtype", "output_dtype", "rounding_mode"]:
        return f"its _convert_float takes {inspect.signature(convert)}"
    for method in ("cast_impl", "create_fp_to_fp"):
        code = getattr(getattr(builder, method, None), "__code__", None)
        if code is None or "_convert_float" not in code.co_names:
            return f"its InterpreterBuilder.{method} does not convert through _convert_float"
    return None


def _faithful(original: Callable[..., Any], interpreter: Any) -> Callable[..., Any]:
    """``original`` (the interpreter's ``_convert_float``) with fp32↔bf16 and fp32→fp16 done as a GPU does."""
    import numpy as np

    tl = interpreter.tl
    rtne, rtz = interpreter._ir.ROUNDING_MODE.RTNE, interpreter._ir.ROUNDING_MODE.RTZ

    def convert_float(input: Any, input_dtype: Any, output_dtype: Any, rounding_mode: Any) -> Any:
        if input_dtype == tl.float32 and output_dtype == tl.bfloat16 and rounding_mode in (None, rtne, rtz):
            bits = np.ascontiguousarray(input, dtype=np.float32).reshape(-1).view(np.uint32)
            if rounding_mode == rtz:
                kept = bits >> np.uint32(16)
            else:  # add just under half an ulp, plus one when the kept part is odd: ties go to even
                kept = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
            nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
            out = np.where(nan, (bits >> np.uint32(16)) | np.uint32(0x0040), kept)  # NaNs stay (quiet) NaNs
            return out.astype(np.uint16).reshape(np.shape(input))
        if input_dtype == tl.bfloat16 and output_dtype == tl.float32:
            bits = np.ascontiguousarray(input).reshape(-1).view(np.uint16).astype(np.uint32)
            return (bits << np.uint32(16)).reshape(np.shape(input))
        if input_dtype == tl.float32 and output_dtype == tl.float16 and rounding_mode in (None, rtne):
            with np.errstate(over="ignore"):  # numpy's own cast rounds to nearest even, as GPUs do
                return np.asarray(input, dtype=np.float32).astype(np.float16).view(np.uint16)
        return original(input, input_dtype, output_dtype, rounding_mode)

    setattr(convert_float, _ORIGINAL, original)
    return convert_float


def make_faithful() -> str | None:
    """Under ``TRITON_INTERPRET=1``, correct the interpreter's conversions where they differ from a GPU's.

    Idempotent. Returns :func:`describe`'s line; None (and nothing done) when the interpreter is not
    in use or triton is not installed. Where the interpreter is not the one this knows (another
    Triton version), nothing is patched and the probe's reason is the line: an environment limit.
    """
    global _line
    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    if _line is not None:
        return _line
    interpreter = _triton()
    if interpreter is None:
        return None
    import triton

    before = _mismatches()
    unknown = _unknown_internals(interpreter)
    if not before:
        _line = "Triton interpreter: converts fp32→bf16/fp16 as GPUs do (nothing to correct)"
    elif unknown is not None:
        _line = f"environment limit: {probe()} (not corrected: {unknown})"
    else:
        interpreter._convert_float = _faithful(interpreter._convert_float, interpreter)
        after = probe()
        _line = (
            f"environment limit: {after} (after gdn_equiv's correction)"
            if after is not None
            else "Triton interpreter: fp32→bf16 now rounds to nearest even, as GPUs do "
            f"(gdn_equiv corrected Triton {triton.__version__}'s {', '.join(before)})"
        )
    return _line


def describe() -> str | None:
    """One line for a run header or report: what :func:`make_faithful` corrected, or the environment limit.

    None when the interpreter is not in use (``TRITON_INTERPRET`` unset) or triton is not installed.
    Before :func:`make_faithful` has run, the probe's finding as it stands.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    if _line is not None:
        return _line
    reason = probe()
    if reason is None:
        return None if _triton() is None else "Triton interpreter: converts fp32→bf16/fp16 as GPUs do"
    return f"environment limit: {reason}"
