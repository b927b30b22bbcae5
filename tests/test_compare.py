"""The comparison and its tolerance table (SPEC §6), tested the way PyTorch tests ``assert_close``: every
verdict at its boundary (passes there, fails one step past it), every non-finite case, every attribute,
and the report's numbers against values computed here, in plain Python floats, not by the code under test.

Semantics pinned here (change them only on purpose):

- Exact is ``torch.equal`` plus NaNs by position: ``-0.0 == 0.0``, any NaN equals any NaN at the same
  index, one ulp apart is a mismatch. Strides do not matter; shape, dtype and device do.
- Tolerance is ``|actual - expected| <= atol + rtol * |expected|``: inclusive, and ``expected`` (the second
  argument) is the reference whose magnitude scales ``rtol``. An infinity only matches the same infinity.
"""

from __future__ import annotations

import math
import pickle
import re
import traceback
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gdn_equiv.harness.compare import (
    ACCURACY_FACTOR,
    Mismatch,
    Report,
    assert_as_accurate,
    assert_equivalent,
    assert_tree_equivalent,
    compare,
    least_accurate,
    mismatch_kind,
    observe,
    tolerance,
    worst,
)
from gdn_equiv.model.cache import Cache

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
LOW = [torch.float32, torch.float16, torch.bfloat16]
F64 = torch.float64
INF, NAN = math.inf, math.nan

#: SPEC §6, written out again so that a change to the table in compare.py has to be made here too.
SPEC_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


