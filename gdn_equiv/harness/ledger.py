"""The ledger's rules (SPEC §10), once, for every driver: ``check``, both fuzz engines, the pytest gate
(layer, conv and serving tests) and ``coverage``.

A driver runs examples and hands over what happened; this module says what it means:

- :func:`judge` runs one example's comparison: an example that does not meet its property's premise
  (:class:`~gdn_equiv.harness.premise.NotApplicable`) compared nothing, and counts for nothing (the
  :class:`Tally` says how many); one built to meet it that does not is a failure (:class:`PremiseNotMet`);
  only an example that compared something is counted and has its regions labelled (``count=True``);
- :func:`row_outcome`, :func:`search_outcome`, :func:`fold` and :func:`ended_early` give a row its
  :class:`Outcome` from its counts: passed, failed, not exercised (no example met the premise), not
  reached (the budget ended first), n/a with its reason (:func:`asked`), crashed (the engine running it
  died first), interrupted;
- :func:`exit_status` is the run's status from its rows' outcomes: 0 only when every asked row ran at
  least one applicable example and none failed.

An :class:`Outcome` is a ``str`` (its value is the word the report, the table and JUnit show), so a row
written to JSON reads as before; code compares members, never words.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from gdn_equiv.harness.compare import Mismatch, Report
from gdn_equiv.harness.coverage import label_example
from gdn_equiv.harness.premise import NotApplicable
from gdn_equiv.harness.testing import compared_something, count_example
from gdn_equiv.model.example import Example

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "MISSED",
    "NOT_APPLICABLE_EVENT",
    "Outcome",
    "PremiseNotMet",
    "Tally",
    "asked",
    "cut_short",
    "ended_early",
    "exercised",
    "exit_status",
    "fold",
    "judge",
    "not_exercised_message",
    "row_outcome",
    "search_outcome",
]

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130

#: the Hypothesis event of an example that did not meet its property's premise: HypoFuzz's ledger
#: (gdn_equiv.run.fuzz_engines) reads it from the observability output, where no tally reaches
NOT_APPLICABLE_EVENT = "gdn-equiv:not applicable"


class Outcome(str, Enum):
    """The result of one asked row (or of one gate test)."""

    PASSED = "pass"
    FAILED = "FAIL"
    #: examples ran, none met the property's premise: an environment or strategy problem, never a pass
    NOT_EXERCISED = "not exercised"
    #: no example ran: the budget (or the run) ended before the row
    NOT_REACHED = "not reached"
    #: the row cannot be asked here, with its reason (a same-backend comparison, a state that cannot exist)
    NOT_APPLICABLE = "n/a"
    #: the engine running the row died before its budget ended (HypoFuzz ending by itself)
    CRASHED = "crashed"
    #: the run was interrupted (Ctrl-C, SIGTERM) before the row finished
    INTERRUPTED = "interrupted"
    #: a P6 search found its state: the condition is necessary
    COUNTEREXAMPLE = "counterexample"
    #: a P6 search on a plug-in found none: a report (the condition may be stricter than the kernel needs)
    NONE_FOUND = "none found"
    #: an upstream constructor refused a drawn config: a report of its own, the search goes on
    UPSTREAM_REFUSED = "upstream refused"
    #: P1: the guard falls back where fusion is exact (speed, not correctness): a finding of its own kind
    MISSED_FUSION = "missed fusion"
    #: the same, where the run was told to let it pass (``--gdn-allow-missed-fusion``): reported, never silent
    MISSED_FUSION_ALLOWED = "missed fusion (allowed)"
    #: a P6 search found states where forcing fusion looked wrong, but on each a path differed from itself run
    #: to run (the same inputs, other bits): its verdict is not a fact of the code, and no stable state decided it
    NONDETERMINISTIC = "nondeterministic"

    # the word itself wherever it is printed, hashed and compared as that word (a dict keyed by words finds it)
    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def fails(self) -> bool:
        """Whether this outcome makes the run fail (exit status 1)."""
        return self in _FAILING

    @property
    def reports(self) -> bool:
        """A result that is neither a pass nor a failure: said with its reason (a skip under pytest)."""
        return self in _REPORTS

    @property
    def decisive(self) -> bool:
        """What a new round brings that replaces an unfinished row's result (and its reason) outright."""
        return self in _DECISIVE

    @property
    def final(self) -> bool:
        """Kept whatever a later round of the same row says (a fuzz run's rounds are folded into one row)."""
        return self in _FINAL


