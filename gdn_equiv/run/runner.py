"""Runs the property records (:mod:`gdn_equiv.harness.registry`) under Hypothesis outside pytest:
``gdn-equiv check`` and ``fuzz``; the pytest gate runs the P6 searches through here too.

Each row (property x family x backend x dtype) runs as a Hypothesis test with the example database on,
under its own database key, so saved failures replay first (``Phase.reuse``) and ``fuzz`` writes what it
finds for the next ``check``. A row keeps searching after a failure, with the kinds found so far counted
as known, so one run reports each distinct kind (SPEC §10) instead of whichever Hypothesis met first.
A failure is written as the shrunk :class:`Example` (JSON) plus a standalone reproducer
(:mod:`gdn_equiv.run.report`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, Phase, given, reporting, settings, target
from hypothesis import strategies as st

from gdn_equiv.harness import isolation, ledger
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.compare import Mismatch, Report, observe, worst
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.harness.registry import (
    GAP_SEARCH,
    MAX_SEQ_LEN,
    Draw,
    get_record,
    necessity_budget,
    necessity_name,
    property_records,
)
from gdn_equiv.harness.testing import fuzzing
from gdn_equiv.model.backends import BUILTIN_BACKENDS
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import DEFAULT_FAMILY
from gdn_equiv.model.guard import Condition
from gdn_equiv.run.failures import Failure
from gdn_equiv.run.rows import Check
from gdn_equiv.run.signals import interrupt_pending
from gdn_equiv.strategies.premises import gap_search_examples
from gdn_equiv.targets import UpstreamRefused

__all__ = [
    "Check",
    "find_counterexample",
    "replay",
    "replayable_functions",
    "run_property",
    "search_gaps",
]


class _BudgetSpent(BaseException):
    """Raised inside a property when a time budget is spent. Not an ``Exception``: Hypothesis passes it
    straight up (as it does ``KeyboardInterrupt``) instead of shrinking it as a failure."""


def _spent(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() >= deadline


def _stop_if_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C / SIGTERM arrived earlier. Called before each example
    (shrinking included), so an interrupt that something swallowed on its way up still ends the run."""
    if interrupt_pending():
        raise KeyboardInterrupt("interrupted (a signal arrived during an earlier example)")


@contextmanager
def without_seed_hints() -> Iterator[None]:
    """Hypothesis' messages, less "You can reproduce this failure by adding @seed(...)": it prints that
    whenever a run it seeded itself ends in an exception, a spent budget or Ctrl-C included, which reads
    as a failure where none happened; and our runs do not replay by seed (the database brings failures
    back, the report's JSON replays them). Giving an explicit ``@seed`` instead would switch the database off."""
    previous = reporting.current_reporter()

    def report(text: object) -> None:
        if "@seed(" not in str(text):
            previous(text)

    with reporting.with_reporter(report):
        yield


class _Found(Exception):
    """A search's draw met its condition: the failure Hypothesis shrinks, as :func:`hypothesis.find` ends one."""


def _round(
    strategy: st.SearchStrategy[Any],
    body: Callable[[Any], None],
    *,
    max_examples: int,
    budget_ended: Callable[[], bool],
    key: bytes | None = None,
    **options: Any,
) -> bool:
    """One round of a driver's search, the loop every driver here runs: ``body`` on up to ``max_examples`` draws
    of ``strategy`` under Hypothesis (no deadline, every health check off, the other ``options`` as given, the
    rest the profile's). With a ``key``, the example database is read and written under that digest: one per
    row and set of kinds already found, so a round that treats a kind as known does not replay the saved example
    of the round that found it, see it pass and delete it. Before each example (shrinking included) an interrupt
    that arrived earlier ends the run, and ``budget_ended()`` the round: ``True`` is returned. A failure of
    ``body`` propagates as Hypothesis raises it."""

    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), **options)
    @given(strategy)
    def prop(drawn: Any) -> None:
        _stop_if_interrupted()
        if budget_ended():
            raise _BudgetSpent
        body(drawn)

    if key is not None:
        prop.hypothesis.inner_test._hypothesis_internal_add_digest = key  # type: ignore[attr-defined]
    try:
        prop()
    except _BudgetSpent:
        return True
    return False


