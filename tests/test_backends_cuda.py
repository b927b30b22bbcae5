"""The ``cuda`` backend (causal-conv1d) against the ``torch`` ground truth, and fused = separate under it.

- cross-backend (SPEC P7): forward, final states, backward (x, weight, bias, initial state) and the
  step update agree with ``torch`` within the §6 table (causal-conv1d sums in another order, with FMAs);
- channel independence: a channel's ``y`` and ``dx`` do not depend on which other channels share the
  call (a channel slice of a wider tensor vs that slice alone), bitwise. This is what P3/P4 need;
- fused = separate bitwise (y, dx) in the layer with every conv on ``cuda``;
- mixed backends across q/k/v: the guard says no with G5 (P1) and forcing fusion changes the output
  or fails (P6).

Every test needs a CUDA device and the causal-conv1d package; without them it is skipped with the
backend's own reason.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.compare import assert_equivalent
from gdn_equiv.model.backends import causal_conv1d, causal_conv1d_update, get_backend
from gdn_equiv.model.config import CallFacts, ConvSpec
from gdn_equiv.model.example import Example
from gdn_equiv.model.families.gated_deltanet import GDNConfig
from gdn_equiv.model.guard import Condition
from gdn_equiv.targets import get_target

_REASON = get_backend("cuda").unavailable()
pytestmark = [
    pytest.mark.cuda_backend,
    pytest.mark.gpu,
    pytest.mark.skipif(_REASON is not None, reason=f"cuda backend unavailable: {_REASON}"),
]
DEVICE = "cuda"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@st.composite
def conv_cases(draw: st.DrawFn, *, varlen: bool | None = None) -> dict:
    """One conv call: shapes (D not always a multiple of 8, so the padded copy runs too), W in 2..4,
    dtype, bias (sometimes in another dtype than the weight), activation, states, cu_seqlens."""
    dtype = draw(st.sampled_from(list(DTYPES)))
    D = draw(st.sampled_from([8, 16, 24, 12, 40]))
    W = draw(st.integers(2, 4))
    is_varlen = draw(st.booleans()) if varlen is None else varlen
    if is_varlen:
        lens = draw(st.lists(st.integers(0, 20), min_size=1, max_size=4))
        B, T = 1, max(sum(lens), 1)
        lens[-1] += T - sum(lens)
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
    else:
        B, T, cu = draw(st.integers(1, 3)), draw(st.integers(1, 70)), None
    bias = draw(st.sampled_from(["none", "same", "float32"]))
    return {
        "dtype": dtype,
        "B": B,
        "T": T,
        "D": D,
        "W": W,
        "cu": cu,
        "bias": bias,
        "activation": draw(st.sampled_from(["silu", None, "swish"])),
        "initial_state": not is_varlen and draw(st.booleans()),
        "final_state": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


def _tensors(case: dict, requires_grad: bool = False) -> dict:
    g = torch.Generator().manual_seed(case["seed"])
    dt = DTYPES[case["dtype"]]
    B, T, D, W = case["B"], case["T"], case["D"], case["W"]

    def draw(*shape: int, dtype: torch.dtype = dt) -> torch.Tensor:
        t = torch.randn(*shape, generator=g).to(dtype).to(DEVICE)
        return t.requires_grad_(requires_grad)

    N = B if case["cu"] is None else len(case["cu"]) - 1
    bias = None
    if case["bias"] != "none":
        bias = draw(D, dtype=dt if case["bias"] == "same" else torch.float32)
    return {
        "x": draw(B, T, D),
        "weight": draw(D, W),
        "bias": bias,
        "initial_state": draw(N, D, W) if case["initial_state"] else None,
        "cu_seqlens": None if case["cu"] is None else torch.tensor(case["cu"], dtype=torch.int32, device=DEVICE),
    }


def _run(backend: str, case: dict, t: dict):
    return causal_conv1d(
        t["x"], t["weight"], t["bias"], case["activation"], t["initial_state"], case["final_state"], t["cu_seqlens"],
        backend=backend,
    )  # fmt: skip


@settings(deadline=None)
@given(case=conv_cases())
def test_cuda_forward_matches_torch(case: dict) -> None:
    note(case)
    t = _tensors(case)
    y, final = _run("cuda", case, t)
    y_ref, final_ref = _run("torch", case, t)
    dtype = DTYPES[case["dtype"]]
    assert_equivalent(y, y_ref, name="y", paths=("cuda", "torch"), exact=False, dtype=dtype, context=case)
    # the final state is a copy of inputs: exact
    assert_equivalent(final, final_ref, name="final_state", paths=("cuda", "torch"), context=case)


@settings(deadline=None)
@given(case=conv_cases())
def test_cuda_backward_matches_torch(case: dict) -> None:
    note(case)
    dtype = DTYPES[case["dtype"]]
    grads = {}
    for backend in ("cuda", "torch"):
        t = _tensors(case, requires_grad=True)
        y, final = _run(backend, case, t)
        g = torch.Generator().manual_seed(case["seed"] + 7)
        loss = (y.float() * torch.randn(y.shape, generator=g).to(DEVICE)).sum()
        if final is not None:
            loss = loss + (final.float() * torch.randn(final.shape, generator=g).to(DEVICE)).sum()
        loss.backward()
        grads[backend] = {k: v.grad for k, v in t.items() if isinstance(v, torch.Tensor) and v.requires_grad}
    for name, ref in grads["torch"].items():
        assert_equivalent(
            grads["cuda"][name], ref, name=f"d{name}", paths=("cuda", "torch"), exact=False,
            dtype=dtype if name == "x" else ref.dtype, context=case,
        )  # fmt: skip


@settings(deadline=None)
@given(case=conv_cases(varlen=False))
def test_cuda_update_matches_torch_and_leaves_state(case: dict) -> None:
    note(case)
    t = _tensors(case)
    x, state = t["x"][:, 0], t["initial_state"]
    if state is None:
        state = torch.randn(x.shape[0], case["D"], case["W"]).to(x.dtype).to(DEVICE)
    before = state.clone()
    with torch.no_grad():
        y, new = causal_conv1d_update(x, state, t["weight"], t["bias"], case["activation"], backend="cuda")
        y_ref, new_ref = causal_conv1d_update(x, state, t["weight"], t["bias"], case["activation"], backend="torch")
    assert_equivalent(state, before, name="state after update", paths=("cuda", "untouched"))
    dtype = DTYPES[case["dtype"]]
    assert_equivalent(y, y_ref, name="y", paths=("cuda", "torch"), exact=False, dtype=dtype, context=case)
    assert_equivalent(new, new_ref, name="new_state", paths=("cuda", "torch"), context=case)


@settings(deadline=None)
@given(case=conv_cases(varlen=False), lo=st.sampled_from([0, 8, 3]), extra=st.sampled_from([0, 8, 5]))
def test_cuda_channel_slice_is_independent(case: dict, lo: int, extra: int) -> None:
    """A channel's y and dx are the same bits whether it is run alone or inside a wider call."""
    note(case)
    case = dict(case, initial_state=False, final_state=False)
    t = _tensors(case)
    D = case["D"]
    wide_D = lo + D + extra
    g = torch.Generator().manual_seed(case["seed"] + 3)
    x_wide = torch.randn(case["B"], case["T"], wide_D, generator=g).to(t["x"].dtype).to(DEVICE)
    w_wide = torch.randn(wide_D, case["W"], generator=g).to(t["weight"].dtype).to(DEVICE)
    w_wide[lo : lo + D] = t["weight"]
    b_wide = None
    if t["bias"] is not None:
        b_wide = torch.randn(wide_D, generator=g).to(t["bias"].dtype).to(DEVICE)
        b_wide[lo : lo + D] = t["bias"]
    results = {}
    for label, x_in in (("slice view", x_wide[..., lo : lo + D]), ("alone", x_wide[..., lo : lo + D].contiguous())):
        x = x_in.detach().requires_grad_(True)
        y, _ = causal_conv1d(x, t["weight"], t["bias"], case["activation"], backend="cuda")
        dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(case["seed"] + 5)).to(y.dtype).to(DEVICE)
        (y * dy).sum().backward()
        results[label] = (y, x)
    # dx for the wide call: the same dy on the slice, zero elsewhere
    x = x_wide.detach().requires_grad_(True)
    y, _ = causal_conv1d(x, w_wide, b_wide, case["activation"], backend="cuda")
    dy = torch.zeros_like(y)
    dy[..., lo : lo + D] = (
        torch.randn(y[..., lo : lo + D].shape, generator=torch.Generator().manual_seed(case["seed"] + 5))
        .to(y.dtype)
        .to(DEVICE)
    )
    (y * dy).sum().backward()
    dx_wide = x.grad[..., lo : lo + D]
    for label in ("slice view", "alone"):
        y_l, x_l = results[label]
        assert_equivalent(y_l, y[..., lo : lo + D], name="y", paths=(f"cuda {label}", "cuda wide"), context=case)
        assert_equivalent(x_l.grad, dx_wide, name="dx", paths=(f"cuda {label}", "cuda wide"), context=case)


