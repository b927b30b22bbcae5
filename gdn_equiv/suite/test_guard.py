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

from collections import Counter, defaultdict
from typing import Any

import pytest

from gdn_equiv.harness import guard_oracle, registry
from gdn_equiv.harness.compare import Report
from gdn_equiv.harness.guard_oracle import Difference
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.harness.properties import MissedFusion, UnsafeFusion, WrongReasons
from gdn_equiv.targets import get_target

# first: a few seconds on a CPU, deterministic, and red on any guard edit that breaks P1 (issue #53)
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.first(0)]

#: a walk of the tables per guard: ours is one function of facts, whatever the family (a planted guard is another)
_WALKS: dict[Any, tuple[list[Difference], dict[str, tuple[int, int]]]] = {}


def probe_of(target: str, family: str, fla_core: str) -> Any:
    """The target's guard probe for ``family``, or ``None`` when it offers none."""
    t = get_target("fla", core=fla_core) if target == "fla" else get_target(target)
    make = getattr(t, "guard_probe", None)
    return None if make is None else make(family)


def walk(probe: Any, tables: tuple[str, ...] | None = None) -> tuple[list[Difference], dict[str, tuple[int, int]]]:
    """Every state of the decision tables (default all; ``tables`` names some) asked of ``probe``: the
    differences, and per table (states asked, states the target cannot hold)."""
    key = (getattr(probe, "guard", None) or (type(probe), probe.family), tables)
    if key in _WALKS:
        return _WALKS[key]
    differences: list[Difference] = []
    counts: dict[str, tuple[int, int]] = {}
    for name in tables or tuple(guard_oracle.TABLES):
        per_conv = guard_oracle.TABLES[name]
        asked = unbuilt = 0
        for layer, call in guard_oracle.table_states(per_conv):
            answer = probe.ask(layer, call)
            if answer is None:
                unbuilt += 1
                continue
            asked += 1
            fuses, failed, facts = answer
            d = guard_oracle.difference(facts, call, fuses, failed)
            if d is not None:
                differences.append(d)
        counts[name] = (asked, unbuilt)
    _WALKS[key] = (differences, counts)
    return differences, counts


def verdict(probe: Any, differences: list[Difference], *, allow_missed: bool) -> tuple[Outcome | str, str]:
    """The table test's outcome from its differences: ``pass``, ``FAIL`` (an unsafe fusion, wrong reasons, a
    gap the target's known gaps do not list, or a known gap no longer found), ``missed fusion``, or
    ``xfailed`` (the target's known gaps exactly, or a missed fusion allowed), with the text to report."""
    by_kind: dict[str, list[Difference]] = defaultdict(list)
    for d in differences:
        by_kind[probe.gap_kind(d)].append(d)
    known = set(probe.known_gaps())
    lines = []
    for (kind, conditions), d in sorted(guard_oracle.smallest(differences, probe.gap_kind).items()):
        n = sum(1 for e in by_kind[kind] if e.conditions == conditions)
        tag = "known" if kind in known else "NEW"
        lines.append(f"[{tag}] {kind} ({', '.join(conditions) or '-'}): {n} states; smallest:\n{d.describe()}")
    found = "\n".join(lines)
    new = set(by_kind) - known
    gone = known - set(by_kind)
    new_missed = {k for k in new if all(d.direction == "missed" for d in by_kind[k])}  # too strict only
    if new - new_missed or gone:
        stale = f"known gaps not found on the tables (the version row is stale): {sorted(gone)}\n" if gone else ""
        return Outcome.FAILED, f"{probe.name}: guard != spec\n{stale}{found}"
    if new_missed:
        return (
            "xfailed" if allow_missed else Outcome.MISSED_FUSION,
            f"{Outcome.MISSED_FUSION}{' (allowed by --gdn-allow-missed-fusion)' if allow_missed else ''}: "
            f"{probe.name} falls back where fusion is exact\n{found}",
        )
    if known:
        return "xfailed", f"known gaps of {probe.name} (its version row): {sorted(known)}\n{found}"
    return Outcome.PASSED, ""


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