def _set(**values: Any) -> dict[str, Any]:
    """The settings among ``values`` that are not None (the others stay the profile's)."""
    return {k: v for k, v in values.items() if v is not None}


def _round_key(base: bytes, known: list[str], *, always: bool = False) -> bytes:
    """A row's database digest for a round that knows the kinds ``known`` (none: the row's own, unless
    ``always``)."""
    return base + ("|known=" + ",".join(sorted(known))).encode() * (always or bool(known))


def _kind(error: BaseException) -> str:
    """What makes two failures the same (the key of "known" kinds): a mismatch's kind class (property,
    tensor, diagnosis) or a crash's exception type."""
    return type(error).__qualname__


#: examples a row may spend, after a failure, looking for another kind: at least this many, or as many as
#: the first finding took, whichever is more (and never past the row's budget). Hypothesis alone keeps
#: generating only up to twice the call count of its last failure; a budget sized for a rare first hit
#: (``MISS_BOUND``) would otherwise be spent in full on a search that already found its defect.
FURTHER_KINDS_EXAMPLES = 100


def _round_budget(max_examples: int, used: int, after_a_failure: bool) -> int:
    left = max(1, max_examples - used)
    return min(left, max(FURTHER_KINDS_EXAMPLES, used)) if after_a_failure else left


