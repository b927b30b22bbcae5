"""Calls shaped like real callers', and the cache they leave measured from the inputs alone.

- Absolute bookkeeping: after a call, a layer's cache holds ``offset`` = every token fed so far (fla's
  ``q_len`` per call, padding included) and, per conv slot, the last ``W`` conv inputs of each
  sequence (``layer._project(x).conv_inputs``, before the conv) after the mask or ``cu_seqlens``,
  zeros in front where a sequence has fewer than ``W``, continuing a previous call's. Computed from
  the inputs directly, never by running the same bookkeeping a second time.
- Hugging Face generation: an ``attention_mask`` longer than the call (past + new tokens, left
  padding; the layers read its last ``T`` columns), a prefill with it, then one token at a time with
  a growing mask and the cache, through ``prologue="auto"`` of every family's fused layer and through
  its reference layer (bitwise: the guard falls back, or fuses exactly), and against each row run
  alone without padding (fp64, table tolerance).
- The cache object a Hugging Face style caller owns, ``fla.models.utils.Cache``: the same generation loops
  (prefill whole or chunked) through a stack of layers sharing one, on the reference layer and both
  prologues, equal the loops with our Cache bitwise and leave it holding what the inputs say; the fla
  target's copy of such a cache round-trips unchanged; caches fla's layers cannot use (transformers'
  ``DynamicCache``, fla's legacy tuples) are refused by name. Needs fla (marker ``fla``).
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, note, settings

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.callers import (
    check_fla_cache_loop,
    check_round_trip,
    fla_cache,
    last_inputs,
    read_state,
    row_mask,
)
from gdn_equiv.harness.compare import Mismatch, assert_equivalent, assert_tree_equivalent
from gdn_equiv.harness.testing import count_example, cu_from_lens, randn
from gdn_equiv.model.cache import Cache, check_layer_state, layer_cache
from gdn_equiv.model.example import Example, Inputs, build_layer
from gdn_equiv.model.families import get_family, known_families
from gdn_equiv.strategies import callers, layer_configs
from gdn_equiv.targets.fla_target import TARGET

F64 = torch.float64


FAMILIES = tuple(known_families())
CLASSES = ("layer_cls", "fused_cls")


def _layer(family: str, config, seed: int, cls: str = "layer_cls"):
    return build_layer(
        Example(config=config, family=family, dtype="float64", seed=seed), getattr(get_family(family), cls)
    )


# --- absolute bookkeeping ---------------------------------------------------------------------


@settings(deadline=None)
@given(**callers.bookkeeping_draws(CLASSES))
def test_cache_holds_offset_and_last_conv_inputs_computed_from_the_inputs(case, call, cls, grad):
    """offset = tokens fed (each call's ``x.shape[1]``, fla's ``q_len``: a packed prefix counts all its
    tokens); conv state = the last W conv inputs of each sequence."""
    family, config, seed = case
    count_example()
    check_bookkeeping(_layer(family, config, seed, cls), family, config, seed, call, grad)


def check_bookkeeping(layer, family: str, config, seed: int, call, grad: bool) -> None:
    """Feed ``layer`` a prefix (if any) and the call, then measure its cache against the inputs."""
    layout, B, T, valid, side, P = call
    cls = type(layer).__name__
    H = config.hidden_size
    N = len(valid) if layout == "cu_seqlens" else B
    note(f"{family}: layout={layout} B={B} T={T} valid={valid} side={side} prefix={P}")
    x = randn(seed, B, T, H, dtype=F64)
    cache = Cache()
    history: list[list] = [[] for _ in range(len(config.SLOTS))]  # per slot: [N, n, D] token rows per sequence
    with torch.set_grad_enabled(grad):
        if P:
            prefix = randn(
                seed + 1, 1 if layout == "cu_seqlens" else B, N * P if layout == "cu_seqlens" else P, H, dtype=F64
            )
            cu = torch.arange(0, N * P + 1, P, dtype=torch.int32) if layout == "cu_seqlens" else None
            layer(prefix, cu_seqlens=cu, past_key_values=cache, use_cache=True)
            for i, inp in enumerate(layer._project(prefix).conv_inputs):
                rows = inp.reshape(N, P, -1) if layout == "cu_seqlens" else inp  # [N, P, D]
                history[i].append([rows[s] for s in range(N)])
        kwargs = {}
        if layout == "mask":
            kwargs["attention_mask"] = row_mask(B, T, valid, side)
        elif layout == "cu_seqlens":
            kwargs["cu_seqlens"] = cu_from_lens(list(valid))
        layer(x, past_key_values=cache, use_cache=True, **kwargs)
    state = cache[config.layer_idx]
    fed = (N * P if layout == "cu_seqlens" else P) + T  # fla: each call adds its q_len (x.shape[1])
    assert state["offset"] == fed, f"offset {state['offset']}, fed {fed} tokens ({family}, layout={layout})"
    dense = get_family(family).mask == "dense"
    starts = [0, *torch.tensor(valid).cumsum(0).tolist()]
    for i, (slot, conv, inp) in enumerate(zip(config.SLOTS, layer.convs(), layer._project(x).conv_inputs, strict=True)):
        W = conv.kernel_size
        expected = []
        for s in range(N):
            if layout == "cu_seqlens":
                new = inp[0, starts[s] : starts[s + 1]]
            elif layout == "mask" and dense:  # the mask multiplies the conv input; the row stays whole
                new = inp[s] * kwargs["attention_mask"][s].to(F64).unsqueeze(-1)
            elif layout == "mask":  # unpadded: the row's valid tokens only
                new = inp[s][kwargs["attention_mask"][s].bool()]
            else:
                new = inp[s]
            before = [h[s] for h in history[i]]
            expected.append(last_inputs(torch.cat([*before, new], dim=0), W))
        ctx = f"{family}, {cls}: {slot} conv (W={W}), layout={layout}, valid={valid}, side={side}, prefix={P}"
        got = state["conv_state"][i]
        assert_equivalent(
            got, torch.stack(expected), name=f"{slot} conv_state", paths=("cache", "inputs"), exact=False, context=ctx
        )


class ForgetsConvState:
    """A planted defect: each call's convs start from zeros instead of the cached conv state (the
    recurrent state and offset are kept), as if a cache were handed over without its conv part."""

    def _prepare(self, *args, **kwargs):
        call = super()._prepare(*args, **kwargs)  # type: ignore[misc]  # mixed into a ShortConvLayer
        if call.last_state is None:
            return call
        return dataclasses.replace(call, last_state={**call.last_state, "conv_state": None})


def test_bookkeeping_catches_a_layer_that_forgets_its_conv_state():
    def wrong(args) -> bool:
        (family, config, seed), call, grad = args
        planted = type("Forgets", (ForgetsConvState, get_family(family).layer_cls), {})
        layer = _layer(family, config, seed)
        broken = build_layer(Example(config=config, family=family, dtype="float64", seed=seed), planted)
        broken.load_state_dict(layer.state_dict(), strict=True)
        try:
            check_bookkeeping(broken, family, config, seed, call, grad)
        except Mismatch:
            return True
        return False

    search = settings(
        max_examples=200,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],  # any failing call makes the point; no shrinking
    )
    _, call, _ = find(callers.bookkeeping_cases(), wrong, settings=search)
    assert call[-1] > 0, "only a call after a prefix has a conv state to forget"


# --- generation as Hugging Face calls it --------------------------------------------------------


def _pair(family: str, config, seed: int):
    """The reference layer and the fused layer with the same parameters."""
    ref = _layer(family, config, seed)
    fused = _layer(family, config, seed, "fused_cls")
    fused.load_state_dict(ref.state_dict(), strict=True)
    return ref, fused


@settings(deadline=None)
@given(**callers.longer_mask_draws())
def test_attention_mask_longer_than_the_call_reads_its_last_columns(case, T, extra, valid):
    """A ``[B, extra + T]`` mask (past + new tokens) is the ``[B, T]`` mask of its last ``T`` columns:
    both paths give what the cut mask gives, auto bitwise the reference (fusing or falling back)."""
    family, config, seed = case
    count_example()
    B = len(valid)
    valid = [min(v, T) for v in valid]
    ref, fused = _pair(family, config, seed)
    x = randn(seed, B, T, config.hidden_size, dtype=F64)
    cut = row_mask(B, T, tuple(valid), "left")
    past = torch.randint(0, 2, (B, extra), generator=torch.Generator().manual_seed(seed))
    long = torch.cat([past, cut], dim=1)
    ctx = f"{family}: B={B} T={T} valid={valid} extra={extra}"
    y_cut, _, _ = ref(x, attention_mask=cut)
    y_ref, _, _ = ref(x, attention_mask=long)
    y_auto, _, _ = fused(x, attention_mask=long, prologue="auto")
    note(f"{ctx}; guard: {fused.last_decision}")
    assert_equivalent(y_ref, y_cut, name="output", paths=("long mask", "cut mask"), context=ctx)
    assert_equivalent(y_auto, y_ref, name="output", paths=("auto", "reference"), context=ctx)


@settings(deadline=None)
@given(**callers.generation_draws())
def test_generation_loop_with_left_padding_and_growing_mask(case, P, steps, valid, grad):
    """Prefill ``[B, P]`` with a left-padded mask, then ``steps`` single tokens with the mask grown by a
    column each time and the cache: auto == reference bitwise (outputs, every step's cache); each row's
    valid outputs == that row run alone, unpadded, prefill then decode (fp64, table tolerance)."""
    family, config, seed = case
    count_example()
    B, H = len(valid), config.hidden_size
    valid = [min(v, P) for v in valid]
    ref, fused = _pair(family, config, seed)
    prompt = randn(seed, B, P, H, dtype=F64)  # padded positions hold values too, as pad embeddings do
    tokens = randn(seed + 1, B, steps, H, dtype=F64)
    ctx = f"{family}: B={B} prompt {P} valid={valid} steps={steps} grad={grad}"
    note(ctx)
    runs = {}
    with torch.set_grad_enabled(grad):
        for name, layer, kw in (("reference", ref, {}), ("auto", fused, {"prologue": "auto"})):
            mask = row_mask(B, P, tuple(valid), "left")
            y, _, cache = layer(prompt, attention_mask=mask, past_key_values=Cache(), use_cache=True, **kw)
            outs, caches = [y], [cache.clone()]
            for t in range(steps):
                mask = torch.cat([mask, torch.ones(B, 1, dtype=mask.dtype)], dim=1)
                y, _, cache = layer(
                    tokens[:, t : t + 1], attention_mask=mask, past_key_values=cache, use_cache=True, **kw
                )
                outs.append(y)
                caches.append(cache.clone())
            runs[name] = (torch.cat(outs, 1), caches)
        assert runs["auto"][1][-1][config.layer_idx]["offset"] == P + steps
        assert_equivalent(
            runs["auto"][0], runs["reference"][0], name="output", paths=("auto", "reference"), context=ctx
        )
        for k, (c_auto, c_ref) in enumerate(zip(runs["auto"][1], runs["reference"][1], strict=True)):
            assert_tree_equivalent(
                c_auto, c_ref, name=f"cache after call {k}", paths=("auto", "reference"), context=ctx
            )
        for b, n in enumerate(valid):
            row = ref if b % 2 == 0 else fused
            kw = {} if row is ref else {"prologue": "auto"}
            y, _, cache = row(prompt[b : b + 1, P - n :], past_key_values=Cache(), use_cache=True, **kw)
            outs = [y]
            for t in range(steps):
                y, _, cache = row(tokens[b : b + 1, t : t + 1], past_key_values=cache, use_cache=True, **kw)
                outs.append(y)
            alone = torch.cat(outs, 1)
            padded = runs["reference"][0][b : b + 1, P - n :]
            assert_equivalent(
                padded, alone, name=f"row {b} output", paths=("padded batch", "row alone"), exact=False, context=ctx
            )


# --- the cache object a Hugging Face style caller owns: fla's --------------------------------------
#
# A caller (fla's own models, transformers' generate) makes one ``fla.models.utils.Cache`` and hands it
# to every layer of its stack; each layer reads ``cache[layer_idx]`` and ``get_seq_length(layer_idx)``
# and writes with ``cache.update(layer_idx=..., ...)``, in place. fla is an optional extra: these tests
# import it inside (marker ``fla``: skipped with a reason without it).


@pytest.mark.fla
@settings(deadline=None)
@given(**callers.fla_cache_loop_draws())
def test_generation_loop_with_a_callers_fla_cache_equals_the_loop_with_ours(case, P, steps, valid, grad, chunk):
    """A left-padded prefill (whole, or chunked so the second call's mask is longer than its tokens),
    then one token at a time with the mask grown, through a stack of layers sharing the caller's
    ``fla.models.utils.Cache``: what our Cache gives, bitwise, and the cache measured from the inputs
    (:func:`check_fla_cache_loop`)."""
    family, configs, seed = case
    count_example()
    check_fla_cache_loop(family, configs, seed, P, steps, valid, grad, chunk, note=note)


@pytest.mark.fla
@settings(deadline=None)
@given(**callers.fla_round_trip_draws())
def test_a_callers_fla_cache_round_trips_through_the_fla_target_unchanged(case, P, steps, valid, chunk):
    """The fla target hands fla's layer a copy of the inputs' cache and gives back ours
    (:func:`check_round_trip`); CPU-checkable, fla's layers themselves need CUDA."""
    family, configs, seed = case
    count_example()
    check_round_trip(family, configs, seed, P, steps, valid, chunk, note=note)


@pytest.mark.gpu
@pytest.mark.fla
@settings(deadline=None, max_examples=10)
@given(**callers.fla_target_cache_draws(FAMILIES))
def test_fla_target_runs_a_callers_fla_cache_as_it_runs_ours(family, data, P, valid):
    """``FlaHandle.run`` (fla's own layer, ``auto``) on a decode step with a caller's fla Cache filled by
    our reference (same weights, left-padded prefill) gives bitwise what it gives with our twin Cache,
    and leaves the caller's cache as it was."""
    reason = TARGET.unavailable_to_run()
    if reason is not None:
        pytest.skip(reason)
    config = data.draw(layer_configs(family=family, use_short_conv=True, conv_dtypes=("float32",), dtype="float32"))
    example = Example(config=config, family=family, dtype="float32", seed=data.draw(callers.SMALL_SEEDS))
    count_example()
    handle = TARGET.build(example, device="cuda")
    B, H = len(valid), config.hidden_size
    valid = [min(v, P) for v in valid]
    mask = row_mask(B, P, tuple(valid), "left").cuda()
    prompt = randn(example.seed, B, P, H).cuda()
    token = randn(example.seed + 1, B, 1, H).cuda()
    grown = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    runs = []
    with torch.no_grad():
        for cache in (fla_cache(), Cache()):
            handle.reference(prompt, attention_mask=mask, past_key_values=cache, use_cache=True)
            before = read_state(cache, config.layer_idx)
            out, got = handle.run(Inputs(token, grown, None, cache, True), "auto")
            after = read_state(cache, config.layer_idx)
            assert_tree_equivalent(after, before, name="caller's cache", paths=("after", "before"), context=family)
            runs.append((out, got))
    ctx = f"{family}: B={B} prompt {P} valid={valid}"
    assert_equivalent(runs[0][0], runs[1][0], name="output", paths=("fla Cache", "our Cache"), context=ctx)
    assert_tree_equivalent(runs[0][1], runs[1][1], name="cache", paths=("fla Cache", "our Cache"), context=ctx)


def _dynamic_cache(populated: bool):
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    if populated:
        cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), 0)
    return cache