_FAILING = frozenset(
    {
        Outcome.FAILED,
        Outcome.MISSED_FUSION,
        Outcome.NOT_EXERCISED,
        Outcome.NOT_REACHED,
        Outcome.CRASHED,
        Outcome.INTERRUPTED,
        Outcome.NONDETERMINISTIC,
    }
)
_REPORTS = frozenset(
    {Outcome.NOT_APPLICABLE, Outcome.NONE_FOUND, Outcome.UPSTREAM_REFUSED, Outcome.MISSED_FUSION_ALLOWED}
)
_FINAL = frozenset(
    {
        Outcome.FAILED,
        Outcome.MISSED_FUSION,
        Outcome.COUNTEREXAMPLE,
        Outcome.NOT_APPLICABLE,
        Outcome.CRASHED,
        Outcome.NONDETERMINISTIC,
    }
)
_DECISIVE = _FINAL | {Outcome.NONE_FOUND}

#: the outcomes that fail a run, in the order the report lists them
FAILING = tuple(o for o in Outcome if o.fails)


# ---- a row's outcome from its counts ------------------------------------------------------------------


def asked(reason: str | None) -> Outcome | None:
    """An asked row's outcome before any example: ``n/a`` where it cannot be asked here (``reason``), else
    none yet (it stays ``not reached`` until a result reaches it)."""
    return Outcome.NOT_APPLICABLE if reason is not None else None


def row_outcome(*, examples: int, not_applicable: int, failed: bool = False, budget_spent: bool = False) -> Outcome:
    """An example property's row: failed when an example failed; else not reached when no example ran
    before the budget ended; not exercised when none of those that ran met the premise; else passed."""
    if failed:
        return Outcome.FAILED
    if examples == 0 and budget_spent:
        return Outcome.NOT_REACHED
    if examples <= not_applicable:
        return Outcome.NOT_EXERCISED
    return Outcome.PASSED


def search_outcome(*, found: bool, examples: int, not_applicable: int, budget_spent: bool, must_find: bool) -> Outcome:
    """A P6 search's row: a counterexample; else not reached / not exercised as :func:`row_outcome`; else,
    where the condition is known necessary (``must_find``: a built-in backend) and the budget was the
    search's own, failed; else none found (a report, never a pass)."""
    if found:
        return Outcome.COUNTEREXAMPLE
    if examples <= not_applicable:
        return Outcome.NOT_REACHED if budget_spent and examples == 0 else Outcome.NOT_EXERCISED
    if must_find and not budget_spent:
        return Outcome.FAILED
    return Outcome.NONE_FOUND


def fold(old: Outcome, new: Outcome, *, examples: int, not_applicable: int, budget_spent: bool) -> Outcome:
    """A row's outcome once another round of it (``new``) is added to what it had (``old``); the counts are
    the row's totals. A final outcome stays; a decisive new one replaces it; else the counts decide (a row
    is exercised as soon as any round had an applicable example)."""
    if old.final:
        return old
    if new.decisive:
        return new
    return row_outcome(examples=examples, not_applicable=not_applicable, budget_spent=budget_spent)


def ended_early(outcome: Outcome) -> Outcome:
    """A row of an engine that ended by itself before its budget: what would have passed crashed (its
    budget was not spent); a failure, or any other outcome, stays."""
    return Outcome.CRASHED if outcome is Outcome.PASSED else outcome


def cut_short(outcome: Outcome) -> Outcome:
    """A row of a run that was interrupted: one no result reached (still ``not reached``) was interrupted;
    any result it had stays."""
    return Outcome.INTERRUPTED if outcome is Outcome.NOT_REACHED else outcome