def run_property(
    name: str,
    backend: str,
    *,
    max_examples: int,
    device: str = "cpu",
    max_seq_len: int = MAX_SEQ_LEN,
    database: Any = None,
    dtype: str | None = None,
    family: str = DEFAULT_FAMILY,
    deadline: float | None = None,
    record: Any = None,
    derandomize: bool = False,
    shrink: bool = True,
    first_kind: bool = False,
) -> Check:
    """Run one property row for up to ``max_examples`` examples (of ``dtype``, default any, and ``family``).

    The first failure lands in the returned row (``check.example`` shrunk, ``check.worst`` its
    comparison); each further distinct kind found in the same budget is a row of its own in
    ``check.also``. Saved failures of this row replay first (with a ``database``). ``deadline`` (a
    ``time.perf_counter()`` reading) is checked before each example; once it passes the row ends with
    what it has (``check.budget_spent``), unless a failure is being shrunk. ``record`` defaults to the
    registry's record of ``name``. ``derandomize``: the same draws on every machine (no database then).
    ``shrink=False``: a failure is kept as first drawn (a catch count needs only whether one was drawn).
    ``first_kind``: the row ends at its first failure, not searching its budget on for further kinds (a test
    of whether a planted defect is caught needs the one).
    """
    record = record or get_record(name)
    assert record.check is not None, f"{name} is a search: find_counterexample runs it"
    fn = record.check
    check = Check(name, backend, dtype or "any", family=family, function=record.function)
    # a serving record's rows are per engine path (the row's backend): no family, dtype or length applies
    strategy = record.strategy(backend) if record.serving else record.strategy(backend, family, dtype, max_seq_len)
    start = time.perf_counter()
    known: dict[str, Check] = {}
    tally = ledger.Tally()
    failing: dict[str, Example] = {}  # kind -> its example, as Hypothesis reports each distinct failure
    # each raised error -> (the error, kept alive so its id stays its own; the example that raised it): Hypothesis
    # reports two failures of one kind raised at different lines as two errors, each from its own shrunk example
    raised: dict[int, tuple[BaseException, Example]] = {}

    def one(draw: Draw) -> None:
        example = draw.example
        with observe() as reports:
            try:
                decision = ledger.judge(
                    lambda: isolation.call(fn, example, device=device),  # in a worker when isolation is on
                    example,
                    must_apply=draw.must_apply,
                    tally=tally,
                    name=name,
                )
            except Exception as exc:
                if _kind(exc) in known:
                    return  # a kind this row already reported: look for others
                # the last failing call of a kind is Hypothesis' replay of its shrunk example: the row keeps
                # that one (the first failing draw is the unshrunk one, seen before any shrinking)
                failing[_kind(exc)] = example
                raised[id(exc)] = (exc, example)
                raise
            finally:
                check.examples, check.not_applicable = tally.drawn, tally.not_applicable
        if decision is ledger.MISSED:
            return
        check.worst = worst(reports, check.worst)
        if decision is not None:  # a guard's decision (a serving check returns none)
            check.reasons[decision.reason_id] += 1
        if fuzzing():  # toward differences near their tolerance
            used = [r.tol_used for r in reports if r.tol_used < float("inf")]
            if used:
                target(max(used), label=f"{name}: share of its tolerance used")

    while True:
        failing.clear()
        raised.clear()
        try:
            spent = _round(
                strategy,
                one,
                max_examples=_round_budget(max_examples, check.examples, bool(known)),
                budget_ended=lambda: not failing and _spent(deadline),
                key=_round_key(check.database_key, list(known)),
                database=None if derandomize else database,  # Hypothesis: a fixed sequence has no database
                derandomize=derandomize,
                phases=list(Phase) if shrink else [p for p in Phase if p is not Phase.shrink],
            )
            check.budget_spent = check.budget_spent or spent
        except Exception as exc:
            if not failing:
                raise  # no example failed: the strategy or this runner broke, not the code under test
            for error in list(getattr(exc, "exceptions", None) or [exc]):
                kind = _kind(error)
                if kind in known:
                    continue
                row = check if not known else dataclasses.replace(check, reasons=Counter(), also=[])
                if row is not check:
                    row.name = f"{name}#{len(known) + 1}"
                # P1's missed fusion is a finding of its own kind in the ledger
                row.result = Outcome.MISSED_FUSION if isinstance(error, P.MissedFusion) else Outcome.FAILED
                row.failure = f"{type(error).__name__}: {error}"
                # the example that raised this very error (its message and its example one failure's), else
                # the last of its kind (Hypothesis' replay of the shrunk example)
                row.example = (
                    raised[id(error)][1] if id(error) in raised else failing.get(kind, next(iter(failing.values())))
                )
                # the shrunk example's comparison, or the crash
                row.worst = (
                    error.report
                    if isinstance(error, Mismatch)
                    else Report(name, (backend, "-"), False, 0, problem=row.failure)
                )
                known[kind] = row
            if not first_kind and check.examples < max_examples and not check.budget_spent and not _spent(deadline):
                continue  # budget left: search on for the kinds not yet seen
        break
    check.also = [row for row in known.values() if row is not check]
    found = check.result if check.result in (Outcome.FAILED, Outcome.MISSED_FUSION) else None
    check.result = found or ledger.row_outcome(
        examples=check.examples, not_applicable=check.not_applicable, budget_spent=check.budget_spent
    )
    why = f" (the last: {tally.last})" if tally.last else ""
    if check.result == Outcome.NOT_REACHED:
        check.failure = "not reached: the budget ended before its first example"
    elif check.result == Outcome.NOT_EXERCISED:
        check.failure = f"not exercised: none of the {check.examples} examples was applicable{why}"
    check.seconds = time.perf_counter() - start
    return check


