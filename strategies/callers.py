"""The caller properties' draws (``gdn_equiv.suite.test_callers``) and their teeth: small fp64 layers with short
convs, a caller's stack of them at distinct ``layer_idx``, the calls' layouts and masks, and each property's
``@given`` keyword arguments (``*_draws``, in the order the property draws them)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from gdn_equiv.model.families import known_families
from gdn_equiv.strategies.layers import layer_configs

FAMILIES = tuple(known_families())


@st.composite
def family_layers(draw: st.DrawFn):
    """``(family, config, seed)``: a small fp64 config with short convs (slot widths may differ)."""
    family = draw(st.sampled_from(FAMILIES))
    config = draw(layer_configs(family=family, use_short_conv=True, conv_dtypes=("float64",), dtype="float64"))
    return family, config, draw(st.integers(0, 2**16))


@st.composite
def stacks(draw: st.DrawFn):
    """``(family, configs, seed)``: a caller's stack of one or two layers of one family (fp64, short
    convs on) at distinct ``layer_idx`` in 0..3, so fla's Cache pads the indices below and between."""
    family, config, seed = draw(family_layers())
    indices = draw(st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True).map(sorted))
    return family, tuple(dataclasses.replace(config, layer_idx=i) for i in indices), seed


@st.composite
def caller_calls(draw: st.DrawFn):
    """A layout (``none``/``mask``/``cu_seqlens``), its per-sequence valid tokens, and a prefix length."""
    layout = draw(st.sampled_from(["none", "mask", "cu_seqlens"]))
    prefix = draw(st.integers(0, 6))
    if layout == "cu_seqlens":
        lens = draw(st.lists(st.integers(0, 8), min_size=1, max_size=3).filter(sum))
        return layout, 1, sum(lens), tuple(lens), "right", prefix
    B, T = draw(st.integers(1, 3)), draw(st.integers(1, 9))
    if layout == "none":
        return layout, B, T, (T,) * B, "right", prefix
    valid = tuple(draw(st.lists(st.integers(0, T), min_size=B, max_size=B)))
    return layout, B, T, valid, draw(st.sampled_from(["left", "right"])), prefix


#: the seed of an fla-target example (the GPU property's)
SMALL_SEEDS = st.integers(0, 999)


def bookkeeping_draws(classes: tuple[str, ...]) -> dict[str, st.SearchStrategy[Any]]:
    """A layer, a call, the layer class (of ``classes``) and gradients on or off: the cache bookkeeping's."""
    return {"case": family_layers(), "call": caller_calls(), "cls": st.sampled_from(classes), "grad": st.booleans()}


def bookkeeping_cases() -> st.SearchStrategy[tuple[Any, Any, bool]]:
    """``(layer, call, grad)``: what the bookkeeping's teeth search for a call a planted cache gets wrong."""
    return st.tuples(family_layers(), caller_calls(), st.booleans())


def longer_mask_draws() -> dict[str, st.SearchStrategy[Any]]:
    """A layer, ``T`` new tokens, ``extra`` past ones, and each row's valid tokens."""
    return {
        "case": family_layers(),
        "T": st.integers(1, 8),
        "extra": st.integers(1, 5),
        "valid": st.lists(st.integers(0, 8), min_size=1, max_size=3),
    }


def generation_draws() -> dict[str, st.SearchStrategy[Any]]:
    """A layer, a prefill of ``P`` tokens, ``steps`` decode steps, each row's valid tokens, gradients on or off."""
    return {
        "case": family_layers(),
        "P": st.integers(1, 8),
        "steps": st.integers(1, 4),
        "valid": st.lists(st.integers(1, 8), min_size=1, max_size=3),
        "grad": st.booleans(),
    }


def fla_cache_loop_draws() -> dict[str, st.SearchStrategy[Any]]:
    """A stack, a prefill, decode steps, valid tokens, gradients, and where the prefill is chunked (0: whole)."""
    return {
        "case": stacks(),
        "P": st.integers(1, 6),
        "steps": st.integers(1, 3),
        "valid": st.lists(st.integers(1, 6), min_size=1, max_size=3),
        "grad": st.booleans(),
        "chunk": st.integers(0, 5),
    }


def fla_round_trip_draws() -> dict[str, st.SearchStrategy[Any]]:
    """A stack, a prefill, up to two decode steps, valid tokens, and a chunked prefill's split."""
    return {
        "case": stacks(),
        "P": st.integers(1, 6),
        "steps": st.integers(0, 2),
        "valid": st.lists(st.integers(1, 6), min_size=1, max_size=3),
        "chunk": st.integers(0, 5),
    }


def fla_target_cache_draws(families: tuple[str, ...]) -> dict[str, st.SearchStrategy[Any]]:
    """A family (of ``families``), the data to draw its config from, a prefill of 1 or 7 tokens, valid tokens."""
    return {
        "family": st.sampled_from(families),
        "data": st.data(),
        "P": st.sampled_from([1, 7]),
        "valid": st.lists(st.integers(1, 7), min_size=1, max_size=2),
    }
