"""P2-P5: the path taken, fused == separate (forward bitwise, gradients), and exact fallback.

Each test draws whole examples (config, dtype, shapes, cache and varlen state, grad/train) and
runs one property from :mod:`gdn_equiv.properties` on the backend chosen by ``--gdn-backend``, on the
layers of the target chosen by ``--gdn-target``: ours (``gdn_equiv``), or fla's (``fla``, its own
guard deciding and its own separate path as the unfused layer; ``--fla-core`` picks its core).

A test none of whose examples met its property's premise fails ("not exercised", SPEC §10): a
property that compared nothing has not passed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv import isolation
from gdn_equiv import properties as P
from gdn_equiv.coverage import label_example
from gdn_equiv.example import Example
from gdn_equiv.guard import Condition
from gdn_equiv.strategies import examples
from gdn_equiv.targets import Target, get_target
from gdn_equiv.testing import count_example

# slow: on a GPU each is tens of seconds cold (Triton compiles), so under xdist they start first
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]


@dataclass
class _Tally:
    """The examples one test drew, how many met the property's premise, and the last reason one did not."""

    drawn: int = 0
    applied: int = 0
    last: str | None = None


_TALLY: _Tally | None = None  # the running test's, set by exercised()


def exercised(test: Callable[..., None]) -> Callable[..., None]:
    """Fail the Hypothesis ``test`` after its run when none of its examples met the premise (all raised
    :class:`~gdn_equiv.properties.NotApplicable`): "not exercised" is an environment or strategy problem,
    never a pass. Outside ``@given``, so it judges the whole run; the signature pytest sees is the test's."""

    @functools.wraps(test)
    def counted(*args: Any, **kwargs: Any) -> None:
        global _TALLY
        tally = _TALLY = _Tally()
        try:
            test(*args, **kwargs)
        finally:
            _TALLY = None
        if tally.applied == 0:
            raise AssertionError(
                f"not exercised: none of the {tally.drawn} examples met the premise; the last reason: {tally.last}"
            )

    return counted


@pytest.fixture(scope="session")
def layer_target(gdn_target: str, fla_core: str) -> str | Target:
    """What the properties' ``target=`` gets: the name of ``--gdn-target``, fla's target with ``--fla-core``."""
    return get_target("fla", core=fla_core) if gdn_target == "fla" else gdn_target


def _name(target: str | Target) -> str:
    return target if isinstance(target, str) else target.name


def _upstream(target: str | Target) -> bool:
    return _name(target) != "gdn_equiv"


# The strategies are drawn with data.draw (their arguments are fixtures), so each example would build
# them afresh: built once per arguments instead, Hypothesis validates them and examples() builds its
# config strategies once (plug-ins register their activations and facts before the tests start).
@functools.cache
def gate_examples(target: str = "gdn_equiv", **kwargs: Any) -> st.SearchStrategy[Example]:
    """:func:`~gdn_equiv.strategies.examples` for the layers of the target called ``target``. fla refuses
    to train a layer whose core mode is ``recurrent`` (``fused_recurrent``: "Only chunk mode is supported
    in training."), a config refusal of fla's, not a finding: left out of fla's draws."""
    drawn = examples(**kwargs)
    if _upstream(target):
        drawn = drawn.filter(lambda e: not (e.train and getattr(e.config, "mode", None) == "recurrent"))
    return drawn


def _run(prop, example: Example, device: str, target: str | Target = "gdn_equiv", *, may_not_apply: bool = False):
    count_example()
    note(example.short())
    label_example(example)  # coverage:layer.* events, read from Hypothesis' observability output
    if _TALLY is not None:
        _TALLY.drawn += 1
    try:
        value = isolation.call(prop, example, device=device, target=target)  # in a worker under --gdn-isolate
    except P.NotApplicable as exc:
        # an upstream target's own guard decides; where it disagrees with the spec the states built from
        # the spec's conditions need not meet the premise (that gap is P1's: `gdn-equiv check --target fla`)
        if may_not_apply or _upstream(target):
            if _TALLY is not None:
                _TALLY.last = str(exc)
            return None
        # built by construction to apply: a strategy bug or, for a state built fusable from the spec's
        # conditions, a guard that refuses what the spec fuses
        raise AssertionError(
            f"the example was built to meet the property's premise and does not: {exc} (a strategy bug or, "
            f"where it was built fusable from the spec's conditions, P1 guard = spec fails)\n"
            f"Example: {example.short()}"
        ) from exc
    if _TALLY is not None:
        _TALLY.applied += 1
    return value