_DYNAMIC = "got transformers.cache_utils.DynamicCache, whose update() does not take recurrent_state, conv_state, offset"
CALLERS_REFUSED = {  # what a caller might hand over, and what the refusal must name
    "DynamicCache": (lambda: _dynamic_cache(False), _DYNAMIC),
    "DynamicCache with a layer": (lambda: _dynamic_cache(True), "transformers cache holds attention key/value states"),
    "legacy tuple of states": (lambda: ({"conv_state": None},), "got a tuple (fla's legacy per-layer states"),
    "legacy list of states": (lambda: [], "convert it with fla.models.utils.Cache.from_legacy_cache"),
}


@pytest.mark.fla
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("caller", list(CALLERS_REFUSED), ids=list(CALLERS_REFUSED))
def test_a_cache_fla_layers_cannot_use_is_refused_by_name(family, cls, caller) -> None:
    """Every layer refuses, before any work, a cache object it cannot read or write as fla's layers do,
    naming its type and the rule (fla's layers fail on these with a TypeError or AttributeError)."""
    make, message = CALLERS_REFUSED[caller]
    config = get_family(family).config_cls(**{**get_family(family).small, "hidden_size": 8})
    layer = _layer(family, config, 0, cls)
    x = randn(0, 1, 2, 8, dtype=F64)
    for use_cache in (True, False):
        with pytest.raises(InvalidArgument, match=re.escape(message)):
            layer(x, past_key_values=make(), use_cache=use_cache)
    with pytest.raises(InvalidArgument, match=re.escape("past_key_values must be a gdn_equiv Cache or an fla cache")):
        layer(x, past_key_values=make(), use_cache=True)


