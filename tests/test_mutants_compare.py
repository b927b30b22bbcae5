"""Gaps in the comparison's tests that mutation testing found (docs/mutation.md, scripts/mutate.py compare)."""

from __future__ import annotations

import pytest
import torch

from gdn_equiv.compare import compare, mismatch_kind


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
