"""P1 in the installed gate: the guard of the target under test decides as the spec's decision table.

The record ``P1-guard-vs-spec`` (:mod:`gdn_equiv.harness.registry`) generates two tests: on drawn layer states
(``test_properties``, like every property) and here, on the exhaustive decision tables
(:data:`gdn_equiv.harness.guard_oracle.TABLES`, the oracle written without calling the guard), one test per
family of ``--gdn-family``, for the target of ``--gdn-target``: ours (its layer's ``guard``), fla in the
installed version (its own decider, asked on an fla layer holding each state), a target offering a guard probe.

Every state where guard and spec differ is classified, in both directions, and the smallest state of each
kind is printed with the conditions that disagree:

- an unsafe fusion (the guard fuses where the spec refuses), or reasons that miss a condition the spec
  fails (the guard would fuse once the others hold): ``FAIL``;
- a missed fusion (the guard refuses where fusion is exact), with the extra reasons such a stricter guard
  gives where the spec refuses too: ``missed fusion``, a failure of its own kind; ``--gdn-allow-missed-fusion``
  lets it pass as an xfail, reported with its states, never silently;
- an upstream target's known gaps (its version row's ``known_gaps``, as ``tests/`` marks them): a strict
  xfail naming each with its smallest state; a known gap the table no longer finds fails (the row is stale),
  and so does any gap the row does not list.

States a target cannot hold (fla has no relu or L2-norm conv, no second device here) are counted and
left out; a table of which no state can be built is ``n/a`` with that reason.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from gdn_equiv.harness import registry
from gdn_equiv.harness.compare import Report
from gdn_equiv.harness.guard_tables import probe_of, verdict, walk
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.harness.properties import MissedFusion, UnsafeFusion, WrongReasons

# first: a few seconds on a CPU, deterministic, and red on any guard edit that breaks P1 (issue #53)
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.first(0)]


def _table_test(record: registry.PropertyRecord) -> Any:
    def test(gdn_family: str, gdn_target: str, fla_core: str, allow_missed_fusion: bool) -> None:
        probe = probe_of(gdn_target, gdn_family, fla_core)
        if probe is None:
            pytest.skip(f"{Outcome.NOT_APPLICABLE}: target {gdn_target!r} offers no guard probe (drawn states only)")
        differences, counts = walk(probe)
        asked = sum(a for a, _ in counts.values())  # decisions, not examples: not counted as Hypothesis' are
        if asked == 0:
            pytest.skip(f"{Outcome.NOT_APPLICABLE}: {probe.name} can hold no state of the decision tables")
        held = ", ".join(f"{name}: {a} asked, {u} not holdable" for name, (a, u) in counts.items())
        print(f"{record.name} on {probe.name}: {asked} states ({held}); {len(differences)} differ: "
              f"{dict(Counter(probe.gap_kind(d) for d in differences))}")  # fmt: skip
        outcome, text = verdict(probe, differences, allow_missed=allow_missed_fusion)
        if outcome == Outcome.PASSED:
            return
        if outcome == "xfailed":
            pytest.xfail(text)
        report = Report("guard", (probe.name, "spec"), False, len(differences), problem=str(outcome))
        if outcome == Outcome.MISSED_FUSION:
            raise MissedFusion(text, report)
        raise (UnsafeFusion if any(d.kind == "unsafe" for d in differences) else WrongReasons)(text, report)

    assert record.table_test is not None
    test.__name__ = test.__qualname__ = record.table_test
    test.__doc__ = f"{record.name} on the exhaustive decision tables: {record.summary}."
    return test


for _record in registry.property_records():
    if _record.table_test is not None:
        globals()[_record.table_test] = _table_test(_record)
