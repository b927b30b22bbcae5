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
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, note, settings
from hypothesis import strategies as st

from gdn_equiv.cache import Cache, check_layer_state
from gdn_equiv.compare import Mismatch, assert_equivalent, assert_tree_equivalent
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.example import Example, build_layer
from gdn_equiv.families import get_family, known_families
from gdn_equiv.strategies import layer_configs
from gdn_equiv.testing import count_example, cu_from_lens, randn

F64 = torch.float64


FAMILIES = tuple(known_families())
CLASSES = ("layer_cls", "fused_cls")


@st.composite
def family_layers(draw: st.DrawFn):
    """``(family, config, seed)``: a small fp64 config with short convs (slot widths may differ)."""
    family = draw(st.sampled_from(FAMILIES))
    config = draw(layer_configs(family=family, use_short_conv=True, conv_dtypes=("float64",), dtype="float64"))
    return family, config, draw(st.integers(0, 2**16))


def _layer(family: str, config, seed: int, cls: str = "layer_cls"):
    return build_layer(
        Example(config=config, family=family, dtype="float64", seed=seed), getattr(get_family(family), cls)
    )


def _last_inputs(tokens: torch.Tensor, W: int) -> torch.Tensor:
    """The last ``W`` rows of ``tokens [n, D]`` as a conv state ``[D, W]``, zeros in front where ``n < W``."""
    padded = torch.cat([tokens.new_zeros(W, tokens.shape[1]), tokens], dim=0)
    return padded[-W:].t()


# --- absolute bookkeeping ---------------------------------------------------------------------


@st.composite
def calls(draw: st.DrawFn):
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


def _row_mask(B: int, T: int, valid: tuple[int, ...], side: str) -> torch.Tensor:
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(valid):
        if n:
            mask[b, slice(T - n, T) if side == "left" else slice(0, n)] = 1
    return mask


@settings(deadline=None)
@given(case=family_layers(), call=calls(), cls=st.sampled_from(CLASSES), grad=st.booleans())
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
            kwargs["attention_mask"] = _row_mask(B, T, valid, side)
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
            expected.append(_last_inputs(torch.cat([*before, new], dim=0), W))
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
    _, call, _ = find(st.tuples(family_layers(), calls(), st.booleans()), wrong, settings=search)
    assert call[-1] > 0, "only a call after a prefix has a conv state to forget"


# --- generation as Hugging Face calls it --------------------------------------------------------


def _pair(family: str, config, seed: int):
    """The reference layer and the fused layer with the same parameters."""
    ref = _layer(family, config, seed)
    fused = _layer(family, config, seed, "fused_cls")
    fused.load_state_dict(ref.state_dict(), strict=True)
    return ref, fused


@settings(deadline=None)
@given(
    case=family_layers(),
    T=st.integers(1, 8),
    extra=st.integers(1, 5),
    valid=st.lists(st.integers(0, 8), min_size=1, max_size=3),
)
def test_attention_mask_longer_than_the_call_reads_its_last_columns(case, T, extra, valid):
    """A ``[B, extra + T]`` mask (past + new tokens) is the ``[B, T]`` mask of its last ``T`` columns:
    both paths give what the cut mask gives, auto bitwise the reference (fusing or falling back)."""
    family, config, seed = case
    count_example()
    B = len(valid)
    valid = [min(v, T) for v in valid]
    ref, fused = _pair(family, config, seed)
    x = randn(seed, B, T, config.hidden_size, dtype=F64)
    cut = _row_mask(B, T, tuple(valid), "left")
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
@given(
    case=family_layers(),
    P=st.integers(1, 8),
    steps=st.integers(1, 4),
    valid=st.lists(st.integers(1, 8), min_size=1, max_size=3),
    grad=st.booleans(),
)
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
            mask = _row_mask(B, P, tuple(valid), "left")
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


# ---- killed mutants (scripts/mutate.py, docs/mutation.md) ----------------------------------------------


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