def t(values: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def verdict(actual: torch.Tensor | None, expected: torch.Tensor | None, **kwargs: Any) -> bool:
    """``assert_equivalent``'s verdict; its report must agree with whether it raised."""
    try:
        report = assert_equivalent(actual, expected, **kwargs)
    except Mismatch as exc:
        assert not exc.report.ok
        return False
    assert report.ok
    return True


def up(x: float) -> float:
    return math.nextafter(x, INF)


def allowed(expected: float, dtype: torch.dtype) -> float:
    """The tolerance at ``expected``, from SPEC_TOLERANCES, in the order ``torch.isclose`` evaluates it."""
    rtol, atol = SPEC_TOLERANCES[dtype]
    return atol + rtol * abs(expected)


def within(actual: float, expected: float, dtype: torch.dtype) -> bool:
    return abs(actual - expected) <= allowed(expected, dtype)


def furthest_f64_within(expected: float, dtype: torch.dtype, direction: float) -> float:
    """The fp64 value furthest from ``expected`` towards ``direction`` still within ``dtype``'s tolerance."""
    x = expected + direction * allowed(expected, dtype)
    while not within(x, expected, dtype):
        x = math.nextafter(x, expected)
    while within(math.nextafter(x, direction * INF), expected, dtype):
        x = math.nextafter(x, direction * INF)
    return x


def next_in(x: torch.Tensor, direction: float = INF) -> torch.Tensor:
    """The next value of ``x``'s own dtype towards ``direction``."""
    return torch.nextafter(x, torch.full_like(x, direction))


# ---- the table ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_table_holds_the_spec_values(dtype: torch.dtype) -> None:
    assert tolerance(dtype) == SPEC_TOLERANCES[dtype]


def test_table_has_no_tolerance_for_integers() -> None:
    with pytest.raises(KeyError):
        tolerance(torch.int64)


# ---- tolerance boundaries, to fp64 precision (fp64 tensors, the table entry chosen by dtype=) -----


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["above", "below"])
def test_atol_boundary_is_inclusive(dtype: torch.dtype, sign: float) -> None:
    # against an expected 0 only atol counts: |a| <= atol passes, one fp64 ulp more fails
    _, atol = SPEC_TOLERANCES[dtype]
    zero = t([0.0], F64)
    assert verdict(t([sign * atol], F64), zero, exact=False, dtype=dtype)
    assert not verdict(t([math.nextafter(sign * atol, sign * INF)], F64), zero, exact=False, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("expected", [1.0, 1000.0, -1000.0])
@pytest.mark.parametrize("direction", [1.0, -1.0], ids=["above", "below"])
def test_rtol_boundary_is_inclusive(dtype: torch.dtype, expected: float, direction: float) -> None:
    # at |expected| = 1000 rtol * |expected| is 1000x atol: a looser (or tighter) rtol moves this edge
    edge = furthest_f64_within(expected, dtype, direction)
    past = math.nextafter(edge, direction * INF)
    assert verdict(t([edge], F64), t([expected], F64), exact=False, dtype=dtype)
    assert not verdict(t([past], F64), t([expected], F64), exact=False, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_expected_is_the_reference_of_rtol(dtype: torch.dtype) -> None:
    # 1000 - (atol + rtol * 1000) is within the tolerance of 1000, but 1000 is not within that of the
    # smaller value: rtol scales with |expected| only, as in torch.isclose
    low = furthest_f64_within(1000.0, dtype, -1.0)
    assert verdict(t([low], F64), t([1000.0], F64), exact=False, dtype=dtype)
    assert not verdict(t([1000.0], F64), t([low], F64), exact=False, dtype=dtype)


def test_the_table_entry_comes_from_expected_else_from_actual() -> None:
    """``exact=False`` without ``dtype=`` takes the table entry of ``expected``'s dtype, or of ``actual``'s
    when ``expected`` is absent; the report carries it even when the comparison is refused (check tables
    print it next to the problem)."""
    with pytest.raises(Mismatch, match="attribute 'dtype'") as info:
        assert_equivalent(t([1.0], torch.float16), t([1.0], F64), exact=False)
    assert (info.value.report.rtol, info.value.report.atol) == SPEC_TOLERANCES[F64]
    with pytest.raises(Mismatch, match="one side is None") as info:
        assert_equivalent(t([1.0], torch.float16), None, exact=False)
    assert (info.value.report.rtol, info.value.report.atol) == SPEC_TOLERANCES[torch.float16]


def test_explicit_tolerances_are_inclusive_and_scale_with_expected() -> None:
    assert compare(t([3.0]), t([2.0]), rtol=0.5).ok  # |1| <= 0.5 * 2
    assert not compare(t([up(3.0)], F64), t([2.0], F64), rtol=0.5).ok
    assert not compare(t([2.0]), t([1.0]), rtol=0.5).ok  # |1| > 0.5 * 1
    assert compare(t([1.0]), t([2.0]), rtol=0.5).ok
    assert compare(t([1.25]), t([1.0]), rtol=0.125, atol=0.125).ok
    assert not compare(t([up(1.25)], F64), t([1.0], F64), rtol=0.125, atol=0.125).ok


# ---- tolerance boundaries in each dtype itself -----------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("expected", [0.0, 1.0, -3.0, 100.0])
def test_native_dtype_boundary(dtype: torch.dtype, expected: float) -> None:
    """The last value of the dtype within the tolerance passes; the next one fails."""
    e = t([expected], dtype)
    a = t([expected + allowed(expected, dtype)], F64).to(dtype)  # nearest; then at most a step or two
    while not within(float(a), float(e), dtype):
        a = next_in(a, -INF)
    while within(float(next_in(a)), float(e), dtype):
        a = next_in(a)
    assert float(a) != float(e), "the tolerance is below one ulp here: the case would test nothing"
    assert verdict(a, e, exact=False)
    assert not verdict(next_in(a), e, exact=False)


# ---- exact ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("value", [0.0, 1.0, -3.5, 1e-3, 200.0])
@pytest.mark.parametrize("direction", [INF, -INF], ids=["up", "down"])
def test_exact_refuses_one_ulp(dtype: torch.dtype, value: float, direction: float) -> None:
    e = t([value, 2.0], dtype)
    a = e.clone()
    a[0] = next_in(e[:1], direction)[0]
    assert float(a[0]) != float(e[0])
    assert verdict(e.clone(), e)
    assert not verdict(a, e)
    report = compare(a, e)
    assert (report.mismatched, report.max_abs_index) == (1, (0,))
    assert report.max_abs == abs(float(a[0]) - float(e[0]))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_one_ulp_at_one_is_within_the_table(dtype: torch.dtype) -> None:
    # so exact=True is what refuses it above, not a table too tight for the dtype
    e = t([1.0], dtype)
    assert verdict(next_in(e), e, exact=False)


def test_exact_counts_signed_zeros_equal_like_torch_equal() -> None:
    # P3's "bitwise equal" is torch.equal, under which -0.0 == 0.0; compare follows it on purpose
    a, e = t([-0.0, 0.0, -0.0]), t([0.0, -0.0, -0.0])
    assert torch.equal(a, e)
    assert verdict(a, e)
    assert compare(a, e).max_abs == 0.0


@pytest.mark.parametrize("exact", [True, False])
def test_nans_at_the_same_positions_are_equal(exact: bool) -> None:
    a = t([NAN, 1.0, NAN])
    e = t([-NAN, 1.0, NAN])  # another NaN bit pattern counts as a NaN all the same
    assert verdict(a, e, exact=exact)
    assert compare(a, e).nan_mismatched == 0


@pytest.mark.parametrize("exact", [True, False])
def test_nans_at_different_positions_differ(exact: bool) -> None:
    with pytest.raises(Mismatch) as info:
        assert_equivalent(t([NAN, 1.0, 2.0]), t([1.0, NAN, 2.0]), exact=exact)
    r = info.value.report
    assert (r.mismatched, r.nan_mismatched, r.numel) == (2, 2, 3)
    assert r.tol_used == INF


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("nan_in", ["actual", "expected"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_nan_on_one_side_only_differs(exact: bool, nan_in: str, dtype: torch.dtype) -> None:
    clean, poisoned = t([1.0, 2.0], dtype), t([1.0, NAN], dtype)
    a, e = (poisoned, clean) if nan_in == "actual" else (clean, poisoned)
    with pytest.raises(Mismatch) as info:
        assert_equivalent(a, e, exact=exact)
    r = info.value.report
    assert (r.mismatched, r.nan_mismatched) == (1, 1)
    assert r.tol_used == INF  # ranks as a failure in worst(), whatever the finite elements used
    assert "NaN mismatches (NaN in one path only): 1" in str(info.value)


@pytest.mark.parametrize("inf", [INF, -INF])
@pytest.mark.parametrize("inf_in", ["actual", "expected"])
def test_infinity_on_one_side_only_differs_under_any_tolerance(inf: float, inf_in: str) -> None:
    a, e = (t([inf], F64), t([1e300], F64)) if inf_in == "actual" else (t([1e300], F64), t([inf], F64))
    assert not compare(a, e).ok
    assert not compare(a, e, rtol=1e300, atol=1e300).ok
    assert compare(a, e).max_abs == INF


@pytest.mark.parametrize("exact", [True, False])
def test_equal_infinities_are_equal(exact: bool) -> None:
    a = t([INF, -INF, 1.0])
    assert verdict(a, a.clone(), exact=exact)
    assert compare(a, a.clone()).max_abs == 0.0


@pytest.mark.parametrize("exact", [True, False])
def test_opposite_infinities_differ(exact: bool) -> None:
    with pytest.raises(Mismatch) as info:
        assert_equivalent(t([1.0, INF]), t([1.0, -INF]), exact=exact)
    r = info.value.report
    assert (r.mismatched, r.max_abs, r.max_abs_index, r.max_rel, r.max_rel_index) == (1, INF, (1,), INF, (1,))


def test_complex_imaginary_parts_count() -> None:
    # casting complex to float64 drops the imaginary part; a tolerance must not pass a difference there
    a, e = t([1 + 2j], torch.complex64), t([1 + 3j], torch.complex64)
    assert not compare(a, e).ok
    assert not compare(a, e, rtol=1e-5, atol=1e-5).ok
    assert compare(a, e).max_abs == 1.0
    assert compare(a, a.clone(), rtol=1e-5, atol=1e-5).ok


# ---- attributes, None, empty and 0-dim ------------------------------------------------------------


@pytest.mark.parametrize("exact", [True, False])
def test_dtype_must_match(exact: bool) -> None:
    with pytest.raises(Mismatch, match="attribute 'dtype'"):
        assert_equivalent(t([1.0], torch.float32), t([1.0], F64), exact=exact)


@pytest.mark.parametrize(("shape_a", "shape_e"), [((2, 3), (3, 2)), ((1,), ()), ((4,), (1, 4)), ((0, 3), (0, 2))])
def test_shape_must_match_without_broadcasting(shape_a: tuple[int, ...], shape_e: tuple[int, ...]) -> None:
    with pytest.raises(Mismatch, match="attribute 'shape'"):
        assert_equivalent(torch.ones(shape_a), torch.ones(shape_e))


def test_device_must_match() -> None:
    with pytest.raises(Mismatch, match="attribute 'device'"):
        assert_equivalent(torch.ones(2, device="meta"), torch.ones(2))
    with pytest.raises(Mismatch, match="attribute 'device'"):
        assert_equivalent(torch.ones(2), torch.ones(2, device="meta"), exact=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for a second real device")
def test_cuda_against_cpu_is_a_device_mismatch() -> None:
    with pytest.raises(Mismatch, match="attribute 'device'"):
        assert_equivalent(torch.ones(2, device="cuda"), torch.ones(2))


def test_strides_do_not_matter() -> None:
    # compare.py claims no stride sensitivity: a transposed view equals its contiguous copy
    x = torch.arange(12.0).reshape(3, 4)
    assert verdict(x.t(), x.t().contiguous())
    assert verdict(torch.ones(1).expand(5), torch.ones(5))
    d = x.t().contiguous()
    d[3, 1] += 1
    assert compare(x.t(), d).max_abs_index == (3, 1)


def test_none_meets_only_none() -> None:
    assert verdict(None, None)
    assert verdict(None, None, exact=False)
    for a, e in ((None, t([1.0])), (t([1.0]), None)):
        with pytest.raises(Mismatch, match="one side is None") as info:
            assert_equivalent(a, e, paths=("fused", "separate"), exact=False)
        assert "fused: " in str(info.value) and "separate: " in str(info.value)


def test_two_absent_tensors_pass_with_a_report_of_nothing() -> None:
    """None meets None: no element compared, no problem text (reports go to JSON, where it is a string),
    none of any tolerance used, so ``worst()`` ranks a real near miss above it."""
    near = compare(t([1.0 + 2**-20]), t([1.0]), rtol=1e-5, atol=1e-5)
    assert near.ok and 0 < near.tol_used < 1
    for report in (compare(None, None, rtol=1e-5, atol=1e-5), assert_as_accurate(None, None, None)):
        assert (report.ok, report.numel, report.problem, report.tol_used) == (True, 0, "", 0.0)
        assert worst([near, report]) is near and worst([report, near]) is near


def test_one_absent_tensor_fails_saying_what_each_side_holds() -> None:
    present = torch.ones(2, 3)
    for a, e, problem in (
        (None, present, "one side is None (fused: None, separate: tensor(2, 3) torch.float32)"),
        (present, None, "one side is None (fused: tensor(2, 3) torch.float32, separate: None)"),
    ):
        report = compare(a, e, paths=("fused", "separate"))
        assert (report.ok, report.problem, report.numel, report.mismatched) == (False, problem, 0, 0)
        with pytest.raises(Mismatch) as info:
            assert_as_accurate(a, e, torch.ones(2, 3, dtype=F64), paths=("fused", "separate"))
        assert (info.value.report.problem, info.value.report.numel) == (problem, 0)


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3)])
@pytest.mark.parametrize("exact", [True, False])
def test_empty_tensors_are_equal(shape: tuple[int, ...], exact: bool) -> None:
    report = assert_equivalent(torch.ones(shape), torch.ones(shape), exact=exact)
    assert (report.ok, report.numel, report.mismatched, report.max_abs) == (True, 0, 0, 0.0)
    assert (report.max_rel, report.tol_used) == (0.0, 0.0)
    assert "Mismatched elements: 0 / 0 (0.0%)" in report.message()
    assert "Greatest relative difference: 0.0 at index ()" in report.message()


def test_zero_dim_tensors() -> None:
    assert verdict(t(1.5), t(1.5))
    with pytest.raises(Mismatch) as info:
        assert_equivalent(t(1.5), t(2.0))
    r = info.value.report
    assert (r.numel, r.mismatched, r.max_abs, r.max_abs_index, r.max_rel) == (1, 1, 0.5, (), 0.25)
    assert "Mismatched elements: 1 / 1 (100.0%)" in str(info.value)
    assert "Greatest absolute difference: 0.5 at index ()" in str(info.value)


def test_integer_tensors_compare_exactly() -> None:
    big = 2**53
    assert not compare(t([big + 1], torch.int64), t([big], torch.int64)).ok  # not rounded through fp64
    assert verdict(t([True, False], torch.bool), t([True, False], torch.bool))


# ---- the report ----------------------------------------------------------------------------------


def test_report_numbers_are_the_differences() -> None:
    gen = torch.Generator().manual_seed(0)
    expected = torch.randn(8, 16, generator=gen) + 3.0  # away from 0, so every relative difference is finite
    actual = expected.clone()
    # the greatest absolute and the greatest relative difference sit at different indices
    for idx, base, delta in (((1, 2), 0.5, 0.25), ((5, 9), 10.0, -0.5), ((7, 15), 4.0, 0.125)):
        expected[idx] = base
        actual[idx] = base + delta
    actual[3, 3] = NAN  # a NaN mismatch: counted, and left out of the greatest differences
    with pytest.raises(Mismatch) as info:
        assert_equivalent(actual, expected, name="grad.x", paths=("fused", "separate"), context="B1 T3 fp32")
    msg = str(info.value)

    e, a = expected.double().tolist(), actual.double().tolist()
    diffs = {(i, j): abs(a[i][j] - e[i][j]) for i in range(8) for j in range(16) if not math.isnan(a[i][j])}
    rels = {k: d / abs(e[k[0]][k[1]]) for k, d in diffs.items()}
    k = sum(1 for d in diffs.values() if d != 0) + 1
    abs_at, rel_at = max(diffs, key=diffs.__getitem__), max(rels, key=rels.__getitem__)
    assert abs_at != rel_at

    assert msg.splitlines()[0] == "grad.x: fused vs separate are not equal!"
    assert f"Mismatched elements: {k} / 128 ({100 * k / 128:.1f}%)" in msg
    assert "NaN mismatches (NaN in one path only): 1" in msg
    got_abs = re.search(r"Greatest absolute difference: (\S+) at index \((\d+), (\d+)\) \(up to 0.0 allowed\)", msg)
    got_rel = re.search(r"Greatest relative difference: (\S+) at index \((\d+), (\d+)\) \(up to 0.0 allowed\)", msg)
    assert got_abs and got_rel, msg
    assert float(got_abs[1]) == diffs[abs_at] and (int(got_abs[2]), int(got_abs[3])) == abs_at
    assert float(got_rel[1]) == rels[rel_at] and (int(got_rel[2]), int(got_rel[3])) == rel_at
    assert msg.splitlines()[-1] == "Example: B1 T3 fp32"


def test_report_under_tolerance_names_the_allowance() -> None:
    with pytest.raises(Mismatch) as info:
        assert_equivalent(t([1.0, 2.0]), t([1.0, 2.5]), name="grad.q_conv1d.weight", exact=False)
    msg = str(info.value)
    assert msg.splitlines()[0] == "grad.q_conv1d.weight: actual vs expected are not close!"
    assert "Mismatched elements: 1 / 2 (50.0%)" in msg
    assert "Greatest absolute difference: 0.5 at index (1,) (up to 1e-05 allowed)" in msg
    assert "Greatest relative difference: 0.2 at index (1,) (up to 1e-05 allowed)" in msg
    assert "NaN mismatches" not in msg


def test_relative_difference_from_zero_is_infinite() -> None:
    r = compare(t([0.0, 1.0]), t([0.0, 0.0]))
    assert (r.max_rel, r.max_rel_index) == (INF, (1,))


def test_tolerance_used_is_one_at_the_edge_and_more_past_it() -> None:
    # rtol 0.25, atol 0.5 around 2: 0.5 + 0.25 * 2 = 1 allowed; a difference of 1 uses all of it, 2 twice it
    at_edge = compare(t([3.0, 4.0]), t([2.0, 4.0]), rtol=0.25, atol=0.5)
    assert (at_edge.ok, at_edge.tol_used) == (True, 1.0)
    past = compare(t([4.0, 4.0]), t([2.0, 4.0]), rtol=0.25, atol=0.5)
    assert (past.ok, past.tol_used) == (False, 2.0)
    # around 6 the allowance is 2, so the same difference of 1 uses half of it
    assert compare(t([7.0]), t([6.0]), rtol=0.25, atol=0.5).tol_used == 0.5


@pytest.mark.parametrize("delta", [0.5, 2.0, 2**-20], ids=["half", "two", "2**-20"])
def test_an_exact_comparison_uses_none_of_its_tolerance_or_all_of_it(delta: float) -> None:
    """Exact has no allowance: equal tensors used none of it (0), any difference is past it (inf), the
    number that ``worst()`` and check tables rank by."""
    assert compare(t([1.0, 2.0]), t([1.0, 2.0])).tol_used == 0.0
    assert compare(t([1.0, 2.0 + delta]), t([1.0, 2.0])).tol_used == INF
    # an atol alone (rtol 0) is a tolerance, not exact: the same difference uses delta / 4 of atol 4
    assert compare(t([1.0, 2.0 + delta]), t([1.0, 2.0]), atol=4.0).tol_used == delta / 4


def test_a_report_is_an_immutable_value() -> None:
    """Reports are kept by ``observe()`` and passed between rounds by ``worst()``: nobody may change one,
    and two comparisons that found the same are equal (and hash alike)."""
    report = compare(t([1.0]), t([2.0]))
    with pytest.raises(FrozenInstanceError):
        report.ok = True  # type: ignore[misc]
    again = compare(t([1.0]), t([2.0]))
    assert report == again and hash(report) == hash(again)


# ---- kinded mismatches (Hypothesis keeps failures apart by exception type) -------------------------


def test_the_same_kind_is_always_the_same_class() -> None:
    kind = "test_compare: the same kind twice"
    first = mismatch_kind(kind)
    assert first is mismatch_kind(kind) is mismatch_kind(kind)
    assert issubclass(first, Mismatch) and issubclass(first, AssertionError)
    assert first.kind == kind


def test_distinct_kinds_are_distinct_mismatch_classes() -> None:
    output, grad = mismatch_kind("P3 output: fused path"), mismatch_kind("P4 grad.x: fused path")
    assert output is not grad
    assert not issubclass(output, grad) and not issubclass(grad, output)
    report = compare(t([1.0]), t([2.0]))
    with pytest.raises(grad) as info:
        try:
            raise grad("grad.x differs", report)
        except output:  # a handler for one kind lets another through
            pytest.fail("a mismatch of one kind was caught as another")
    assert (info.value.kind, info.value.report) == ("P4 grad.x: fused path", report)


def test_a_kinded_mismatch_names_its_kind_in_the_traceback() -> None:
    kind = "P3 output: channel offset"
    exc = mismatch_kind(kind)("output: fused vs separate are not equal!", compare(t([1.0]), t([2.0])))
    lines = traceback.format_exception_only(type(exc), exc)
    assert lines == [f"gdn_equiv.harness.compare.Mismatch[{kind}]: output: fused vs separate are not equal!\n"]


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_a_kinded_mismatch_survives_pickling_as_its_kind(protocol: int) -> None:
    """A worker process may send a failure back to its parent (compare.py's ``__reduce__``): the copy is
    the same kind's class, with the same message and report."""
    kind = "P4 grad.q_conv1d.weight: tolerance"
    report = compare(t([1.0, 2.0]), t([1.0, 2.5]), name="grad.q_conv1d.weight")
    exc = mismatch_kind(kind)(report.message("B1 T3"), report)
    back = pickle.loads(pickle.dumps(exc, protocol=protocol))
    assert type(back) is mismatch_kind(kind)
    assert (back.kind, str(back), back.report) == (kind, str(exc), report)


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_a_plain_mismatch_survives_pickling(protocol: int) -> None:
    """What ``assert_equivalent`` raises can cross a process boundary too (it pickled its message only,
    and unpickling failed for want of the report)."""
    report = compare(t([1.0]), t([2.0]), name="y")
    exc = Mismatch(report.message("B1 T1"), report)
    back = pickle.loads(pickle.dumps(exc, protocol=protocol))
    assert type(back) is Mismatch and (str(back), back.report) == (str(exc), report)


# ---- properties ----------------------------------------------------------------------------------

SPECIALS = [0.0, -0.0, INF, -INF, NAN, 1e-45, 65504.0, 1e38]


@st.composite
def tensors(draw: st.DrawFn, *, finite: bool = False, nonempty: bool = False) -> torch.Tensor:
    """A tensor of 0 to 3 dims of up to 4 elements each, of any float dtype, with any values (NaN, infinities,
    signed zeros, subnormals, values that overflow the dtype) or finite ones in [-1e3, 1e3]; shrinks towards
    a 0-dim fp64 zero. bf16 has no numpy dtype, so values are drawn as Python floats and cast."""
    dtype = draw(st.sampled_from(FLOATS))
    shape = draw(st.lists(st.integers(1 if nonempty else 0, 4), min_size=1 if nonempty else 0, max_size=3))
    n = math.prod(shape)
    values = st.floats(-1e3, 1e3) if finite else st.floats() | st.sampled_from(SPECIALS)
    flat = draw(st.lists(values, min_size=n, max_size=n))
    return torch.tensor(flat, dtype=F64).to(dtype).reshape(shape)


def oracle_close(a: float, e: float, rtol: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(e):
        return math.isnan(a) and math.isnan(e)
    if a == e:
        return True
    return math.isfinite(a) and math.isfinite(e) and abs(a - e) <= atol + rtol * abs(e)


@given(tensors())
def test_a_tensor_equals_itself(x: torch.Tensor) -> None:
    assert verdict(x, x)
    assert verdict(x, x.clone(), exact=False)
    assert compare(x, x).max_abs == 0.0


@given(st.data(), st.booleans())
def test_verdict_and_numbers_agree_with_an_independent_oracle(data: st.DataObject, exact: bool) -> None:
    a = data.draw(tensors())
    e = data.draw(tensors()).to(a.dtype)
    e = e.reshape(-1)[: a.numel()]
    e = torch.cat([e, a.reshape(-1)[e.numel() :]]).reshape(a.shape)  # some elements equal, some not
    rtol, atol = (0.0, 0.0) if exact else SPEC_TOLERANCES[a.dtype]
    report = compare(a, e, rtol=rtol, atol=atol)

    av, ev = a.double().reshape(-1).tolist(), e.double().reshape(-1).tolist()
    bad = [not oracle_close(x, y, rtol, atol) for x, y in zip(av, ev, strict=True)]
    diffs = [0.0 if math.isnan(x) or math.isnan(y) or x == y else abs(x - y) for x, y in zip(av, ev, strict=True)]
    assert report.mismatched == sum(bad)
    assert report.ok == (not any(bad))
    assert report.nan_mismatched == sum(math.isnan(x) != math.isnan(y) for x, y in zip(av, ev, strict=True))
    assert report.max_abs == max(diffs, default=0.0)
    if diffs:
        flat = int(torch.tensor(range(a.numel())).reshape(a.shape)[report.max_abs_index])
        assert diffs[flat] == report.max_abs


@given(tensors(finite=True, nonempty=True), st.data(), st.booleans())
def test_one_element_past_the_tolerance_is_reported_at_its_index(
    e: torch.Tensor, data: st.DataObject, exact: bool
) -> None:
    flat = data.draw(st.integers(0, e.numel() - 1))
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), e.shape))
    ev = float(e[idx])
    step = 2 * allowed(ev, e.dtype) * data.draw(st.sampled_from([1.0, -1.0]))
    a = e.clone()
    a[idx] = ev + step
    av = float(a[idx])
    assert not within(av, ev, e.dtype)  # the test's own premise: the cast kept it past the tolerance

    with pytest.raises(Mismatch) as info:
        assert_equivalent(a, e, exact=exact)
    r = info.value.report
    assert (r.mismatched, r.max_abs, r.max_abs_index) == (1, abs(av - ev), idx)
    assert f"at index {idx}" in str(info.value)


