"""The gap search behind ``gdn-equiv check/fuzz --target``, on its own: a synthetic target handed in as
its ``check`` (no upstream package needed; the fla searches are in test_fla_target.py)."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from gdn_equiv import properties as P
from gdn_equiv.compare import Report
from gdn_equiv.example import Example
from gdn_equiv.runner import search_gaps


@pytest.mark.slow
def test_gap_search_reports_each_kind_at_its_own_minimum() -> None:
    """Two overlapping gap kinds of a synthetic target (``A`` wherever batch >= 2, else ``B`` wherever
    seq_len >= 2, handed to the search as its ``check``): shrinking one kind meets the other, and each must
    still come out at its own minimum, not as the first example that failed (reporting that one instead
    of the shrunk one fails this with ``(2, 3) != (2, 1)``)."""

    class GapA(P.UpstreamGap):
        pass

    class GapB(P.UpstreamGap):
        pass

    report = Report("guard", ("synthetic", "spec"), False, 1)

    def synthetic_guard(example: Example, **_: object) -> Any:
        if example.batch >= 2:
            raise GapA("A", report)
        if example.seq_len >= 2:
            raise GapB("B", report)
        return types.SimpleNamespace(reason_id="fuse")

    found = search_gaps("synthetic", max_examples=300, check=synthetic_guard)
    checks = {c.name: c.example for c in found if c.result == "FAIL"}
    assert checks.keys() == {"P1-synthetic-gap-A", "P1-synthetic-gap-B"}
    a, b = checks["P1-synthetic-gap-A"], checks["P1-synthetic-gap-B"]
    assert a is not None and b is not None
    assert (a.batch, a.seq_len) == (2, 1), a
    assert (b.batch, b.seq_len) == (1, 2), b


def test_a_shrink_the_budget_ends_is_reported_with_the_example_it_reached_and_the_search_stops() -> None:
    """The budget runs out while a gap is being shrunk (a clock that jumps once the gap is first seen):
    the gap is still reported (a finding is never lost), with the example shrinking had reached and a
    note that it is not minimal, and the search ends there instead of finishing the shrink (with
    ``--family all`` a long shrink used to eat the next families' shares)."""

    class GapA(P.UpstreamGap):
        pass

    report = Report("guard", ("synthetic", "spec"), False, 1)
    now = [0.0]
    calls = []

    def synthetic_guard(example: Example, **kwargs: object) -> Any:
        if not kwargs.get("demonstrate"):
            calls.append(example)
        if example.batch >= 2 or example.seq_len >= 2:
            now[0] = 100.0  # the budget is gone from the first failure on
            raise GapA("A", report)
        return types.SimpleNamespace(reason_id="fuse")

    checks = list(search_gaps("synthetic", max_examples=300, seconds=10.0, clock=lambda: now[0], check=synthetic_guard))
    gaps = [c for c in checks if c.result == "FAIL"]
    assert [c.name for c in gaps] == ["P1-synthetic-gap-A"]
    assert "the time budget ended its shrinking" in gaps[0].failure
    first_failing = next(e for e in calls if e.batch >= 2 or e.seq_len >= 2)
    assert gaps[0].example == first_failing  # no candidate ran after the budget was gone
    assert checks[-1].name == "P1-synthetic-guard-vs-spec" and checks[-1].budget_spent


class _Paths:
    """A stand-in handle whose two paths return or raise what the test says."""

    def __init__(self, fused, separate):
        self.out = {"fused": fused, "separate": separate}

    def run(self, inputs, prologue):
        out = self.out[prologue]
        if isinstance(out, Exception):
            raise out
        return out, None


@pytest.mark.parametrize(
    ("fused", "separate", "expected"),
    [
        (torch.ones(2), torch.ones(2), "fused vs separate differ by up to 0"),
        (torch.ones(2), torch.zeros(2), "fused vs separate differ by up to 1"),
        (TypeError("cat None"), torch.ones(2), "run on cuda: TypeError: cat None"),
        (RuntimeError("in place"), RuntimeError("in place too"), "both paths raise, so not the fusion's doing"),
        (torch.ones(2), RuntimeError("only here"), "only the separate path raises: RuntimeError: only here"),
    ],
)
def test_a_gap_cost_says_whose_error_it_is(fused, separate, expected):
    """The cost shown for a gap: an error the separate path raises too is the layer's (fla's ABC layer
    multiplies a conv output in place under a mask, in both paths), not the fusion's."""
    assert expected in P._fused_vs_separate(_Paths(fused, separate), None, "cuda")
