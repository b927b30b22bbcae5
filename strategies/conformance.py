"""The conv calls the gate's conformance and ground-truth properties draw (``gdn_equiv.suite.test_conformance``,
``test_ground_truth``), each inside a backend's declared scope at the conformance reach
(:func:`conformance_reach`: on a GPU up to the PR's 6,144 fused channels and
tile-edge lengths, on a CPU up to 1,025 channels, small shapes for Triton kernels in the interpreter), and the
Gated DeltaNet layers the reference layer is checked on against SPEC §2 written out."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from hypothesis import strategies as st

from gdn_equiv.model.backends import capabilities
from gdn_equiv.model.families.gated_deltanet import GDNConfig
from gdn_equiv.strategies.convs import LAYOUTS, ConvCall, conv_calls
from gdn_equiv.strategies.values import VALUE_KINDS

__all__ = [
    "LONG_REACH",
    "channel_slices",
    "conformance_calls",
    "conformance_reach",
    "gdn_truth_cases",
    "ground_truth_calls",
    "split_calls",
]


#: the longest call the conformance properties draw: past 256, the longest time tile (values.TIME_TILES)
LONG_REACH = 300


def conformance_reach(backend: str) -> dict:
    """How wide and long the calls may get: where real kernels change code path (block edges up to the
    PR's 6,144 fused channels, tile edges in time) on a GPU, and on a CPU up to 1,025 channels; Triton
    kernels (ours and fla's) run in the interpreter there, too slow for them, so they keep the small
    shapes. Calls past the time tiles (up to :data:`LONG_REACH` tokens, a few channels: issue #49) and
    extreme values (:data:`~gdn_equiv.strategies.values.VALUE_KINDS`: issue #52) everywhere else."""
    if torch.cuda.is_available():
        return {"wide_channels": 6145, "long_seq_len": LONG_REACH, "values": VALUE_KINDS}
    if backend in ("triton", "fla-triton"):
        return {"values": VALUE_KINDS}
    return {"wide_channels": 1025, "long_seq_len": LONG_REACH, "values": VALUE_KINDS}


def conformance_calls(backend: str, **options: Any) -> st.SearchStrategy[ConvCall]:
    """The conv calls inside the capabilities of the backend and of the torch reference it is compared with
    (causal-conv1d: widths 2..4, no fp64, no per-sequence states of packed sequences...; a call outside
    them is the refusal property's, test_outside_capabilities_is_refused_or_right); widths up to 4; every
    tensor in any of :data:`~gdn_equiv.strategies.convs.LAYOUTS` the capabilities allow; every activation both
    run."""
    caps = capabilities([backend, "torch"])
    lo, hi = caps.widths or (1, 4)
    options = {**conformance_reach(backend), "layouts": LAYOUTS, "widths": (lo, min(hi, 4)), **options}
    return conv_calls(capabilities=caps, **options)


def ground_truth_calls(backend: str, **options: Any) -> st.SearchStrategy[ConvCall]:
    """A call within the backend's declared scope (its widths; varlen initial states if it takes them), at the
    conformance properties' reach: one definition for both."""
    caps = capabilities([backend])
    lo, hi = caps.widths or (1, 4)
    return conv_calls(widths=(lo, min(hi, 4)), capabilities=caps, **conformance_reach(backend), **options)


def channel_slices() -> st.SearchStrategy[list[int]]:
    """Two or three channel slices of 1-16 channels each (in multiples of a backend's channel multiple, the
    property scales them): the fused-slices property's q|k|v."""
    return st.lists(st.integers(1, 16), min_size=2, max_size=3)


def split_calls(data: st.DataObject, call: ConvCall, lo: int) -> tuple[ConvCall, int]:
    """``call`` made at least two tokens long and a split point ``lo..T-1`` in it, drawn from ``data``."""
    call = call if call.T >= 2 else dataclasses.replace(call, T=2)
    return call, data.draw(st.integers(lo, call.T - 1), label="split")


@st.composite
def gdn_truth_cases(draw: st.DrawFn) -> tuple[GDNConfig, int, int, int]:
    """A small Gated DeltaNet config (every switch of SPEC §2 drawn), a seed, and an input shape."""
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
