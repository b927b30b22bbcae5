"""The backend under review against the ``torch`` ground truth, one conv call at a time (SPEC §3, P7).

Forward, gradients (x, weight, bias, initial_state, through y and the final state), the step kernel
and varlen, all within the §6 table; and the promise the fused prologue rests on, bitwise: a
channel's output and ``dx`` do not depend on which channels share the call (one call over q|k|v,
sliced afterwards, equals one call per slice on strided views of the wide tensor).

With ``--gdn-backend torch`` (the default) these compare torch with itself and only check the
harness; they are meant for a backend under review: ``--gdn-backend mypkg.kernels:conv``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.backends import causal_conv1d, causal_conv1d_update, get_backend, supported_widths
from gdn_equiv.compare import assert_equivalent
from gdn_equiv.strategies import ConvCall, conv_calls
from gdn_equiv.testing import count_example

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _forward(call: ConvCall, tensors: dict, backend: str, *, final: bool = True):
    t = tensors
    return causal_conv1d(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], final, t["cu_seqlens"], backend=backend
    )


def _close(actual, expected, name: str, backend: str, call: ConvCall) -> None:
    assert_equivalent(actual, expected, name=name, paths=(backend, "torch"), exact=False, context=call)


def _draw_call(data: st.DataObject, backend: str, **options) -> ConvCall:
    """A conv call the backend's declared scope covers: its kernel widths (causal-conv1d: 2..4) and,
    for packed sequences, initial states only where it supports them (its refusal is checked in
    tests/test_backends_cuda.py)."""
    lo, hi = supported_widths([backend])
    varlen_state = get_backend(backend).varlen_initial_state
    reach = _reach(backend)
    return data.draw(
        conv_calls(widths=(lo, min(hi, 4)), varlen_initial_state=varlen_state, **reach, **options), label="call"
    )


def _reach(backend: str) -> dict:
    """How wide and long the calls may get: where real kernels change code path (block edges up to the
    PR's 6,144 fused channels, tile edges in time) on a GPU, and on a CPU up to 1,025 channels; our
    triton kernels run in the interpreter there, too slow for them, so they keep the small shapes."""
    import torch

    if torch.cuda.is_available():
        return {"wide_channels": 6145, "long_seq_len": 257}
    if backend == "triton":
        return {}
    return {"wide_channels": 1025, "long_seq_len": 129}


def _check_forward(call: ConvCall, backend: str, device: str) -> None:
    count_example()
    note(repr(call))
    tensors = call.tensors(device)
    y, final = _forward(call, tensors, backend)
    y_ref, final_ref = _forward(call, tensors, "torch")
    _close(y, y_ref, "y", backend, call)
    _close(final, final_ref, "final_state", backend, call)


@settings(deadline=None)
@given(data=st.data())
def test_backend_forward_matches_torch(data, gdn_backend, device):
    """y and the final state (the last W inputs per sequence) == the torch backend's, within §6."""
    _check_forward(_draw_call(data, gdn_backend, varlen=False), gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_varlen_matches_torch(data, gdn_backend, device):
    """Packed sequences (``cu_seqlens``, empty ones included): y and per-sequence final states, within §6."""
    _check_forward(_draw_call(data, gdn_backend, varlen=True), gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_gradients_match_torch(data, gdn_backend, device):
    """Gradients of x, weight, bias and initial_state, through y and the final state, within §6."""
    call = _draw_call(data, gdn_backend)
    count_example()
    note(repr(call))
    tensors = call.tensors(device)
    names = [n for n in ("x", "weight", "bias", "initial_state") if tensors[n] is not None]
    grads = {}
    for backend in (gdn_backend, "torch"):
        t = {k: (v.detach().clone().requires_grad_() if k in names else v) for k, v in tensors.items()}
        y, final = _forward(call, t, backend)
        gen = torch.Generator().manual_seed(call.seed + 7)
        dy = torch.randn(y.shape, generator=gen).to(y.dtype).to(device)
        dfinal = torch.randn(final.shape, generator=gen).to(final.dtype).to(device)
        if not y.requires_grad:
            raise AssertionError(f"backend {backend!r} returned y without a gradient (no backward)\nExample: {call}")
        grads[backend] = torch.autograd.grad((y, final), [t[n] for n in names], (dy, dfinal), allow_unused=True)
    for name, g, g_ref in zip(names, grads[gdn_backend], grads["torch"], strict=True):
        _close(g, g_ref, f"grad.{name}", gdn_backend, call)


@settings(deadline=None)
@given(data=st.data())
def test_backend_update_matches_torch_and_keeps_state(data, gdn_backend, device):
    """The single-step ``update``: y and the new state == torch's, within §6; the state passed in is unchanged."""
    call = _draw_call(data, gdn_backend, varlen=False, initial_state=True, max_seq_len=1)
    count_example()
    note(repr(call))
    t = call.tensors(device)
    x, state = t["x"][:, 0], t["initial_state"]
    before = state.clone()
    y, new_state = causal_conv1d_update(x, state, t["weight"], t["bias"], call.activation, backend=gdn_backend)
    assert_equivalent(state, before, name="state after update", paths=("after", "before"), context=call)
    y_ref, new_ref = causal_conv1d_update(x, state, t["weight"], t["bias"], call.activation, backend="torch")
    _close(y, y_ref, "update.y", gdn_backend, call)
    _close(new_state, new_ref, "update.new_state", gdn_backend, call)


@settings(deadline=None)
@given(data=st.data(), dims=st.lists(st.integers(1, 16), min_size=2, max_size=3))
def test_backend_fused_channel_slices_are_bitwise_the_split_calls(data, dims, gdn_backend, device):
    """One call over concatenated channels == one call per channel slice (strided views of the wide tensor,
    as the fused prologue hands q|k|v over): y and dx bitwise. This is what makes P3 hold."""
    call = _draw_call(data, gdn_backend, varlen=False, initial_state=False, max_channels=1)
    count_example()
    D = sum(dims)
    wide = ConvCall(**{**call.__dict__, "D": D})
    note(f"{wide!r}, slices {dims}")
    t = wide.tensors(device)
    x = t["x"].detach().requires_grad_()
    w, b = t["weight"], t["bias"]
    gen = torch.Generator().manual_seed(call.seed + 3)
    dy = torch.randn(x.shape, generator=gen).to(x.dtype).to(device)
    y_fused, _ = causal_conv1d(x, w, b, call.activation, backend=gdn_backend)
    (dx_fused,) = torch.autograd.grad(y_fused, [x], dy)
    ys, start = [], 0
    for n in dims:
        c = slice(start, start + n)
        ys.append(causal_conv1d(x[..., c], w[c], None if b is None else b[c], call.activation, backend=gdn_backend)[0])
        start += n
    y_split = torch.cat(ys, -1)
    (dx_split,) = torch.autograd.grad(y_split, [x], dy)
    context = f"{wide}, slices {dims}"
    assert_equivalent(y_fused, y_split, name="y", paths=("fused", "split"), context=context)
    assert_equivalent(dx_fused, dx_split, name="dx", paths=("fused", "split"), context=context)