def find_counterexample(
    condition: Condition,
    backend: str,
    *,
    max_examples: int | None = None,
    device: str = "cpu",
    max_seq_len: int = 12,
    family: str = DEFAULT_FAMILY,
    deadline: float | None = None,
    shrink: bool = True,
    derandomize: bool | None = None,
) -> Check:
    """P6 for one condition, the one search every driver runs: states that break only ``condition``
    where forcing the fused path is wrong.

    ``counterexample``: the condition is necessary (the example shows why). ``n/a``: the state cannot
    exist here (G5 with one built-in backend), decided before any example. No counterexample within
    the budget (default :func:`~gdn_equiv.harness.registry.necessity_budget`): ``FAIL`` on a built-in backend,
    where every condition is known necessary (a strategy or fused-path regression), ``none found`` on a
    plug-in (a report: the condition may be stricter than that kernel needs, never a pass).
    ``not exercised``: no drawn state was applicable. ``FAIL`` as well where the separate (production)
    path fails or kills its worker: a finding about the layer, never evidence for the condition.
    ``derandomize`` (``check --derandomize``) fixes the draws; None leaves them to the profile.
    """
    record = get_record(necessity_name(condition))
    check = Check(record.name, backend, family=family, function=record.function)
    start = time.perf_counter()
    reason = record.not_applicable(backend)
    if ledger.asked(reason) is not None:
        check.result, check.failure = Outcome.NOT_APPLICABLE, str(reason)
        return check
    budget = max_examples if max_examples is not None else necessity_budget(backend)
    # by the state's json, so the state Hypothesis returns (after shrinking) finds its own problem
    found: dict[str, str] = {}
    broken: dict[str, Mismatch] = {}  # the production path's failure
    unstable: list[str] = []  # states that looked wrong where a path differed from itself run to run
    decided: dict[str, bool] = {}  # each state's verdict, made once: Hypothesis's replay of it reads this
    tally = ledger.Tally()

    def wrong(draw: Draw) -> bool:
        key = draw.example.to_json()
        if key not in decided:
            decided[key] = judged(draw)
        return decided[key]

    def judged(draw: Draw) -> bool:
        example = draw.example
        try:
            problem = ledger.judge(
                lambda: isolation.call(P.forced_fusion_error, example, device=device),
                example,
                must_apply=False,
                tally=tally,
            )
        except P.ProductionPathFailed as exc:
            broken[example.to_json()] = exc
            return True
        except isolation.WorkerDied as exc:
            # which path killed the process? the separate one alone, in a fresh worker, tells
            try:
                isolation.call(P.check_separate_path, example, device=device)
            except (isolation.WorkerDied, P.ProductionPathFailed) as separate:
                broken[example.to_json()] = (
                    separate
                    if isinstance(separate, Mismatch)
                    else P.ProductionPathFailed(
                        f"the separate (production) path killed its worker: {separate}",
                        Report("error", ("separate", "-"), False, 0),
                    )
                )
                return True
            problem = f"forcing the fused path killed the worker: {exc}"
        finally:
            check.examples, check.not_applicable = tally.drawn, tally.not_applicable
        if problem is ledger.MISSED:
            return False
        if problem:
            # a wrong-looking state counts only where both paths give their own bits again: else the verdict
            # was the kernel's run-to-run nondeterminism (atomics in a backward), not the condition's breach
            unsteady = isolation.call(P.run_to_run_difference, example, device=device)
            if unsteady is not None:
                unstable.append(f"{unsteady} ({problem}); state: {example.short()}")
                return False
            found[example.to_json()] = problem
        return problem is not None

    last: list[Draw] = []

    def search(draw: Draw) -> None:  # as hypothesis.find: the first draw that is wrong is shrunk, then kept
        if wrong(draw):
            last[:] = [draw]
            raise _Found

    try:
        spent = _round(
            record.strategy(backend, family, None, max_seq_len),
            search,
            max_examples=budget,
            budget_ended=lambda: not found and not broken and _spent(deadline),
            database=None,
            phases=list(Phase) if shrink else [Phase.explicit, Phase.generate],
            report_multiple_bugs=False,
            **_set(derandomize=derandomize),
        )
    except _Found:
        example = last[0].example
        if example.to_json() in broken:
            error = broken[example.to_json()]
            check.result, check.failure, check.worst = Outcome.FAILED, f"{type(error).__name__}: {error}", error.report
        else:
            check.result = Outcome.COUNTEREXAMPLE
            check.failure = found.get(example.to_json(), "")
            if unstable:
                check.failure += f" (before it, {len(unstable)} state(s) set aside as nondeterministic: {unstable[0]})"
        check.example = example
    else:
        check.budget_spent = spent
        applicable = check.examples - check.not_applicable
        why = f" (the last: {tally.last})" if tally.last else ""
        check.result = ledger.search_outcome(
            found=False,
            examples=check.examples,
            not_applicable=check.not_applicable,
            budget_spent=check.budget_spent,
            must_find=backend in BUILTIN_BACKENDS,
        )
        if unstable:
            check.result = Outcome.NONDETERMINISTIC
            check.failure = (
                f"{condition}: {len(unstable)} state(s) where forcing fusion looked wrong, each with a path that "
                f"differs from itself run to run, and no stable state in {applicable} applicable ones; the first: "
                f"{unstable[0]}"
            )
        elif check.result in (Outcome.NOT_REACHED, Outcome.NOT_EXERCISED):
            check.failure = f"{check.result}: none of the {check.examples} states was applicable{why}"
        elif check.result == Outcome.FAILED:
            check.failure = (
                f"{condition}: no state where forcing fusion is wrong in {applicable} applicable states on the "
                f"built-in backend {backend!r}, where the condition is known to be necessary (a strategy or "
                "fused-path regression)"
            )
        else:
            check.failure = (
                f"{condition.id} is not needed for this kernel: no counterexample in {applicable} applicable states"
                + (" (the time budget ended the search)" if check.budget_spent else "")
            )
    check.seconds = time.perf_counter() - start
    return check


