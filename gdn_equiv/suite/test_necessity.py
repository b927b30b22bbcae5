"""P6: every guard condition is necessary: Hypothesis finds, by itself, a state breaking only that
condition where forcing the fused path is wrong (different output, gradients or cache, or a crash).

For the built-in backends (torch, triton, cuda) necessity is known, so a search that finds nothing is a
failure. For a plug-in kernel it is a finding about the kernel, not a defect: a condition may be stricter
than that kernel needs (a kernel that computes in fp32 whatever its parameters' dtype has no use for G9).
Such a search is reported, "G9 is not needed for this kernel: no counterexample in N states", and the
test is skipped with that reason, never passed (SPEC P6, §10). Skipped rather than xfailed: an xfail
says "a known defect, expected to fail", and there is no defect here; a skip says the test's premise
(this kernel has a counterexample) does not hold, which is the finding. The gating run stays green,
and ``pytest -rs`` lists each such condition with its reason.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from gdn_equiv import properties as P
from gdn_equiv.backends import BUILTIN_BACKENDS, available_backends
from gdn_equiv.example import Example
from gdn_equiv.guard import Condition
from gdn_equiv.strategies import violating
from gdn_equiv.testing import MISS_BOUND, count_example

# No shrink phase: the first state where forced fusion is wrong proves the condition necessary;
# `gdn-equiv check` shrinks the counterexamples it reports.
SEARCH = settings(
    deadline=None, database=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate]
)
MAX_STATES = 300


class _Wrong:
    """The search predicate: forcing fusion on this state is wrong; counts the states it saw, and those
    where the property did not apply (with the last reason)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.states = 0
        self.not_applicable = 0
        self.why: str | None = None

    def __call__(self, example: Example) -> bool:
        count_example()
        self.states += 1
        try:
            return P.forced_fusion_error(example, device=self.device) is not None
        except P.NotApplicable as exc:
            self.not_applicable += 1
            self.why = str(exc)
            return False


def search_counterexample(
    condition: Condition, strategy: st.SearchStrategy[Example], backend: str, device: str
) -> tuple[Example, str]:
    """A state breaking ``condition`` where forced fusion is wrong, and what goes wrong there.

    None found: a failure for a built-in ``backend``, a report and a skip for a plug-in one
    (:func:`no_counterexample`). On a built-in backend the search must hit, so it may run up to
    ``MISS_BOUND`` states (it stops at its first hit; first hits have a heavy tail); a plug-in's search
    stops at ``MAX_STATES``, since there a miss is a possible answer and its cost is the whole budget."""
    wrong = _Wrong(device)
    budget = MISS_BOUND if backend in BUILTIN_BACKENDS else MAX_STATES
    try:
        found = find(strategy, wrong, settings=settings(SEARCH, max_examples=budget))
    except NoSuchExample:
        no_counterexample(condition, backend, wrong.states, not_applicable=wrong.not_applicable, why=wrong.why)
    problem = P.forced_fusion_error(found, device=device)
    assert problem is not None, f"{condition}: the state found no longer shows a problem: {found.short()}"
    return found, problem


def no_counterexample(
    condition: Condition,
    backend: str,
    states: int,
    *,
    not_applicable: int = 0,
    why: str | None = None,
    report: Callable[[str], None] = print,
) -> None:
    """What a search without a counterexample means: raises ``AssertionError`` for a built-in backend,
    else reports the condition as not needed for the kernel and skips (see the module docstring). A
    search whose states did not apply (the separate path raised too, say) says so: that is no evidence
    either way, and the reason is usually the environment."""
    inapplicable = f" ({not_applicable} of them not applicable; the last: {why})" if not_applicable else ""
    message = f"{condition.id} is not needed for this kernel: no counterexample in {states} states{inapplicable}"
    if backend in BUILTIN_BACKENDS:
        raise AssertionError(
            f"{condition}: no state where forcing fusion is wrong in {states} states{inapplicable} on the "
            f"built-in backend {backend!r}, where the condition is known to be necessary (a strategy or "
            "fused-path regression)"
        )
    report(f"{message} (backend {backend!r}; {condition}: {condition.rule})")
    pytest.skip(f"{message} (backend {backend!r})")


@pytest.mark.parametrize("condition", [c for c in Condition if c is not Condition.G5], ids=lambda c: c.id)
def test_every_guard_condition_is_necessary(condition, gdn_family, gdn_backend, device):
    found, problem = search_counterexample(
        condition, violating(condition, backends=(gdn_backend,), family=gdn_family), gdn_backend, device
    )
    print(f"{condition}: {problem}\n  shrunk: {found.short()}")


def test_backend_condition_is_necessary(gdn_family, gdn_backend, device):
    """G5 needs two backends that differ numerically; triton (interpreter on CPU) is the second."""
    # the built-in kernels, which differ numerically; a plug-in registered by another test (a bitwise
    # twin of torch, say) would make the search look for a difference that cannot exist
    others = [b for b in available_backends() if b != gdn_backend and b in BUILTIN_BACKENDS]
    if not others:
        pytest.skip(f"G5 needs a second available conv backend besides {gdn_backend!r}")
    strategy = violating(Condition.G5, backends=(gdn_backend, *others), family=gdn_family)
    search_counterexample(Condition.G5, strategy, gdn_backend, device)
