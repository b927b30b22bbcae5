"""Triton's interpreter converts floats as a GPU does once :mod:`gdn_equiv.harness.interpreter` has corrected it.

Triton 3.9's interpreter truncated fp32→bf16 where a GPU rounds to nearest even, so the triton
backend's correct bf16 layer failed P7 against torch on a CPU (42 of 1000 seeds of the example
below). The plugin corrects the interpreter at start-up; ``as_shipped`` undoes that for one test.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from gdn_equiv.harness import interpreter as faithful

pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(
        importlib.util.find_spec("triton") is None or importlib.util.find_spec("numpy") is None,
        reason="triton (and numpy, which its interpreter needs) is not installed",
    ),
]
interpreting = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="kernels run compiled here, not in Triton's interpreter"
)


@pytest.fixture
def interp() -> Any:
    from triton.runtime import interpreter

    return interpreter


@pytest.fixture
def corrected(interp: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The interpreter as the plugin leaves it on a CPU (corrected), here whatever the machine; undone after."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(interp, "_convert_float", interp._convert_float)
    monkeypatch.setattr(faithful, "_line", faithful._line)
    faithful.make_faithful()
    return interp


@pytest.fixture
def as_shipped(interp: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The interpreter as Triton ships it: the correction the plugin made at start-up undone, for one test."""
    current = interp._convert_float
    monkeypatch.setattr(interp, "_convert_float", getattr(current, faithful._ORIGINAL, current))
    monkeypatch.setattr(faithful, "_line", None)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    yield interp


def _sweep_f32() -> torch.Tensor:
    """fp32 bit patterns: every bf16 value with each of the low halves exact, below half, tie, above half
    (ties at both parities, carries into the exponent and to inf, subnormals, ±inf, NaNs)."""
    high = torch.arange(1 << 16, dtype=torch.int64) << 16
    low = torch.tensor([0x0000, 0x7FFF, 0x8000, 0x8001], dtype=torch.int64)
    bits = (high[:, None] | low[None, :]).reshape(-1)
    return torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32).view(torch.float32)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def _assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), (
        f"NaN where there was none, or none where there was: {got[nan != got.isnan()]}"
    )
    wrong = (_bits(got) != _bits(want)) & ~nan
    assert not wrong.any(), (
        f"{int(wrong.sum())} of {wrong.numel()} differ; first: {_bits(got)[wrong][:4].tolist()} where "
        f"{_bits(want)[wrong][:4].tolist()}"
    )


