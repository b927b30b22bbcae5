"""P2-P5: the path taken, fused == separate (forward bitwise, gradients), and exact fallback.

Each test draws whole examples (config, dtype, shapes, cache and varlen state, grad/train) and
runs one property from :mod:`gdn_equiv.properties` on the backend chosen by ``--gdn-backend``.
"""

from __future__ import annotations

import functools
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
from gdn_equiv.testing import count_example

# slow: on a GPU each is tens of seconds cold (Triton compiles), so under xdist they start first
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]


# The strategies are drawn with data.draw (their arguments are fixtures), so each example would build
# them afresh: built once per arguments instead, Hypothesis validates them and examples() builds its
# config strategies once (plug-ins register their activations and facts before the tests start).
gate_examples = functools.cache(examples)


def _run(prop, example: Example, device: str, *, may_not_apply: bool = False):
    count_example()
    note(example.short())
    label_example(example)  # coverage:layer.* events, read from Hypothesis' observability output
    try:
        return isolation.call(prop, example, device=device)  # in a worker under --gdn-isolate
    except P.NotApplicable as exc:
        if may_not_apply:
            return None
        # built by construction to apply: a strategy bug or, for a state built fusable from the spec's
        # conditions, a guard that refuses what the spec fuses
        raise AssertionError(
            f"the example was built to meet the property's premise and does not: {exc} (a strategy bug or, "
            f"where it was built fusable from the spec's conditions, P1 guard = spec fails)\n"
            f"Example: {example.short()}"
        ) from exc


@functools.cache
def either_side(backend: str, families: tuple[str, ...], **kwargs: Any) -> st.SearchStrategy[tuple[Example, bool]]:
    """``(example, fusable)``: mostly states the spec fuses, some it refuses (a guard that fuses too often
    must meet them); ``fusable`` says which, as the strategy built it from the spec's conditions. A state
    built fusable must be fused (P3/P4 run it with ``may_not_apply=False``): else a guard that fuses less
    than the spec allows, or never, would leave P3/P4 nothing to compare and pass (found by mutation
    testing of this suite: ``_all_equal`` answering None or inverted in ``guard.py``)."""
    # one strategy per condition, built once (a flatmap built a fresh examples() in every draw)
    one_reason = st.one_of(
        [
            examples(backends=(backend,), fusable=False, reasons=[c.id], family=families, **kwargs)
            for c in Condition
            if c is not Condition.G5
        ]
    )
    fusable = examples(backends=(backend,), fusable=True, family=families, **kwargs)
    return st.one_of(
        fusable.map(lambda e: (e, True)), fusable.map(lambda e: (e, True)), one_reason.map(lambda e: (e, False))
    )


@settings(deadline=None)
@given(data=st.data())
def test_auto_launches_one_conv_iff_guard_fuses(data, gdn_backend, gdn_families, device):
    """P2: counted through the backend registry, never by patching the guard."""
    example = data.draw(gate_examples(backends=(gdn_backend,), fusable=None, family=gdn_families))
    _run(P.check_path_taken, example, device)


@settings(deadline=None)
@given(data=st.data())
def test_a_layer_without_short_convs_runs_and_describes_none(data, gdn_backend, gdn_families, device):
    """P1/P2 without short convs (SPEC G1), which the draws above rarely reach: the facts name no conv,
    the layer holds none, and no path launches one."""
    example = data.draw(gate_examples(backends=(gdn_backend,), fusable=None, use_short_conv=False, family=gdn_families))
    _run(P.check_path_taken, example, device)


@settings(deadline=None)
@given(data=st.data())
def test_fused_forward_is_bitwise_equal(data, gdn_backend, gdn_families, device):
    """P3: guard true => fused output == separate output, bitwise, NaNs by position."""
    example, fusable = data.draw(either_side(gdn_backend, gdn_families))
    _run(P.check_forward_exact, example, device, may_not_apply=not fusable)


@settings(deadline=None)
@given(data=st.data())
def test_fused_gradients_match(data, gdn_backend, gdn_families, device):
    """P4: dx and non-conv gradients bitwise; conv weight/bias gradients within the §6 table."""
    example, fusable = data.draw(either_side(gdn_backend, gdn_families, grad=True))
    _run(P.check_gradients, example, device, may_not_apply=not fusable)


@settings(deadline=None)
@given(data=st.data())
def test_fallback_is_the_reference(data, gdn_backend, gdn_families, device):
    """P5: guard false => output, gradients and written cache are bitwise the reference layer's."""
    example = data.draw(gate_examples(backends=(gdn_backend,), fusable=False, family=gdn_families))
    _run(P.check_fallback_exact, example, device)
