"""P1's facts check (``properties._check_layer_facts``): the facts the guard and the spec decide from
must describe the layer as built. Each planted defect is a facts reader that lies about one thing the
guard reads; guard and spec then agree with each other (both read the lie), so only this check sees it."""

from __future__ import annotations

import dataclasses

import pytest

from gdn_equiv.harness import properties as P
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.model.config import LayerFacts
from gdn_equiv.model.example import Example
from gdn_equiv.model.families.gated_deltanet import GDNConfig
from gdn_equiv.model.reference import ShortConv

EXAMPLE = Example(config=GDNConfig(hidden_size=16, head_dim=8, num_heads=2, conv_bias=True), dtype="float32")


def _lying_conv_facts(**lie):
    real = ShortConv.facts

    def facts(self):
        return dataclasses.replace(real(self), **lie)

    return facts


@pytest.mark.teeth
@pytest.mark.parametrize(
    "lie",
    [{"has_bias": False}, {"kernel_size": 3}, {"activation": None}, {"weight_dtype": "bfloat16"}],
    ids=lambda lie: next(iter(lie)),
)
def test_a_conv_facts_reader_that_lies_is_caught(monkeypatch, lie) -> None:
    monkeypatch.setattr(ShortConv, "facts", _lying_conv_facts(**lie))
    with pytest.raises(Mismatch, match=f"P1 facts: .*q.{next(iter(lie))}: facts say"):
        P.check_path_taken(EXAMPLE)


@pytest.mark.teeth
def test_a_layer_facts_reader_that_forgets_the_bias_flag_is_caught(monkeypatch) -> None:
    layer_cls = type(P._setup(EXAMPLE, "cpu", None)[0].layer)
    real = layer_cls.layer_facts

    def forgets(self) -> LayerFacts:
        return dataclasses.replace(real(self), conv_bias=False)

    monkeypatch.setattr(layer_cls, "layer_facts", forgets)
    with pytest.raises(Mismatch, match=r"P1 facts: .*conv_bias: facts say False, the layer has True"):
        P.check_path_taken(EXAMPLE)


def test_the_true_facts_pass() -> None:
    assert P.check_path_taken(EXAMPLE) is not None