def replayable_functions() -> tuple[str, ...]:
    """The property functions a failure JSON may name (what :func:`replay` will call)."""
    return tuple(
        dict.fromkeys(
            (*(r.function for r in property_records()), P.forced_fusion_error.__name__, P.check_target_guard.__name__)
        )
    )


def replay(failure: Failure) -> int:
    """Replay a validated failure (:func:`gdn_equiv.run.report.read_failure`): 1 if it still fails, or if it
    can no longer be judged (the example no longer meets the property's premise); 0 if it passes now."""
    fn = getattr(P, failure.function)
    kwargs: dict[str, Any] = {"device": failure.device}
    if failure.function == P.check_target_guard.__name__:
        kwargs.update(target=failure.target, **failure.target_options)
    print(f"replaying {failure.property} on {failure.backend} ({failure.family}): {failure.example.short()}")
    try:
        result = fn(failure.example, **kwargs)
    except P.NotApplicable as exc:
        print(
            f"NOT JUDGED: the example no longer meets the property's premise ({exc}); the failure cannot be "
            "replayed on it, so this is no evidence that it is fixed"
        )
        return 1
    except Exception:  # the property's failure (a Mismatch) or a crash of the code under test
        traceback.print_exc(file=sys.stdout)
        return 1
    if failure.function == P.forced_fusion_error.__name__ and result is not None:
        print(f"forcing the fused path is still wrong here (the condition is necessary): {result}")
        return 1
    print("passes now")
    return 0


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() and os.environ.get("GDN_EQUIV_DEVICE", "") != "cpu" else "cpu"


