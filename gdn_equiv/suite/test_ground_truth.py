"""Every backend, ``torch`` included, against an independently written fp64 conv
(:mod:`gdn_equiv.harness.ground_truth`).

``test_conformance`` measures a backend against the ``torch`` backend; these measure it against
``F.conv1d`` in fp64, sharing no code with any backend, so a defect the torch backend itself carries
(and would share with every comparison made against it) shows here. The truth is cast to the
backend's output dtype and compared within the §6 table: forward output and final state (dense and
packed), the single-step update, and the gradients of x, weight, bias and initial_state.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness import isolation
from gdn_equiv.harness.compare import assert_equivalent
from gdn_equiv.harness.conformance import length_parts, length_share, value_parts, value_share
from gdn_equiv.harness.coverage import label_conv_call
from gdn_equiv.harness.ground_truth import (
    check_forward,
    check_gradients,
    check_update,
    gated_deltanet_truth,
)
from gdn_equiv.harness.testing import count_example, randn
from gdn_equiv.model.backends import capabilities, get_backend
from gdn_equiv.model.backends.capabilities import DTYPE_NAMES
from gdn_equiv.model.example import Example, build_layer
from gdn_equiv.strategies import ConvCall
from gdn_equiv.strategies.conformance import conformance_reach, gdn_truth_cases, ground_truth_calls
from gdn_equiv.strategies.values import swept_lengths, swept_values

# first: cheap and broad (one conv call of each kind against fp64): every worker starts on them (time to red)
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.first(3)]


def draw_call(data: st.DataObject, backend: str, **options) -> ConvCall:
    return data.draw(ground_truth_calls(backend, **options), label="call")


def _check(check, call: ConvCall, *, backend: str, device: str) -> None:
    """``check(call, the backend, device)``, in a worker under ``--gdn-isolate``: the run's backend name is
    resolved here, once a check (a backend a test registers in its place is the one checked), and the check gets
    its object (a worker resolves it from its name once for the process: ``isolation.resolved``)."""
    isolation.call(check, call, get_backend(backend), device)


@settings(deadline=None)
@given(data=st.data())
def test_backend_forward_matches_fp64_ground_truth(data, gdn_backend, device):
    """y and the final state (the last W inputs per row, state in front) == F.conv1d in fp64, within §6."""
    call = draw_call(data, gdn_backend, varlen=False)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    _check(check_forward, call, backend=gdn_backend, device=device)  # in a worker under --gdn-isolate


@settings(deadline=None)
@given(data=st.data())
def test_backend_varlen_matches_fp64_ground_truth(data, gdn_backend, device):
    """Packed sequences (empty ones included): y and each sequence's final state == the truth's, within §6."""
    call = draw_call(data, gdn_backend, varlen=True)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    _check(check_forward, call, backend=gdn_backend, device=device)  # in a worker under --gdn-isolate


@settings(deadline=None)
@given(data=st.data())
def test_backend_gradients_match_fp64_ground_truth(data, gdn_backend, device):
    """Gradients of x, weight, bias and initial_state, through y and the final state, within §6."""
    call = draw_call(data, gdn_backend)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=True, final_state=True)
    _check(check_gradients, call, backend=gdn_backend, device=device)  # in a worker under --gdn-isolate


@settings(deadline=None)
@given(data=st.data())
def test_backend_update_matches_fp64_ground_truth(data, gdn_backend, device):
    """The step kernel: y and the new state (the state shifted by one, the token at the end), within §6."""
    call = draw_call(data, gdn_backend, varlen=False, initial_state=True, max_seq_len=1)
    count_example()
    note(repr(call))
    label_conv_call(call, grad=False, final_state=True)
    _check(check_update, call, backend=gdn_backend, device=device)  # in a worker under --gdn-isolate


def _sweep(calls: list[ConvCall], backend: str, device: str, *, update: bool = False) -> None:
    """Each call of a sweep inside the backend's capabilities: forward and gradients (and the step)."""
    caps = capabilities([backend])
    inside = [c for c in calls if c.refusal(caps) is None]
    assert inside, f"no call of the sweep is inside {backend!r}'s capabilities: {calls[0]}"
    for call in inside:
        label_conv_call(call, grad=True, final_state=True)
        _check(check_forward, call, backend=backend, device=device)
        _check(check_gradients, call, backend=backend, device=device)
        if update:
            _check(check_update, dataclasses.replace(call, initial_state=True), backend=backend, device=device)