@pytest.mark.fla
def test_fla_layers_cannot_use_a_transformers_cache_either() -> None:
    """What the refusal mirrors: fla's layer-cache helpers (0.6.0 and the PR #977 build) fail on a
    ``DynamicCache`` (its ``update`` wants key/value states; a populated one is not subscriptable).
    If fla's layers ever accept it, the layers' refusal is to be revisited. (fla's models differ by
    version: 0.6.0's ``Cache.from_legacy_cache`` refuses one, the PR build's converts an empty one.)"""
    from fla.layers.utils import get_layer_cache, update_layer_cache

    module = type("Layer", (), {"layer_idx": 0})()
    with pytest.raises(TypeError):
        update_layer_cache(module, _dynamic_cache(False), recurrent_state=torch.zeros(1), conv_state=None, offset=1)
    with pytest.raises(TypeError):
        get_layer_cache(module, _dynamic_cache(True))


@pytest.mark.fla
@pytest.mark.parametrize("family", FAMILIES)
def test_a_callers_fla_cache_is_written_only_with_use_cache(family) -> None:
    """``use_cache=False`` leaves a caller's fla Cache as it was (fla 0.6.0's layers write one anyway:
    the count advances and the conv states become ``None``; ours never do, whatever the cache type)."""
    config = get_family(family).config_cls(**{**get_family(family).small, "hidden_size": 8, "layer_idx": 1})
    layer = _layer(family, config, 0)
    cache = fla_cache()
    layer(randn(0, 2, 3, 8, dtype=F64), past_key_values=cache, use_cache=True)
    before = read_state(cache, 1)
    _, _, returned = layer(randn(1, 2, 1, 8, dtype=F64), past_key_values=cache, use_cache=False)
    assert returned is cache
    assert_tree_equivalent(read_state(cache, 1), before, name="fla Cache", paths=("after", "before"), context=family)


