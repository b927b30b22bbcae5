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
harness; they are meant for a backend under review: ``--gdn-backend mypkg.kernels:conv``. Each check
(:mod:`gdn_equiv.harness.conformance`) runs in a worker process under ``--gdn-isolate``, so a kernel that
crashes fails its example instead of ending the run.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness import isolation, ledger, registry
from gdn_equiv.harness.conformance import (
    check_block_edges,
    check_continuation,
    check_decode_continuation,
    check_forward,
    check_fused_slices,
    check_gradients,
    check_outside_capabilities,
    check_update,
    edge_parts,
    edge_splits,
    length_parts,
    length_share,
    value_parts,
    value_share,
)
from gdn_equiv.harness.coverage import label_conv_call
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.harness.testing import count_example
from gdn_equiv.model.backends import capabilities, get_backend
from gdn_equiv.model.backends.capabilities import DTYPE_NAMES
from gdn_equiv.strategies import ConvCall, outside_calls
from gdn_equiv.strategies.conformance import channel_slices, conformance_calls, conformance_reach, split_calls
from gdn_equiv.strategies.convs import breakable_limits
from gdn_equiv.strategies.values import swept_lengths, swept_values

# first: one conv call of each kind against torch, cheap and broad: every worker starts on them (time to red)
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.first(2)]


def _draw_call(data: st.DataObject, backend: str, **options) -> ConvCall:
    return data.draw(conformance_calls(backend, **options), label="call")


def _check(check, *args, backend: str, device: str) -> object:
    """``check(*args, the backend, device)``, in a worker under ``--gdn-isolate``: the run's backend name is
    resolved here, once an example (a backend a test registers in its place is the one checked), and the check
    gets its object (a worker resolves it from its name once for the process: ``isolation.resolved``)."""
    return isolation.call(check, *args, get_backend(backend), device)


def against_torch(backend: str) -> None:
    """A comparison with the torch backend compares nothing where the backend is torch: that row is n/a (a
    skip with the record's reason, as ``check`` asks it), and its calls reach no region. The fp64 ground
    truth (``test_ground_truth``) is what checks torch itself."""
    reason = registry.get_record("P7-conv-conformance").not_applicable(backend)
    if ledger.asked(reason) is not None:
        pytest.skip(f"{Outcome.NOT_APPLICABLE}: {reason}")


# ---- the properties ---------------------------------------------------------------------------------


@settings(deadline=None)
@given(data=st.data())
def test_backend_forward_matches_torch(data, gdn_backend, device):
    """y and the final state (the last W inputs per sequence) == the torch backend's, within §6."""
    against_torch(gdn_backend)
    call = _draw_call(data, gdn_backend, varlen=False)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    _check(check_forward, call, backend=gdn_backend, device=device)  # in a worker under --gdn-isolate


@settings(deadline=None)
@given(data=st.data())
def test_backend_varlen_matches_torch(data, gdn_backend, device):
    """Packed sequences (``cu_seqlens``, empty ones included): y and per-sequence final states, within §6."""
    against_torch(gdn_backend)
    call = _draw_call(data, gdn_backend, varlen=True)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    _check(check_forward, call, backend=gdn_backend, device=device)  # in a worker under --gdn-isolate