def _dtypes(backend: str) -> tuple[str, ...]:
    """fp32/fp16/bf16 where the backend takes them (one that declares none of them: the ones it declares)."""
    caps = capabilities([backend])
    return caps.dtypes_among(("float32", "float16", "bfloat16")) or caps.dtypes_among(DTYPE_NAMES)


# each example sweeps 3 dtypes x (3 lengths + 1 packed) calls: a fifth of the profile's examples; on a GPU in
# parts (conformance.length_parts)
@pytest.mark.parametrize("part", range(length_parts()))
@settings(deadline=None, max_examples=max(3, settings().max_examples // 5))
@given(data=st.data())
def test_backend_matches_fp64_ground_truth_past_every_time_tile_in_every_dtype(data, gdn_backend, device, part):
    """Issue #49: a drawn call (one row, up to 16 channels) moved just past each time tile in reach (65, 129,
    257 tokens) and packed after a short sequence, in every dtype: y, the final state and the gradients ==
    the fp64 truth's, within §6. A kernel wrong only for fp16 past 64 tokens is caught by every example."""
    call = draw_call(data, gdn_backend, varlen=False, max_seq_len=4)
    count_example()
    note(repr(call))
    reach = conformance_reach(gdn_backend).get("long_seq_len", 129)
    caps = capabilities([gdn_backend])
    sweep = swept_lengths(
        call,
        dtypes=_dtypes(gdn_backend),
        reach=reach,
        varlen_initial_state=caps.varlen_initial_state,
        channel_step=caps.channel_step,
    )
    _sweep(length_share(sweep, part), gdn_backend, device)


# each example sweeps 3 dtypes x 5 value kinds: a fifth of the profile's examples; on a GPU in parts
# (conformance.value_parts: the same shares as the conformance sweep)
@pytest.mark.parametrize("part", range(value_parts()))
@settings(deadline=None, max_examples=max(3, settings().max_examples // 5))
@given(data=st.data())
def test_backend_matches_fp64_ground_truth_at_every_value_extreme_in_every_dtype(data, gdn_backend, device, part):
    """Issue #52: a drawn call carrying each extreme value kind in turn (sums near the dtype's largest value,
    subnormal inputs, signed zeros, cancelling taps, constant runs), in every dtype: y, the final state (its
    zeros' signs too), the gradients and the step == the fp64 truth's (an output that overflows the dtype is
    that infinity in both; the atol widened by fp32's rounding at the truth's scale)."""
    call = draw_call(data, gdn_backend, varlen=False, max_seq_len=12, max_channels=16)
    count_example()
    note(repr(call))
    _sweep(value_share(swept_values(call, dtypes=_dtypes(gdn_backend)), part), gdn_backend, device, update=True)


# ---- the reference layer itself, against SPEC §2 written out independently ---------------------------


@settings(deadline=None)
@given(case=gdn_truth_cases())
def test_reference_layer_matches_an_independent_fp64_transcription(case) -> None:
    """The layer every property compares paths against is itself right: Gated DeltaNet in fp64 (its convs
    on the torch backend, its chunked core, its norms and output gate) against SPEC §2 written out token by
    token with ``F.conv1d`` and an explicit recurrence (:func:`gdn_equiv.harness.ground_truth.gated_deltanet_truth`),
    within the fp64 table. Both paths share the projections, the core and the epilogue, so a defect
    there is invisible to fused-vs-separate; this is where it shows."""

    config, seed, batch, T = case
    count_example()
    layer = build_layer(Example(config=config, family="gated_deltanet", dtype="float64", seed=seed))
    x = randn(seed + 1, batch, T, config.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        y = layer(x)[0]
    note(f"{config}, B={batch}, T={T}, seed={seed}")
    assert_equivalent(y, gated_deltanet_truth(layer, x), name="output", paths=("layer", "SPEC §2"), exact=False)