@pytest.mark.fla
def test_a_cache_that_puts_a_state_elsewhere_or_holds_attention_is_refused() -> None:
    """Ways an fla cache could be silently mis-read: an attention layer's state at this layer's index
    (a hybrid model, a wrong ``layer_idx``), a state the cache's ``update`` would drop (a keyword it does
    not take), and fla's legacy cache, which appends a new layer's state at the end wherever
    ``layer_idx`` points."""
    import importlib
    import importlib.util

    family = FAMILIES[0]
    config = get_family(family).config_cls(**{**get_family(family).small, "hidden_size": 8, "layer_idx": 2})
    layer = _layer(family, config, 0)
    x = randn(0, 1, 2, 8, dtype=F64)
    hybrid = fla_cache()
    hybrid.update(layer_idx=2, attn_state=(torch.zeros(1, 2, 4), torch.zeros(1, 2, 4)), offset=2)
    with pytest.raises(InvalidArgument, match=re.escape("cache state of layer 2 holds an attn_state")):
        layer(x, past_key_values=hybrid, use_cache=True)
    with pytest.raises(InvalidArgument, match=re.escape("update() takes no ['h_state']")):
        view = layer_cache(fla_cache())
        assert view is not None
        view.update(0, recurrent_state=None, conv_state=None, offset=1, h_state=torch.zeros(1))
    legacy_cls = None  # 0.6.0 keeps it in fla.models.cache_utils, the PR #977 build in fla.models.utils
    for where in ("fla.models.cache_utils", "fla.models.utils"):
        if importlib.util.find_spec(where) is not None:
            legacy_cls = legacy_cls or getattr(importlib.import_module(where), "LegacyFLACache", None)
    if legacy_cls is None:
        pytest.skip("this fla has no LegacyFLACache")
    try:
        legacy = legacy_cls()
    except Exception as exc:  # the PR #977 build's calls transformers' Cache() without layers, which 5.x refuses
        pytest.skip(f"this fla's LegacyFLACache cannot be made here: {type(exc).__name__}: {exc}")
    with pytest.raises(InvalidArgument, match=re.escape("must be filled in layer order from 0")):
        layer(x, past_key_values=legacy, use_cache=True)