@settings(deadline=None)
@given(data=st.data())
def test_backend_gradients_match_torch(data, gdn_backend, device):
    """Gradients of x, weight, bias and initial_state, through y and the final state, within §6."""
    against_torch(gdn_backend)
    call = _draw_call(data, gdn_backend)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=True, final_state=True)
    _check(check_gradients, call, backend=gdn_backend, device=device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_update_matches_torch_and_keeps_state(data, gdn_backend, device):
    """The single-step ``update``: y and the new state == torch's, within §6; the state passed in is unchanged."""
    call = _draw_call(data, gdn_backend, varlen=False, initial_state=True, max_seq_len=1)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    _check(check_update, call, backend=gdn_backend, device=device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_final_state_continues_the_sequence(data, gdn_backend, device):
    """A call's final state, fed to the next call as its initial state, continues the sequence: the
    backend's two calls == torch's (y, gradients, final state), within §6."""
    against_torch(gdn_backend)
    call, split = split_calls(data, _draw_call(data, gdn_backend, varlen=False), 1)
    count_example()
    note(f"{call!r}, split at {split}")
    label_conv_call(call, grad=True, final_state=True)
    _check(check_continuation, call, split, backend=gdn_backend, device=device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_decode_continues_the_prefill(data, gdn_backend, device):
    """Prefill then one ``update`` per token, each from the state the last call returned == torch's, within §6."""
    against_torch(gdn_backend)
    call, split = split_calls(data, _draw_call(data, gdn_backend, varlen=False), 0)
    count_example()
    note(f"{call!r}, prefill of {split}")
    label_conv_call(call, grad=False, final_state=True)
    _check(check_decode_continuation, call, split, backend=gdn_backend, device=device)


# each example sweeps its share of the edges in reach, twice (11 edges on a GPU: 22 fused-vs-split checks,
# 66 channel counts, over the parts), so a fifth of the profile's examples, as the other sweeping tests take
@pytest.mark.parametrize("part", range(edge_parts()))
@settings(deadline=None, max_examples=max(3, settings().max_examples // 5))
@given(data=st.data())
def test_backend_calls_across_each_block_edge_are_bitwise_the_split_calls(data, gdn_backend, device, part):
    """For every block edge E in reach (8, 16, 32, ...): one call just past E == a call up to E and one over
    the rest, y and dx bitwise, in channel counts the backend takes (multiples of its channel multiple:
    ``edge_splits``; a multiple wider than every edge sweeps its narrowest pair). A kernel that takes another
    code path (or another summation order) past a channel count is caught at that edge on every drawn call,
    not only when a random split happens to straddle it; a kernel that raises fails (an exception is never
    agreement, and a sweep never compares nothing). Each call is also swept as its fp32 twin with a bias and
    at least 2W tokens (:func:`~gdn_equiv.harness.conformance.check_block_edges`)."""
    call = _draw_call(data, gdn_backend, varlen=False, initial_state=False, max_channels=1)
    count_example()
    splits = edge_splits(gdn_backend)
    share = splits[part :: edge_parts()] or [splits[part % len(splits)]]
    note(f"{call!r}, splits {share} of {splits}")
    check_block_edges(call, share, get_backend(gdn_backend), device)


def sweep_dtypes(backend: str) -> tuple[str, ...]:
    """The dtypes a sweep runs in: every one of fp32/fp16/bf16 both the backend and torch take (a backend that
    declares none of them: the ones it declares, fp64)."""
    caps = capabilities([backend, "torch"])
    return caps.dtypes_among(("float32", "float16", "bfloat16")) or caps.dtypes_among(DTYPE_NAMES)


def sweep_reach(backend: str) -> int:
    """How long a length sweep goes: the conformance reach, and past 64 and 128 for Triton kernels in the
    interpreter (whose reach keeps the other calls short)."""
    return conformance_reach(backend).get("long_seq_len", 129)


def run_sweep(calls: list[ConvCall], backend: str, device: str, checks: tuple) -> None:
    """Every call of a sweep inside the capabilities (a call outside them is the refusal property's), each
    labelled and checked by each of ``checks``."""
    caps = capabilities([backend, "torch"])
    inside = [c for c in calls if c.refusal(caps) is None]
    assert inside, f"no call of the sweep is inside {backend!r}'s capabilities: {calls[0]}"
    for call in inside:
        label_conv_call(call, grad=True, final_state=True)
        for check in checks:
            _check(check, call, backend=backend, device=device)


# each example sweeps 3 dtypes x (3 lengths + 1 packed) calls: a fifth of the profile's examples; on a GPU in
# parts (conformance.length_parts)
@pytest.mark.parametrize("part", range(length_parts()))
@settings(deadline=None, max_examples=max(3, settings().max_examples // 5))
@given(data=st.data())
def test_backend_matches_torch_past_every_time_tile_in_every_dtype(data, gdn_backend, device, part):
    """Issue #49: a drawn call (one row, up to 16 channels) moved just past each time tile in reach (65, 129,
    257 tokens: fla's 64-token chunk, the Triton kernels' 64- and 128-row chunks) and packed after a short
    sequence, in every dtype: y, the final state and every gradient == torch's, within §6. A kernel wrong only
    for fp16 past 64 tokens is caught by every example, not by the few random draws that are long and fp16."""
    against_torch(gdn_backend)
    call = _draw_call(data, gdn_backend, varlen=False, max_seq_len=4)
    count_example()
    note(repr(call))
    caps = capabilities([gdn_backend, "torch"])
    sweep = swept_lengths(
        call,
        dtypes=sweep_dtypes(gdn_backend),
        reach=sweep_reach(gdn_backend),
        varlen_initial_state=caps.varlen_initial_state,
        channel_step=caps.channel_step,
    )
    run_sweep(length_share(sweep, part), gdn_backend, device, (check_forward, check_gradients))


# each example sweeps 3 dtypes x 5 value kinds: a fifth of the profile's examples
@pytest.mark.parametrize("part", range(value_parts()))
@settings(deadline=None, max_examples=max(3, settings().max_examples // 5))
@given(data=st.data())
def test_backend_matches_torch_at_every_value_extreme_in_every_dtype(data, gdn_backend, device, part):
    """Issue #52: a drawn call carrying each extreme of ``gdn_equiv.strategies.values`` in turn (sums near the
    dtype's largest value, subnormal inputs, signed zeros, cancelling taps, constant runs), in every dtype:
    y, the final state (its zeros' signs too), every gradient and the step == torch's. A kernel that sums in
    fp16, flushes subnormals or drops a -0.0 is caught by every example."""
    against_torch(gdn_backend)
    call = _draw_call(data, gdn_backend, varlen=False, max_seq_len=12, max_channels=16)
    count_example()
    note(repr(call))
    swept = value_share(swept_values(call, dtypes=sweep_dtypes(gdn_backend)), part)
    run_sweep(swept, gdn_backend, device, (check_forward, check_gradients))
    for c in swept:
        if c.refusal(capabilities([gdn_backend, "torch"])) is None:
            _check(check_update, dataclasses.replace(c, initial_state=True), backend=gdn_backend, device=device)


@settings(deadline=None)
@given(data=st.data(), dims=channel_slices())
def test_backend_fused_channel_slices_are_bitwise_the_split_calls(data, dims, gdn_backend, device):
    """One call over concatenated channels == one call per channel slice (strided views of the wide tensor,
    as the fused prologue hands q|k|v over): y and dx bitwise. This is what makes P3 hold."""
    call = _draw_call(data, gdn_backend, varlen=False, initial_state=False, max_channels=1)
    m = capabilities([gdn_backend]).channel_step
    # slices the backend takes; past 64 channels a multiple, one or two multiples a slice (16 multiples of
    # 4096 would be 65,536 channels a slice)
    dims = [d * m for d in dims] if m <= 64 else [m * (1 + d % 2) for d in dims]
    count_example()
    note(f"{call!r}, slices {dims}")
    _check(check_fused_slices, call, dims, backend=gdn_backend, device=device)


@settings(deadline=None)
@given(data=st.data())
def test_outside_capabilities_is_refused_or_right(data, gdn_backend, device):
    """A call outside the backend's declared capabilities (one limit broken: a dtype, a width, an activation,
    a channel count, x's strides, the bias' layout or dtype, a state's dtype, packed sequences with states)
    is refused with an error that says why, or answered right; never answered wrongly. A backend that
    declares no limits has no such call: n/a, with the reason."""
    caps = capabilities([gdn_backend])
    if not breakable_limits(caps):
        pytest.skip(
            f"n/a: {gdn_backend!r} declares no limit a call can break here (capabilities: {caps.limits() or 'all'})"
        )
    outside = data.draw(outside_calls(caps), label="outside")
    count_example()
    note(repr(outside))
    _check(check_outside_capabilities, outside, backend=gdn_backend, device=device)