# ---- assert_as_accurate and least_accurate ---------------------------------------------------------

# fp32, truth 1: eps * max|truth| = 2**-23; expected's error 2**-10, so the bar is 2 * 2**-10 + 2**-23
TRUTH = t([1.0, -0.5], F64)
REF = t([1.0 + 2**-10, -0.5])
EDGE = 1.0 + 2**-9 + 2**-23


def test_accuracy_factor_is_two() -> None:
    assert ACCURACY_FACTOR == 2.0


def test_as_accurate_at_the_bar_passes_and_one_ulp_past_fails() -> None:
    report = assert_as_accurate(t([EDGE, -0.5]), REF, TRUTH)
    assert report.ok and report.max_abs == EDGE - 1.0 and report.tol_used == 1.0
    with pytest.raises(Mismatch, match=r"1 / 2 elements past it") as info:
        assert_as_accurate(t([EDGE + 2**-23, -0.5]), REF, TRUTH, paths=("fla", "reference"))
    assert info.value.report.max_abs_index == (0,)
    assert "fla is less accurate than reference" in str(info.value)


def test_as_accurate_bar_to_fp64_precision() -> None:
    # in fp64 the unit is 2**-52, so the bar is pinned to 2**-52 rather than to fp32's 2**-23
    truth, ref = t([1.0], F64), t([1.0 + 2**-10], F64)
    edge = 1.0 + 2**-9 + 2**-52
    assert assert_as_accurate(t([edge], F64), ref, truth).ok
    with pytest.raises(Mismatch):
        assert_as_accurate(t([up(edge)], F64), ref, truth)