@functools.cache
def either_side(
    backend: str, families: tuple[str, ...], target: str = "gdn_equiv", **kwargs: Any
) -> st.SearchStrategy[tuple[Example, bool]]:
    """``(example, fusable)``: mostly states the spec fuses, some it refuses (a guard that fuses too often
    must meet them); ``fusable`` says which, as the strategy built it from the spec's conditions. A state
    built fusable must be fused (P3/P4 run it with ``may_not_apply=False``): else a guard that fuses less
    than the spec allows, or never, would leave P3/P4 nothing to compare and pass (found by mutation
    testing of this suite: ``_all_equal`` answering None or inverted in ``guard.py``)."""
    # one strategy per condition, built once (a flatmap built a fresh examples() in every draw)
    one_reason = st.one_of(
        [
            gate_examples(target, backends=(backend,), fusable=False, reasons=(c.id,), family=families, **kwargs)
            for c in Condition
            if c is not Condition.G5
        ]
    )
    fusable = gate_examples(target, backends=(backend,), fusable=True, family=families, **kwargs)
    return st.one_of(
        fusable.map(lambda e: (e, True)), fusable.map(lambda e: (e, True)), one_reason.map(lambda e: (e, False))
    )


def families_with_fusion(target: str | Target, families: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """The ``families`` whose layers on ``target`` have a fused prologue at all (an fla version's table row
    says which), and why none does when none does."""
    if not _upstream(target):
        return families, None
    from gdn_equiv.targets.fla_target import version_row

    row = version_row()
    fusing = tuple(f for f in families if f in row.fusing)
    why = None if fusing else f"fla {row.version} has no fused prologue for {', '.join(families)}"
    return fusing, why


@pytest.fixture(scope="session")
def fusing_families(layer_target: str | Target, gdn_families: tuple[str, ...]) -> tuple[str, ...]:
    """The families P3/P4 draw from: those with a fused prologue on the target. With none, P3/P4 are
    "n/a" with that reason (a skip), not "not exercised"."""
    fusing, why = families_with_fusion(layer_target, gdn_families)
    if why is not None:
        pytest.skip(f"n/a: {why}")
    return fusing


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_auto_launches_one_conv_iff_guard_fuses(data, gdn_backend, gdn_families, device, layer_target):
    """P2: counted through the backend registry (fla: conv-module calls), never by patching the guard."""
    example = data.draw(gate_examples(_name(layer_target), backends=(gdn_backend,), fusable=None, family=gdn_families))
    _run(P.check_path_taken, example, device, layer_target)


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_a_layer_without_short_convs_runs_and_describes_none(data, gdn_backend, gdn_families, device, layer_target):
    """P1/P2 without short convs (SPEC G1), which the draws above rarely reach: the facts name no conv,
    the layer holds none, and no path launches one."""
    drawn = gate_examples(_name(layer_target), backends=(gdn_backend,), use_short_conv=False, family=gdn_families)
    _run(P.check_path_taken, data.draw(drawn), device, layer_target)


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_fused_forward_is_bitwise_equal(data, gdn_backend, fusing_families, device, layer_target):
    """P3: guard true => fused output == separate output, bitwise, NaNs by position."""
    example, fusable = data.draw(either_side(gdn_backend, fusing_families, _name(layer_target)))
    _run(P.check_forward_exact, example, device, layer_target, may_not_apply=not fusable)


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_fused_gradients_match(data, gdn_backend, fusing_families, device, layer_target):
    """P4: dx and non-conv gradients bitwise; conv weight/bias gradients within the §6 table."""
    example, fusable = data.draw(either_side(gdn_backend, fusing_families, _name(layer_target), grad=True))
    _run(P.check_gradients, example, device, layer_target, may_not_apply=not fusable)


@exercised
@settings(deadline=None)
@given(data=st.data())
def test_fallback_is_the_reference(data, gdn_backend, gdn_families, device, layer_target):
    """P5: guard false => output, gradients and written cache are bitwise the unfused layer's (ours: the
    reference layer; fla: its own separate path)."""
    example = data.draw(gate_examples(_name(layer_target), backends=(gdn_backend,), fusable=False, family=gdn_families))
    _run(P.check_fallback_exact, example, device, layer_target)
