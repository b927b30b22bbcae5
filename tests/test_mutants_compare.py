"""Gaps in the comparison's tests that mutation testing found (docs/mutation.md, scripts/mutate.py compare)."""

from __future__ import annotations

import pytest
import torch

from gdn_equiv.compare import Mismatch, assert_tree_equivalent, compare, mismatch_kind


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
