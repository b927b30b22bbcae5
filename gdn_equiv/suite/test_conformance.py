"""The backend under review against the ``torch`` ground truth, one conv call at a time (SPEC §3, P7).

Forward, gradients (x, weight, bias, initial_state, through y and the final state), the step kernel
and varlen, all within the §6 table; and the promise the fused prologue rests on, bitwise: a
channel's output and ``dx`` do not depend on which channels share the call (one call over q|k|v,
sliced afterwards, equals one call per slice on strided views of the wide tensor).

Every tensor of a call, inputs and cotangents (``dy``, ``d final_state``), is drawn in a memory
layout too (contiguous, sliced from a wider buffer, strided, transposed, expanded with stride 0:
``gdn_equiv.strategies.convs.LAYOUTS``), shrinking to contiguous; buffer elements outside a view are
NaN, so a kernel that reads storage with the wrong strides shows.

A backend's state convention (``Backend.unused_state_slots``: fla keeps only the last ``W - 1``
inputs meaningful) is honoured: the final state, the gradient through it and the step's new state are
compared on the declared slots only. The continuation properties keep that declaration honest: a
final state fed back as the next call's initial state, or to the step kernel, must continue the
sequence as one call would, so a slot the conv needs cannot be declared away.

With ``--gdn-backend torch`` (the default) these compare torch with itself and only check the
harness; they are meant for a backend under review: ``--gdn-backend mypkg.kernels:conv``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.backends import causal_conv1d, causal_conv1d_update, get_backend, supported_widths
from gdn_equiv.compare import assert_equivalent
from gdn_equiv.coverage import label_conv_call
from gdn_equiv.strategies import ConvCall, conv_calls
from gdn_equiv.strategies.convs import LAYOUTS
from gdn_equiv.testing import count_example

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _forward(call: ConvCall, tensors: dict, backend: str, *, final: bool = True):
    t = tensors
    return causal_conv1d(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], final, t["cu_seqlens"], backend=backend
    )


def _close(actual, expected, name: str, backend: str, call: object) -> None:
    assert_equivalent(actual, expected, name=name, paths=(backend, "torch"), exact=False, context=call)


def _slots(backend: str, W: int) -> slice:
    """The state slots ``backend`` declares meaningful (``Backend.unused_state_slots``)."""
    return get_backend(backend).state_slots(W)


def _state_name(backend: str, W: int, name: str) -> str:
    s = _slots(backend, W)
    return name if s.start == 0 else f"{name}[..., {s.start}:{W}]"


def conformance_calls(backend: str, **options) -> st.SearchStrategy[ConvCall]:
    """The conv calls the backend's declared scope covers: its kernel widths (causal-conv1d: 2..4) and,
    for packed sequences, initial states only where it supports them (its refusal is checked in
    tests/test_backends_cuda.py); every tensor in any of :data:`LAYOUTS`; every activation both it
    and the torch reference run (registered ones such as relu included)."""
    from gdn_equiv.conv_ops import supported_activations

    lo, hi = supported_widths([backend])
    varlen_state = get_backend(backend).varlen_initial_state
    acts = supported_activations([backend, "torch"])
    options = {**_reach(backend), "layouts": LAYOUTS, "activations": acts, **options}
    return conv_calls(widths=(lo, min(hi, 4)), varlen_initial_state=varlen_state, **options)


def _draw_call(data: st.DataObject, backend: str, **options) -> ConvCall:
    return data.draw(conformance_calls(backend, **options), label="call")


def _reach(backend: str) -> dict:
    """How wide and long the calls may get: where real kernels change code path (block edges up to the
    PR's 6,144 fused channels, tile edges in time) on a GPU, and on a CPU up to 1,025 channels; Triton
    kernels (ours and fla's) run in the interpreter there, too slow for them, so they keep the small
    shapes."""
    if torch.cuda.is_available():
        return {"wide_channels": 6145, "long_seq_len": 257}
    if backend in ("triton", "fla-triton"):
        return {}
    return {"wide_channels": 1025, "long_seq_len": 129}


# ---- the checks, one call each (tests/ plants defects and searches with them) ----------------------


def check_forward(call: ConvCall, backend: str, device: str) -> None:
    """y and the final state's declared slots == the torch backend's, within §6."""
    tensors = call.tensors(device)
    y, final = _forward(call, tensors, backend)
    y_ref, final_ref = _forward(call, tensors, "torch")
    _close(y, y_ref, "y", backend, call)
    s = _slots(backend, call.W)
    _close(final[..., s], final_ref[..., s], _state_name(backend, call.W, "final_state"), backend, call)


def _grads(call: ConvCall, backend: str, device: str, unused_state_slots: int) -> tuple[list[str], tuple]:
    t = call.tensors(device, grad=True)
    names = [n for n in ("x", "weight", "bias", "initial_state") if t[n] is not None]
    y, final = _forward(call, t, backend)
    if not y.requires_grad:
        raise AssertionError(f"backend {backend!r} returned y without a gradient (no backward)\nExample: {call}")
    cot = call.cotangents(device, unused_state_slots=unused_state_slots)
    # with respect to the tensors as passed (an expanded one's gradient before autograd sums its copies:
    # a sum of rounded fp16/bf16 terms that cancel would judge the summation, not the kernel)
    inputs = [t[n] for n in names]
    return names, torch.autograd.grad((y, final), inputs, (cot["dy"], cot["dfinal"]), allow_unused=True)


def check_gradients(call: ConvCall, backend: str, device: str) -> None:
    """Gradients of every input (through its layout) from ``dy`` and ``d final_state`` (zero on the slots
    the backend declares unused) == torch's, within §6."""
    unused = get_backend(backend).unused_state_slots  # the reviewed backend's convention, for both
    names, grads = _grads(call, backend, device, unused)
    _, grads_ref = _grads(call, "torch", device, unused)
    for name, g, g_ref in zip(names, grads, grads_ref, strict=True):
        _close(g, g_ref, f"grad.{name}", backend, call)


def check_update(call: ConvCall, backend: str, device: str) -> None:
    """The single-step ``update`` on ``x[:, 0]``: y and the new state's declared slots == torch's; the
    state passed in is unchanged."""
    t = call.tensors(device)
    x, state = t["x"][:, 0], t["initial_state"]
    before = state.clone()
    y, new_state = causal_conv1d_update(x, state, t["weight"], t["bias"], call.activation, backend=backend)
    assert_equivalent(state, before, name="state after update", paths=("after", "before"), context=call)
    y_ref, new_ref = causal_conv1d_update(x, state, t["weight"], t["bias"], call.activation, backend="torch")
    _close(y, y_ref, "update.y", backend, call)
    s = _slots(backend, call.W)
    _close(new_state[..., s], new_ref[..., s], _state_name(backend, call.W, "update.new_state"), backend, call)


def _continued(call: ConvCall, t: dict, backend: str, split: int):
    """``x[:, :split]``, then ``x[:, split:]`` from the first call's final state as the backend returned it."""
    x, w, b = t["x"], t["weight"], t["bias"]
    y1, f1 = causal_conv1d(x[:, :split], w, b, call.activation, t["initial_state"], True, None, backend=backend)
    y2, final = causal_conv1d(x[:, split:], w, b, call.activation, f1, True, None, backend=backend)
    return torch.cat([y1, y2], 1), final


def check_continuation(call: ConvCall, split: int, backend: str, device: str) -> None:
    """Two calls, ``x[:, :split]`` then ``x[:, split:]`` from the first call's final state (all ``W`` slots
    as the backend returned them) == the same two calls on torch: y, the gradients of every input through
    both calls, and the last final state's declared slots. (Two torch calls, not one: a gradient summed
    from two calls is rounded twice in fp16/bf16.)"""
    context = f"{call}, split at {split}"
    unused = get_backend(backend).unused_state_slots
    results = []
    for name in (backend, "torch"):
        t = call.tensors(device, grad=True)
        y, final = _continued(call, t, name, split)
        names = [n for n in ("x", "weight", "bias", "initial_state") if t[n] is not None]
        cot = call.cotangents(device, unused_state_slots=unused)
        grads = torch.autograd.grad((y, final), [t[n] for n in names], (cot["dy"], cot["dfinal"]), allow_unused=True)
        results.append((y, final, dict(zip(names, grads, strict=True))))
    (y, final, got), (y_ref, final_ref, grads_ref) = results
    _close(y, y_ref, "continued.y", backend, context)
    s = _slots(backend, call.W)
    _close(final[..., s], final_ref[..., s], _state_name(backend, call.W, "continued.final_state"), backend, context)
    for n, g in got.items():
        _close(g, grads_ref[n], f"continued.grad.{n}", backend, context)


def _decoded(call: ConvCall, t: dict, backend: str, split: int):
    x, w, b, h0 = t["x"], t["weight"], t["bias"], t["initial_state"]
    if split > 0:
        y_pre, state = causal_conv1d(x[:, :split], w, b, call.activation, h0, True, None, backend=backend)
        ys = [y_pre]
    else:
        state = h0 if h0 is not None else x.new_zeros(call.B, call.D, call.W)
        ys = []
    for i in range(split, call.T):
        assert state is not None  # asked for (output_final_state=True)
        y_i, state = causal_conv1d_update(x[:, i], state, w, b, call.activation, backend=backend)
        ys.append(y_i.unsqueeze(1))
    return torch.cat(ys, 1), state


def check_decode_continuation(call: ConvCall, split: int, backend: str, device: str) -> None:
    """A prefill of ``x[:, :split]`` (none when ``split == 0``: the initial state, or zeros), then one
    ``update`` per remaining token from the state the previous call returned == the same on torch: every
    y and the last state's declared slots."""
    context = f"{call}, prefill of {split}"
    t = call.tensors(device)
    with torch.no_grad():
        y, state = _decoded(call, t, backend, split)
        y_ref, state_ref = _decoded(call, t, "torch", split)
    _close(y, y_ref, "decoded.y", backend, context)
    s = _slots(backend, call.W)
    _close(state[..., s], state_ref[..., s], _state_name(backend, call.W, "decoded.state"), backend, context)


def check_fused_slices(call: ConvCall, dims: list[int], backend: str, device: str) -> None:
    """One call over ``sum(dims)`` channels == one call per channel slice of the same (laid out) ``x``:
    y and dx bitwise."""
    D = sum(dims)
    wide = dataclasses.replace(call, D=D)
    label_conv_call(wide, grad=True, final_state=False)  # the call the kernel sees (dx, no final state)
    context = f"{wide}, slices {dims}"
    t = wide.tensors(device, grad=True)
    x = t["x"]
    w, b = t["weight"].detach(), None if t["bias"] is None else t["bias"].detach()
    dy = wide.cotangents(device)["dy"]
    y_fused, _ = causal_conv1d(x, w, b, call.activation, backend=backend)
    (dx_fused,) = torch.autograd.grad(y_fused, [x], dy)
    ys, start = [], 0
    for n in dims:
        c = slice(start, start + n)
        ys.append(causal_conv1d(x[..., c], w[c], None if b is None else b[c], call.activation, backend=backend)[0])
        start += n
    y_split = torch.cat(ys, -1)
    (dx_split,) = torch.autograd.grad(y_split, [x], dy)
    assert_equivalent(y_fused, y_split, name="y", paths=("fused", "split"), context=context)
    assert_equivalent(dx_fused, dx_split, name="dx", paths=("fused", "split"), context=context)


#: channel counts where kernels change code path (block sizes); a fused call just past one, split
#: into calls that stay at or under it, is where "fused == split" breaks for such a kernel
BLOCK_EDGES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6144)


def block_edges(backend: str) -> tuple[int, ...]:
    """The edges a backend's conformance sweeps: up to its reach (6,144 on a GPU, 1,024 on a CPU, 32 for
    kernels that run in the Triton interpreter here)."""
    reach = _reach(backend).get("wide_channels", 33)
    return tuple(e for e in BLOCK_EDGES if e < reach)


def _split(data: st.DataObject, call: ConvCall, lo: int) -> tuple[ConvCall, int]:
    """A call at least two tokens long and a split point ``lo..T-1`` in it."""
    call = call if call.T >= 2 else dataclasses.replace(call, T=2)
    return call, data.draw(st.integers(lo, call.T - 1), label="split")


# ---- the properties ---------------------------------------------------------------------------------


@settings(deadline=None)
@given(data=st.data())
def test_backend_forward_matches_torch(data, gdn_backend, device):
    """y and the final state (the last W inputs per sequence) == the torch backend's, within §6."""
    call = _draw_call(data, gdn_backend, varlen=False)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    check_forward(call, gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_varlen_matches_torch(data, gdn_backend, device):
    """Packed sequences (``cu_seqlens``, empty ones included): y and per-sequence final states, within §6."""
    call = _draw_call(data, gdn_backend, varlen=True)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    check_forward(call, gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_gradients_match_torch(data, gdn_backend, device):
    """Gradients of x, weight, bias and initial_state, through y and the final state, within §6."""
    call = _draw_call(data, gdn_backend)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=True, final_state=True)
    check_gradients(call, gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_update_matches_torch_and_keeps_state(data, gdn_backend, device):
    """The single-step ``update``: y and the new state == torch's, within §6; the state passed in is unchanged."""
    call = _draw_call(data, gdn_backend, varlen=False, initial_state=True, max_seq_len=1)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    check_update(call, gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_final_state_continues_the_sequence(data, gdn_backend, device):
    """A call's final state, fed to the next call as its initial state, continues the sequence: the
    backend's two calls == torch's (y, gradients, final state), within §6."""
    call, split = _split(data, _draw_call(data, gdn_backend, varlen=False), 1)
    count_example()
    note(f"{call!r}, split at {split}")
    label_conv_call(call, grad=True, final_state=True)
    check_continuation(call, split, gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_decode_continues_the_prefill(data, gdn_backend, device):
    """Prefill then one ``update`` per token, each from the state the last call returned == torch's, within §6."""
    call, split = _split(data, _draw_call(data, gdn_backend, varlen=False), 0)
    count_example()
    note(f"{call!r}, prefill of {split}")
    label_conv_call(call, grad=False, final_state=True)
    check_decode_continuation(call, split, gdn_backend, device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_calls_across_each_block_edge_are_bitwise_the_split_calls(data, gdn_backend, device):
    """For every block edge E in reach (8, 16, 32, ...): one call over E + 1 channels == a call over the
    first E and one over the last, y and dx bitwise. A kernel that takes another code path (or another
    summation order) past a channel count is caught at that edge on every drawn call, not only when a
    random split happens to straddle it. Each call is also swept as its fp32 twin with a bias and at
    least 2W tokens: a different summation order rounds differently in fp32 sums of several non-zero
    terms, and a bf16/fp16 output or a one-token call hides it."""
    call = _draw_call(data, gdn_backend, varlen=False, initial_state=False, max_channels=1)
    count_example()
    note(repr(call))
    twin = dataclasses.replace(call, dtype="float32", bias=True, T=max(call.T, 2 * call.W))
    for swept in dict.fromkeys([call, twin]):
        for edge in block_edges(gdn_backend):
            check_fused_slices(swept, [edge, 1], gdn_backend, device)


@settings(deadline=None)
@given(data=st.data(), dims=st.lists(st.integers(1, 16), min_size=2, max_size=3))
def test_backend_fused_channel_slices_are_bitwise_the_split_calls(data, dims, gdn_backend, device):
    """One call over concatenated channels == one call per channel slice (strided views of the wide tensor,
    as the fused prologue hands q|k|v over): y and dx bitwise. This is what makes P3 hold."""
    call = _draw_call(data, gdn_backend, varlen=False, initial_state=False, max_channels=1)
    count_example()
    note(f"{call!r}, slices {dims}")
    check_fused_slices(call, dims, gdn_backend, device)
