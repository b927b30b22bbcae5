"""The gap search behind ``gdn-equiv check/fuzz --target``, on its own: a synthetic target handed in as
its ``check`` (no upstream package needed; the fla searches are in test_fla_target.py)."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from gdn_equiv.harness import properties as P
from gdn_equiv.harness.compare import Report
from gdn_equiv.model.example import Example
from gdn_equiv.run.runner import search_gaps
from gdn_equiv.targets import UpstreamRefused


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


def _refusal(message: str = "planted: two rows refused") -> UpstreamRefused:
    return UpstreamRefused("gated_deltanet", "SyntheticLayer", {"batch": 2}, AssertionError(message))


def test_a_refused_config_is_a_row_of_its_own_and_the_search_goes_on() -> None:
    """A synthetic upstream whose constructor refuses every batch-2 example (two messages, by length):
    each distinct refusal is one ``upstream refused`` row with its example and upstream's message, the
    refused examples count as not applicable, and the search still finds and shrinks the gap elsewhere."""

    class GapA(P.UpstreamGap):
        pass

    report = Report("guard", ("synthetic", "spec"), False, 1)

    def synthetic_guard(example: Example, **_: object) -> Any:
        if example.batch >= 2:
            raise _refusal("planted: long rows refused" if example.seq_len >= 4 else "planted: two rows refused")
        if example.seq_len >= 2:
            raise GapA("A", report)
        return types.SimpleNamespace(reason_id="fuse")

    checks = list(search_gaps("synthetic", max_examples=200, check=synthetic_guard))
    refused = [c for c in checks if c.result == "upstream refused"]
    assert sorted(c.name for c in refused) == ["P1-synthetic-upstream-refused", "P1-synthetic-upstream-refused#2"]
    for row in refused:
        assert row.example is not None and row.example.batch == 2 and row.family == "gated_deltanet"
        assert "SyntheticLayer refused" in row.failure and "planted:" in row.failure
        assert row.worst is not None and row.worst.problem.startswith("AssertionError: planted:")
    gaps = {c.name: c.example for c in checks if c.result == "FAIL"}
    assert list(gaps) == ["P1-synthetic-gap-A"]
    assert (gaps["P1-synthetic-gap-A"].batch, gaps["P1-synthetic-gap-A"].seq_len) == (1, 2)
    summary = checks[-1]
    assert summary.name == "P1-synthetic-guard-vs-spec" and summary.result == "pass"
    assert summary.not_applicable == sum(c.examples for c in refused) > 0


def test_a_search_whose_every_example_was_refused_is_not_exercised() -> None:
    def refusing(example: Example, **_: object) -> Any:
        raise _refusal()

    checks = list(search_gaps("synthetic", max_examples=20, check=refusing))
    assert [(c.name, c.result) for c in checks] == [
        ("P1-synthetic-upstream-refused", "upstream refused"),
        ("P1-synthetic-guard-vs-spec", "not exercised"),
    ]
    assert checks[-1].examples == checks[-1].not_applicable == checks[0].examples > 0
    assert "upstream refused all" in checks[-1].failure


def test_a_search_whose_budget_share_was_zero_is_not_reached() -> None:
    """``fuzz --family all`` gives each family its share of what is left: a share of 0 s runs no example,
    and that row is ``not reached`` (it used to be a ``pass`` of 0 examples)."""
    calls: list[Example] = []

    def never(example: Example, **_: object) -> Any:
        calls.append(example)
        return types.SimpleNamespace(reason_id="fuse")

    (summary,) = search_gaps("synthetic", max_examples=20, seconds=0.0, check=never)
    assert (summary.result, summary.examples, calls) == ("not reached", 0, [])
    assert "ended before its first example" in summary.failure


def test_a_gap_row_is_named_for_what_its_run_showed() -> None:
    """The search shrinks on the guards alone (a missing bias is only predicted there); the row takes the
    kind the shrunk example's run raised: the crash only when it was seen."""
    report = Report("guard", ("synthetic", "spec"), False, 1)

    def search(seen: type[P.UpstreamGap]) -> list[str]:
        def synthetic_guard(example: Example, *, demonstrate: bool, **_: object) -> Any:
            if example.seq_len >= 2:
                raise (seen if demonstrate else P.GapMissingBias)("missing bias", report)
            return types.SimpleNamespace(reason_id="fuse")

        return [c.name for c in search_gaps("synthetic", max_examples=100, check=synthetic_guard)]

    assert search(P.GapMissingBiasCrash)[0] == "P1-synthetic-gap-MissingBiasCrash"
    assert search(P.GapMissingBias)[0] == "P1-synthetic-gap-MissingBias"


class _Run:
    """A stand-in handle whose run raises what the test says (or returns)."""

    def __init__(self, raises: Exception | None):
        self.raises = raises

    def run(self, inputs, prologue):
        if self.raises is not None:
            raise self.raises
        return torch.ones(1), None

    def path_taken(self):
        return "separate"


@pytest.mark.parametrize(
    ("inputs", "raises", "kind", "words"),
    [
        (None, None, P.GapMissingBias, "would concatenate a missing bias (predicted from the facts; not run)"),
        ("x", TypeError("expected Tensor, got NoneType"), P.GapMissingBiasCrash, "raises TypeError: expected Tensor"),
        (
            "x",
            RuntimeError("no kernel here"),
            P.GapMissingBias,
            "raised RuntimeError: no kernel here (not the TypeError",
        ),
        ("x", None, P.GapMissingBias, "raised nothing (path taken: separate): not a crash"),
    ],
    ids=["predicted", "crash-seen", "other-error", "nothing-raised"],
)
def test_a_missing_bias_is_a_crash_only_when_the_crash_was_seen(inputs, raises, kind, words) -> None:
    report = Report("guard", ("synthetic", "spec"), False, 1)
    with pytest.raises(P.GapMissingBias) as gap:
        P._missing_bias(_Run(raises), inputs, "synthetic", "conv_bias=True, convs k=none", "cpu", "ctx", report)
    assert type(gap.value) is kind and words in str(gap.value)


def test_refusals_that_differ_only_in_numbers_or_addresses_are_one_kind() -> None:
    """One rule refuses many configs ("got 1", "got 3"): one row, not one per config."""

    def kind(message: str) -> str:
        return UpstreamRefused("abc", "ABCAttention", {}, AssertionError(message)).kind

    assert kind("Rotary dimension must be even, got 1") == kind("Rotary dimension must be even, got 3")
    assert kind("dict at 0x7f45ab10 refused") == kind("dict at 0x7f1200cd refused")
    assert kind("Rotary dimension must be even, got 1") != kind("key dim must be divisible by num_heads of 3")
