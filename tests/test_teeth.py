"""P9: the suite has teeth. Each property runs against a layer or backend with a planted defect
and must find, by itself, an example where it fails. Defects are injected the way a user would
plug in a broken implementation (a subclass, a registered backend), never by patching."""

from __future__ import annotations

import pytest
import torch
from hypothesis import find, settings

from gdn_equiv.harness import planted
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.planted import (
    AutoIgnoresDecision,
    FallbackForgetsConvCache,
    FusedDetachesConvWeights,
    FusedDropsVBias,
    GuardIgnoresVarlen,
    fused_biases,
    fused_conv,
    fused_weights,
)
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.model.backends import Backend, registered
from gdn_equiv.model.backends import torch_backend as tb
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import known_families
from gdn_equiv.model.guard import Condition, Decision, decide, decide_upstream
from gdn_equiv.strategies import examples
from gdn_equiv.targets import get_target

pytestmark = pytest.mark.teeth

# No shrink phase: a defect is caught by the first failing example (every assertion below holds for
# any failing one); `gdn-equiv check` shrinks what it reports, and CI time goes to more states.
SEARCH = first_hit()
FAMILIES = known_families()


def _fails(prop, defect=None):
    target = get_target("gdn_equiv", defect=defect) if defect is not None else None

    def predicate(example: Example) -> bool:
        try:
            prop(example, device="cpu", target=target)
        except P.NotApplicable:
            return False
        except Mismatch:
            return True
        return False

    return predicate


def _caught(prop, strategy, defect=None, *, search: settings = SEARCH) -> Example:
    example = find(strategy, _fails(prop, defect), settings=search)
    print(f"caught by {prop.__name__}: {example.short()}")
    return example


# --- planted defects in the guard (mixed in front of a family's fused layer) ---------------


class UpstreamGuard:
    """fla 0.6.0's rule (no G8/G9); the suite must find its gap by itself."""

    @staticmethod
    def guard(layer, call):
        return Decision(True) if decide_upstream(layer, call) else decide(layer, call)


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_property_catches_guard_ignoring_cu_seqlens(family):
    example = _caught(P.check_forward_exact, examples(fusable=False, reasons=["G4"], family=family), GuardIgnoresVarlen)
    assert example.varlen != "none"


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_property_catches_upstream_guard_bias_gap(family):
    example = _caught(P.check_forward_exact, examples(fusable=False, reasons=["G8"], family=family), UpstreamGuard)
    c = example.config
    assert any(
        (c.conv_spec(n).bias if c.conv_spec(n).bias is not None else c.conv_bias) != c.conv_bias for n in c.SLOTS
    ) or any(c.conv_spec(n).dtype for n in c.SLOTS)


# --- planted defects in the fused path ------------------------------------------------------


class FusedSplitsOffByOne:
    """k is read one channel too far right (its last channel is v's first)."""

    def _fused_prologue(self, proj, call):
        q, k, *rest = super()._fused_prologue(proj, call)
        qkv = torch.cat([q, k, *rest], dim=-1)
        Dq, Dk = q.shape[-1], k.shape[-1]
        return (q, qkv[..., Dq + 1 : Dq + Dk + 1].contiguous(), *rest)


class FusedSplitsAsIfUngrouped:
    """Splits the fused output as q | k | v with k as wide as q (right only without grouped k/v)."""

    def _fused_prologue(self, proj, call):
        Dq = self.convs()[0].channels
        total = sum(c.channels for c in self.convs())
        return fused_conv(self, proj, call, fused_weights(self), fused_biases(self), sizes=[Dq, Dq, total - 2 * Dq])


class FusedMasksAfterConv:
    """Multiplies a dense mask into the conv output instead of its input."""

    def _fused_prologue(self, proj, call):
        from gdn_equiv.model.backends import causal_conv1d
        from gdn_equiv.model.conv_ops import apply_conv_facts

        first = self.convs()[0]
        y, _ = causal_conv1d(
            proj.conv_in, fused_weights(self), fused_biases(self), first.activation, backend=first.backend
        )
        y = apply_conv_facts(y, first.extras())
        if call.conv_mask is not None:
            y = y * call.conv_mask.unsqueeze(-1)
        return tuple(t.contiguous() for t in torch.split(y, [c.channels for c in self.convs()], dim=-1))


class FusedAlwaysSilu:
    """Applies silu in the fused conv whatever the convs' activation (LightNet's convs have none)."""

    def _fused_prologue(self, proj, call):
        return fused_conv(self, proj, call, fused_weights(self), fused_biases(self), activation="silu")


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_property_catches_dropped_v_bias(family):
    _caught(P.check_forward_exact, examples(fusable=True, family=family), FusedDropsVBias)


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_property_catches_split_at_wrong_offset(family):
    _caught(P.check_forward_exact, examples(fusable=True, family=family), FusedSplitsOffByOne)


@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_property_catches_detached_conv_weights(family):
    _caught(P.check_gradients, examples(fusable=True, grad=True, family=family), FusedDetachesConvWeights)