class _FlaLikeWithoutCount:
    """A cache with fla's ``update`` signature and ``[layer_idx]``, but no ``get_seq_length``/``len()``."""

    def update(self, recurrent_state=None, conv_state=None, layer_idx=None, offset=1):
        return {}

    def __getitem__(self, layer_idx):
        return None


class _FlaLikeHoldingATuple(_FlaLikeWithoutCount):
    """A complete fla-like cache whose state at the layer's index is not a state dict."""

    def __getitem__(self, layer_idx):
        return (torch.zeros(1), None)

    def __len__(self):
        return 1

    def get_seq_length(self, layer_idx=0):
        return 3


@pytest.mark.parametrize("family", FAMILIES)
def test_an_fla_like_cache_missing_a_method_or_holding_a_non_state_is_refused_by_name(family) -> None:
    """A cache whose ``update`` fits but which lacks what fla's layers read is refused naming what it
    lacks (not only a cache whose ``update`` does not fit); one holding something other than a state
    dict at the layer's index is refused naming what it holds (mutants #34, #36, #43, #46 of cache.py)."""
    config = get_family(family).config_cls(**{**get_family(family).small, "hidden_size": 8})
    layer = _layer(family, config, 0)
    x = randn(0, 1, 2, 8, dtype=F64)
    with pytest.raises(InvalidArgument, match=re.escape("_FlaLikeWithoutCount, which has no get_seq_length, __len__")):
        layer(x, past_key_values=_FlaLikeWithoutCount(), use_cache=True)
    with pytest.raises(InvalidArgument, match=re.escape("cache state of layer 0 must be a dict with keys")):
        layer(x, past_key_values=_FlaLikeHoldingATuple(), use_cache=True)