def test_as_accurate_below_the_truth_too() -> None:
    assert assert_as_accurate(t([2.0 - EDGE, -0.5]), REF, TRUTH).ok
    with pytest.raises(Mismatch):
        assert_as_accurate(t([2.0 - EDGE - 2**-23, -0.5]), REF, TRUTH)


def test_as_accurate_uses_its_factor() -> None:
    with pytest.raises(Mismatch):
        assert_as_accurate(t([EDGE, -0.5]), REF, TRUTH, factor=1.0)
    assert assert_as_accurate(t([1.0 + 2**-10 + 2**-23, -0.5]), REF, TRUTH, factor=1.0).ok


def test_as_accurate_against_an_exact_reference_allows_one_unit() -> None:
    exact_ref = t([1.0, -0.5])
    assert assert_as_accurate(t([1.0 + 2**-23, -0.5]), exact_ref, TRUTH).ok
    with pytest.raises(Mismatch):
        assert_as_accurate(t([1.0 + 2**-22, -0.5]), exact_ref, TRUTH)


def test_as_accurate_nans_must_sit_where_the_truth_has_them() -> None:
    with pytest.raises(Mismatch, match="NaN positions differ") as info:
        assert_as_accurate(t([1.0, NAN]), REF, TRUTH)
    assert info.value.report.tol_used == INF
    with pytest.raises(Mismatch, match="NaN positions differ"):
        assert_as_accurate(t([1.0, -0.5]), t([1.0, NAN]), TRUTH)
    truth = t([1.0, NAN], F64)
    assert assert_as_accurate(t([1.0, NAN]), t([1.0, NAN]), truth).ok
    with pytest.raises(Mismatch):
        assert_as_accurate(t([1.0, 0.0]), t([1.0, NAN]), truth)


