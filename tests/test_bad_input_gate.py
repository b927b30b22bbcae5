"""The installed gate's P8 property (``gdn_equiv/suite/test_bad_input.py``) has teeth: each planted
defect below (a check removed, a message that names nothing, the wrong exception, a refused call that
edits what the caller holds) makes :func:`gdn_equiv.harness.properties.check_refuses_bad_input` fail on some
drawn bad call. The defects are planted in the layer's input checks, never in the guard."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import find, settings
from hypothesis.errors import NoSuchExample

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.bad_input import KINDS, BadCall, applies, names, prepare
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.model import reference
from gdn_equiv.model.families import known_families
from gdn_equiv.strategies import bad_calls

FAMILIES = tuple(known_families())
# the first hit is enough (no shrinking): each search stops there
SEARCH = first_hit()


def _fails(bad: BadCall) -> bool:
    try:
        P.check_refuses_bad_input(bad)
    except Mismatch:
        return True
    return False


def _caught(kinds: list[str], planted: Callable[[], Any]) -> BadCall:
    with planted():
        return find(bad_calls(family=FAMILIES, kinds=kinds), _fails, settings=SEARCH)


def _no_op(target: str) -> Callable[[], Any]:
    return lambda: mock.patch(target, lambda *args, **kwargs: None)


@contextmanager
def _refuse_with(message: str, exc: type[Exception] = InvalidArgument) -> Iterator[None]:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise exc(message)

    with mock.patch("gdn_equiv.model.reference.check_cu_seqlens", refuse):
        yield


@contextmanager
def _edits_then_refuses(edit: Callable[[Any, Any], None]) -> Iterator[None]:
    """A layer whose checks first edit what the caller passed (``x``, the cache), then refuse as usual."""
    original = reference.ShortConvLayer._prepare

    def prepare_(self, x, attention_mask, past_key_values, use_cache, cu_seqlens):
        edit(x, past_key_values)
        return original(self, x, attention_mask, past_key_values, use_cache, cu_seqlens)

    with mock.patch.object(reference.ShortConvLayer, "_prepare", prepare_):
        yield


def _scale_x(x: Any, cache: Any) -> None:
    if hasattr(x, "mul_") and x.numel() and not x.is_meta:
        x.mul_(2)


def _bump_state(x: Any, cache: Any) -> None:
    state = cache.states[0] if cache is not None and cache.states else None
    if isinstance(state, dict) and hasattr(state.get("recurrent_state"), "zero_"):
        state["recurrent_state"].add_(1)


def _drop_state(x: Any, cache: Any) -> None:
    if cache is not None and cache.states:
        cache.states[0] = None


def _kinds(prefix: str) -> list[str]:
    return [k for k in KINDS if k.startswith(prefix)]


PLANTED: list[tuple[str, list[str], Callable[[], Any]]] = [
    ("mask check removed", _kinds("attention_mask"), _no_op("gdn_equiv.model.reference.ShortConvLayer._check_mask")),
    ("cu_seqlens check removed", _kinds("cu_seqlens"), _no_op("gdn_equiv.model.reference.check_cu_seqlens")),
    ("cached-state check removed", _kinds("cache"), _no_op("gdn_equiv.model.reference.check_layer_state")),
    ("a refusal naming nothing", _kinds("cu_seqlens"), lambda: _refuse_with("bad cu_seqlens")),
    ("a ValueError, not InvalidArgument", _kinds("cu_seqlens"), lambda: _refuse_with("cu_seqlens", ValueError)),
    ("x edited before the refusal", list(KINDS), lambda: _edits_then_refuses(_scale_x)),
    ("a cached state edited before the refusal", _kinds("cached"), lambda: _edits_then_refuses(_bump_state)),
    ("the cache's state dropped before the refusal", _kinds("cached"), lambda: _edits_then_refuses(_drop_state)),
    ("conv facts accept any backend", ["conv backend"], _no_op("gdn_equiv.model.reference.get_backend")),
]  # fmt: skip


@pytest.mark.parametrize(("kinds", "planted"), [pytest.param(k, p, id=i) for i, k, p in PLANTED])
def test_the_bad_input_property_catches_a_planted_defect(kinds, planted):
    bad = _caught(kinds, planted)
    assert bad.kind in kinds


def test_the_catalog_covers_every_class_of_p8():
    """SPEC P8's classes, each with kinds of its own: ranks/shapes, dtypes, cu_seqlens, masks, the cached
    state (shape, dtype), unknown backend/activation, the config's values."""
    for prefix in (
        "hidden_states",
        "attention_mask",
        "cu_seqlens",
        "cached",
        "conv backend",
        "conv activation",
        "config",
    ):
        assert any(k.startswith(prefix) for k in KINDS), prefix


@pytest.mark.parametrize(
    ("message", "needle", "found"),
    [
        ("got 17", "7", False),
        ("got 0.7", "7", False),
        ("got 7 after 9", "7", True),
        ("got (1, 7)", "7", True),
        ("got -1", "-1", True),
        ("got torch.float16", "torch.float16", True),
        ("got 'yes'", ("'no'", "'yes'"), True),
        ("a list", "list", True),
    ],
)
def test_a_number_is_named_only_as_a_token_of_its_own(message, needle, found):
    assert names(message, needle) is found


@pytest.mark.slow
def test_a_kind_whose_premise_fails_is_refused_by_name():
    bad = find(bad_calls(family=FAMILIES, kinds=["hidden_states rank 2"]), lambda b: b.example.cache != "populated")
    assert not applies("cached offset", bad.example)
    with pytest.raises(InvalidArgument, match="cached offset"):
        prepare(BadCall(bad.example, "cached offset"))
    with pytest.raises(InvalidArgument, match="'no such kind'"):
        prepare(BadCall(bad.example, "no such kind"))


@pytest.mark.slow
def test_a_bad_call_replays_from_json():
    bad = find(bad_calls(family=FAMILIES, kinds=["cached state shape"]), lambda b: b.pick > 3)
    assert BadCall.from_json(bad.to_json()) == bad


def test_no_planted_defect_means_no_false_alarm_for_the_searches():
    """The searches above find nothing when nothing is planted (so a hit means the planted defect)."""
    with pytest.raises(NoSuchExample):
        find(
            bad_calls(family=FAMILIES, kinds=[k for k in KINDS if k.startswith("cu_seqlens")]),
            _fails,
            settings=settings(SEARCH, max_examples=60),
        )
