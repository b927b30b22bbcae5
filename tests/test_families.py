"""P7 for every family: each reference layer agrees with itself across the ways one computation can
be split, and its state_dict is its fla class's.

Every property draws a family (all of ``known_families()``, shrinking towards gated_deltanet) and
compares two different algorithms: the chunked core against the token loop, a decode loop against
one prefill, a packed batch against single sequences, a masked batch against its rows alone. They
run in fp64 (table 1e-7): layer-level comparisons in fp32 exceed the table's 1e-5 by rounding alone
(see tests/test_reference.py), which would hide nothing but noise.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import replace

import pytest
import torch
from _gen import count_example, cu_from_lens, randn
from hypothesis import given, settings
from hypothesis import strategies as st

from gdn_equiv.harness.compare import assert_equivalent, assert_tree_equivalent
from gdn_equiv.model.cache import Cache
from gdn_equiv.model.example import Example, build_layer, materialize
from gdn_equiv.model.families import get_family, known_families
from gdn_equiv.strategies import examples, layer_configs

F64 = torch.float64
FAMILIES = tuple(known_families())


@st.composite
def family_layers(draw: st.DrawFn, *, use_short_conv: bool | None = True, modes: tuple[str, ...] = ("chunk",)):
    """``(family, config, seed)``: a small config of a drawn family; fp64 convs (no dtype mix)."""
    family = draw(st.sampled_from(FAMILIES))
    config = draw(
        layer_configs(
            family=family, use_short_conv=use_short_conv, conv_dtypes=("float64",), dtype="float64", modes=modes
        )
    )
    return family, config, draw(st.integers(0, 2**16))


def _layer(family: str, config, seed: int):
    return build_layer(Example(config=config, family=family, dtype="float64", seed=seed), get_family(family).layer_cls)


@settings(deadline=None)
@given(case=family_layers(use_short_conv=None), batch=st.integers(1, 2), T=st.one_of(st.integers(1, 12), st.just(70)))
def test_chunked_core_equals_recurrent_core_for_every_family(case, batch, T):
    family, config, seed = case
    count_example()
    chunk = _layer(family, config.replace(mode="chunk"), seed)
    recurrent = _layer(family, config.replace(mode="recurrent"), seed)
    recurrent.load_state_dict(chunk.state_dict(), strict=True)
    x = randn(seed, batch, T, config.hidden_size, dtype=F64)
    y_chunk, _, c_chunk = chunk(x, use_cache=True)
    y_rec, _, c_rec = recurrent(x, use_cache=True)
    assert_equivalent(y_chunk, y_rec, name="output", paths=("chunk", "recurrent"), exact=False, context=family)
    assert_tree_equivalent(c_chunk, c_rec, name="cache", paths=("chunk", "recurrent"), exact=False, context=family)


@settings(deadline=None)
@given(
    case=family_layers(), batch=st.integers(1, 2), T=st.integers(2, 10), prefix=st.integers(0, 9), grad=st.booleans()
)
def test_decode_after_prefill_equals_one_prefill_for_every_family(case, batch, T, prefix, grad):
    """A prefill of ``prefix`` tokens, then one token at a time with the cache = one call over all ``T``
    (outputs and the final cache, states and offsets), with and without autograd (the step kernel)."""
    family, config, seed = case
    prefix = min(prefix, T - 1)
    count_example()
    layer = _layer(family, config, seed)
    x = randn(seed, batch, T, config.hidden_size, dtype=F64)
    with torch.set_grad_enabled(grad):
        whole, _, cache_whole = layer(x, use_cache=True)
        cache = Cache()
        outs = []
        if prefix:
            y, _, cache = layer(x[:, :prefix], past_key_values=cache, use_cache=True)
            outs.append(y)
        for t in range(prefix, T):
            y, _, cache = layer(x[:, t : t + 1], past_key_values=cache, use_cache=True)
            outs.append(y)
    paths = ("decode", "prefill")
    assert_equivalent(torch.cat(outs, 1), whole, name="output", paths=paths, exact=False, context=family)
    assert_tree_equivalent(cache, cache_whole, name="cache", paths=paths, exact=False, context=family)
    assert cache[0]["offset"] == T  # absolute: the tokens fed, not a second run of the same bookkeeping


@settings(deadline=None)
@given(case=family_layers(), lens=st.lists(st.integers(0, 9), min_size=1, max_size=4).filter(lambda xs: sum(xs) > 0))
def test_varlen_packed_equals_each_sequence_alone_for_every_family(case, lens):
    family, config, seed = case
    count_example()
    layer = _layer(family, config, seed)
    x = randn(seed, 1, sum(lens), config.hidden_size, dtype=F64)
    packed, _, cache = layer(x, cu_seqlens=cu_from_lens(lens), use_cache=True)
    start = 0
    for i, n in enumerate(lens):
        if n:
            alone, _, c_alone = layer(x[:, start : start + n], use_cache=True)
            ctx = f"{family}: sequence {i} of {lens}"
            assert_equivalent(
                packed[:, start : start + n], alone, name="output", paths=("packed", "alone"), exact=False, context=ctx
            )
            rec = cache[0]["recurrent_state"][i : i + 1]
            assert_equivalent(rec, c_alone[0]["recurrent_state"], name="recurrent_state", exact=False, context=ctx)
            for slot, s_p, s_a in zip(config.SLOTS, cache[0]["conv_state"], c_alone[0]["conv_state"], strict=True):
                assert_equivalent(s_p[i : i + 1], s_a, name=f"{slot} conv_state", exact=False, context=ctx)
        start += n


@settings(deadline=None)
@given(
    case=family_layers(),
    T=st.integers(1, 10),
    valid=st.lists(st.integers(0, 10), min_size=1, max_size=3),
    left=st.booleans(),
)
def test_attention_mask_equals_each_row_alone_for_every_family(case, T, valid, left):
    """A padded batch with an ``attention_mask`` (unpadded into ``cu_seqlens``, or dense: multiplied
    into the conv input) gives each row's valid positions what the row alone gives."""
    family, config, seed = case
    count_example()
    valid = [min(v, T) for v in valid]
    layer = _layer(family, config, seed)
    B = len(valid)
    x = randn(seed, B, T, config.hidden_size, dtype=F64)
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(valid):
        if n:
            mask[b, slice(T - n, T) if left else slice(0, n)] = 1
    out, _, _ = layer(x, attention_mask=mask)
    for b, n in enumerate(valid):
        if not n:
            continue
        rows = slice(T - n, T) if left else slice(0, n)
        alone, _, _ = layer(x[b : b + 1, rows])
        ctx = f"{family} ({get_family(family).mask} mask): row {b}, {n} valid of {T}, {'left' if left else 'right'}"
        assert_equivalent(
            out[b : b + 1, rows], alone, name="output", paths=("masked", "alone"), exact=False, context=ctx
        )