def test_as_accurate_an_infinity_is_infinitely_wrong() -> None:
    with pytest.raises(Mismatch):
        assert_as_accurate(t([INF, -0.5]), REF, TRUTH)
    with pytest.raises(Mismatch):
        assert_as_accurate(t([-INF, -0.5]), t([INF, -0.5]), t([INF, -0.5], F64))


def test_as_accurate_an_overflow_in_the_reference_bars_only_its_own_position() -> None:
    # a reference run that overflowed at one element must not make the bar infinite everywhere
    assert assert_as_accurate(t([INF, -0.5]), t([INF, -0.5]), TRUTH).ok
    with pytest.raises(Mismatch, match=r"greatest .* = 999\.5 at index \(1,\)"):
        assert_as_accurate(t([1.0, 999.0]), t([INF, -0.5]), TRUTH)


def test_as_accurate_an_infinite_truth_does_not_widen_the_unit() -> None:
    truth = t([INF, 2.0], F64)
    with pytest.raises(Mismatch):
        assert_as_accurate(t([INF, 1000.0]), t([INF, 2.0]), truth)


def test_as_accurate_refuses_missing_or_misshapen_operands() -> None:
    with pytest.raises(Mismatch, match="truth has shape None"):
        assert_as_accurate(REF, REF, None)
    with pytest.raises(Mismatch, match=r"truth has shape \(3,\)"):
        assert_as_accurate(REF, REF, t([1.0, 2.0, 3.0], F64))
    with pytest.raises(Mismatch, match="one side is None"):
        assert_as_accurate(None, REF, TRUTH)
    with pytest.raises(Mismatch, match="attribute 'dtype'"):
        assert_as_accurate(REF.double(), REF, TRUTH)
    assert assert_as_accurate(None, None, None).ok


def test_as_accurate_on_empty_tensors() -> None:
    # nothing measured: no error, a bar of 0 (no reference error, no truth to scale a unit), none of it used
    report = assert_as_accurate(torch.ones(0), torch.ones(0), torch.ones(0, dtype=F64))
    assert report.ok and report.numel == 0
    assert (report.max_abs, report.atol, report.tol_used) == (0.0, 0.0, 0.0)


