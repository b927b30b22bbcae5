"""P6: every guard condition is necessary: Hypothesis finds, by itself, a state breaking only that
condition where forcing the fused path is wrong (different output, gradients or cache, or a crash)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, find, settings

from gdn_equiv import properties as P
from gdn_equiv.backends import available_backends
from gdn_equiv.example import Example
from gdn_equiv.guard import Condition
from gdn_equiv.strategies import violating
from gdn_equiv.testing import count_example

# No shrink phase: the first state where forced fusion is wrong proves the condition necessary;
# `gdn-equiv check` shrinks the counterexamples it reports.
SEARCH = settings(
    deadline=None, database=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate]
)


def _forced_fusion_is_wrong(device: str):
    def wrong(example: Example) -> bool:
        count_example()
        try:
            return P.forced_fusion_error(example, device=device) is not None
        except P.NotApplicable:
            return False

    return wrong


@pytest.mark.parametrize("condition", [c for c in Condition if c is not Condition.G5], ids=lambda c: c.id)
def test_every_guard_condition_is_necessary(condition, gdn_family, gdn_backend, device):
    found = find(
        violating(condition, backends=(gdn_backend,), family=gdn_family),
        _forced_fusion_is_wrong(device),
        settings=settings(SEARCH, max_examples=300),
    )
    problem = P.forced_fusion_error(found, device=device)
    print(f"{condition}: {problem}\n  shrunk: {found.short()}")
    assert problem is not None


def test_backend_condition_is_necessary(gdn_family, gdn_backend, device):
    """G5 needs two backends that differ numerically; triton (interpreter on CPU) is the second."""
    # the built-in kernels, which differ numerically; a plug-in registered by another test (a bitwise
    # twin of torch, say) would make the search look for a difference that cannot exist
    others = [b for b in available_backends() if b != gdn_backend and b in ("torch", "triton", "cuda")]
    if not others:
        pytest.skip(f"G5 needs a second available conv backend besides {gdn_backend!r}")
    found = find(
        violating(Condition.G5, backends=(gdn_backend, *others), family=gdn_family),
        _forced_fusion_is_wrong(device),
        settings=settings(SEARCH, max_examples=300),
    )
    assert P.forced_fusion_error(found, device=device) is not None
