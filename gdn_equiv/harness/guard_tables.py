"""P1 on the spec's exhaustive decision tables: a target's guard probe asked every state of
:data:`gdn_equiv.harness.guard_oracle.TABLES`, and the table test's verdict from the differences
(``gdn_equiv.suite.test_guard`` runs it for the target under test; ``tests/test_guard_gate.py`` against planted
guards)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gdn_equiv.harness import guard_oracle
from gdn_equiv.harness.guard_oracle import Difference
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.targets import get_target

__all__ = ["probe_of", "verdict", "walk"]


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