def test_as_accurate_a_nan_where_the_truth_has_one_is_no_error() -> None:
    # NaNs are judged by position; the NaN slot adds nothing to the greatest error or to the bar
    report = assert_as_accurate(t([1.0, NAN]), t([1.0, NAN]), t([1.0, NAN], F64))
    assert (report.ok, report.max_abs, report.tol_used) == (True, 0.0, 0.0)
    assert report.atol == 2**-23  # the bar is one fp32 unit at |truth| = 1, nothing more


def test_as_accurate_a_bar_of_zero_passes_only_an_exact_answer() -> None:
    # truth 0 and an exact reference: 2 x 0 + eps * 0 = 0 allowed
    zero, truth = t([0.0, 0.0]), t([0.0, 0.0], F64)
    report = assert_as_accurate(zero.clone(), zero, truth)
    assert (report.ok, report.atol, report.tol_used) == (True, 0.0, 0.0)
    with pytest.raises(Mismatch, match=r"1 / 2 elements past it") as info:
        assert_as_accurate(t([0.0, 2**-30]), zero, truth)
    assert (info.value.report.max_abs, info.value.report.tol_used) == (2**-30, INF)


def test_least_accurate_picks_the_greatest_error() -> None:
    truth = t([1.0, 2.0], F64)
    good, bad, worse = t([1.0, 2.0]), t([1.5, 2.0]), t([1.0, 3.0])
    assert least_accurate([good, bad, worse], truth) is worse
    assert least_accurate([worse, good, bad], truth) is worse
    assert least_accurate([bad, t([1.0, 2.5])], truth) is bad  # a tie keeps the first
    overflowed = t([INF, 2.0])
    assert least_accurate([good, overflowed], truth) is overflowed
    assert least_accurate([good, worse], None) is good
    assert least_accurate([good, None], truth) is good


# ---- observe and worst -----------------------------------------------------------------------------


def test_observe_collects_every_report_passing_or_not() -> None:
    with observe() as outer:
        assert_equivalent(t([1.0]), t([1.0]), name="a")
        with observe() as inner:
            with pytest.raises(Mismatch):
                assert_equivalent(t([1.0]), t([2.0]), name="b")
            assert_as_accurate(REF, REF, TRUTH, name="c")
        compare(t([1.0]), t([3.0]), name="not an assertion")
    assert_equivalent(t([1.0]), t([1.0]), name="after")
    assert [r.name for r in outer] == ["a", "b", "c"]
    assert [r.name for r in inner] == ["b", "c"]
    assert [r.ok for r in outer] == [True, False, True]


def test_observe_stops_on_an_exception() -> None:
    with pytest.raises(Mismatch), observe() as reports:
        assert_equivalent(t([1.0]), t([2.0]))
    assert_equivalent(t([1.0]), t([1.0]))
    assert len(reports) == 1


def report(name: str, ok: bool = True, tol_used: float = 0.0, max_abs: float = 0.0) -> Report:
    return Report(name, ("a", "b"), ok, 1, max_abs=max_abs, tol_used=tol_used)


def test_worst_ranks_failures_then_tolerance_used_then_difference() -> None:
    assert worst([]) is None
    keep = report("current", tol_used=0.5)
    assert worst([], keep) is keep
    assert worst([report("x", tol_used=0.4)], keep) is keep
    beaten = report("x", tol_used=0.6)
    assert worst([beaten], keep) is beaten
    failed = report("failed", ok=False, tol_used=0.0)
    assert worst([report("close", tol_used=0.99), failed, report("closer", tol_used=0.999)]) is failed
    larger = report("b", tol_used=0.5, max_abs=2.0)
    assert worst([report("a", tol_used=0.5, max_abs=1.0), larger]) is larger
    first = report("first", tol_used=0.5)
    assert worst([first, report("second", tol_used=0.5)]) is first


def test_worst_of_real_reports_prefers_a_nan_mismatch_to_a_near_miss() -> None:
    near = compare(t([1.0 + 2**-20]), t([1.0]), rtol=1e-5, atol=1e-5)
    nan = compare(t([1.0, NAN]), t([1.0, 2.0]), rtol=1e-5, atol=1e-5)
    assert near.ok and 0 < near.tol_used < 1
    assert worst([near, nan]) is nan
    assert worst([nan, near]) is nan


# ---- assert_tree_equivalent ------------------------------------------------------------------------

PATHS = ("fused", "separate")


@dataclass
class FakeCache:
    """Only what the tree walk looks at: a ``states`` list, one entry per layer."""

    states: list[dict[str, Any] | None] = field(default_factory=list)


def layer_state(seed: int, offset: int = 3) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    conv = tuple(torch.randn(1, 4, 3, generator=gen) for _ in range(3))
    return {"recurrent_state": torch.randn(1, 2, 4, 4, generator=gen), "conv_state": conv, "offset": offset}


def outputs(bump: float = 0.0) -> dict[str, Any]:
    return {
        "y": torch.ones(2, 3),
        "grads": {"x": torch.zeros(4), "q_conv1d.weight": torch.full((4,), 1.0 + bump), "unused": None},
        "conv": (torch.ones(2), torch.arange(3), None),
        "steps": [1, 2.5, True, "silu"],
    }


def tree_mismatch(actual: Any, expected: Any, **kwargs: Any) -> Mismatch:
    with pytest.raises(Mismatch) as info:
        assert_tree_equivalent(actual, expected, name=kwargs.pop("name", "out"), paths=PATHS, **kwargs)
    assert isinstance(info.value, AssertionError)
    return info.value


def test_tree_equal_nested_outputs_return_one_report_per_tensor() -> None:
    reports = assert_tree_equivalent(outputs(), outputs(), name="out", paths=PATHS)
    names = ["out.y", "out.grads.x", "out.grads.q_conv1d.weight", "out.conv[0]", "out.conv[1]"]
    assert [r.name for r in reports] == names
    assert all(r.ok and r.paths == PATHS for r in reports)


def test_tree_a_tensor_difference_names_its_leaf() -> None:
    exc = tree_mismatch(outputs(1e-6), outputs(), context="B1 T3")
    assert str(exc).startswith("out.grads.q_conv1d.weight: fused vs separate are not equal!")
    assert exc.report.name == "out.grads.q_conv1d.weight"
    assert exc.report.mismatched == 4
    assert str(exc).endswith("Example: B1 T3")


