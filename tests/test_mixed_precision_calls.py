"""Parameter dtypes independent of the input dtype, for single conv calls (issue #18's reach): a conv
call may hold its weight and bias in another dtype than ``x`` (fp32 convs under bf16 activations, the
ordinary mixed-precision setup; ``ConvCall.param_dtype``), shrinking to one dtype, and the conformance
properties catch a kernel that computes in the parameters' dtype. Pure torch: fast on a CPU."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample

from gdn_equiv.harness import conformance as C
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.testing import MISS_BOUND
from gdn_equiv.model.backends import Backend, get_backend, registered
from gdn_equiv.model.backends import torch_backend as tb
from gdn_equiv.strategies import ConvCall, conv_calls
from gdn_equiv.strategies.conformance import conformance_calls

SEARCH = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
)


def test_a_mixed_call_holds_weight_and_bias_in_their_dtype_and_x_and_state_in_xs() -> None:
    t = ConvCall(B=1, T=3, D=4, W=2, dtype="bfloat16", param_dtype="float32", bias=True, initial_state=True).tensors()
    assert (t["x"].dtype, t["initial_state"].dtype) == (torch.bfloat16, torch.bfloat16)
    assert (t["weight"].dtype, t["bias"].dtype) == (torch.float32, torch.float32)
    same = ConvCall(B=1, T=3, D=4, W=2, dtype="bfloat16", bias=True, initial_state=True).tensors()
    # the parameters are the one-dtype call's values, held in fp32 (bf16 values are exact in fp32)
    assert torch.equal(t["weight"], same["weight"].float()) and torch.equal(t["x"], same["x"])


def test_mixed_calls_are_drawn_in_every_pair_and_shrink_to_one_dtype() -> None:
    """Each (x, parameters) pair is about 1 draw in 40 (one call in four is mixed, then the dtypes):
    the search gets 3,000 draws (generation only, cheap), so a miss is not luck but a narrowed strategy."""
    dtypes = ("float32", "float16", "bfloat16")
    wide = settings(SEARCH, max_examples=3000)
    for x in dtypes:
        for p in dtypes:
            if x != p:
                find(conv_calls(), lambda c, x=x, p=p: c.dtype == x and c.param_dtype == p, settings=wide)
    assert find(conv_calls(), lambda c: c.D > 2, settings=SEARCH).param_dtype is None
    try:
        find(conv_calls(mixed_precision=False), lambda c: c.param_dtype is not None, settings=SEARCH)
    except NoSuchExample:
        pass
    else:
        raise AssertionError("mixed_precision=False drew a mixed call")


def _computes_in_param_dtype(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    """A kernel that rounds x (and the state) to the parameters' dtype before computing."""
    state = None if initial_state is None else initial_state.to(weight.dtype)
    y, final = tb.forward(x.to(weight.dtype), weight, bias, activation, state, output_final_state, cu_seqlens)
    return y.to(x.dtype), None if final is None else final.to(x.dtype)


def test_conformance_catches_a_kernel_that_computes_in_the_parameters_dtype() -> None:
    """Caught, and only through a mixed call: with one dtype per call the defect is the identity."""
    planted = Backend("computes-in-param-dtype", forward=_computes_in_param_dtype)

    def fails(call: ConvCall) -> bool:
        try:
            C.check_forward(call, get_backend(planted.name), "cpu")
        except Mismatch:
            return True
        return False

    with registered(planted):
        hit = settings(SEARCH, max_examples=MISS_BOUND)  # stops at the first catch, then shrinks it
        call = find(conformance_calls(planted.name), fails, settings=hit)
        assert call.param_dtype is not None and call.param_dtype != call.dtype, call
        try:
            find(conformance_calls(planted.name, mixed_precision=False), fails, settings=SEARCH)
        except NoSuchExample:
            pass
        else:
            raise AssertionError("caught without a mixed call")