class _ListCache:
    """An fla-style cache written through ``update(layer_idx=...)``: states are dicts that also name
    every other kind a layer may keep, unset (``A_state=None``, as fla PR #977's does); ``legacy``
    appends a new layer's state at the end wherever ``layer_idx`` points (fla's legacy cache)."""

    def __init__(self, legacy: bool = False) -> None:
        self.states: list = []
        self.counts: list = []
        self.legacy = legacy

    def update(self, recurrent_state=None, conv_state=None, layer_idx=0, offset=1, attn_state=None, ffn_state=None):
        state = {
            "recurrent_state": recurrent_state,
            "conv_state": conv_state,
            "attn_state": attn_state,
            "ffn_state": ffn_state,
            "A_state": None,
        }
        if layer_idx < len(self.states):
            self.states[layer_idx], self.counts[layer_idx] = state, self.counts[layer_idx] + offset
        else:
            while not self.legacy and len(self.states) < layer_idx:
                self.states.append(None)
                self.counts.append(0)
            self.states.append(state)
            self.counts.append(offset)
        return state

    def __getitem__(self, layer_idx):
        return self.states[layer_idx]

    def __len__(self):
        return len(self.states)

    def get_seq_length(self, layer_idx=0):
        return self.counts[layer_idx] if layer_idx < len(self.counts) else 0


