"""A caller's stack of layers, drawn for the caller properties (``gdn_equiv.suite.test_callers``) and their
teeth: small fp64 layers with short convs, at distinct ``layer_idx``."""

from __future__ import annotations

import dataclasses

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
