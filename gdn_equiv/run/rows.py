"""The ledger's row (:class:`Check`): one asked property x family x backend x dtype (x target), its counts and
its :class:`~gdn_equiv.harness.ledger.Outcome`; :func:`merge` folds a further round into it (the ledger's rule,
:func:`gdn_equiv.harness.ledger.fold`); :func:`format_table` prints rows. Below every driver and writer: the
drivers fill rows, the writers (:mod:`gdn_equiv.run.report`, :mod:`gdn_equiv.run.junit`,
:mod:`gdn_equiv.run.failures`) write them."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gdn_equiv.harness.compare import Report, worst
from gdn_equiv.harness.ledger import Outcome, fold
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import DEFAULT_FAMILY

__all__ = ["ASKED", "UNREACHED", "Check", "format_table", "merge"]

#: what an asked row holds until a result reaches it: a run that ends first leaves it failing
UNREACHED = Outcome.NOT_REACHED
ASKED = "the run ended before this row"


@dataclass
class Check:
    """One row of the summary: a property run against a backend on examples of one dtype and family.

    ``result``: ``pass``, ``FAIL``, ``not exercised`` (every example was not applicable: a strategy or
    environment problem, never a pass); for a P6 necessity search ``counterexample``, ``none found`` (the
    condition may be unnecessary: a note, not a pass) or ``n/a`` (the state cannot exist here).
    ``worst`` is the comparison that came closest to (or went past) its tolerance: for a failure,
    the shrunk example's. ``function`` names the property in :mod:`gdn_equiv.harness.properties` that a
    reproducer calls.
    """

    name: str
    backend: str
    dtype: str = "any"
    family: str = DEFAULT_FAMILY
    target: str = "gdn_equiv"
    target_options: dict[str, str] = field(default_factory=dict)
    function: str = ""
    examples: int = 0
    not_applicable: int = 0
    result: Outcome = Outcome.PASSED
    reasons: Counter[str] = field(default_factory=Counter)
    failure: str = ""
    example: Example | None = None
    seconds: float = 0.0
    budget_spent: bool = False
    repro: str = ""
    repro_json: str = ""
    worst: Report | None = None
    #: further distinct failures of the same run (another kind: another tensor, region or diagnosis),
    #: each a row of its own so a harmless finding cannot hide a real one
    also: list[Check] = field(default_factory=list, repr=False)

    @property
    def row_id(self) -> str:
        # the default family's rows keep the ids they had before families existed, so the JUnit
        # history of a CI job carries on
        family = "" if self.family == DEFAULT_FAMILY else f"-{self.family}"
        return f"{self.name}[{self.backend}-{self.dtype}{family}]"

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """What makes two checks the same row (a fuzz run merges its rounds by it)."""
        return (self.name, self.family, self.backend, self.dtype, self.target)

    @property
    def database_key(self) -> bytes:
        """This row's own key in Hypothesis' example database (the ``@given`` function is the same
        code for every row, so without it one row's run would delete another's saved failure)."""
        options = ",".join(f"{k}={v}" for k, v in sorted(self.target_options.items()))
        return "|".join((*self.key, options)).encode()

    def worst_cells(self) -> tuple[str, str]:
        """``(worst difference, tolerance)`` for the table: ``3.1e-06 grad.x``, ``rtol 1e-05 atol 1e-05 (31%)``."""
        r = self.worst
        if r is None:
            return "-", "-"
        if r.problem:
            return (
                f"{r.name}: {r.problem[:40]}",
                "exact" if r.rtol == r.atol == 0 else f"rtol {r.rtol:g} atol {r.atol:g}",
            )
        diff = f"{r.max_abs:.2g} {r.name}"
        if r.rtol == r.atol == 0:
            return diff, "exact"
        return diff, f"rtol {r.rtol:g} atol {r.atol:g} ({100 * r.tol_used:.0f}%)"

    def row(self) -> list[str]:
        reasons = ", ".join(f"{k}:{v}" for k, v in sorted(self.reasons.items()))
        return [
            self.name,
            self.family,
            self.backend,
            self.dtype,
            str(self.examples),
            str(self.not_applicable),
            self.result,
            *self.worst_cells(),
            f"{self.seconds:.1f}",
            reasons,
        ]

    def as_dict(self) -> dict[str, Any]:
        r = self.worst
        out: dict[str, Any] = {
            "property": self.name,
            "family": self.family,
            "backend": self.backend,
            "dtype": self.dtype,
            "target": self.target,
            "examples": self.examples,
            "not_applicable": self.not_applicable,
            "result": self.result,
            "seconds": round(self.seconds, 2),
            "budget_spent": self.budget_spent,
            "reasons": dict(self.reasons),
            "failure": self.failure,
            "worst": None if r is None else _report_dict(r),
        }
        if self.target_options:
            out["target_options"] = dict(self.target_options)
        if self.example is not None:
            out["example"] = json.loads(self.example.to_json())
        if self.repro:
            out["repro"], out["repro_json"] = self.repro, self.repro_json
        return out


def _report_dict(r: Report) -> dict[str, Any]:
    return {
        "name": r.name,
        "paths": list(r.paths),
        "max_abs": r.max_abs,
        "max_rel": r.max_rel,
        "rtol": r.rtol,
        "atol": r.atol,
        "tol_used": r.tol_used,
        "mismatched": r.mismatched,
        "numel": r.numel,
        "problem": r.problem,
    }


def merge(old: Check, new: Check) -> None:
    """Fold ``new`` (a finished run of the row) into ``old`` (the asked row, or an earlier fuzz round's):
    counts add up, a failure wins, a search's counterexample stays, and an example row is exercised as
    soon as any round had an applicable example (``not reached`` while none ran at all)."""
    old.worst = new.worst if new.result == Outcome.FAILED else worst([new.worst] if new.worst else [], old.worst)
    old.examples += new.examples
    old.not_applicable += new.not_applicable
    old.seconds += new.seconds
    old.budget_spent = old.budget_spent or new.budget_spent
    old.reasons.update(new.reasons)
    before, arriving = Outcome(old.result), Outcome(new.result)
    if before.final:
        return
    old.result = fold(
        before, arriving, examples=old.examples, not_applicable=old.not_applicable, budget_spent=old.budget_spent
    )
    if arriving.decisive:
        old.failure, old.example = new.failure, new.example
    elif old.result == Outcome.PASSED:
        old.failure = ""
    elif old.result == Outcome.NOT_REACHED:
        old.failure = new.failure or "the budget ended before its first example"
    else:  # never the asked row's "the run ended before this row": this row ran
        old.failure = new.failure or "not exercised: no example met the property's premise"


def format_table(checks: list[Check]) -> str:
    header = [
        "property",
        "family",
        "backend",
        "dtype",
        "examples",
        "n/a",
        "result",
        "worst difference",
        "tolerance (used)",
        "seconds",
        "guard reasons",
    ]
    rows = [header, *(c.row() for c in checks)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
