"""Gaps in the fused prologue's tests that mutation testing found (docs/mutation.md, tools/mutate.py fused)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _gen import make_layer, randn
from hypothesis import given
from hypothesis import strategies as st

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.families.gated_deltanet import FusedGatedDeltaNet, GDNConfig
from gdn_equiv.model.fused import PROLOGUES

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


@pytest.mark.parametrize("family", ["lightnet", "simple_gla"])
def test_the_fused_path_multiplies_a_dense_mask_into_its_input(family: str) -> None:
    """Dense-mask families (padding stays in place, the mask zeroes the conv input): the fused call
    multiplies the mask in, as the separate convs do, so padding never reaches a valid token through
    the conv window. Padding with values of 1e4 makes a mask left out show in every valid output
    (mutation survivor fused #4: the whole-layer properties only timed out on it while shrinking)."""
    from gdn_equiv.model.example import Example, build_layer
    from gdn_equiv.model.families import get_family
    from gdn_equiv.model.fused import fused_variant

    fam = get_family(family)
    layer = build_layer(
        Example(config=fam.config_cls(hidden_size=8, conv_size=3), family=family), fused_variant(fam.layer_cls)
    )
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    x = torch.where(mask.bool().unsqueeze(-1), x, torch.full_like(x, 1e4))
    with torch.no_grad():
        fused = layer(x, attention_mask=mask, prologue="fused")[0]
        separate = layer(x, attention_mask=mask, prologue="separate")[0]
    valid = mask.bool()
    assert torch.isfinite(separate[valid]).all()
    torch.testing.assert_close(fused[valid], separate[valid], rtol=0, atol=0)