@pytest.mark.parametrize("family", FAMILIES)
def test_a_cache_naming_unset_state_kinds_decodes_as_ours_and_a_misplacing_one_is_refused(family) -> None:
    """A caller's cache whose states also name unset kinds (``A_state=None``) decodes exactly as with our
    Cache: only the unset extras are dropped (mutant #52 of cache.py); a cache that appends a layer's
    state at the end refuses as soon as the state is not at ``layer_idx`` (index 1 of an empty cache:
    mutant #56). The view hands back what the caller's ``update`` returned (#58)."""
    prompt, step = randn(0, 1, 3, 8, dtype=F64), randn(1, 1, 1, 8, dtype=F64)
    for short_conv in (True, False):  # without short convs the state's conv_state is None, and kept
        small = {**get_family(family).small, "hidden_size": 8, "use_short_conv": short_conv}
        layer = _layer(family, get_family(family).config_cls(**small), 0)
        outs = []
        for cache in (_ListCache(), Cache()):
            layer(prompt, past_key_values=cache, use_cache=True)
            outs.append(layer(step, past_key_values=cache, use_cache=True)[0])
        ctx = f"{family}, use_short_conv={short_conv}"
        assert_equivalent(outs[0], outs[1], name="decode output", paths=("caller's cache", "our Cache"), context=ctx)
    caller = _ListCache()
    view = layer_cache(caller)
    assert view is not None
    stored = view.update(0, recurrent_state=torch.ones(1), conv_state=None, offset=2)
    assert stored is caller[0]  # what the caller's update returned (mutant #58)
    later = get_family(family).config_cls(**{**get_family(family).small, "hidden_size": 8, "layer_idx": 1})
    with pytest.raises(InvalidArgument, match=re.escape("must be filled in layer order from 0")):
        _layer(family, later, 0)(prompt, past_key_values=_ListCache(legacy=True), use_cache=True)


# ---- killed mutants (tools/mutate.py, docs/mutation.md) ----------------------------------------------


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
    assert src is not None and dst is not None
    assert dst.keys() == src.keys() and dst["offset"] == 7
    pairs = [(src["recurrent_state"], dst["recurrent_state"]), *zip(src["conv_state"], dst["conv_state"], strict=True)]
    for a, b in pairs:
        if a is None:
            assert b is None
            continue
        assert b.dtype == (dtype or a.dtype) and torch.equal(a.to(b.dtype), b)
        assert b.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()


# ---- a cache state a caller hands over is checked, not trusted (P8) --------------------------------------

_CONV_SHAPES = {"q": (2, 4, 3), "k": (2, 4, 3), "v": (2, 6, 3)}
_REC_SHAPE = (2, 2, 2, 3)


def _state(**changes):
    state = {
        "recurrent_state": torch.zeros(_REC_SHAPE),
        "conv_state": tuple(torch.zeros(shape) for shape in _CONV_SHAPES.values()),
        "offset": 5,
    }
    return {**state, **changes}


def _check_state(state) -> None:
    check_layer_state(
        state, 0, recurrent_shape=_REC_SHAPE, conv_shapes=_CONV_SHAPES, dtype=torch.float32, device=torch.device("cpu")
    )


