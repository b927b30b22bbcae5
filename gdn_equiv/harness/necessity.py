"""P6's verdict under pytest: what a necessity search's ledger row means for the test that ran it.

The search is the one ``gdn-equiv check`` runs (:func:`gdn_equiv.run.runner.find_counterexample`), so the two
drivers give one verdict (SPEC P6, §10): a counterexample passes; none found on a plug-in kernel is a report
and a skip with its reason (a finding about the kernel, never a pass); ``n/a`` is a skip with its reason;
anything else (none found on a built-in backend, no applicable state, the separate path broken) fails.
The gate's :mod:`gdn_equiv.suite.test_necessity` and the harness's own tests judge a row here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from gdn_equiv.harness.ledger import Outcome

if TYPE_CHECKING:
    from gdn_equiv.run.rows import Check


def verdict(check: Check, report: Callable[[str], None] = print) -> None:
    """What a necessity search's row means under pytest: the ledger's outcome, a pass, a skip with its
    reason (a report, never a pass) or a failure."""
    outcome = Outcome(check.result)
    if outcome == Outcome.COUNTEREXAMPLE:
        assert check.example is not None
        report(f"{check.name}: {check.failure}\n  found: {check.example.short()}")
        return
    if outcome == Outcome.NOT_APPLICABLE:
        pytest.skip(f"{check.name} on {check.backend!r}: {check.failure}")
    if outcome.reports:  # none found
        report(f"{check.failure} (backend {check.backend!r})")
        pytest.skip(f"{check.failure} (backend {check.backend!r})")
    example = f"\nExample: {check.example.short()}" if check.example is not None else ""
    raise AssertionError(f"{check.name} on {check.backend!r}: {check.result}: {check.failure}{example}")
