"""P8: bad input gets a clear ``InvalidArgument`` naming the value; NaN/Inf propagate in a documented way;
no argument tensor is ever modified.

Each invalid-input case names the text that must appear in the message (the offending value, chosen
distinctive enough that finding it means something).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from _gen import configs, count_example, cu_from_lens, make_layer, randn, seeds
from hypothesis import given, settings
from hypothesis import strategies as st

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.compare import assert_equivalent
from gdn_equiv.model.backends import causal_conv1d, causal_conv1d_update
from gdn_equiv.model.cache import Cache
from gdn_equiv.model.example import Example, build_layer, materialize
from gdn_equiv.model.families import get_family
from gdn_equiv.model.families.gated_deltanet import FusedGatedDeltaNet, GDNConfig

H = 8
TINY = {"hidden_size": 8, "head_dim": 2, "num_heads": 2}
SMALL = GDNConfig(hidden_size=H, head_dim=2, num_heads=2, expand_v=2, conv_size=3)


def _layer(config: GDNConfig = SMALL, dtype: torch.dtype = torch.float32) -> FusedGatedDeltaNet:
    return make_layer(config, 0, dtype, cls=FusedGatedDeltaNet)


def _x(B: int = 1, T: int = 11, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return randn(0, B, T, H, dtype=dtype)


def _populated_cache(layer: FusedGatedDeltaNet, B: int = 2) -> Cache:
    cache = Cache()
    with torch.no_grad():
        layer(_x(B, 3), past_key_values=cache, use_cache=True)
    return cache


def _with_state(cache: Cache, **changes: Any) -> Cache:
    state = dict(cache[0])
    state.update(changes)
    cache.states[0] = state
    return cache


def _call(**kwargs: Any) -> Callable[[], Any]:
    x = kwargs.pop("x", None)
    layer = kwargs.pop("layer", None)

    def run() -> Any:
        lay = layer if layer is not None else _layer()
        return lay(_x() if x is None else x, **kwargs)

    return run


def _set_conv_attr(attr: str, value: Any) -> Callable[[], Any]:
    def run() -> Any:
        layer = _layer()
        setattr(layer.k_conv1d, attr, value)
        return layer(_x(), prologue="separate")

    return run


def _kernel(**overrides: Any) -> Callable[[], Any]:
    def run() -> Any:
        args = {
            "x": randn(0, 1, 6, 5),
            "weight": randn(1, 5, 3),
            "bias": None,
            "activation": "silu",
            "initial_state": None,
            "output_final_state": True,
            "cu_seqlens": None,
        }
        args.update(overrides)
        return causal_conv1d(**args)

    return run


def _update(**overrides: Any) -> Callable[[], Any]:
    def run() -> Any:
        args = {"x": randn(0, 2, 5), "state": randn(1, 2, 5, 3), "weight": randn(2, 5, 3), "bias": None}
        args.update(overrides)
        return causal_conv1d_update(args["x"], args["state"], args["weight"], args["bias"], "silu")

    return run


# (id, thunk that must raise InvalidArgument, text that must appear in the message)
BAD_INPUTS: list[tuple[str, Callable[[], Any], str]] = [
    ("hidden_states rank 2", _call(x=randn(0, 11, H)), "(11, 8)"),
    ("hidden_states rank 4", _call(x=randn(0, 1, 2, 11, H)), "(1, 2, 11, 8)"),
    ("wrong hidden size", _call(x=randn(0, 1, 11, 13)), "(1, 11, 13)"),
    ("empty sequence T=0", _call(x=randn(0, 1, 0, H)), "(1, 0, 8)"),
    ("fp16 input to fp32 layer", _call(x=_x(dtype=torch.float16)), "torch.float16"),
    ("bf16 input to fp64 layer", lambda: _layer(dtype=torch.float64)(_x(dtype=torch.bfloat16)), "torch.bfloat16"),
    ("cu_seqlens not starting at 0", _call(cu_seqlens=torch.tensor([3, 5, 11])), "3"),
    ("cu_seqlens decreasing", _call(cu_seqlens=torch.tensor([0, 7, 4, 11])), "4 after 7"),
    ("cu_seqlens wrong total", _call(cu_seqlens=torch.tensor([0, 4, 9])), "9"),
    ("cu_seqlens float", _call(cu_seqlens=torch.tensor([0.0, 4.0, 11.0])), "torch.float32"),
    ("cu_seqlens int16", _call(cu_seqlens=torch.tensor([0, 11], dtype=torch.int16)), "torch.int16"),
    ("cu_seqlens with B=2", _call(x=_x(B=2), cu_seqlens=torch.tensor([0, 11])), "B=2"),
    ("cu_seqlens 2-D", _call(cu_seqlens=torch.tensor([[0, 4, 11]])), "(1, 3)"),
    ("cu_seqlens single entry", _call(cu_seqlens=torch.tensor([0])), "(1,)"),
    ("cu_seqlens a list", _call(cu_seqlens=[0, 11]), "list"),
    ("attention_mask too short", _call(x=_x(B=2), attention_mask=torch.ones(2, 10)), "(2, 10)"),
    ("attention_mask wrong batch", _call(x=_x(B=2), attention_mask=torch.ones(3, 11)), "(3, 11)"),
    ("attention_mask 3-D", _call(attention_mask=torch.ones(1, 11, 11)), "(1, 11, 11)"),
    ("attention_mask value 7", _call(attention_mask=torch.tensor([[1] * 10 + [7]])), "7"),
    ("attention_mask value 0.5", _call(attention_mask=torch.tensor([[1.0] * 10 + [0.5]])), "0.5"),
    ("attention_mask value -1", _call(attention_mask=torch.tensor([[-1] + [1] * 10])), "-1"),
]


def _cache_cases() -> list[tuple[str, Callable[[], Any], str]]:
    def recurrent_wrong_shape() -> Any:
        layer = _layer()
        cache = _with_state(_populated_cache(layer, B=1), recurrent_state=torch.zeros(1, 2, 5, 2))
        return layer(_x(), past_key_values=cache)

    def recurrent_fp16() -> Any:
        layer = _layer()
        cache = _populated_cache(layer, B=1)
        cache = _with_state(cache, recurrent_state=cache[0]["recurrent_state"].half())
        return layer(_x(), past_key_values=cache)

    def conv_wrong_shape() -> Any:
        layer = _layer()
        cache = _populated_cache(layer, B=1)
        q, k, v = cache[0]["conv_state"]
        return layer(_x(), past_key_values=_with_state(cache, conv_state=(q, k[..., :2], v)))

    def conv_fp64() -> Any:
        layer = _layer()
        cache = _populated_cache(layer, B=1)
        q, k, v = cache[0]["conv_state"]
        return layer(_x(), past_key_values=_with_state(cache, conv_state=(q, k, v.double())))

    def conv_not_tuple() -> Any:
        layer = _layer()
        cache = _populated_cache(layer, B=1)
        return layer(_x(), past_key_values=_with_state(cache, conv_state=list(cache[0]["conv_state"])))

    def wrong_num_sequences() -> Any:
        layer = _layer()
        return layer(_x(B=3), past_key_values=_populated_cache(layer, B=2), use_cache=True)

    def wrong_num_sequences_varlen() -> Any:
        layer = _layer()
        return layer(_x(), cu_seqlens=torch.tensor([0, 2, 5, 11]), past_key_values=_populated_cache(layer, B=2))

    def cache_not_a_cache() -> Any:
        return _layer()(_x(), past_key_values={"recurrent_state": None})

    def cache_without_layer_idx() -> Any:
        return _layer(SMALL.replace(layer_idx=None))(_x(), use_cache=True)

    return [
        ("cached recurrent_state wrong shape", recurrent_wrong_shape, "(1, 2, 5, 2)"),
        ("cached recurrent_state fp16", recurrent_fp16, "torch.float16"),
        ("cached conv_state wrong shape", conv_wrong_shape, "(1, 4, 2)"),
        ("cached conv_state wrong dtype", conv_fp64, "torch.float64"),
        ("cached conv_state not a tuple", conv_not_tuple, "list"),
        ("cache for 2 sequences, call with B=3", wrong_num_sequences, "(2, 2, 4, 2)"),
        ("cache for 2 sequences, call with 3 packed", wrong_num_sequences_varlen, "(2, 2, 4, 2)"),
        ("past_key_values a dict", cache_not_a_cache, "dict"),
        ("use_cache with layer_idx=None", cache_without_layer_idx, "layer_idx=None"),
    ]


def _cache1() -> Cache:
    return _populated_cache(_layer(), 1)


def _without(cache: Cache, key: str) -> Cache:
    cache.states[0] = {k: v for k, v in cache[0].items() if k != key}
    return cache


def _replaced(cache: Cache, state: Any) -> Cache:
    cache.states[0] = state
    return cache


def _two_channel_weight() -> Any:
    layer = _layer()
    with torch.no_grad():
        layer.q_conv1d.weight = torch.nn.Parameter(torch.zeros(8, 2, 3))
    return layer(_x(), prologue="separate")


NO_CONV = SMALL.replace(use_short_conv=False)
CONFIG_CASES: list[tuple[str, Callable[[], Any], str]] = [
    (
        "another family's config",
        lambda: FusedGatedDeltaNet(get_family("kda").config_cls(**TINY)),
        "FusedGatedDeltaNet needs a GDNConfig, got KDAConfig",
    ),
    ("unknown conv backend", _set_conv_attr("backend", "no-such-backend"), "'no-such-backend'"),
    ("unknown conv backend in config", lambda: _layer(SMALL.replace(conv_backend="tpu-magic"))(_x()), "'tpu-magic'"),
    ("unknown conv activation", _set_conv_attr("activation", "gelu"), "'gelu'"),
    ("unknown conv activation, fused layer facts", lambda: _fused_with_activation("gelu"), "'gelu'"),
    ("unknown conv activation in config", lambda: GDNConfig(k_conv=SMALL.k_conv.__class__(activation="tanh")), "tanh"),
    ("non-integer value_dim expand_v=0.3", lambda: GDNConfig(hidden_size=8, head_dim=4, expand_v=0.3), "0.3"),
    ("non-integer head_v_dim expand_v=0.25", lambda: GDNConfig(**TINY, expand_v=0.25), "0.25"),
    ("indivisible heads 3/2", lambda: GDNConfig(**TINY, num_v_heads=3), "3"),
    ("fewer v heads than q heads 1/2", lambda: GDNConfig(**TINY, num_v_heads=1), "num_v_heads=1"),
    ("unknown output_gate_activation", lambda: GDNConfig(output_gate_activation="relu6"), "'relu6'"),
    ("unknown core mode", lambda: GDNConfig(mode="fused_recurrent"), "'fused_recurrent'"),
    ("non-positive conv_size", lambda: GDNConfig(conv_size=0), "0"),
    ("non-positive num_heads", lambda: GDNConfig(num_heads=-2), "-2"),
    ("negative expand_v", lambda: GDNConfig(expand_v=-1.5), "-1.5"),
    ("unknown prologue", lambda: _layer()(_x(), prologue="both"), "'both'"),
    ("fused prologue without short conv", lambda: _layer(NO_CONV)(_x(), prologue="fused"), "use_short_conv"),
    ("unexpected keyword", lambda: _layer()(_x(), prologue="auto", window=3), "window"),
    # issue #16's probes: each was silently accepted or raised a bare KeyError/TypeError/OverflowError
    ("negative layer_idx", lambda: GDNConfig(**TINY, layer_idx=-1), "-1"),
    ("string layer_idx", lambda: GDNConfig(**TINY, layer_idx="0"), "'0'"),
    (
        "negative layer_idx in a cache",
        lambda: Cache().update(-1, recurrent_state=None, conv_state=None, offset=1),
        "-1",
    ),
    ("cache state without offset", lambda: _call(past_key_values=_without(_cache1(), "offset"))(), "offset"),
    ("cache state of the wrong type", lambda: _call(past_key_values=_replaced(_cache1(), [1, 2]))(), "list"),
    ("cache offset not an integer", lambda: _call(past_key_values=_with_state(_cache1(), offset="3"))(), "'3'"),
    ("conv weight [D, 2, W]", _two_channel_weight, "(8, 2, 3)"),
    ("norm_eps inf", lambda: GDNConfig(**TINY, norm_eps=float("inf")), "inf"),
    ("string boolean use_gate", lambda: GDNConfig(**TINY, use_gate="false"), "'false'"),
    ("string boolean conv_bias", lambda: GDNConfig(**TINY, conv_bias="False"), "'False'"),
    ("expand_v inf", lambda: GDNConfig(**TINY, expand_v=float("inf")), "inf"),
    ("string use_cache", lambda: _call(use_cache="yes")(), "'yes'"),
]  # fmt: skip


def _fused_with_activation(activation: str) -> Any:
    layer = _layer()
    layer.q_conv1d.activation = activation
    return layer(_x(), prologue="auto")


CU_2 = torch.tensor([0, 2, 6])
KERNEL_CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("kernel x rank 2", _kernel(x=randn(0, 6, 5)), "(6, 5)"),
    ("kernel x integer", _kernel(x=torch.ones(1, 6, 5, dtype=torch.int64)), "torch.int64"),
    ("kernel weight wrong channels", _kernel(weight=randn(1, 7, 3)), "(7, 3)"),
    ("kernel weight 3-D", _kernel(weight=randn(1, 5, 1, 3)), "(5, 1, 3)"),
    ("kernel weight width 0", _kernel(weight=randn(1, 5, 0)), "0"),
    ("kernel bias wrong shape", _kernel(bias=randn(2, 6)), "(6,)"),
    ("kernel activation gelu", _kernel(activation="gelu"), "'gelu'"),
    ("kernel initial_state wrong shape", _kernel(initial_state=randn(3, 1, 5, 2)), "(1, 5, 2)"),
    ("kernel initial_state wrong N (varlen)", _kernel(initial_state=randn(3, 1, 5, 3), cu_seqlens=CU_2), "(1, 5, 3)"),
    ("kernel initial_state integer", _kernel(initial_state=torch.zeros(1, 5, 3, dtype=torch.int32)), "torch.int32"),
    ("kernel cu_seqlens wrong total", _kernel(cu_seqlens=torch.tensor([0, 2, 5])), "5"),
    ("kernel unknown backend", lambda: causal_conv1d(randn(0, 1, 6, 5), randn(1, 5, 3), backend="nope"), "'nope'"),
    ("update x rank 3", _update(x=randn(0, 2, 1, 5)), "(2, 1, 5)"),
    ("update state wrong shape", _update(state=randn(1, 2, 5, 4)), "(2, 5, 4)"),
    ("update state wrong N", _update(state=randn(1, 3, 5, 3)), "(3, 5, 3)"),
    ("update weight wrong channels", _update(weight=randn(2, 6, 3)), "(6, 3)"),
    ("update bias wrong shape", _update(bias=randn(2, 4)), "(4,)"),
    ("update weight integer (as forward)", _update(weight=torch.ones(5, 3, dtype=torch.int64)), "torch.int64"),
]  # fmt: skip

ALL_CASES = BAD_INPUTS + _cache_cases() + CONFIG_CASES + KERNEL_CASES


@pytest.mark.parametrize(("thunk", "needle"), [pytest.param(t, n, id=i) for i, t, n in ALL_CASES])
def test_bad_input_raises_invalid_argument_naming_the_value(thunk, needle):
    """Each class of invalid input raises ``InvalidArgument`` (a ``ValueError``) whose message names the value."""
    with pytest.raises(InvalidArgument) as info:
        thunk()
    assert isinstance(info.value, ValueError)
    assert needle in str(info.value), f"message does not name {needle!r}: {info.value}"


def test_there_are_at_least_fourteen_classes_of_bad_input():
    assert len({case_id.split(",")[0] for case_id, _, _ in ALL_CASES}) >= 14


# ---- NaN / Inf ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["chunk", "recurrent"])
@pytest.mark.parametrize("poison", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
@settings(deadline=None, max_examples=max(5, settings.default.max_examples // 3))  # six parametrizations share it
@given(
    lens=st.lists(st.integers(1, 12), min_size=2, max_size=4),
    victim=st.integers(0, 3),
    where=st.integers(0, 11),
    seed=seeds(),
)
def test_nan_in_one_sequence_stays_in_that_sequence(mode, poison, lens, victim, where, seed):
    """A NaN/Inf in one token of sequence ``victim`` (packed varlen batch) does not raise or hang: it turns that
    sequence's outputs from the token on into NaN (Inf becomes NaN through the L2 norm), and its cached states;
    every other sequence's output and state are bitwise those of the clean call.

    Documented asymmetry: ``recurrent`` is causal (tokens before the NaN stay finite); ``chunk`` mixes a chunk's
    tokens in matmuls where ``0 * NaN = NaN``, so tokens before the NaN *in its 64-token chunk* may become NaN
    too; this is rounding-free poisoning, never a finite wrong value. fla's chunk kernel has the same form.
    """
    count_example()
    victim %= len(lens)
    where %= lens[victim]
    layer = make_layer(SMALL.replace(mode=mode), seed)
    cu = cu_from_lens(lens)
    x = randn(seed + 1, 1, sum(lens), H)
    bad = x.clone()
    start = int(cu[victim])
    bad[0, start + where, seed % H] = poison
    with torch.no_grad():
        clean_cache, bad_cache = Cache(), Cache()
        y = layer(x, cu_seqlens=cu, past_key_values=clean_cache, use_cache=True)[0]
        y_bad = layer(bad, cu_seqlens=cu, past_key_values=bad_cache, use_cache=True)[0]
    nan_rows = torch.isnan(y_bad[0]).any(-1)
    assert not torch.isinf(y_bad).any()
    b = cu.tolist()
    for s in range(len(lens)):
        rows = slice(b[s], b[s + 1])
        if s != victim:
            assert_equivalent(y_bad[:, rows], y[:, rows], name=f"sequence {s} output", paths=("poisoned", "clean"))
            assert_equivalent(
                bad_cache[0]["recurrent_state"][s], clean_cache[0]["recurrent_state"][s], name=f"sequence {s} state"
            )
            continue
        assert nan_rows[b[s] + where : b[s + 1]].all(), "tokens from the poisoned one on must be NaN"
        assert torch.isnan(bad_cache[0]["recurrent_state"][s]).any()
        before = nan_rows[b[s] : b[s] + where]
        if mode == "recurrent":
            assert not before.any(), "recurrent mode must stay causal under NaN"
            assert_equivalent(y_bad[:, b[s] : b[s] + where], y[:, b[s] : b[s] + where], name="tokens before the NaN")


def test_nan_before_the_chunk_does_not_reach_back_across_chunks():
    """Chunk mode: a NaN at token 66 leaves tokens 0..63 (an earlier chunk) finite and as in the clean call."""
    layer = make_layer(SMALL.replace(mode="chunk"), 0)
    x = randn(1, 1, 70, H)
    bad = x.clone()
    bad[0, 66, 0] = float("nan")
    with torch.no_grad():
        y, y_bad = layer(x)[0], layer(bad)[0]
    assert_equivalent(y_bad[:, :64], y[:, :64], name="earlier chunk", paths=("poisoned", "clean"))
    assert torch.isnan(y_bad[:, 66:]).all()


@settings(deadline=None)
@given(seed=seeds(), T=st.integers(2, 10), left=st.booleans())
def test_nan_in_padding_does_not_leak(seed, T, left):
    """NaN at padded positions of an ``attention_mask`` batch never reaches the output (unlike fla's
    ``x.mul_(mask)``, which turns ``NaN * 0`` into NaN): outputs equal the clean call's, padding rows zero."""
    count_example()
    layer = make_layer(SMALL, seed)
    x = randn(seed + 1, 2, T, H)
    mask = torch.ones(2, T, dtype=torch.long)
    pad = slice(0, T // 2) if left else slice(T - T // 2, T)
    mask[1, pad] = 0
    bad = x.clone()
    bad[1, pad] = float("nan")
    with torch.no_grad():
        y, y_bad = layer(x, attention_mask=mask)[0], layer(bad, attention_mask=mask)[0]
    assert_equivalent(y_bad, y, name="output", paths=("NaN in padding", "clean"))
    assert (y_bad[1, pad] == 0).all()


# ---- nothing the caller passed is modified -----------------------------------------------------------


def _tensors_of(args: dict[str, Any], cache: Cache | None) -> dict[str, torch.Tensor]:
    found = {name: t for name, t in args.items() if isinstance(t, torch.Tensor)}
    if cache is not None:
        for i, state in enumerate(cache.states):
            if state is None:
                continue
            found[f"cache[{i}].recurrent_state"] = state["recurrent_state"]
            for name, c in zip("qkv", state["conv_state"] or (), strict=False):
                if c is not None:
                    found[f"cache[{i}].{name}_conv_state"] = c
    return found


@settings(deadline=None)
@given(
    config=configs(),
    seed=seeds(),
    prologue=st.sampled_from(["auto", "fused", "separate"]),
    varlen=st.sampled_from(["none", "mask", "cu_seqlens"]),
    cache=st.sampled_from(["none", "empty", "populated"]),
    use_cache=st.booleans(),
    grad=st.booleans(),
    step=st.booleans(),
    lens=st.lists(st.integers(0, 6), min_size=1, max_size=3),
    left=st.booleans(),
)
def test_no_argument_tensor_is_modified(config, seed, prologue, varlen, cache, use_cache, grad, step, lens, left):
    """On every path (prologue auto/fused/separate, mask, cu_seqlens, cache populated + use_cache, grad on/off,
    the T=1 step path) every tensor the caller passed, and every tensor that was in the cache, keeps its values
    (bitwise), storage and version counter. Writing a *new* state into the Cache is the cache's purpose."""
    count_example()
    if step:  # one new token per sequence: the conv's single-step update when grad is off
        lens = [1] * len(lens)
    elif sum(lens) == 0:
        lens = [*lens[:-1], 1]
    T = 1 if step else max(lens)
    B = len(lens)
    example = Example(
        config=config,
        seed=seed,
        batch=1 if varlen == "cu_seqlens" else B,
        seq_len=sum(lens) if varlen == "cu_seqlens" else T,
        varlen=varlen,
        seq_lens=tuple(lens) if varlen != "none" else (),
        pad_side="left" if left else "right",
        cache=cache,
        prefix_len=2,
        use_cache=use_cache,
        grad=grad,
    )
    layer = build_layer(example, cls=FusedGatedDeltaNet)
    inputs = materialize(example, layer)
    x = inputs.x.requires_grad_(grad)
    kwargs = {**inputs.kwargs(), "prologue": prologue}
    tracked = _tensors_of({"x": x, **kwargs}, inputs.cache)
    tracked.update({f"param {n}": p for n, p in layer.named_parameters()})
    # the dicts that held the old states must not be edited either: same keys, same objects
    old_states = [(s, dict(s)) for s in (inputs.cache.states if inputs.cache is not None else []) if s is not None]
    snapshot = {name: (t.detach().clone(), t.data_ptr(), t._version) for name, t in tracked.items()}
    with torch.enable_grad() if grad else torch.no_grad():
        try:
            y = layer(x, **kwargs)[0]
        except InvalidArgument:
            assert prologue == "fused" and not config.use_short_conv
            y = None
        if y is not None and grad:
            y.sum().backward()
    for name, t in tracked.items():
        before, ptr, version = snapshot[name]
        assert t.data_ptr() == ptr, f"{name} was re-pointed to other storage"
        assert t._version == version, f"{name} was modified in place (version {version} -> {t._version})"
        assert_equivalent(t.detach(), before, name=name, paths=("after call", "before call"), context=example.short())
    for state, before in old_states:
        assert state.keys() == before.keys() and all(state[k] is before[k] for k in before), "old cache dict edited"
