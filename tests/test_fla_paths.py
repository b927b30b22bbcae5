"""The fla target reports "fused" only when it saw the fused conv run (SPEC §9: the path is read from
behaviour). A planted layer stands in for fla's: its fused branch is taken when the adapter pins the
decision (0.6.0's way, ``pinned``), and it calls the conv by the module-global name ``causal_conv1d``
that the version row says the fused branch calls (``fused_conv="layer"``: the layer's own module, here
this one). Three plants, each a way a forced ``"fused"`` can miss the fused conv; the adapter used to
call every run without conv-module calls fused.

CPU only: the layer's convs are torch modules and the conv a torch stand-in (the adapter wraps the name,
whatever it is bound to); fla must be installed for the adapter's version table.
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from torch import nn

from gdn_equiv.model.example import Example, Inputs
from gdn_equiv.model.families import fla_only
from gdn_equiv.model.families.fla_only import FlaOnlyFamily, _gdn2_kwargs, _kkv
from gdn_equiv.model.families.gated_deltanet import GDNConfig
from gdn_equiv.model.fla_versions import GDN_METHOD, version_row
from gdn_equiv.targets import get_target
from gdn_equiv.targets.fla_target import FlaHandle

_REASON = get_target("fla").unavailable()
pytestmark = [pytest.mark.fla, pytest.mark.skipif(_REASON is not None, reason=f"fla target unavailable: {_REASON}")]
HIDDEN, CHANNELS = 8, {"q": 4, "k": 4, "v": 8}


def causal_conv1d(x, weight, bias=None, activation=None, backend=None, **_):
    """Stands in for fla's conv where the planted layer calls it (the output's values do not matter)."""
    return torch.zeros(*x.shape[:-1], weight.shape[0]), None


class PlantedLayer(nn.Module):
    """fla's layer shape (``use_short_conv``, ``{q,k,v}_conv1d``, ``forward -> (o, None, cache)``) with
    its fused branch (``pinned``) doing what ``plant`` says; unpinned, it calls the three conv modules."""

    plant = "fused"
    pinned: bool | None = None

    def __init__(self) -> None:
        super().__init__()
        self.use_short_conv, self.conv_bias = True, False
        for name, ch in CHANNELS.items():
            setattr(self, f"{name}_conv1d", nn.Conv1d(ch, ch, 2, groups=ch, bias=False))

    def forward(self, x, past_key_values=None, attention_mask=None, use_cache=False, **_):
        convs = [self.q_conv1d, self.k_conv1d, self.v_conv1d]
        if not self.pinned:
            for conv in convs:
                conv(x[..., : conv.weight.shape[0]].transpose(1, 2))
        elif self.plant == "fused":  # one conv over the three convs' weights
            causal_conv1d(x=x, weight=torch.cat([c.weight.squeeze(1) for c in convs]))
        elif self.plant == "fall-through":  # the fused branch runs each conv on its own, not the modules
            for conv in convs:
                causal_conv1d(x=x, weight=conv.weight.squeeze(1))
        # plant "no-conv": the fused branch calls no conv at all
        return x, None, past_key_values


@pytest.fixture
def handle(monkeypatch: pytest.MonkeyPatch):
    """A handle on the planted layer, under a 0.6.0-style row (decision pinned on the layer, fused conv
    called through the layer's module) whose decider the planted family names, so it fuses there)."""
    family = FlaOnlyFamily(
        "planted_paths",
        f"{__name__}.PlantedLayer",
        "gated_deltanet",
        _gdn2_kwargs,
        _kkv,
        "plant",
        fuses_from=(GDN_METHOD,),
    )
    monkeypatch.setitem(fla_only.FAMILIES, family.name, family)
    row = dataclasses.replace(version_row(), decider=GDN_METHOD, fused_conv="layer")
    example = Example(config=GDNConfig(hidden_size=HIDDEN, head_dim=4, num_heads=1), family=family.name, seq_len=3)
    layer = PlantedLayer()
    reference = types.SimpleNamespace(slots=tuple(CHANNELS))
    return FlaHandle(example, layer, reference, "cpu", "fla", row)  # type: ignore[arg-type]


def _inputs() -> Inputs:
    return Inputs(x=torch.randn(1, 3, HIDDEN), attention_mask=None, cu_seqlens=None, cache=None, use_cache=False)


def test_the_fused_conv_seen_is_fused_and_the_modules_seen_are_separate(handle) -> None:
    handle.run(_inputs(), "fused")
    assert (handle.path_taken(), handle.launches()) == ("fused", 1)
    handle.run(_inputs(), "separate")
    assert (handle.path_taken(), handle.launches()) == ("separate", 3)


def test_a_forced_fused_path_that_falls_through_to_the_separate_convs_is_separate(handle) -> None:
    """No conv module called, but three convs of one conv's width each: the separate computation."""
    handle.layer.plant = "fall-through"
    handle.run(_inputs(), "fused")
    assert (handle.path_taken(), handle.launches()) == ("separate", 3)


def test_a_forced_fused_path_that_calls_no_conv_is_not_fused(handle) -> None:
    handle.layer.plant = "no-conv"
    handle.run(_inputs(), "fused")
    assert handle.path_taken() == "unobserved (0 conv-module calls, fused-conv calls of widths [], convs [4, 4, 8])"
    assert handle.launches() == 0


def test_a_run_that_raises_leaves_no_path(handle) -> None:
    """The path of a run that raised is unknown, not the previous run's."""
    handle.run(_inputs(), "fused")
    handle.layer.forward = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("planted"))
    with pytest.raises(RuntimeError, match="planted"):
        handle.run(_inputs(), "fused")
    assert handle.path_taken() is None