def exit_status(outcomes: Iterable[Outcome], *, interrupted: bool = False) -> int:
    """The run's exit status from its asked rows' outcomes: 130 when it was interrupted, else 1 when any
    row fails, else 0."""
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if any(Outcome(o).fails for o in outcomes) else EXIT_OK


# ---- one example -----------------------------------------------------------------------------------


class PremiseNotMet(Mismatch):
    """An example built to meet the property's premise did not (a strategy bug, or a guard that refuses what
    the spec fuses): a failure, since the property compared nothing on it."""

    compared_nothing = True  # not counted by properties (gdn_equiv.harness.testing.compared_something)


@dataclass
class Tally:
    """The examples one row (or gate test) drew, and those that did not meet the premise."""

    drawn: int = 0
    not_applicable: int = 0
    last: str | None = None  # the last reason an example did not meet the premise

    @property
    def applied(self) -> int:
        return self.drawn - self.not_applicable

    def outcome(self) -> Outcome:
        return row_outcome(examples=self.drawn, not_applicable=self.not_applicable)


#: what :func:`judge` returns for an example that did not meet the premise (it compared nothing)
MISSED: Any = object()

_RUNNING: list[Tally] = []  # the tallies of the gate tests running now (exercised())


def judge(
    call: Callable[[], T],
    example: Any,
    *,
    must_apply: bool,
    tally: Tally | None = None,
    name: str = "",
    count: bool = False,
    on_missed: Callable[[str], None] | None = None,
) -> T:
    """Run one example's comparison (``call``) and keep its ledger: ``tally`` (default: the running gate
    test's, :func:`exercised`) counts it drawn, and not applicable where it did not meet the premise, which
    returns :data:`MISSED` (``on_missed`` gets the reason) unless the example was built to meet it
    (``must_apply``): then :class:`PremiseNotMet`, a failure. Any other exception is the example's failure
    and passes through. With ``count`` (the gate), an example that compared something, failing or not
    (:func:`~gdn_equiv.harness.testing.compared_something`), is counted for the session's summary and its
    regions labelled for ``coverage``; one that compared nothing (not applicable, or its call raised something
    other than a failed comparison: a backend's refusal) is not counted and reaches no region."""
    tally = tally if tally is not None else (_RUNNING[-1] if _RUNNING else None)
    if tally is not None:
        tally.drawn += 1
    try:
        value = call()
    except NotApplicable as exc:
        if must_apply:
            short = example.short() if hasattr(example, "short") else repr(example)
            raise PremiseNotMet(
                f"{name + ': ' if name else ''}the example was built to meet the property's premise and does not: "
                f"{exc} (a strategy bug or, where it was built fusable from the spec's conditions, a guard that "
                f"refuses what the spec fuses)\nExample: {short}",
                Report("premise", (name or "property", "spec"), False, 0, problem=str(exc)),
            ) from None
        if tally is not None:
            tally.not_applicable += 1
            tally.last = str(exc)
        if on_missed is not None:
            on_missed(str(exc))
        return MISSED
    except BaseException as exc:
        if count and compared_something(exc):
            _compared(example)  # a failed comparison compared something; a refused or crashed call did not
        raise
    if count:
        _compared(example)
    return value


def _compared(example: Any) -> None:
    count_example()
    if isinstance(example, Example):
        label_example(example)


def not_exercised_message(tally: Tally, what: str = "met the premise") -> str:
    return f"{Outcome.NOT_EXERCISED}: none of the {tally.drawn} examples {what}; the last reason: {tally.last}"


def exercised(test: Callable[..., None], *, what: str = "met the premise") -> Callable[..., None]:
    """The gate's row verdict around a Hypothesis ``test`` (outside ``@given``, so it judges the whole run):
    the examples :func:`judge` ran in it are tallied, and a test none of whose examples met its premise fails
    (not exercised, as ``check``'s row does), never passes. The signature pytest sees is the test's."""

    @functools.wraps(test)
    def counted(*args: Any, **kwargs: Any) -> None:
        tally = Tally()
        _RUNNING.append(tally)
        try:
            test(*args, **kwargs)
        finally:
            _RUNNING.remove(tally)
        if tally.outcome().fails:
            raise AssertionError(not_exercised_message(tally, what))

    return counted
