"""Runs the properties under Hypothesis outside pytest: ``gdn-equiv check`` and ``fuzz``.

Each property runs as a Hypothesis test with the example database on: each property x family x
backend x dtype row under its own database key, so saved failures replay first (``Phase.reuse``) and
``fuzz`` writes what it finds for the next ``check``. A failure is written as the shrunk
:class:`Example` (JSON) plus a standalone reproducer script (:mod:`gdn_equiv.report`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings, target
from hypothesis import find as hypothesis_find
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from gdn_equiv import isolation
from gdn_equiv import properties as P
from gdn_equiv._source import alias_strategies
from gdn_equiv.compare import Mismatch, Report, observe, worst
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.example import Example
from gdn_equiv.families import DEFAULT_FAMILY
from gdn_equiv.guard import Condition
from gdn_equiv.report import Check, Failure, interrupt_pending
from gdn_equiv.testing import fuzzing

alias_strategies()  # the CLI imports gdn_equiv.strategies from here, installed or not

__all__ = [
    "SPECS",
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


def _strategy(
    kind: str, backend: str, max_seq_len: int, dtype: str | None = None, family: str = DEFAULT_FAMILY
) -> st.SearchStrategy[Example]:
    from gdn_equiv.strategies import examples

    fusable = {"fusable": True, "fusable-grad": True, "refused": False, "any": None}[kind]
    kwargs: dict[str, Any] = {"grad": True} if kind == "fusable-grad" else {}
    if dtype is not None:
        kwargs["dtypes"] = (dtype,)
    return examples(backends=(backend,), fusable=fusable, max_seq_len=max_seq_len, family=family, **kwargs)


# property name -> (function, which states to draw)
SPECS: dict[str, tuple[Callable[..., Any], str]] = {
    "P2-path-taken": (P.check_path_taken, "any"),
    "P3-forward-exact": (P.check_forward_exact, "fusable"),
    "P4-gradients": (P.check_gradients, "fusable-grad"),
    "P5-fallback-exact": (P.check_fallback_exact, "refused"),
    "P7-backend-vs-torch": (P.check_backend_matches_torch, "any"),
    "P7-conv-conformance": (P.check_conv_conformance, "any"),
}


def run_property(
    name: str,
    backend: str,
    *,
    max_examples: int,
    device: str = "cpu",
    max_seq_len: int = 20,
    database: Any = None,
    dtype: str | None = None,
    family: str = DEFAULT_FAMILY,
    deadline: float | None = None,
) -> Check:
    """Run one property for ``max_examples`` examples (of ``dtype``, default any, and ``family``); the
    shrunk failure lands in ``check.example``, the comparison closest to its tolerance in ``check.worst``.

    Saved failures of this row replay first (with a ``database``). Randomness is fresh on every call:
    the database is what makes a failure come back, not a seed. ``deadline`` (a ``time.perf_counter()``
    reading) is checked before each example; once it passes, the run ends at once with what it has
    (``check.budget_spent``), unless a failure is being shrunk.
    """
    fn, kind = SPECS[name]
    check = Check(name, backend, dtype or "any", family=family, function=fn.__name__)
    last_failing: list[Example] = []
    failing_by_error: dict[int, Example] = {}  # Hypothesis reports each distinct failure: keep its example
    last_not_applicable: list[str] = []
    start = time.perf_counter()

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=database,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=list(Phase),
    )
    @given(_strategy(kind, backend, max_seq_len, dtype, family))
    def prop(example: Example) -> None:
        _stop_if_interrupted()
        if not last_failing and _spent(deadline):
            raise _BudgetSpent
        check.examples += 1
        with observe() as reports:
            try:
                decision = isolation.call(fn, example, device=device)  # in a worker when isolation is on
            except P.NotApplicable as exc:
                check.not_applicable += 1
                last_not_applicable[:] = [str(exc)]
                return
            except Exception as exc:
                last_failing[:] = [example]
                failing_by_error[id(exc)] = example
                raise
        check.worst = worst(reports, check.worst)
        check.reasons[decision.reason_id] += 1
        if fuzzing():  # toward differences near their tolerance
            used = [r.tol_used for r in reports if r.tol_used < float("inf")]
            if used:
                target(max(used), label=f"{name}: share of its tolerance used")

    prop.hypothesis.inner_test._hypothesis_internal_add_digest = check.database_key  # type: ignore[attr-defined]
    try:
        prop()
    except _BudgetSpent:
        check.budget_spent = True
    except Exception as exc:
        if not last_failing:
            raise  # no example failed: the strategy or this runner broke, not the code under test
        # several distinct failures (kinds) come as a group: each becomes a row, the first this one
        errors = list(getattr(exc, "exceptions", None) or [exc])
        rows = [check] + [dataclasses.replace(check, reasons=Counter(), also=[]) for _ in errors[1:]]
        for row, error in zip(rows, errors, strict=True):
            row.result = "FAIL"
            row.failure = f"{type(error).__name__}: {error}"
            row.example = failing_by_error.get(id(error), last_failing[0])
            # the shrunk example's comparison, or the crash
            row.worst = (
                error.report
                if isinstance(error, Mismatch)
                else Report(name, (backend, "-"), False, 0, problem=row.failure)
            )
        for k, row in enumerate(rows[1:], start=2):
            row.name = f"{name}#{k}"
        check.also = rows[1:]
    if check.result == "pass" and check.examples == check.not_applicable:
        check.result = "not exercised"
        why = f" (the last: {last_not_applicable[0]})" if last_not_applicable else ""
        check.failure = f"not exercised: none of the {check.examples} examples was applicable{why}"
    check.seconds = time.perf_counter() - start
    return check


def find_counterexample(
    condition: Condition,
    backend: str,
    *,
    max_examples: int,
    device: str = "cpu",
    max_seq_len: int = 12,
    family: str = DEFAULT_FAMILY,
    deadline: float | None = None,
) -> Check:
    """P6 for one condition: search states that break only ``condition`` for a wrong forced fusion.

    ``counterexample``: the condition is necessary (the example shows why). ``none found``: the search
    ran applicable examples and none was wrong: reported, never a pass. ``not exercised``: no drawn
    example was applicable. ``n/a``: the state cannot exist here (e.g. G5 with one backend).
    """
    from gdn_equiv.strategies import violating

    check = Check(f"P6-necessity-{condition.id}", backend, family=family, function=P.forced_fusion_error.__name__)
    start = time.perf_counter()
    found: list[str] = []
    last_not_applicable: list[str] = []

    def wrong(example: Example) -> bool:
        _stop_if_interrupted()
        if not found and _spent(deadline):
            raise _BudgetSpent
        check.examples += 1
        try:
            problem = isolation.call(P.forced_fusion_error, example, device=device)
        except P.NotApplicable as exc:
            check.not_applicable += 1
            last_not_applicable[:] = [str(exc)]
            return False
        except isolation.WorkerDied as exc:  # forcing the fusion killed the process: wrong, and worse
            problem = str(exc)
        if problem:
            found[:] = [problem]
        return problem is not None

    try:
        check.example = hypothesis_find(
            violating(condition, backends=(backend,), max_seq_len=max_seq_len, family=family),
            wrong,
            settings=settings(
                max_examples=max_examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
            ),
        )
        check.result = "counterexample"
        check.failure = found[0] if found else ""
    except (NoSuchExample, _BudgetSpent) as exc:
        check.budget_spent = isinstance(exc, _BudgetSpent)
        if check.examples > check.not_applicable:
            check.result = "none found"
        else:
            check.result = "not exercised"
            why = f" (the last: {last_not_applicable[0]})" if last_not_applicable else ""
            check.failure = f"not exercised: none of the {check.examples} examples was applicable{why}"
    except InvalidArgument as exc:  # the state cannot exist on this machine (e.g. one backend only)
        check.result = "n/a"
        check.failure = str(exc)
    check.seconds = time.perf_counter() - start
    return check


def replayable_functions() -> tuple[str, ...]:
    """The property functions a failure JSON may name (what :func:`replay` will call)."""
    return (*(fn.__name__ for fn, _ in SPECS.values()), P.check_target_guard.__name__)


def replay(failure: Failure) -> int:
    """Replay a validated failure (:func:`gdn_equiv.report.read_failure`): 1 if it still fails, 0 if not."""
    fn = getattr(P, failure.function)
    kwargs: dict[str, Any] = {"device": failure.device}
    if failure.function == P.check_target_guard.__name__:
        kwargs.update(target=failure.target, **failure.target_options)
    print(f"replaying {failure.property} on {failure.backend} ({failure.family}): {failure.example.short()}")
    try:
        fn(failure.example, **kwargs)
    except P.NotApplicable as exc:
        print(f"passes now: the example no longer meets the property's premise ({exc})")
        return 0
    except Exception:  # the property's failure (a Mismatch) or a crash of the code under test
        traceback.print_exc(file=sys.stdout)
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

    The examples are drawn as the target asks (:func:`gdn_equiv.properties.upstream_example_pins`: fla's
    version, so only configs its classes accept). A constructor that still refuses one
    (:class:`~gdn_equiv.properties.UpstreamRefused`: a rule the family records miss, a newer upstream)
    is a row of its own, ``upstream refused``, once per distinct refusal, with the example and upstream's
    message; the example counts as not applicable and the search goes on. The summary row of a search
    that ran no example is ``not reached`` when the budget was spent before it, else ``not exercised``;
    one whose every example was refused is ``not exercised``.
    """
    from gdn_equiv.strategies import examples

    pins = P.upstream_example_pins(target, **options)
    # a third of the draws break one guard condition alone: the states where a guard's mistake on that
    # condition shows (another broken condition can make both guards fall back). SPEC §1's two gaps are
    # such states: 14 searches found both in 137-480 guard calls (shrinking included), 6 searches with
    # free draws only in 136-1,093
    strategy = st.one_of(
        examples(fusable=True, family=family, **pins),
        examples(fusable=False, max_reasons=1, family=family, **pins),
        examples(fusable=False, family=family, **pins),
    )
    started = clock()
    known: set[type] = set()
    row: dict[str, Any] = {
        "target": target,
        "target_options": {k: str(v) for k, v in options.items()},
        "function": check.__name__,
        "family": family,
    }
    clean = Check(f"P1-{target}-guard-vs-spec", "-", **row)
    found: list[tuple[type, Example]] = []
    refusals: dict[str, Check] = {}  # by P.UpstreamRefused.kind, in the order first seen
    reported = 0  # refusal rows yielded so far

    def spent() -> bool:
        return seconds is not None and clock() - started >= seconds

    def refused(exc: P.UpstreamRefused, example: Example) -> None:
        clean.not_applicable += 1
        if exc.kind in refusals:
            refusals[exc.kind].examples += 1
            return
        name = f"P1-{target}-upstream-refused" + (f"#{len(refusals) + 1}" if refusals else "")
        refusal = Check(name, "-", **row, examples=1, example=example, result="upstream refused")
        refusal.failure = f"{exc}\nExample: {example.short()}"
        problem = f"{type(exc.error).__name__}: {exc.error}"
        refusal.worst = Report(exc.constructor, (target, family), False, 0, problem=problem)
        refusal.seconds = clock() - started
        refusals[exc.kind] = refusal

    while not spent():
        found.clear()

        @settings(
            max_examples=max_examples,
            deadline=None,
            database=database,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @given(strategy)
        def prop(example: Example) -> None:
            _stop_if_interrupted()
            if spent():
                # out of time: ends the round at once (not a failure to shrink); a shrink in progress
                # stops too, its smallest example so far is the gap (with --family all a long shrink
                # ate the next families' shares: two of twelve got no example in a 120 s fuzz)
                raise _BudgetSpent
            clean.examples += 1
            try:
                decision = check(example, device=device, target=target, demonstrate=False, **options)
            except P.UpstreamRefused as exc:
                refused(exc, example)
                return
            except P.UpstreamGap as exc:
                if type(exc) in known:
                    return
                found[:] = [(type(exc), example)]
                raise
            clean.reasons[decision.reason_id] += 1

        # a key per round (per set of known kinds): a round that treats a kind as known would
        # otherwise replay the saved example of the round that found it, see it pass and delete it
        round_key = clean.database_key + b"|known=" + ",".join(sorted(k.__name__ for k in known)).encode()
        prop.hypothesis.inner_test._hypothesis_internal_add_digest = round_key  # type: ignore[attr-defined]
        cut_short = False
        try:
            prop()
        except _BudgetSpent:
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
            except P.UpstreamRefused as exc:  # built on the run's device, the constructor said no
                message = f"{kind.__name__}: not run: {exc}"
            if cut_short:
                message += " (the time budget ended its shrinking: the example is not minimal)"
            gap = Check(f"P1-{target}-gap-{shown_kind.__name__.removeprefix('Gap')}", "-", **row)
            gap.result, gap.failure, gap.example = "FAIL", message, example
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
    if clean.examples == 0:
        clean.result = "not reached" if spent() else "not exercised"
        clean.failure = (
            f"not reached: the time budget ({seconds:g} s for this search) ended before its first example"
            if clean.result == "not reached"
            else "not exercised: the search drew no example"
        )
    elif clean.examples == clean.not_applicable:
        clean.result = "not exercised"
        clean.failure = f"not exercised: upstream refused all {clean.examples} examples (see the upstream refused rows)"
    yield clean