def test_cuda_rejects_what_the_package_cannot_do() -> None:
    x = torch.randn(1, 6, 8, device=DEVICE)
    for W in (1, 5):
        with pytest.raises(InvalidArgument, match=f"W={W}"):
            causal_conv1d(x, torch.randn(8, W, device=DEVICE), backend="cuda")
    with pytest.raises(InvalidArgument, match="float64"):
        causal_conv1d(x.double(), torch.randn(8, 4, device=DEVICE, dtype=torch.float64), backend="cuda")
    cu = torch.tensor([0, 2, 6], dtype=torch.int32, device=DEVICE)
    with pytest.raises(InvalidArgument, match="initial_state"):
        causal_conv1d(x, torch.randn(8, 4, device=DEVICE), None, "silu", torch.randn(2, 8, 4, device=DEVICE), False, cu,
                      backend="cuda")  # fmt: skip


def _layer_example(seed: int, dtype: str, T: int, **config: object) -> Example:
    base = dict(hidden_size=16, head_dim=8, num_heads=2, expand_v=2, conv_size=4, conv_backend="cuda")
    return Example(config=GDNConfig(**(base | config)), dtype=dtype, batch=2, seq_len=T, seed=seed, grad=True)


@settings(deadline=None, max_examples=20)
@given(
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from(list(DTYPES)),
    T=st.integers(2, 80),
    conv_size=st.integers(2, 4),
    conv_bias=st.booleans(),
    head_dim=st.sampled_from([8, 4, 6]),
)
def test_fused_equals_separate_bitwise_under_cuda(
    seed: int, dtype: str, T: int, conv_size: int, conv_bias: bool, head_dim: int
) -> None:
    example = _layer_example(seed, dtype, T, conv_size=conv_size, conv_bias=conv_bias, head_dim=head_dim)
    note(example.short())
    handle = get_target("gdn_equiv").build(example, DEVICE)
    outs = {}
    for prologue in ("fused", "separate"):
        inputs = handle.inputs()
        x = inputs.x.detach().requires_grad_(True)
        inputs.x = x
        out, _ = handle.run(inputs, prologue)
        out.float().pow(2).sum().backward()
        outs[prologue] = (out, x.grad, handle.path_taken())
    assert outs["fused"][2] == "fused" and outs["separate"][2] == "separate"
    assert_equivalent(
        outs["fused"][0], outs["separate"][0], name="y", paths=("fused", "separate"), context=example.short()
    )
    assert_equivalent(
        outs["fused"][1], outs["separate"][1], name="dx", paths=("fused", "separate"), context=example.short()
    )


