"""P9 for a caller's fla Cache: each property of :mod:`gdn_equiv.suite.test_callers` that drives one
must find, by itself, an example where a planted defect shows. Layer-side defects are a
:class:`~gdn_equiv.model.cache.FlaCacheView` subclass a layer subclass supplies as its ``cache_view`` (the way
a planted guard is supplied); the fla target's cache seam takes its converters as arguments."""

from __future__ import annotations

import pytest
from hypothesis import find
from hypothesis import strategies as st

from gdn_equiv.harness.callers import check_fla_cache_loop, check_round_trip
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.model.cache import Cache, FlaCacheView, layer_cache
from gdn_equiv.strategies.callers import stacks

pytestmark = [pytest.mark.teeth, pytest.mark.fla]

SEARCH = first_hit()  # any failing example makes the point; no shrinking
LOOPS = st.tuples(
    stacks(),
    st.integers(1, 6),
    st.integers(1, 3),
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.booleans(),
    st.integers(0, 5),
)


def _planted(view_cls: type[FlaCacheView]) -> type:
    """A mixin whose ``cache_view`` reads an fla cache through ``view_cls`` (our Cache as before)."""

    def cache_view(past_key_values):
        view = layer_cache(past_key_values)
        return view_cls(view.cache, view.keywords) if isinstance(view, FlaCacheView) else view

    return type(f"Planted{view_cls.__name__}", (), {"cache_view": staticmethod(cache_view)})


class DropsLastConvSlot(FlaCacheView):
    """Writes ``None`` for the last conv slot (that conv restarts from zeros next call)."""

    def update(self, layer_idx, *, conv_state, **kwargs):
        conv_state = None if conv_state is None else (*conv_state[:-1], None)
        return super().update(layer_idx, conv_state=conv_state, **kwargs)


class ReadsLayerZero(FlaCacheView):
    """Reads layer 0's state whatever the layer's index."""

    def get(self, layer_idx):
        return super().get(0)


class CountsTwice(FlaCacheView):
    """Hands fla the new total as ``offset``, which fla adds to its count."""

    def update(self, layer_idx, *, offset, **kwargs):
        seen = self.cache.get_seq_length(layer_idx) if len(self.cache) > layer_idx else 0
        return super().update(layer_idx, offset=seen + offset, **kwargs)


def _loop_caught(view_cls: type[FlaCacheView]):
    planted = _planted(view_cls)

    def fails(args) -> bool:
        (family, configs, seed), P, steps, valid, grad, chunk = args
        try:
            check_fla_cache_loop(family, configs, seed, P, steps, valid, grad, chunk, planted=planted)
        except AssertionError:  # Mismatch included
            return True
        return False

    return find(LOOPS, fails, settings=SEARCH)


def test_loop_property_catches_a_view_that_drops_a_conv_slot() -> None:
    _loop_caught(DropsLastConvSlot)


def test_loop_property_catches_a_view_that_reads_another_layers_state() -> None:
    (_, configs, _), *_ = _loop_caught(ReadsLayerZero)
    assert any(c.layer_idx > 0 for c in configs), "layer 0 reading layer 0 is no defect"


def test_loop_property_catches_a_view_that_counts_tokens_twice() -> None:
    _loop_caught(CountsTwice)


# --- the fla target's cache seam --------------------------------------------------------------


def _offsets_of_layer_zero(cache):
    """``from_fla_cache`` reading every layer's token count from ``get_seq_length()`` (layer 0's)."""
    from gdn_equiv.targets.fla_target import from_fla_cache

    out = from_fla_cache(cache)
    if out is not None and not isinstance(cache, Cache):
        for state in out.states:
            if state is not None:
                state["offset"] = cache.get_seq_length()
    return out


def _drops_last_conv_slot(cache):
    """``to_fla_cache`` that copies every conv slot but the last."""
    from gdn_equiv.targets.fla_target import to_fla_cache

    out = to_fla_cache(cache)
    for idx in range(len(out)):
        state = out[idx]
        if state is not None and state["conv_state"] is not None:
            state["conv_state"] = (*state["conv_state"][:-1], None)
    return out


def _no_copy(cache):
    """``to_fla_cache`` that hands fla's layer a caller's fla cache itself."""
    from gdn_equiv.targets.fla_target import to_fla_cache

    return to_fla_cache(cache) if isinstance(cache, Cache) else cache


ROUND_TRIPS = st.tuples(
    stacks(), st.integers(1, 6), st.integers(0, 2), st.lists(st.integers(1, 6), min_size=1, max_size=3)
)


def _round_trip_caught(**converters):
    def fails(args) -> bool:
        (family, configs, seed), P, steps, valid = args
        try:
            check_round_trip(family, configs, seed, P, steps, valid, **converters)
        except AssertionError:
            return True
        return False

    return find(ROUND_TRIPS, fails, settings=SEARCH)


def test_round_trip_catches_offsets_read_from_the_wrong_layer() -> None:
    (_, configs, _), *_ = _round_trip_caught(from_fla=_offsets_of_layer_zero)
    assert configs[0].layer_idx > 0, "with layer 0 in the stack every layer's count is layer 0's"


def test_round_trip_catches_a_copy_that_drops_a_conv_slot() -> None:
    _round_trip_caught(to_fla=_drops_last_conv_slot)


def test_round_trip_catches_a_copy_that_is_the_callers_cache() -> None:
    _round_trip_caught(to_fla=_no_copy)