def test_tree_a_callable_rule_exempts_the_leaves_it_names() -> None:
    seen: list[str] = []

    def conv_grads_use_the_table(path: str) -> bool:
        seen.append(path)
        return not path.endswith(("_conv1d.weight", "_conv1d.bias"))

    reports = assert_tree_equivalent(outputs(1e-6), outputs(), name="out", paths=PATHS, exact=conv_grads_use_the_table)
    assert seen == ["out.y", "out.grads.x", "out.grads.q_conv1d.weight", "out.conv[0]", "out.conv[1]"]
    exempt = reports[2]
    assert (exempt.name, exempt.rtol, exempt.atol) == ("out.grads.q_conv1d.weight", 1e-5, 1e-5)
    assert all(r.rtol == r.atol == 0 for r in reports if r is not exempt)
    # the rule exempts that one leaf only: the same difference anywhere else still fails
    bumped = outputs()
    bumped["grads"]["x"] = bumped["grads"]["x"] + 1e-6
    exc = tree_mismatch(bumped, outputs(), exact=conv_grads_use_the_table)
    assert exc.report.name == "out.grads.x"
    # and past the table it fails too
    exc = tree_mismatch(outputs(1e-3), outputs(), exact=conv_grads_use_the_table)
    assert str(exc).startswith("out.grads.q_conv1d.weight: fused vs separate are not close!")


def test_tree_exact_false_uses_the_table_everywhere_but_integer_tensors() -> None:
    reports = assert_tree_equivalent(outputs(1e-6), outputs(), name="out", paths=PATHS, exact=False)
    assert {r.name: r.rtol for r in reports}["out.conv[1]"] == 0.0  # an int64 tensor: no tolerance exists
    bumped = outputs()
    bumped["conv"] = (torch.ones(2), torch.arange(3) + 1, None)
    assert tree_mismatch(bumped, outputs(), exact=False).report.name == "out.conv[1]"


def test_tree_missing_and_extra_keys_are_named() -> None:
    a, e = outputs(), outputs()
    del a["grads"]["x"]
    a["grads"]["extra"] = torch.ones(1)
    exc = tree_mismatch(a, e)
    assert str(exc).startswith("out.grads: fused vs separate")
    assert "only in fused: ['extra']; only in separate: ['x']" in str(exc)
    assert exc.report.name == "out.grads"


def test_tree_length_mismatch() -> None:
    a = outputs()
    a["conv"] = a["conv"][:2]
    exc = tree_mismatch(a, outputs())
    assert exc.report.name == "out.conv" and "lengths differ: 2 vs 3" in str(exc)


def test_tree_lists_and_tuples_meet_like_in_torch_testing() -> None:
    assert_tree_equivalent([torch.ones(1), 2], (torch.ones(1), 2), name="out", paths=PATHS)


@pytest.mark.parametrize(
    ("a", "e", "problem"),
    [
        (torch.ones(2), None, "one side is None"),
        (None, torch.ones(2), "one side is None"),
        (torch.ones(2), 1.0, "types differ"),
        ({"a": 1}, [1], "types differ"),
        ([1], {"a": 1}, "types differ"),
        (1, None, "one side is None"),
        (1, True, "types differ"),
        (1, 1.0, "types differ"),
        (FakeCache([]), {}, "types differ"),
        (FakeCache([]), 3, "types differ (fused: FakeCache, separate: int)"),
        ("silu", FakeCache([]), "types differ (fused: str, separate: FakeCache)"),
        ({"a": 1}, 3, "types differ (fused: dict, separate: int)"),
        (2.5, {"a": 1}, "types differ (fused: float, separate: dict)"),
        ("silu", "swish", "values differ: 'silu' != 'swish'"),
        (3, 4, "values differ: 3 != 4"),
        (-0.0, 1e-300, "values differ"),
    ],
)
def test_tree_leaf_mismatches(a: Any, e: Any, problem: str) -> None:
    exc = tree_mismatch({"k": [a]}, {"k": [e]})
    assert str(exc).startswith("out.k[0]: fused vs separate")
    assert problem in str(exc)
    assert exc.report.name == "out.k[0]" and not exc.report.ok


def test_tree_float_leaves_nan_equal_nan_and_signed_zeros_equal() -> None:
    assert_tree_equivalent([NAN, -0.0], [NAN, 0.0], name="out", paths=PATHS)


@pytest.mark.parametrize(
    ("a", "e", "kinds"),
    [(object(), object(), "object with object"), (1, object(), "int with object"), (object(), "x", "object with str")],
)
def test_tree_unknown_leaf_types_are_refused(a: Any, e: Any, kinds: str) -> None:
    # not a mismatch of the outputs but a caller's error, even when the other side is a scalar
    with pytest.raises(TypeError, match=rf"out\[0\]: cannot compare {kinds} "):
        assert_tree_equivalent([a], [e], name="out", paths=PATHS)


def test_tree_cache_layers_compare_leaf_by_leaf() -> None:
    a = FakeCache([layer_state(0), None, layer_state(1)])
    e = FakeCache([layer_state(0), None, layer_state(1)])
    reports = assert_tree_equivalent(a, e, name="cache", paths=PATHS)
    assert [r.name for r in reports][:4] == [
        "cache[0].recurrent_state",
        "cache[0].conv_state[0]",
        "cache[0].conv_state[1]",
        "cache[0].conv_state[2]",
    ]
    assert len(reports) == 8

    state = a.states[2]
    assert state is not None
    state["conv_state"][2][0, 1, 2] += 1.0
    exc = tree_mismatch(a, e, name="cache")
    assert exc.report.name == "cache[2].conv_state[2]"
    assert exc.report.max_abs_index == (0, 1, 2)


def test_tree_cache_offsets_layers_and_presence() -> None:
    exc = tree_mismatch(FakeCache([layer_state(0, offset=3)]), FakeCache([layer_state(0, offset=4)]), name="cache")
    assert exc.report.name == "cache[0].offset" and "values differ: 3 != 4" in str(exc)

    exc = tree_mismatch(FakeCache([layer_state(0), None]), FakeCache([layer_state(0)]), name="cache")
    assert exc.report.name == "cache" and "2 vs 1 layer states" in str(exc)

    exc = tree_mismatch(FakeCache([None, layer_state(0)]), FakeCache([None, None]), name="cache")
    assert str(exc).startswith("cache[1]: fused vs separate are not equal!")
    assert "state written by one path only" in str(exc)

    extra = layer_state(0)
    extra["ffn_state"] = torch.ones(2)  # a family's extra state is compared too, not skipped
    exc = tree_mismatch(FakeCache([extra]), FakeCache([layer_state(0)]), name="cache")
    assert "only in fused: ['ffn_state']" in str(exc)

    one_conv_missing = layer_state(0)
    one_conv_missing["conv_state"] = (*one_conv_missing["conv_state"][:2], None)
    exc = tree_mismatch(one_conv_missing, layer_state(0), name="cache[0]")
    assert exc.report.name == "cache[0].conv_state[2]" and "one side is None" in str(exc)