def search_gaps(
    target: str,
    *,
    max_examples: int,
    device: str = "cpu",
    seconds: float | None = None,
    database: Any = None,
    clock: Callable[[], float] = time.perf_counter,
    check: Callable[..., Any] = P.check_target_guard,
    family: str = DEFAULT_FAMILY,
    **options: Any,
) -> Iterator[Check]:
    """P1 against an upstream target: search its guard's gaps one kind at a time (``options`` configure
    the target, e.g. fla's ``core``). Yields each gap as it is found, then the summary row.

    Each round runs the guard-vs-spec property with the gap kinds found so far counted as known;
    a round that finds a new kind records it (shrunk, with the time since the start) and the search
    goes on, until a round finds nothing new or ``seconds`` are spent (checked before each example: once
    the budget is gone the round ends, a shrink in progress too, its gap reported with the smallest
    example reached and a note saying so). Shrinking
    decides from the guards alone; the shrunk example is then run once to show the gap's cost
    (fused vs separate on a GPU, the crash anywhere), and the gap row is named for what that run
    showed (a missing bias predicted from the guards becomes ``MissingBiasCrash`` only if the crash was
    seen). ``check`` is the guard comparison (``properties.check_target_guard``'s signature; a
    stand-in lets the search itself be tested).

    The examples are drawn as the target asks (:func:`gdn_equiv.harness.properties.upstream_example_pins`: fla's
    version, so only configs its classes accept). A constructor that still refuses one
    (:class:`~gdn_equiv.targets.UpstreamRefused`: a rule the family records miss, a newer upstream)
    is a row of its own, ``upstream refused``, once per distinct refusal, with the example and upstream's
    message; the example counts as not applicable and the search goes on. The summary row of a search
    that ran no example is ``not reached`` when the budget was spent before it, else ``not exercised``;
    one whose every example was refused is ``not exercised``.
    """
    pins = P.upstream_example_pins(target, **options)
    strategy = gap_search_examples(family, **pins)
    started = clock()
    known: set[type] = set()
    row: dict[str, Any] = {
        "target": target,
        "target_options": {k: str(v) for k, v in options.items()},
        "function": check.__name__,
        "family": family,
    }
    clean = Check(GAP_SEARCH.name(target), "-", **row)
    found: list[tuple[type, Example]] = []
    refusals: dict[str, Check] = {}  # by UpstreamRefused.kind, in the order first seen
    reported = 0  # refusal rows yielded so far

    def spent() -> bool:
        return seconds is not None and clock() - started >= seconds

    def refused(exc: UpstreamRefused, example: Example) -> None:
        clean.not_applicable += 1
        if exc.kind in refusals:
            refusals[exc.kind].examples += 1
            return
        name = GAP_SEARCH.refused_name(target, len(refusals) + 1)
        refusal = Check(name, "-", **row, examples=1, example=example, result=Outcome.UPSTREAM_REFUSED)
        refusal.failure = f"{exc}\nExample: {example.short()}"
        problem = f"{type(exc.error).__name__}: {exc.error}"
        refusal.worst = Report(exc.constructor, (target, family), False, 0, problem=problem)
        refusal.seconds = clock() - started
        refusals[exc.kind] = refusal

    def one(example: Example) -> None:
        clean.examples += 1
        try:
            decision = check(example, device=device, target=target, demonstrate=False, **options)
        except UpstreamRefused as exc:
            refused(exc, example)
            return
        except P.UpstreamGap as exc:
            if type(exc) in known:
                return
            found[:] = [(type(exc), example)]
            raise
        clean.reasons[decision.reason_id] += 1

    while not spent():
        found.clear()
        cut_short = False
        try:
            # out of time: ends the round at once (not a failure to shrink); a shrink in progress stops too, its
            # smallest example so far is the gap (with --family all a long shrink ate the next families' shares:
            # two of twelve got no example in a 120 s fuzz)
            if _round(
                strategy,
                one,
                max_examples=max_examples,
                budget_ended=spent,
                key=_round_key(clean.database_key, [k.__name__ for k in known], always=True),
                database=database,
                derandomize=False,
                report_multiple_bugs=False,
            ):
                clean.budget_spent = True
                cut_short = bool(found)  # the budget ended the shrink: report what it had reached
        except P.UpstreamGap:
            pass
        new_refusals = list(refusals.values())[reported:]
        reported = len(refusals)
        yield from new_refusals
        if found:
            kind, example = found[-1]
            shown_kind = kind
            try:  # the shrunk example, run once: the gap's cost, not just the guards' disagreement
                check(example, device=device, target=target, demonstrate=True, **options)
                message = f"{kind.__name__}: not reproduced when run"
            except P.UpstreamGap as shown:
                shown_kind = type(shown)
                message = f"{type(shown).__name__}: {shown}"
            except UpstreamRefused as exc:  # built on the run's device, the constructor said no
                message = f"{kind.__name__}: not run: {exc}"
            if cut_short:
                message += " (the time budget ended its shrinking: the example is not minimal)"
            gap = Check(GAP_SEARCH.gap_name(target, shown_kind.__name__.removeprefix("Gap")), "-", **row)
            gap.result, gap.failure, gap.example = Outcome.FAILED, message, example
            gap.seconds = clock() - started  # time until this gap was found, shrunk and shown
            gap.examples = clean.examples
            known.update((kind, shown_kind))
            yield gap
            if cut_short:
                break
            continue
        if clean.budget_spent or seconds is None:
            break  # a check: one round with nothing new ends it; a fuzz run spends its budget
    clean.seconds = clock() - started
    clean.result = ledger.row_outcome(
        examples=clean.examples, not_applicable=clean.not_applicable, budget_spent=clean.examples == 0 and spent()
    )
    if clean.result == Outcome.NOT_REACHED:
        clean.failure = f"not reached: the time budget ({seconds:g} s for this search) ended before its first example"
    elif clean.result == Outcome.NOT_EXERCISED and clean.examples == 0:
        clean.failure = "not exercised: the search drew no example"
    elif clean.result == Outcome.NOT_EXERCISED:
        clean.failure = f"not exercised: upstream refused all {clean.examples} examples (see the upstream refused rows)"
    yield clean
