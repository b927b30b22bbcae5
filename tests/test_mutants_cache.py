"""Gaps in the cache's tests that mutation testing found (docs/mutation.md, scripts/mutate.py cache)."""

from __future__ import annotations

import pytest
import torch

from gdn_equiv.cache import Cache


def _cache() -> Cache:
    cache = Cache()
    conv = (torch.arange(6.0).reshape(1, 2, 3), None, torch.ones(1, 4, 3))  # a slot may hold no state
    cache.states = [None, {"recurrent_state": torch.full((1, 2, 2, 2), 0.5), "conv_state": conv, "offset": 7}]
    return cache


@pytest.mark.parametrize("dtype", [None, torch.float64], ids=["same-dtype", "fp64"])
def test_a_clone_holds_the_same_states_in_fresh_storage(dtype: torch.dtype | None) -> None:
    """A clone feeds a second path: same layers (empty ones included), same values and offsets,
    cast to ``dtype`` when given, and no tensor shared with the original."""
    original = _cache()
    clone = original.clone(dtype)
    assert len(clone) == len(original) == 2
    assert clone.states[0] is None
    src, dst = original.states[1], clone.states[1]
    assert dst.keys() == src.keys() and dst["offset"] == 7
    pairs = [(src["recurrent_state"], dst["recurrent_state"]), *zip(src["conv_state"], dst["conv_state"], strict=True)]
    for a, b in pairs:
        if a is None:
            assert b is None
            continue
        assert b.dtype == (dtype or a.dtype) and torch.equal(a.to(b.dtype), b)
        assert b.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
