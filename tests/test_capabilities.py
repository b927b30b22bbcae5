"""Backend capabilities (SPEC §3): declared as data, read by every strategy, and the refusal property's teeth.

The strict planted backend (causal-conv1d's limits, raising outside them) runs through the whole installed
gate in CI (``.ci/run``); here: the declaration's reading of real tensors, the strategies that must stay
inside, the registry's layout hand-over, and the refusal property against a backend that answers outside
its limits wrongly.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.conformance import AnsweredOutside, check_outside_capabilities
from gdn_equiv.harness.planted import LAX_CAUSAL_CONV1D, STRICT_CAUSAL_CONV1D, STRICT_LIMITS
from gdn_equiv.model.backends import (
    CAUSAL_CONV1D,
    Capabilities,
    as_backend,
    capabilities,
    causal_conv1d,
    get_backend,
    registered,
    supported_activations,
)
from gdn_equiv.model.backends import torch_backend as tb
from gdn_equiv.model.guard import Condition
from gdn_equiv.strategies import conv_calls, examples, outside_calls
from gdn_equiv.strategies.convs import LAYOUTS, OUTSIDE_LIMITS, OutsideCall, breakable_limits
from gdn_equiv.strategies.violations import violating

STRICT, LAX = STRICT_CAUSAL_CONV1D.name, LAX_CAUSAL_CONV1D.name


def _x(B: int = 1, T: int = 5, D: int = 16, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(B, T, D, dtype=dtype)


# ---- the declaration ---------------------------------------------------------------------------------


def test_undeclared_capabilities_claim_everything():
    caps = Capabilities()
    assert not caps.declared and caps.limits() == [] and breakable_limits(caps) == ()
    x = _x(D=3).double()
    assert caps.refusal(x, torch.randn(3, 7).double(), torch.randn(3).double(), "relu", None, None) is None


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (lambda a: {**a, "x": a["x"].double(), "weight": a["weight"].double()}, "x is float64"),
        (lambda a: {**a, "weight": torch.randn(16, 5)}, "kernel width W=5"),
        (lambda a: {**a, "activation": "relu"}, "activation 'relu'"),
        (lambda a: {**a, "x": _x(D=12), "weight": torch.randn(12, 4), "bias": None}, "D=12 channels"),
        (lambda a: {**a, "x": torch.randn(1, 5, 19)[..., :16]}, "strides (95, 19, 1)"),
        (lambda a: {**a, "bias": torch.randn(32)[::2]}, "bias has stride 2"),
        (lambda a: {**a, "bias": torch.randn(16, dtype=torch.float16)}, "bias is float16 but weight is float32"),
        (
            lambda a: {**a, "initial_state": torch.randn(1, 16, 4, dtype=torch.float16)},
            "state is float16 but x is float32",
        ),
        (
            lambda a: {**a, "initial_state": torch.randn(2, 16, 4), "cu_seqlens": torch.tensor([0, 2, 5])},
            "initial_state with cu_seqlens",
        ),
    ],
    ids=OUTSIDE_LIMITS,
)
def test_each_declared_limit_names_the_value_and_the_rule(change, rule):
    inside = {"x": _x(), "weight": torch.randn(16, 4), "bias": torch.randn(16), "activation": "silu"}
    assert CAUSAL_CONV1D.refusal(**inside) is None
    reason = CAUSAL_CONV1D.refusal(**change(inside))
    assert reason is not None and rule in reason, reason


def test_the_cuda_packages_limits_hold_on_its_device_only():
    assert "runs on cuda" in get_backend("fla-cuda").capabilities.refusal(_x(), torch.randn(16, 4))
    assert "runs on cuda" in get_backend("cuda").capabilities.refusal(_x(), torch.randn(16, 4))
    assert STRICT_LIMITS.refusal(_x(), torch.randn(16, 4)) is None  # the planted twin runs anywhere


def test_joint_capabilities_are_what_every_backend_runs():
    with registered(STRICT_CAUSAL_CONV1D):
        joint = capabilities(["torch", "triton", STRICT])
        assert joint == STRICT_LIMITS
        assert capabilities(["torch", "triton"]) == Capabilities()
        assert set(supported_activations([STRICT])) == {None, "silu", "swish"}
    a, b = Capabilities(widths=(2, 4), channel_multiple=4), Capabilities(widths=(3, 8), channel_multiple=6)
    assert a.intersect(b) == Capabilities(widths=(3, 4), channel_multiple=12)
    with pytest.raises(InvalidArgument, match="no kernel width is run by both"):
        Capabilities(widths=(2, 3)).intersect(Capabilities(widths=(5, 6)))
    with pytest.raises(InvalidArgument, match="non-empty subset"):
        Capabilities(dtypes=("float32",)).intersect(Capabilities(dtypes=("float16",)))


def test_a_plugin_declares_its_capabilities_as_an_attribute():
    class Kernel:
        forward = staticmethod(tb.forward)
        capabilities = Capabilities(widths=(2, 4))

    assert as_backend(Kernel(), "declared").capabilities.widths == (2, 4)
    with pytest.raises(InvalidArgument, match="capabilities must be"):
        as_backend(type("K", (), {"forward": staticmethod(tb.forward), "capabilities": {"widths": (2, 4)}})(), "bad")


# ---- the strategies stay inside ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(call=conv_calls(capabilities=STRICT_LIMITS, layouts=LAYOUTS, max_channels=40, wide_channels=300))
def test_conv_calls_stay_inside_the_capabilities(call):
    assert call.refusal(STRICT_LIMITS) is None, call


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_layer_examples_stay_inside_the_capabilities_of_their_backends(data):
    families = ("gated_deltanet", "kda", "gla", "lightnet", "simple_gla")
    with registered(STRICT_CAUSAL_CONV1D):
        example = data.draw(
            examples(backends=(STRICT,), family=families, fusable=data.draw(st.sampled_from([None, True, False])))
        )
    c = example.config
    assert example.dtype != "float64"
    if c.use_short_conv:
        for n in c.SLOTS:
            assert c.conv_channels(n) % 8 == 0, example.short()
            assert 2 <= c.slot_kernel_size(n) <= 4 and c.conv_spec(n).activation in (None, "silu", "swish")
            assert (c.conv_spec(n).dtype or example.dtype) != "float64"
    packs = example.varlen == "cu_seqlens" or (
        example.varlen == "mask" and example.family not in ("lightnet", "simple_gla")
    )
    assert not (example.cache == "populated" and packs), example.short()


def test_g5_states_are_drawn_inside_both_backends():
    with registered(STRICT_CAUSAL_CONV1D):
        state = find(
            violating(Condition.G5, backends=("triton", STRICT), family="gated_deltanet"),
            lambda e: any(e.config.slot_backend(n) == STRICT for n in e.config.SLOTS),
        )
    c = state.config
    assert all(c.conv_channels(n) % 8 == 0 and c.slot_kernel_size(n) <= 4 for n in c.SLOTS), state.short()


# ---- the registry hands a backend only the layouts it declares ------------------------------------


def test_the_registry_hands_a_strided_slice_over_as_a_copy_the_backend_takes():
    wide = torch.randn(1, 1, 41)
    x, w = wide[..., :16], torch.randn(16, 4)
    with registered(STRICT_CAUSAL_CONV1D):
        y, _ = causal_conv1d(x, w, None, "silu", backend=STRICT)  # strides (41, 41, 1): copied first
        with pytest.raises(RuntimeError, match="strides"):
            STRICT_CAUSAL_CONV1D.forward(x, w, None, "silu", None, False, None)
    assert torch.equal(y, tb.forward(x, w, None, "silu", None, False, None)[0])


# ---- the refusal property, and its teeth -------------------------------------------------------------


def _answered_wrongly(outside: OutsideCall, backend: str = LAX) -> bool:
    try:
        check_outside_capabilities(outside, get_backend(backend), "cpu")
    except AnsweredOutside:
        return True
    return False


#: the limits the lax backend answers wrongly outside of (it drops taps past width 4, the states of packed
#: sequences and an odd call's last channel); outside the others it answers right
LAX_WRONG = ("widths", "channel_multiple", "varlen_initial_state")


@pytest.mark.parametrize("limit", OUTSIDE_LIMITS)
def test_the_strict_backend_refuses_each_limit_and_the_lax_one_is_caught(limit):
    call = find(outside_calls(STRICT_LIMITS), lambda o: o.limit == limit)
    with registered(STRICT_CAUSAL_CONV1D, LAX_CAUSAL_CONV1D):
        refused = check_outside_capabilities(call, get_backend(STRICT), "cpu")
        assert refused.startswith("refused: RuntimeError: strict causal-conv1d")
        if limit in LAX_WRONG:
            wrong = find(outside_calls(STRICT_LIMITS), lambda o: o.limit == limit and _answered_wrongly(o))
            with pytest.raises(AnsweredOutside, match=f"outside its {limit} limit wrongly"):
                check_outside_capabilities(wrong, get_backend(LAX), "cpu")
        else:
            assert check_outside_capabilities(call, get_backend(LAX), "cpu") == "answered right"


def test_the_refusal_property_finds_the_lax_backend_by_itself():
    with registered(LAX_CAUSAL_CONV1D):
        found = find(outside_calls(STRICT_LIMITS), _answered_wrongly, settings=settings(max_examples=300))
    assert found.limit in LAX_WRONG


def test_a_backend_refusing_with_an_empty_message_is_caught():
    def mute(*args):
        raise RuntimeError()

    mute_backend = dataclasses.replace(STRICT_CAUSAL_CONV1D, name="planted-mute", forward=mute)
    call = find(outside_calls(STRICT_LIMITS), lambda o: o.limit == "dtypes")
    with registered(mute_backend), pytest.raises(AnsweredOutside, match="empty RuntimeError"):
        check_outside_capabilities(call, mute_backend, "cpu")