@pytest.mark.parametrize("family", FAMILIES)
def test_path_property_catches_auto_ignoring_the_guard(family):
    _caught(P.check_path_taken, examples(fusable=True, family=family), AutoIgnoresDecision)


@pytest.mark.parametrize("family", FAMILIES)
def test_fallback_property_catches_lost_conv_cache(family):
    example = _caught(P.check_fallback_exact, examples(fusable=False, family=family), FallbackForgetsConvCache)
    assert example.use_cache


def test_forward_property_catches_gqa_split_at_the_wrong_size():
    example = _caught(P.check_forward_exact, examples(fusable=True, family="gla"), FusedSplitsAsIfUngrouped)
    assert example.config.groups > 1


def test_forward_property_catches_mask_applied_after_the_conv():
    example = _caught(P.check_forward_exact, examples(fusable=True, family="lightnet"), FusedMasksAfterConv)
    assert example.varlen == "mask"


def test_forward_property_catches_activation_on_a_conv_that_has_none():
    example = _caught(P.check_forward_exact, examples(fusable=True, family="lightnet"), FusedAlwaysSilu)
    assert example.config.conv_spec("q").activation is None


# --- planted defects in a backend -----------------------------------------------------------


def _update_without_bias(x, state, weight, bias, activation):
    return tb.update(x, state, weight, None, activation)


@pytest.fixture
def broken_backends():
    with registered(
        Backend("teeth_wide", forward=planted.BACKENDS["planted-wide-rounding"].forward, update=tb.update),
        Backend("teeth_update", forward=tb.forward, update=_update_without_bias),
    ):
        yield


def test_forward_property_catches_channel_count_dependent_backend(broken_backends):
    _caught(P.check_forward_exact, examples(backends=("teeth_wide",), fusable=True))


def test_forward_property_catches_update_kernel_that_drops_bias(broken_backends):
    example = _caught(P.check_forward_exact, examples(backends=("teeth_update",), fusable=True, grad=False))
    assert example.seq_len == 1 and not example.grad


class GuardNeverFuses:
    """Always falls back: P3/P4 would hold vacuously; the installed suite must still notice."""

    guard = staticmethod(lambda layer, call: Decision(False, (Condition.G1,)))


@pytest.mark.parametrize("family", FAMILIES)
def test_path_property_catches_a_guard_that_never_fuses(family):
    _caught(P.check_path_taken, examples(fusable=True, family=family), GuardNeverFuses)


class StepsUnderAutograd:
    """fla PR #977's one-token defect planted in ours: the separate path takes the step kernel whenever
    every sequence has one new token, autograd on or off (SPEC §2: only with autograd off). Our step
    kernel is differentiable, so outputs and gradients stay equal: only P2's step-kernel count sees it."""

    def _separate_prologue(self, proj, call, use_cache):
        cached = (None,) * len(proj.conv_inputs)
        if call.last_state is not None and call.last_state.get("conv_state") is not None:
            cached = tuple(call.last_state["conv_state"])
        step = call.one_token_per_sequence()
        outs, states = [], []
        for conv, x, state in zip(self.convs(), proj.conv_inputs, cached, strict=True):
            y, final = conv(
                x, mask=call.conv_mask, cache=state, output_final_state=use_cache, cu_seqlens=call.cu_seqlens, step=step
            )
            outs.append(y)
            states.append(final)
        return tuple(outs), tuple(states)


def test_path_property_catches_a_step_kernel_taken_under_autograd():
    example = _caught(P.check_path_taken, examples(grad=True, use_short_conv=True), StepsUnderAutograd)
    assert example.grad and (example.seq_len == 1 or all(n == 1 for n in example.seq_lens))


class FusedCastsParamsToInput:
    """Mixed precision lost in the fused path only: the concatenated conv weights and biases are cast to
    the activations' dtype (fp32 convs under bf16 activations get bf16 weights), the separate convs keep
    theirs. Invisible unless the convs' parameter dtype differs from the layer's (layer_configs draws that
    now and then: strategies/layers.py, _MIXED_PRECISION)."""

    def _fused_prologue(self, proj, call):
        bias = fused_biases(self)
        dtype = proj.conv_in.dtype
        return fused_conv(self, proj, call, fused_weights(self).to(dtype), None if bias is None else bias.to(dtype))


def test_forward_property_catches_a_fused_path_that_drops_mixed_precision():
    """Mixed-precision convs are one layer draw in seven; with fp32 conv parameters (the ordinary setup)
    under half-precision activations the cast shows. Drawn from the other half-precision dtype as well,
    400 draws missed it in 2 of 12 runs (a CI run among them); the search stops at the first catch."""
    example = _caught(
        P.check_forward_exact,
        examples(fusable=True, dtypes=("bfloat16", "float16"), conv_dtypes=("float32",)),
        FusedCastsParamsToInput,
    )
    spec = example.config.conv_spec(example.config.SLOTS[0])
    assert spec.dtype is not None and spec.dtype != example.dtype, example.short()
