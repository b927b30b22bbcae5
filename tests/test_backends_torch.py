"""The torch conv backend (SPEC §3), the suite's ground truth, checked against things it does not share code with.

- ``torch.nn.functional.conv1d`` with ``groups=D`` and left padding, plus ``F.silu``: the forward,
  varlen and final state (within the §6 table: a different summation order).
- Its own full kernel: ``update`` chains to ``forward`` bitwise and leaves ``state`` untouched.
- Autograd's numerical gradient (``gradcheck`` in fp64) for x, weight, bias and initial_state.
- Itself on a wider tensor: channel slices of a fused call are bitwise the split calls (forward, dx).
- The registry's launch counter: one launch per call, by backend and kind.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _gen import count_example, cu_from_lens, randn, seeds
from hypothesis import given, settings
from hypothesis import strategies as st

from gdn_equiv.harness.compare import assert_equivalent
from gdn_equiv.model.backends import Backend, causal_conv1d, causal_conv1d_update, count_launches, registered
from gdn_equiv.model.backends.torch_backend import BACKEND as TORCH

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def conv1d_reference(x, weight, bias, activation, initial_state):
    """``F.conv1d`` over ``[history | x]`` in fp64: ``x [B, T, D]``, ``initial_state [B, D, W]`` or zeros."""
    B, T, D = x.shape
    W = weight.shape[1]
    d = torch.float64
    history = torch.zeros(B, D, W, dtype=d) if initial_state is None else initial_state.to(d)
    full = torch.cat([history, x.to(d).transpose(1, 2)], dim=-1)  # [B, D, W + T]
    if T == 0:  # an empty sequence: no output, the state passes through
        return x.new_zeros(B, 0, D, dtype=d), full[..., -W:]
    y = F.conv1d(full[..., 1:], weight.to(d).unsqueeze(1), None if bias is None else bias.to(d), groups=D)
    if activation is not None:
        y = F.silu(y)
    return y.transpose(1, 2), full[..., -W:]  # [B, T, D], the last W inputs [B, D, W]


@st.composite
def conv_cases(draw, *, dtypes=DTYPES, varlen=None, max_len=20):
    """A conv call: shapes, dtype, bias/activation/initial state/varlen. Shrinks to fp32, D=1, W=1, no extras."""
    dtype = draw(st.sampled_from(dtypes))
    D, W = draw(st.integers(1, 8)), draw(st.integers(1, 4))
    use_varlen = draw(st.booleans()) if varlen is None else varlen
    if use_varlen:
        lens = draw(st.lists(st.integers(0, max_len), min_size=1, max_size=4).filter(sum))
        B, T = 1, sum(lens)
    else:
        lens, B, T = None, draw(st.integers(1, 3)), draw(st.integers(1, max_len))
    N = len(lens) if lens else B
    seed = draw(seeds())
    return {
        "x": randn(seed, B, T, D, dtype=dtype),
        "weight": randn(seed + 1, D, W, dtype=dtype, scale=0.5),
        "bias": randn(seed + 2, D, dtype=dtype) if draw(st.booleans()) else None,
        "activation": draw(st.sampled_from(["silu", "swish", None])),
        "initial_state": randn(seed + 3, N, D, W, dtype=dtype) if draw(st.booleans()) else None,
        "cu_seqlens": None if lens is None else cu_from_lens(lens, draw(st.sampled_from([torch.int32, torch.int64]))),
    }


def _run(case, **overrides):
    args = {**case, **overrides}
    return causal_conv1d(
        args["x"], args["weight"], args["bias"], args["activation"], args["initial_state"], True, args["cu_seqlens"]
    )


@settings(deadline=None)
@given(case=conv_cases())
def test_torch_conv_matches_conv1d_reference(case):
    """Output and final state == ``F.conv1d`` (groups=D, left padding by the state) + ``F.silu``, per sequence."""
    count_example()
    y, final = _run(case)
    x, cu = case["x"], case["cu_seqlens"]
    bounds = [0, x.shape[1]] if cu is None else cu.tolist()
    for s in range(len(bounds) - 1):
        rows = slice(None) if cu is None else slice(s, s + 1)
        init = case["initial_state"]
        y_ref, final_ref = conv1d_reference(
            x[:, bounds[s] : bounds[s + 1]], case["weight"], case["bias"], case["activation"],
            None if init is None else init[rows],
        )  # fmt: skip
        ctx = {k: v for k, v in case.items() if k != "x"}
        y_s = y[:, bounds[s] : bounds[s + 1]]
        assert_equivalent(y_s, y_ref.to(x.dtype), name="y", paths=("torch", "F.conv1d"), exact=False, context=ctx)
        # the final state is a copy of inputs, not arithmetic: bitwise
        assert_equivalent(final[rows], final_ref.to(final.dtype), name="final_state", paths=("torch", "F.conv1d"))
    assert y.dtype == x.dtype


@settings(deadline=None)
@given(case=conv_cases(varlen=False), steps=st.integers(1, 6), state_dtype=st.sampled_from([None, *DTYPES]))
def test_update_leaves_state_untouched_and_chains_to_forward_bitwise(case, steps, state_dtype):
    """Each single-token ``update`` == ``forward`` over that one token from the same state (y and new state
    bitwise); ``steps`` updates chained == one forward over all the tokens; every ``state`` handed to
    ``update`` is unchanged afterwards (values and version counter).

    The state may have another dtype than ``x`` (``None``: the same). Both kernels then store the inputs
    rounded to the state's dtype and must compute with ``x`` at its own precision; the multi-token chain is
    only compared when the state keeps ``x`` exactly (a narrower state rounds the history by design).
    """
    count_example()
    x, w, b, act = case["x"], case["weight"], case["bias"], case["activation"]
    B, _, D = x.shape
    state = case["initial_state"]
    if state is None:
        state = torch.zeros(B, D, w.shape[1], dtype=x.dtype)
    if state_dtype is not None:
        state = state.to(state_dtype)
    tokens = randn(7, B, steps, D, dtype=x.dtype)
    y_fwd, final_fwd = causal_conv1d(tokens, w, b, act, state, True)
    ys = []
    for t in range(steps):
        before, version = state.clone(), state._version
        y_t, new_state = causal_conv1d_update(tokens[:, t], state, w, b, act)
        assert state._version == version
        assert_equivalent(state, before, name="state after update", paths=("after", "before"))
        y_one, state_one = causal_conv1d(tokens[:, t : t + 1], w, b, act, state, True)
        ctx = f"step {t}, x {x.dtype}, state {state.dtype}"
        assert_equivalent(y_t, y_one[:, 0], name="y", paths=("update", "forward, one token"), context=ctx)
        assert_equivalent(new_state, state_one, name="new state", paths=("update", "forward, one token"), context=ctx)
        ys.append(y_t)
        state = new_state
    if state.dtype == x.dtype or state.dtype == torch.float64:
        assert_equivalent(torch.stack(ys, 1), y_fwd, name="y", paths=("update chain", "forward"))
        assert_equivalent(state, final_fwd, name="final state", paths=("update chain", "forward"))


@settings(deadline=None)
@given(case=conv_cases(varlen=True), victim=st.integers(0, 3), seed=seeds())
def test_varlen_has_no_leakage_across_sequences(case, victim, seed):
    """Changing sequence ``victim``'s tokens (and its initial state) changes no other sequence's outputs
    or final state, bitwise."""
    count_example()
    cu = case["cu_seqlens"]
    bounds = cu.tolist()
    N = len(bounds) - 1
    victim %= N
    x2 = case["x"].clone()
    sl = slice(bounds[victim], bounds[victim + 1])
    x2[:, sl] = randn(seed, *x2[:, sl].shape, dtype=x2.dtype, scale=100.0)
    init2 = case["initial_state"]
    if init2 is not None:
        init2 = init2.clone()
        init2[victim] = 1e4
    y1, f1 = _run(case)
    y2, f2 = _run(case, x=x2, initial_state=init2)
    for s in range(N):
        if s == victim:
            continue
        ctx = f"bounds={bounds} victim={victim} sequence={s}"
        rows = slice(bounds[s], bounds[s + 1])
        assert_equivalent(y2[:, rows], y1[:, rows], name="y", paths=("perturbed", "original"), context=ctx)
        assert_equivalent(f2[s], f1[s], name="final_state", paths=("perturbed", "original"), context=ctx)


@pytest.mark.parametrize("varlen", [False, True], ids=["batch", "varlen"])
@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("with_state", [True, False], ids=["state", "no-state"])
def test_gradients_match_gradcheck(varlen, activation, with_bias, with_state):
    """Analytic gradients of y and final_state for x, weight, bias, initial_state == finite differences (fp64)."""
    D, W = 3, 3
    lens = [2, 0, 3, 1] if varlen else None
    B, T = (1, sum(lens)) if varlen else (2, 4)
    N = len(lens) if varlen else B
    cu = cu_from_lens(lens) if varlen else None
    d = torch.float64
    x = randn(0, B, T, D, dtype=d).requires_grad_()
    w = randn(1, D, W, dtype=d).requires_grad_()
    b = randn(2, D, dtype=d).requires_grad_() if with_bias else None
    s0 = randn(3, N, D, W, dtype=d).requires_grad_() if with_state else None
    inputs = tuple(t for t in (x, w, b, s0) if t is not None)

    def fn(*args):
        it = iter(args)
        xx, ww = next(it), next(it)
        bb = next(it) if with_bias else None
        ss = next(it) if with_state else None
        return causal_conv1d(xx, ww, bb, activation, ss, True, cu)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-6)


@settings(deadline=None)
@given(
    dims=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    W=st.integers(1, 4),
    B=st.integers(1, 2),
    T=st.integers(1, 20),
    dtype=st.sampled_from(DTYPES),
    with_bias=st.booleans(),
    activation=st.sampled_from(["silu", None]),
    seed=seeds(),
)
def test_fused_channel_slices_are_bitwise_the_split_calls(dims, W, B, T, dtype, with_bias, activation, seed):
    """One call over concatenated channels, split afterwards == one call per channel slice (the slices as
    strided views of the wide tensor, as the fused prologue hands them over): forward and dx bitwise;
    weight/bias gradients within the table (their reduction over B*T may be vectorised by channel count)."""
    count_example()
    D = sum(dims)
    x = randn(seed, B, T, D, dtype=dtype).requires_grad_()
    w = randn(seed + 1, D, W, dtype=dtype, scale=0.5).requires_grad_()
    b = randn(seed + 2, D, dtype=dtype).requires_grad_() if with_bias else None
    gy = randn(seed + 3, B, T, D, dtype=dtype)
    params = [t for t in (x, w, b) if t is not None]

    y_fused, _ = causal_conv1d(x, w, b, activation)
    grads_fused = torch.autograd.grad(y_fused, params, gy)
    starts = [sum(dims[:i]) for i in range(len(dims))]
    ys = []
    for s, n in zip(starts, dims, strict=True):
        c = slice(s, s + n)
        ys.append(causal_conv1d(x[..., c], w[c], None if b is None else b[c], activation)[0])
    y_split = torch.cat(ys, -1)
    grads_split = torch.autograd.grad(y_split, params, gy)
    ctx = f"dims={dims} W={W} B={B} T={T} {dtype}"
    paths = ("fused", "split")
    assert_equivalent(y_fused, y_split, name="y", paths=paths, context=ctx)
    assert_equivalent(grads_fused[0], grads_split[0], name="dx", paths=paths, context=ctx)
    for name, g_f, g_s in zip(["dweight", "dbias"], grads_fused[1:], grads_split[1:], strict=False):
        assert_equivalent(g_f, g_s, name=name, paths=paths, exact=False, context=ctx)


def test_launch_counter_counts_one_per_call_by_backend_and_kind():
    """Each registry call is one launch, recorded as (backend, kind); counters nest and stop at ``with`` exit."""
    x, w = randn(0, 1, 5, 4), randn(1, 4, 3)
    state = torch.zeros(2, 4, 3)
    with count_launches() as outer:
        for _ in range(3):
            causal_conv1d(x, w, None, "silu")
        with count_launches() as inner:
            causal_conv1d_update(x[0, :2], state, w, None, "silu")
            causal_conv1d_update(x[0, :2], state, w, None, None)
    causal_conv1d(x, w, None, "silu")  # outside every counter
    assert dict(inner.counts) == {("torch", "update"): 2}
    assert dict(outer.counts) == {("torch", "forward"): 3, ("torch", "update"): 2}
    assert outer.total() == 5 and outer.total("forward") == 3 and outer.total(backend="torch", kind="update") == 2
    assert outer.total(backend="triton") == 0


def test_launch_counter_records_a_plugin_under_its_name():
    """A plug-in without a step kernel: ``update`` runs its full kernel once, counted under the plug-in's
    name as a step (the step path was taken; P2 checks which path, whatever kernel runs it)."""
    name = "test-torch-plugin"
    with registered(Backend(name=name, forward=TORCH.forward)):
        x, w = randn(0, 2, 4), randn(1, 4, 3)
        state = randn(2, 2, 4, 3)
        with count_launches() as launches:
            y, new_state = causal_conv1d_update(x, state, w, None, "silu", backend=name)
        assert dict(launches.counts) == {(name, "update"): 1}
        y_ref, state_ref = causal_conv1d_update(x, state, w, None, "silu")
        assert_equivalent(y, y_ref, name="y", paths=(name, "torch"))
        assert_equivalent(new_state, state_ref, name="new_state", paths=(name, "torch"))


def test_weight_and_bias_gradients_do_not_depend_on_how_many_channels_share_the_call():
    """CI drew it (P4, simple_gla, fp32, B2 T61, scale 100, convs without activation): autograd's own
    per-channel reduction vectorises across channels, so the fused call's conv-weight gradient was
    1.9e-5 (relative) from the separate calls'. The backend sums them in fp64 now; this is that
    example, which failed before."""
    from gdn_equiv.harness import properties as P
    from gdn_equiv.model.config import ConvSpec
    from gdn_equiv.model.example import Example
    from gdn_equiv.model.families import get_family

    spec = ConvSpec(activation=None)
    config = get_family("simple_gla").config_cls(
        hidden_size=16, conv_size=5, conv_bias=True, mode="recurrent", q_conv=spec, k_conv=spec, v_conv=spec,
        expand_k=0.25, expand_v=0.5, num_heads=2, num_kv_heads=1, gate_logit_normalizer=1,
    )  # fmt: skip
    example = Example(
        config=config, family="simple_gla", dtype="float32", batch=2, seq_len=61, grad=True, scale=100.0, seed=618
    )
    P.check_gradients(example)


def test_registered_puts_the_registry_back_as_it_was():
    """A new name is gone after the block; a replaced backend (torch here) comes back."""
    from gdn_equiv.model.backends import get_backend, known_backends

    torch_backend = get_backend("torch")
    twin = Backend(name="torch", forward=TORCH.forward)
    with registered(Backend(name="test-registered-new", forward=TORCH.forward), twin):
        assert get_backend("torch") is twin and "test-registered-new" in known_backends()
    assert get_backend("torch") is torch_backend and "test-registered-new" not in known_backends()


@pytest.mark.parametrize("trainable", ["weight-and-bias", "input-only", "bias-only"])
def test_gradients_flow_to_exactly_the_inputs_that_ask(trainable):
    """A frozen input with a trainable weight and bias (a conv over fixed features), the other way round,
    and only the bias trainable: each tensor that requires grad gets its gradient, equal to F.conv1d's
    (fp64). (The weight/bias gradients are gated on their own flags, not the input's.)"""
    x, weight, bias = randn(0, 2, 7, 3, dtype=torch.float64), randn(1, 3, 4, dtype=torch.float64), randn(2, 3)
    bias = bias.double()
    x.requires_grad_(trainable == "input-only")
    weight.requires_grad_(trainable == "weight-and-bias")
    bias.requires_grad_(trainable != "input-only")
    y, _ = causal_conv1d(x, weight, bias, "silu")
    wanted = [t for t in (x, weight, bias) if t.requires_grad]
    got = torch.autograd.grad(y.sum(), wanted)
    ref = F.silu(F.conv1d(F.pad(x.transpose(1, 2), (3, 0)), weight[:, None], bias, groups=3)).transpose(1, 2)
    expected = torch.autograd.grad(ref.sum(), wanted)
    for name, g, e in zip(("first", "second", "third"), got, expected, strict=False):
        assert_equivalent(g, e, name=f"{name} gradient", exact=False, dtype=torch.float64)
