"""Every backend, ``torch`` included, against an independently written fp64 conv (:mod:`gdn_equiv.ground_truth`).

``test_conformance`` measures a backend against the ``torch`` backend; these measure it against
``F.conv1d`` in fp64, sharing no code with any backend, so a defect the torch backend itself carries
(and would share with every comparison made against it) shows here. The truth is cast to the
backend's output dtype and compared within the §6 table: forward output and final state (dense and
packed), the single-step update, and the gradients of x, weight, bias and initial_state.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.backends import causal_conv1d, causal_conv1d_update, get_backend, supported_widths
from gdn_equiv.compare import assert_equivalent
from gdn_equiv.conformance import _reach
from gdn_equiv.coverage import label_conv_call
from gdn_equiv.ground_truth import conv1d_truth, update_truth
from gdn_equiv.strategies import ConvCall, conv_calls
from gdn_equiv.testing import count_example

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def draw_call(data: st.DataObject, backend: str, **options) -> ConvCall:
    """A call within the backend's declared scope (its widths; varlen initial states if it takes them);
    on a GPU up to the PR's 6,144 fused channels and tile-edge lengths, on a CPU up to 1,025 channels
    (but small shapes for Triton kernels, ours and fla's, which run in the interpreter there): the
    conformance properties' reach, one definition for both."""
    lo, hi = supported_widths([backend])
    options.setdefault("varlen_initial_state", get_backend(backend).varlen_initial_state)
    return data.draw(conv_calls(widths=(lo, min(hi, 4)), **_reach(backend), **options), label="call")


def _close(actual: torch.Tensor | None, truth: torch.Tensor, name: str, backend: str, call: ConvCall) -> None:
    """``actual`` against the fp64 truth rounded to ``actual``'s dtype, within the §6 table for it."""
    expected = truth.detach().to(actual.dtype) if actual is not None else truth
    assert_equivalent(actual, expected, name=name, paths=(backend, "fp64 conv1d"), exact=False, context=call)


def check_forward(call: ConvCall, backend: str, device: str) -> None:
    """y and the final state of one call == the fp64 truth's, within §6."""
    t = call.tensors(device)
    y, final = causal_conv1d(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], True, t["cu_seqlens"], backend=backend
    )
    y_true, final_true = conv1d_truth(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], t["cu_seqlens"]
    )
    _close(y, y_true, "y", backend, call)
    s = get_backend(backend).state_slots(call.W)  # the slots the backend declares meaningful
    _close(None if final is None else final[..., s], final_true[..., s], "final_state", backend, call)


def check_gradients(call: ConvCall, backend: str, device: str) -> None:
    """Gradients of x, weight, bias and initial_state through y and the final state == the truth's."""
    tensors = call.tensors(device)
    names = [n for n in ("x", "weight", "bias", "initial_state") if tensors[n] is not None]
    t = {k: (v.detach().clone().requires_grad_() if k in names else v) for k, v in tensors.items()}
    y, final = causal_conv1d(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], True, t["cu_seqlens"], backend=backend
    )
    if not y.requires_grad:
        raise AssertionError(f"backend {backend!r} returned y without a gradient (no backward)\nExample: {call}")
    assert final is not None  # asked for (output_final_state=True); the backend's outputs are checked
    gen = torch.Generator().manual_seed(call.seed + 11)
    dy = torch.randn(y.shape, generator=gen).to(y.dtype).to(device)
    dfinal = torch.randn(final.shape, generator=gen).to(final.dtype).to(device)
    dfinal[..., : get_backend(backend).unused_state_slots] = 0  # no gradient into slots declared unused
    grads = torch.autograd.grad((y, final), [t[n] for n in names], (dy, dfinal), allow_unused=True)
    # the truth from the same (low-precision) values, leaves of its own, same cotangents in fp64
    d = {k: (v.detach().to(torch.float64).requires_grad_() if k in names else v) for k, v in tensors.items()}
    y_t, final_t = conv1d_truth(d["x"], d["weight"], d["bias"], call.activation, d["initial_state"], d["cu_seqlens"])
    truths = torch.autograd.grad(
        (y_t, final_t), [d[n] for n in names], (dy.double(), dfinal.double()), allow_unused=True
    )
    for name, g, g_true in zip(names, grads, truths, strict=True):
        if g_true is None:  # the truth has no path to it (cannot happen with y and final both used)
            g_true = torch.zeros_like(d[name])
        if g is None:
            raise AssertionError(f"backend {backend!r} gave no gradient for {name}\nExample: {call}")
        _close(g, g_true, f"grad.{name}", backend, call)


