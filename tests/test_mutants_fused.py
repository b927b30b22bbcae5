"""Gaps in the fused prologue's tests that mutation testing found (docs/mutation.md, scripts/mutate.py fused)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _gen import make_layer, randn
from hypothesis import given
from hypothesis import strategies as st

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.families.gated_deltanet import FusedGatedDeltaNet, GDNConfig
from gdn_equiv.fused import PROLOGUES

H = 8
SMALL = GDNConfig(hidden_size=H, head_dim=2, num_heads=2, expand_v=2, conv_size=3)
LAYER = make_layer(SMALL, 0, cls=FusedGatedDeltaNet)
X = randn(0, 1, 5, H)


@given(prologue=st.text(max_size=12).filter(lambda s: s not in PROLOGUES))
def test_an_unknown_prologue_is_refused_naming_it(prologue: str) -> None:
    """A misspelt path (``"fuse"``, ``"Auto"``) is refused, never run as some default path."""
    with pytest.raises(InvalidArgument, match="prologue must be one of") as info:
        LAYER(X, prologue=prologue)
    assert repr(prologue) in str(info.value)


def test_forcing_fusion_without_short_convs_is_refused() -> None:
    """``prologue="fused"`` on a layer without convs has nothing to fuse: refused with the reason,
    not run, and not failing somewhere inside the conv code."""
    layer = make_layer(dataclasses.replace(SMALL, use_short_conv=False), 0, cls=FusedGatedDeltaNet)
    with torch.no_grad():
        layer(X, prologue="separate")  # the layer itself is fine
        with pytest.raises(InvalidArgument, match="use_short_conv"):
            layer(X, prologue="fused")