def _fla_layers():
    if importlib.util.find_spec("fla") is None:
        return None
    try:
        return importlib.import_module("fla.layers")
    except Exception:  # fla present but not importable here (e.g. a triton it cannot use)
        return None


@pytest.mark.parametrize("family", FAMILIES)
def test_state_dict_loads_strict_into_the_fla_class(family):
    """Our reference layer's state_dict is the fla class's (names and shapes) in both directions."""
    if _fla_layers() is None:
        pytest.skip("flash-linear-attention is not installed or does not import here")
    fam = get_family(family)
    module, _, name = fam.fla_class.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        pytest.skip(f"this fla has no {fam.fla_class}")
    config = fam.config_cls(**{**_small(family), "conv_bias": True})
    ours = _layer(family, config, 0)
    theirs = cls(**fam.fla_kwargs(config))
    ours_sd, theirs_sd = ours.state_dict(), theirs.state_dict()
    assert {k: tuple(v.shape) for k, v in ours_sd.items()} == {k: tuple(v.shape) for k, v in theirs_sd.items()}
    theirs.load_state_dict({k: v.float() for k, v in ours_sd.items()}, strict=True)
    ours.load_state_dict({k: v.double() for k, v in theirs.state_dict().items()}, strict=True)


def _small(family: str) -> dict:
    return dict(get_family(family).small)


@settings(deadline=None)
@given(example=st.sampled_from(FAMILIES).flatmap(lambda f: examples(family=f)))
def test_example_call_facts_are_what_the_layer_reads(example):
    """The facts a guard-only search decides from (``Example.call_facts``) are the layer's own."""
    count_example()
    layer = build_layer(example)
    inputs = materialize(example, layer)
    facts = layer.call_facts(inputs.x, inputs.attention_mask, inputs.cache, inputs.use_cache, inputs.cu_seqlens)
    assert example.call_facts() == facts


def test_every_family_describes_its_slots():
    for family in FAMILIES:
        fam = get_family(family)
        config = fam.config_cls(**_small(family))
        line = fam.describe(config)
        for slot in config.SLOTS:
            assert f"{slot}={config.conv_channels(slot)}" in line
        # the fused split comes from the weights: their rows are the slots' channels
        layer = _layer(family, replace(config), 0)
        assert [c.channels for c in layer.convs()] == [config.conv_channels(s) for s in config.SLOTS]