def test_tree_a_real_cache() -> None:
    def cache(bump: float) -> Cache:
        c = Cache()
        state = layer_state(0)
        c.update(1, recurrent_state=state["recurrent_state"] + bump, conv_state=state["conv_state"], offset=5)
        return c

    reports = assert_tree_equivalent(cache(0.0), cache(0.0), name="cache", paths=PATHS)
    assert reports[0].name == "cache[1].recurrent_state"
    assert tree_mismatch(cache(1.0), cache(0.0), name="cache").report.name == "cache[1].recurrent_state"
    assert_tree_equivalent(None, None, name="cache", paths=PATHS)
    assert "one side is None" in str(tree_mismatch(cache(0.0), None, name="cache"))


@pytest.mark.parametrize(
    ("a", "e", "where", "problem"),
    [
        ([torch.ones(2)], [1.0], "out[0]", "types differ (fused: tensor(2,) torch.float32, separate: float)"),
        ([3], [None], "out[0]", "one side is None (fused: int, separate: None)"),
        ([None], [torch.ones(2)], "out[0]", "one side is None (fused: None, separate: tensor(2,) torch.float32)"),
        ([1, 2], [1, 2, 3], "out", "lengths differ: 2 vs 3 (fused vs separate)"),
        (FakeCache([None, None]), FakeCache([None]), "out", "2 vs 1 layer states (fused vs separate)"),
        (
            FakeCache([None, {"offset": 1}]),
            FakeCache([None, None]),
            "out[1]",
            "state written by one path only (fused: dict, separate: None)",
        ),
    ],
    ids=["types", "none", "none-tensor", "lengths", "layers", "written"],
)
def test_tree_a_structure_mismatch_names_each_side_by_its_path(a: Any, e: Any, where: str, problem: str) -> None:
    exc = tree_mismatch(a, e)
    assert str(exc).splitlines() == [f"{where}: fused vs separate are not equal!", problem]
    # no element was compared: the report counts none
    assert (exc.report.name, exc.report.numel, exc.report.mismatched) == (where, 0, 0)


@pytest.mark.parametrize("exact", [False, lambda path: False], ids=["table", "rule"])
def test_tree_a_tensor_against_none_is_a_mismatch_under_any_rule(exact: Any) -> None:
    for a, e in (([torch.ones(2)], [None]), ([None], [torch.ones(2)])):
        assert "one side is None" in str(tree_mismatch(a, e, exact=exact))


def test_tree_mismatches_are_observed() -> None:
    with observe() as reports, pytest.raises(Mismatch):
        assert_tree_equivalent({"a": torch.ones(1), "b": 1}, {"a": torch.ones(1), "b": 2}, name="out", paths=PATHS)
    assert [(r.name, r.ok) for r in reports] == [("out.a", True), ("out.b", False)]


leaves = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.sampled_from(["silu", "swish"]),
    st.lists(st.floats(-10, 10, width=32), min_size=1, max_size=3).map(torch.tensor),
)
trees = st.recursive(
    leaves,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from("abc"), kids, max_size=3),
    max_leaves=8,
)


def tensor_paths(tree: Any, path: str) -> list[str]:
    if isinstance(tree, torch.Tensor):
        return [path]
    if isinstance(tree, dict):
        return [p for k, v in tree.items() for p in tensor_paths(v, f"{path}.{k}")]
    if isinstance(tree, list):
        return [p for i, v in enumerate(tree) for p in tensor_paths(v, f"{path}[{i}]")]
    return []


def clone_tree(tree: Any, bump_path: str | None = None, path: str = "out") -> Any:
    if isinstance(tree, torch.Tensor):
        return tree + 1.0 if path == bump_path else tree.clone()
    if isinstance(tree, dict):
        return {k: clone_tree(v, bump_path, f"{path}.{k}") for k, v in tree.items()}
    if isinstance(tree, list):
        return [clone_tree(v, bump_path, f"{path}[{i}]") for i, v in enumerate(tree)]
    return tree


@given(trees, st.data())
def test_tree_a_copy_is_equivalent_and_a_bumped_leaf_is_named(tree: Any, data: st.DataObject) -> None:
    reports = assert_tree_equivalent(clone_tree(tree), tree, name="out", paths=PATHS)
    paths = tensor_paths(tree, "out")
    assert [r.name for r in reports] == paths
    if paths:
        leaf = data.draw(st.sampled_from(paths))
        assert tree_mismatch(clone_tree(tree, leaf), tree).report.name == leaf


# ---- killed mutants (tools/mutate.py, docs/mutation.md) ----------------------------------------------


@pytest.mark.parametrize("kind", ["", None, 3, b"bias"], ids=["empty", "None", "int", "bytes"])
def test_a_mismatch_kind_must_be_a_nonempty_string(kind: object) -> None:
    """Kinds name failure classes Hypothesis keeps apart; an empty or non-string kind is a caller's bug."""
    with pytest.raises(TypeError, match="non-empty string"):
        mismatch_kind(kind)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "actual, expected",
    [(None, None), (torch.zeros(3), torch.zeros(4)), (torch.zeros(3), torch.zeros(3, dtype=torch.float64))],
    ids=["both-absent", "shape", "dtype"],
)
def test_a_comparison_that_measured_no_values_reports_no_difference(actual, expected) -> None:
    """Where no element was compared (absent tensors, or shapes/dtypes that differ), the report's
    greatest differences are 0, never a made-up number that ``worst()`` or a table could show."""
    report = compare(actual, expected)
    assert report.max_abs == 0.0 and report.max_rel == 0.0
    assert (report.mismatched, report.nan_mismatched, report.tol_used) == (0, 0, 0.0)
    assert report.ok == (actual is None and expected is None)


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.9])
def test_tolerance_used_is_the_greatest_difference_over_what_the_tolerance_allows(fraction: float) -> None:
    """``tol_used`` (what check tables show next to a tolerance) is max |a - e| / (atol + rtol * |e|):
    a difference of 90% of the allowance reads 0.9, whatever the magnitude of the values."""
    rtol, atol = 1e-5, 1e-5
    expected = torch.tensor([10.0, -20.0, 0.5, 300.0], dtype=torch.float64)
    actual = expected + fraction * (atol + rtol * expected.abs())
    report = compare(actual, expected, rtol=rtol, atol=atol)
    assert report.ok
    assert report.tol_used == pytest.approx(fraction, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize(
    "actual, expected", [([1.0], 1.0), (1.0, (1.0,)), ((2,), "x")], ids=["list-float", "float-tuple", "tuple-str"]
)
def test_a_sequence_against_a_non_sequence_is_a_structure_mismatch(actual, expected) -> None:
    """One path returning a sequence where the other returns a scalar is a finding about that leaf
    (a ``Mismatch`` naming the path and both kinds), not an internal error of the comparison."""
    with pytest.raises(Mismatch, match="types differ") as info:
        assert_tree_equivalent({"cache": actual}, {"cache": expected}, name="out", paths=("fused", "separate"))
    assert "out.cache" in str(info.value)
