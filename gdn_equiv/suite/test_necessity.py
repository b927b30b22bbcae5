"""P6: every guard condition is necessary: Hypothesis finds, by itself, a state breaking only that
condition where forcing the fused path is wrong (different output, gradients or cache, or a crash).

The search is the one ``gdn-equiv check`` runs (:func:`gdn_equiv.run.runner.find_counterexample`, its states
and budget from the condition's record in :mod:`gdn_equiv.harness.registry`), so the two drivers give one verdict:

- a counterexample: the test passes;
- none found on a built-in backend (torch, triton, cuda), where every condition is known to be
  necessary: a failure (a strategy or fused-path regression);
- none found on a plug-in kernel: a finding about the kernel, not a defect (a kernel that computes in fp32
  whatever its parameters' dtype has no use for G9). It is reported, "G9 is not needed for this kernel: no
  counterexample in N states", and the test is skipped with that reason, never passed (SPEC P6, §10): a skip
  says the test's premise (this kernel has a counterexample) does not hold, which is the finding;
- the separate (production) path failing, or no applicable state at all: a failure;
- ``n/a`` (G5 with no second built-in backend here): skipped with the reason.

Under ``--gdn-isolate`` each state runs in a worker process, as every other property's examples do.
"""

from __future__ import annotations

import pytest

from gdn_equiv.harness import registry
from gdn_equiv.harness.necessity import verdict
from gdn_equiv.harness.testing import count_example
from gdn_equiv.run import runner


@pytest.mark.parametrize("condition", [r.condition for r in registry.necessity_records()], ids=lambda c: c.id)
def test_every_guard_condition_is_necessary(condition, gdn_family, gdn_backend, device):
    check = runner.find_counterexample(condition, gdn_backend, device=device, family=gdn_family, shrink=False)
    for _ in range(check.examples):
        count_example()
    verdict(check)