def test_mixed_backends_guard_says_g5_and_forced_fusion_differs() -> None:
    """q on torch, k and v on cuda: the guard refuses with G5; forcing the fused path (which runs q's
    backend over all channels) gives different numbers, or fails, for some seed."""
    differs = []
    for seed in range(10):
        example = _layer_example(seed, "float32", 64, k_conv=ConvSpec(backend="cuda"), v_conv=ConvSpec(backend="cuda"),
                                 conv_backend="cuda", q_conv=ConvSpec(backend="torch"))  # fmt: skip
        handle = get_target("gdn_equiv").build(example, DEVICE)
        fuse, reason = handle.decide(CallFacts(False, False, False))
        assert not fuse and reason is not None and reason.startswith(Condition.G5.id), reason
        inputs = handle.inputs()
        with torch.no_grad():
            auto, _ = handle.run(inputs, "auto")
            assert handle.path_taken() == "separate"
            try:
                forced, _ = handle.run(inputs, "fused")
            except Exception as exc:  # a crash is a P6 counterexample too
                differs.append(f"seed {seed}: {type(exc).__name__}: {exc}")
                continue
        if not torch.equal(auto, forced):
            differs.append(f"seed {seed}: max |diff| {(auto - forced).abs().max().item():.3g}")
    assert differs, "forcing fusion across torch/cuda convs never changed the output: G5 not shown necessary here"