_Q, _K, _V = (torch.zeros(shape) for shape in _CONV_SHAPES.values())
STATES_ACCEPTED = {
    "full": _state(),
    "offset 0": _state(offset=0),
    "fp64 recurrent state": _state(recurrent_state=torch.zeros(_REC_SHAPE, dtype=torch.float64)),
    "no recurrent state yet": _state(recurrent_state=None),
    "no conv state yet": _state(conv_state=None),
    "one conv slot empty": _state(conv_state=(None, _K, _V)),
}
STATES_REFUSED = {
    "not a dict": ([_Q, _K], "must be a dict with keys"),
    "no offset": ({k: v for k, v in _state().items() if k != "offset"}, "lacks ['offset']"),
    "offset -1": (_state(offset=-1), "offset must be an integer >= 0, got -1"),
    "offset '3'": (_state(offset="3"), "got '3'"),
    "offset True": (_state(offset=True), "got True"),
    "recurrent state of another shape": (_state(recurrent_state=torch.zeros(1, 2, 2, 3)), "got (1, 2, 2, 3)"),
    "recurrent state fp16": (_state(recurrent_state=torch.zeros(_REC_SHAPE, dtype=torch.float16)), "torch.float16"),
    "recurrent state on another device": (_state(recurrent_state=torch.zeros(_REC_SHAPE, device="meta")), "meta"),
    "conv state a list": (_state(conv_state=[_Q, _K, _V]), "got list"),
    "conv state of two slots": (_state(conv_state=(_Q, _K)), "got tuple of 2"),
    "conv slot of another shape": (_state(conv_state=(_Q, torch.zeros(2, 4, 2), _V)), "got (2, 4, 2)"),
    "conv slot in another dtype": (_state(conv_state=(None, _K, _V.double())), "torch.float64"),
}


@pytest.mark.parametrize("state", list(STATES_ACCEPTED.values()), ids=list(STATES_ACCEPTED))
def test_a_cache_state_that_fits_the_call_is_accepted(state) -> None:
    _check_state(state)


@pytest.mark.parametrize("state, message", list(STATES_REFUSED.values()), ids=list(STATES_REFUSED))
def test_a_cache_state_that_does_not_fit_the_call_is_refused_by_name(state, message) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        _check_state(state)


# ---- the cache's own API: what every P5/P7 comparison of caches reads ----------------------------------


def test_cache_update_accumulates_offsets_and_returns_what_it_stored() -> None:
    cache = Cache()
    conv = (torch.ones(1, 2, 3), None)
    first = cache.update(2, recurrent_state=None, conv_state=conv, offset=3, extra=torch.zeros(1))
    assert len(cache) == 3 and cache.get(0) is None and cache.get(1) is None and cache.get(7) is None
    assert first is cache[2] and first["offset"] == 3 and first["conv_state"] is conv and "extra" in first
    second = cache.update(2, recurrent_state=torch.zeros(1), conv_state=None, offset=4)
    assert second is cache[2] and second["offset"] == 7 and second["conv_state"] is None


def test_cache_reading_a_layer_it_does_not_hold_raises_key_error() -> None:
    cache = Cache()
    cache.update(1, recurrent_state=None, conv_state=None, offset=1)
    for layer_idx in (0, 2):
        with pytest.raises(KeyError, match=f"no state for layer {layer_idx}"):
            cache[layer_idx]


@pytest.mark.parametrize("layer_idx", [-1, "0", True, 1.0, None])
def test_cache_refuses_a_layer_index_that_is_not_a_non_negative_int(layer_idx) -> None:
    """A negative index would read or overwrite another layer's state from the end of the list."""
    cache = Cache()
    cache.update(0, recurrent_state=None, conv_state=None, offset=1)
    for call in (lambda: cache.get(layer_idx), lambda: cache.update(layer_idx, recurrent_state=None,
                                                                      conv_state=None, offset=1)):  # fmt: skip
        with pytest.raises(InvalidArgument, match=re.escape(f"layer_idx must be an integer >= 0, got {layer_idx!r}")):
            call()