def check_update(call: ConvCall, backend: str, device: str) -> None:
    """The single-step update: y and the new state == the truth's one-token forward, within §6."""
    t = call.tensors(device)
    x, state = t["x"][:, 0], t["initial_state"]
    y, new_state = causal_conv1d_update(x, state, t["weight"], t["bias"], call.activation, backend=backend)
    y_true, new_true = update_truth(x, state, t["weight"], t["bias"], call.activation)
    _close(y, y_true, "update.y", backend, call)
    s = get_backend(backend).state_slots(call.W)
    _close(new_state[..., s], new_true[..., s], "update.new_state", backend, call)


@settings(deadline=None)
@given(data=st.data())
def test_backend_forward_matches_fp64_ground_truth(data, gdn_backend, device):
    """y and the final state (the last W inputs per row, state in front) == F.conv1d in fp64, within §6."""
    call = draw_call(data, gdn_backend, varlen=False)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    check_forward(call, gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_varlen_matches_fp64_ground_truth(data, gdn_backend, device):
    """Packed sequences (empty ones included): y and each sequence's final state == the truth's, within §6."""
    call = draw_call(data, gdn_backend, varlen=True)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    check_forward(call, gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_gradients_match_fp64_ground_truth(data, gdn_backend, device):
    """Gradients of x, weight, bias and initial_state, through y and the final state, within §6."""
    call = draw_call(data, gdn_backend)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=True, final_state=True)
    check_gradients(call, gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_update_matches_fp64_ground_truth(data, gdn_backend, device):
    """The step kernel: y and the new state (the state shifted by one, the token at the end), within §6."""
    call = draw_call(data, gdn_backend, varlen=False, initial_state=True, max_seq_len=1)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    check_update(call, gdn_backend, device)


# ---- the reference layer itself, against SPEC §2 written out independently ---------------------------


@st.composite
def _gdn_layers(draw: st.DrawFn):
    """A small Gated DeltaNet config (every switch of SPEC §2 drawn), a seed, and an input shape."""
    from gdn_equiv.families.gated_deltanet import GDNConfig

    num_heads = draw(st.integers(1, 2))
    config = GDNConfig(
        hidden_size=draw(st.sampled_from([8, 12, 16])),
        expand_v=draw(st.sampled_from([1, 2, 0.5])),
        head_dim=draw(st.sampled_from([2, 4, 8])),
        num_heads=num_heads,
        num_v_heads=num_heads * draw(st.sampled_from([1, 2])),
        use_gate=draw(st.booleans()),
        use_short_conv=draw(st.booleans()),
        allow_neg_eigval=draw(st.booleans()),
        conv_size=draw(st.integers(2, 4)),
        conv_bias=draw(st.booleans()),
        output_gate_activation=draw(st.sampled_from(["swish", "silu", "sigmoid"])),
    )
    return config, draw(st.integers(0, 2**16)), draw(st.integers(1, 2)), draw(st.integers(1, 12))


@settings(deadline=None)
@given(case=_gdn_layers())
def test_reference_layer_matches_an_independent_fp64_transcription(case) -> None:
    """The layer every property compares paths against is itself right: Gated DeltaNet in fp64 (its convs
    on the torch backend, its chunked core, its norms and output gate) against SPEC §2 written out token by
    token with ``F.conv1d`` and an explicit recurrence (:func:`gdn_equiv.ground_truth.gated_deltanet_truth`),
    within the fp64 table. Both paths share the projections, the core and the epilogue, so a defect
    there is invisible to fused-vs-separate; this is where it shows."""
    from gdn_equiv.example import Example, build_layer
    from gdn_equiv.ground_truth import gated_deltanet_truth
    from gdn_equiv.testing import randn

    config, seed, batch, T = case
    count_example()
    layer = build_layer(Example(config=config, family="gated_deltanet", dtype="float64", seed=seed))
    x = randn(seed + 1, batch, T, config.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        y = layer(x)[0]
    note(f"{config}, B={batch}, T={T}, seed={seed}")
    assert_equivalent(y, gated_deltanet_truth(layer, x), name="output", paths=("layer", "SPEC §2"), exact=False)
