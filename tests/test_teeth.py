"""P9: the suite has teeth. Each property runs against a layer or backend with a planted defect
and must find, by itself, an example where it fails. Defects are injected the way a user would
plug in a broken implementation (a subclass, a registered backend), never by patching."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, find, settings

from gdn_equiv import properties as P
from gdn_equiv.backends import Backend, register_backend
from gdn_equiv.backends import torch_backend as tb
from gdn_equiv.compare import Mismatch
from gdn_equiv.example import Example
from gdn_equiv.families.gated_deltanet import FusedGatedDeltaNet
from gdn_equiv.guard import Decision, decide, decide_upstream
from gdn_equiv.strategies import examples

pytestmark = pytest.mark.teeth

SEARCH = settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _fails(prop, layer_cls=None):
    def predicate(example: Example) -> bool:
        try:
            prop(example, device="cpu", layer_cls=layer_cls)
        except P.NotApplicable:
            return False
        except Mismatch:
            return True
        return False

    return predicate


def _caught(prop, strategy, layer_cls=None) -> Example:
    example = find(strategy, _fails(prop, layer_cls), settings=SEARCH)
    print(f"caught by {prop.__name__}: {example.short()}")
    return example


# --- planted defects in the guard -----------------------------------------------------------


class GuardIgnoresVarlen(FusedGatedDeltaNet):
    guard = staticmethod(lambda layer, call: decide(layer, replace(call, varlen=False)))


class UpstreamGuard(FusedGatedDeltaNet):
    """fla 0.6.0's rule (no G8/G9); the suite must find its gap by itself."""

    @staticmethod
    def guard(layer, call):
        return Decision(True) if decide_upstream(layer, call) else decide(layer, call)


def test_forward_property_catches_guard_ignoring_cu_seqlens():
    example = _caught(P.check_forward_exact, examples(fusable=False, reasons=["G4"]), GuardIgnoresVarlen)
    assert example.varlen != "none"


def test_forward_property_catches_upstream_guard_bias_gap():
    example = _caught(P.check_forward_exact, examples(fusable=False, reasons=["G8"]), UpstreamGuard)
    c = example.config
    assert any(
        (c.conv_spec(n).bias if c.conv_spec(n).bias is not None else c.conv_bias) != c.conv_bias for n in "qkv"
    ) or any(c.conv_spec(n).dtype for n in "qkv")


# --- planted defects in the fused path ------------------------------------------------------


def _fused_conv(layer, proj, weight, bias):
    from gdn_equiv.backends import causal_conv1d

    qc = layer.q_conv1d
    y, _ = causal_conv1d(proj.qkv, weight, bias, qc.activation, backend=qc.backend)
    q, k, v = torch.split(y, [layer.key_dim, layer.key_dim, layer.value_dim], dim=-1)
    return q.contiguous(), k.contiguous(), v.contiguous()


def _weights(layer):
    return torch.cat([c.weight[:, 0] for c in layer.convs()], dim=0)


class FusedDropsVBias(FusedGatedDeltaNet):
    def _fused_prologue(self, proj):
        qc, kc, vc = self.convs()
        bias = torch.cat([qc.bias, kc.bias, torch.zeros_like(vc.bias)]) if self.conv_bias else None
        return _fused_conv(self, proj, _weights(self), bias)


class FusedSplitsOffByOne(FusedGatedDeltaNet):
    """k is read one channel too far right (its last channel is v's first)."""

    def _fused_prologue(self, proj):
        q, k, v = super()._fused_prologue(proj)
        qkv = torch.cat([q, k, v], dim=-1)
        Dk = self.key_dim
        return q, qkv[..., Dk + 1 : 2 * Dk + 1].contiguous(), v


class FusedDetachesConvWeights(FusedGatedDeltaNet):
    def _fused_prologue(self, proj):
        bias = torch.cat([c.bias for c in self.convs()]) if self.conv_bias else None
        return _fused_conv(self, proj, _weights(self).detach(), bias)


class AutoIgnoresDecision(FusedGatedDeltaNet):
    def _prologue(self, proj, call, use_cache, prologue="auto", **kwargs):
        return super()._prologue(proj, call, use_cache, "separate" if prologue == "auto" else prologue, **kwargs)


class FallbackForgetsConvCache(FusedGatedDeltaNet):
    def _separate_prologue(self, proj, call, use_cache):
        outs, _ = super()._separate_prologue(proj, call, use_cache)
        return outs, (None, None, None)


def test_forward_property_catches_dropped_v_bias():
    _caught(P.check_forward_exact, examples(fusable=True), FusedDropsVBias)


def test_forward_property_catches_split_at_wrong_offset():
    _caught(P.check_forward_exact, examples(fusable=True), FusedSplitsOffByOne)


def test_gradient_property_catches_detached_conv_weights():
    _caught(P.check_gradients, examples(fusable=True, grad=True), FusedDetachesConvWeights)


def test_path_property_catches_auto_ignoring_the_guard():
    _caught(P.check_path_taken, examples(fusable=True), AutoIgnoresDecision)


def test_fallback_property_catches_lost_conv_cache():
    example = _caught(P.check_fallback_exact, examples(fusable=False), FallbackForgetsConvCache)
    assert example.use_cache


# --- planted defects in a backend -----------------------------------------------------------


def _rounds_differently_when_wide(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    """Channel-count-dependent arithmetic: wide calls (the fused one) scale by 1 + 2^-20."""
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return (y * (1 + 2**-20) if x.shape[-1] > 16 else y), final


def _update_without_bias(x, state, weight, bias, activation):
    return tb.update(x, state, weight, None, activation)


@pytest.fixture
def broken_backends():
    register_backend(Backend("teeth_wide", forward=_rounds_differently_when_wide, update=tb.update), replace=True)
    register_backend(Backend("teeth_update", forward=tb.forward, update=_update_without_bias), replace=True)


def test_forward_property_catches_channel_count_dependent_backend(broken_backends):
    _caught(P.check_forward_exact, examples(backends=("teeth_wide",), fusable=True))


def test_forward_property_catches_update_kernel_that_drops_bias(broken_backends):
    example = _caught(P.check_forward_exact, examples(backends=("teeth_update",), fusable=True, grad=False))
    assert example.seq_len == 1 and not example.grad