def _store_kernel(rounding: str | None) -> Callable[..., Any]:
    import triton
    import triton.language as tl

    if rounding is None:

        @triton.jit
        def store(src, dst, n: tl.constexpr):  # type: ignore[no-untyped-def]
            offs = tl.arange(0, n)
            tl.store(dst + offs, tl.load(src + offs))  # fp32 stored into dst's bf16: an implicit cast

        return store

    @triton.jit
    def store_rtz(src, dst, n: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.arange(0, n)
        tl.store(dst + offs, tl.load(src + offs).to(tl.bfloat16, fp_downcast_rounding="rtz"))

    return store_rtz


# ---- the probe -------------------------------------------------------------------------------


@pytest.mark.skipif(
    not importlib.util.find_spec("triton") or not __import__("triton").__version__.startswith("3.9"),
    reason="Triton 3.9's interpreter is the one known to truncate",
)
def test_probe_finds_triton_39_interpreters_truncation(as_shipped: Any) -> None:
    reason = faithful.probe()
    assert reason is not None
    assert "fp32→bf16 (tl.store, .to) 0x3f818000 → 0x3f81, a GPU gives 0x3f82" in reason, reason
    assert "bf16→fp32 0x40 → 0x0, a GPU gives 0x400000" in reason, reason  # subnormals lost on the way up


def _truncate(bits: Any) -> Any:
    return bits >> 16


def _half_up(bits: Any) -> Any:
    return (bits + 0x8000) >> 16


def _no_carry(bits: Any) -> Any:  # Triton 3.9's own rtne: the rounded mantissa wraps instead of carrying
    return (bits >> 16) & 0xFF80 | (((bits >> 16) + ((bits >> 15) & 1)) & 0x7F)


def _flush_subnormals(bits: Any) -> Any:
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded * ((bits & 0x7F800000) != 0) | (bits >> 16) & 0x8000


def _nan_to_inf(bits: Any) -> Any:  # rounding with no NaN case: a NaN with a low payload becomes inf
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


@pytest.mark.teeth
@pytest.mark.parametrize("defect", [_truncate, _half_up, _no_carry, _flush_subnormals, _nan_to_inf])
def test_probe_finds_a_planted_fp32_to_bf16_defect(
    corrected: Any, monkeypatch: pytest.MonkeyPatch, defect: Callable[[Any], Any]
) -> None:
    import numpy as np

    interp, correct = corrected, corrected._convert_float

    def convert(input: Any, input_dtype: Any, output_dtype: Any, rounding_mode: Any) -> Any:
        if input_dtype == interp.tl.float32 and output_dtype == interp.tl.bfloat16 and rounding_mode is None:
            bits = np.ascontiguousarray(input, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
            return defect(bits).astype(np.uint16).reshape(np.shape(input))
        return correct(input, input_dtype, output_dtype, rounding_mode)

    monkeypatch.setattr(interp, "_convert_float", convert)
    reason = faithful.probe()
    assert reason is not None and "fp32→bf16 (tl.store, .to)" in reason, reason
    assert "rtz" not in reason and "fp16" not in reason, reason  # only the conversion planted


def test_probe_passes_the_corrected_interpreter(corrected: Any) -> None:
    assert faithful.probe() is None


# ---- the correction ----------------------------------------------------------------------------


def test_make_faithful_corrects_once(as_shipped: Any) -> None:
    shipped = as_shipped._convert_float
    line = faithful.make_faithful()
    assert line is not None and line.startswith("Triton interpreter: fp32→bf16 now rounds to nearest even"), line
    corrected = as_shipped._convert_float
    assert getattr(corrected, faithful._ORIGINAL) is shipped
    assert faithful.make_faithful() == line and as_shipped._convert_float is corrected
    assert faithful.describe() == line
    assert faithful.probe() is None


def test_make_faithful_does_nothing_without_the_interpreter(as_shipped: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = as_shipped._convert_float
    monkeypatch.delenv("TRITON_INTERPRET")
    assert faithful.make_faithful() is None and faithful.describe() is None
    assert as_shipped._convert_float is shipped


def test_make_faithful_leaves_an_unknown_interpreter_alone_and_names_the_limit(
    as_shipped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped_cast = as_shipped.InterpreterBuilder.cast_impl

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:  # another Triton: converts some other way
        return shipped_cast(self, src, dst_type)

    monkeypatch.setattr(as_shipped.InterpreterBuilder, "cast_impl", cast_impl)
    shipped = as_shipped._convert_float
    line = faithful.make_faithful()
    assert line is not None and line.startswith("environment limit: Triton "), line
    assert "0x3f818000 → 0x3f81" in line and "cast_impl does not convert through _convert_float" in line, line
    assert as_shipped._convert_float is shipped


def test_importing_and_calling_without_the_interpreter_stays_cheap() -> None:
    code = (
        "import sys, gdn_equiv.harness.interpreter as i; i.make_faithful(); i.describe(); "
        "print('triton' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out


# ---- the corrected interpreter against torch ------------------------------------------------------


@interpreting
def test_fp32_stored_into_bf16_rounds_like_torch(corrected: Any) -> None:
    src = _sweep_f32()
    dst = torch.empty(src.shape, dtype=torch.bfloat16)
    _store_kernel(None)[(1,)](src, dst, src.numel())
    _assert_same_bits(dst, src.to(torch.bfloat16))


@interpreting
def test_rtz_stays_truncation(corrected: Any) -> None:
    src = _sweep_f32()
    dst = torch.empty(src.shape, dtype=torch.bfloat16)
    _store_kernel("rtz")[(1,)](src, dst, src.numel())
    truncated = (src.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)
    _assert_same_bits(dst, torch.where(src.isnan(), torch.nan, truncated))


@interpreting
def test_every_bf16_widens_to_fp32_exactly(corrected: Any) -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def widen(src, dst, n: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.arange(0, n)
        tl.store(dst + offs, tl.load(src + offs).to(tl.float32))

    src = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    dst = torch.empty(src.shape, dtype=torch.float32)
    widen[(1,)](src, dst, src.numel())
    _assert_same_bits(dst, src.float())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_the_explicit_rtne_conversion_rounds_like_torch(corrected: Any, dtype: torch.dtype) -> None:
    """``create_fp_to_fp`` with RTNE: no cast of Triton 3.9 reaches it from fp32, and it rounds in code of its own."""
    interp = corrected
    if faithful._unknown_internals(interp) is not None:
        pytest.skip(f"not the interpreter this corrects: {faithful._unknown_internals(interp)}")
    src = _sweep_f32()
    handle = interp.TensorHandle(src.numpy(), interp.tl.float32)
    tl_dtype = interp.tl.bfloat16 if dtype == torch.bfloat16 else interp.tl.float16
    out = interp.interpreter_builder.create_fp_to_fp(handle, tl_dtype, interp._ir.ROUNDING_MODE.RTNE)
    got = torch.from_numpy(out.data.view("int16")).view(dtype)
    _assert_same_bits(got, src.to(dtype))


# ---- the false alarm it was -----------------------------------------------------------------------

# seeds of this example whose P7 failed against the shipped interpreter (0.15 against atol 0.01 for 177)
FAILED_SEEDS = (44, 54, 98, 177)
# since P7 at the layer is decided past the table by each side's error against the fp64 layer, the
# truncating interpreter's output is within the accuracy bar (2x torch's error plus one unit) on three of
# them: its conversions are off by at most one ulp where torch's round to half of one. Seed 54's is not
STILL_FAILING_SEEDS = (54,)


def _example(seed: int) -> Any:
    from gdn_equiv.model.example import Example

    config = {"conv_backend": "triton", "conv_bias": True, "conv_size": 5, "head_dim": 2, "hidden_size": 8}
    return Example.from_json(
        {"family": "gated_deltanet", "dtype": "bfloat16", "batch": 1, "seq_len": 4, "grad": False, "seed": seed}
        | {"config": config | {"num_heads": 1}}
    )


@interpreting
@pytest.mark.parametrize("seed", FAILED_SEEDS)
def test_the_triton_layer_in_bf16_matches_torch(corrected: Any, seed: int) -> None:
    from gdn_equiv.harness.properties import check_backend_matches_torch

    check_backend_matches_torch(_example(seed), device="cpu")


@interpreting
@pytest.mark.teeth
@pytest.mark.parametrize("seed", STILL_FAILING_SEEDS)
def test_the_shipped_interpreter_fails_those_examples(as_shipped: Any, seed: int) -> None:
    from gdn_equiv.harness.compare import Mismatch
    from gdn_equiv.harness.properties import check_backend_matches_torch

    with pytest.raises(Mismatch, match="triton vs torch are not close"):
        check_backend_matches_torch(_example(seed), device="cpu")
