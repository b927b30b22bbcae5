"""Memory layouts as a strategy dimension: every tensor of a conv call (inputs and the cotangents ``dy``,
``d final_state``) is drawn contiguous, sliced, strided, transposed or expanded
(:func:`gdn_equiv.strategies.convs.apply_layout`), shrinking to contiguous, and the conformance
properties catch a kernel that reads storage with the wrong strides (planted below: forward and backward).
Pure torch: fast on a CPU."""

from __future__ import annotations

import pytest
import torch
from hypothesis import find, given
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from gdn_equiv.harness import conformance as C
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.model.backends import Backend, get_backend, registered
from gdn_equiv.model.backends import torch_backend as tb
from gdn_equiv.strategies import ConvCall, conv_calls
from gdn_equiv.strategies.conformance import conformance_calls
from gdn_equiv.strategies.convs import LAYOUT_TENSORS, LAYOUTS, apply_layout

# A reachability search stops at its first hit; the budget (MISS_BOUND) only bounds the tail. Measured
# over 30 seeds (initial_state expanded, p ~ 2/15 per draw): first hits after 4-167 draws, so 300 flaked
# once in CI.
SEARCH = first_hit()


# ---- the layouts themselves ------------------------------------------------------------------------


@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    layout=st.sampled_from(LAYOUTS),
)
def test_layout_is_a_view_with_its_promised_strides_and_gradient(shape, layout):
    """Each layout keeps the values (``expanded``: the first row broadcast), has the strides it promises,
    and passes the gradient back to the contiguous tensor it was made from."""
    leaf = torch.randn(*shape, dtype=torch.float64).requires_grad_()
    view = apply_layout(leaf, layout)
    expected = leaf.narrow(0, 0, 1).expand(leaf.shape) if layout == "expanded" else leaf
    torch.testing.assert_close(view, expected, rtol=0, atol=0)
    if layout == "sliced":
        buffer = [n + 1 for n in shape[:-1]] + [shape[-1] + 3]
        assert view.stride() == torch.empty(buffer).stride() and view.storage_offset() > 0
    elif layout == "strided":
        assert view.stride() == tuple(2 * s for s in torch.empty([2 * n for n in shape]).stride())
    elif layout == "transposed" and view.dim() >= 2 and min(view.shape[-2:]) > 1:
        assert view.stride(-2) == 1 and not view.is_contiguous()
    elif layout == "expanded" and view.shape[0] > 1:
        assert view.stride(0) == 0
    cot = torch.randn(*shape, dtype=torch.float64)
    (grad,) = torch.autograd.grad(view, [leaf], cot)
    (grad_ref,) = torch.autograd.grad(expected, [leaf], cot)
    torch.testing.assert_close(grad, grad_ref, rtol=0, atol=0)


def test_a_view_into_a_buffer_is_surrounded_by_nan():
    """Outside a sliced or strided view the buffer is NaN, so a read with the wrong strides shows."""
    t = torch.arange(6.0).reshape(2, 3)
    for layout in ("sliced", "strided"):
        view = apply_layout(t, layout)
        storage = torch.as_strided(view, (view.untyped_storage().nbytes() // view.element_size(),), (1,), 0)
        assert int(storage.isnan().sum()) == storage.numel() - t.numel(), layout


def test_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="unknown layout 'diagonal'"):
        apply_layout(torch.zeros(2, 2), "diagonal")
    with pytest.raises(InvalidArgument, match="unknown layouts"):
        find(conv_calls(layouts=("diagonal",)), lambda c: True)


def test_calls_shrink_to_contiguous_and_default_to_it():
    """Layouts shrink away; without asking for them a call is all contiguous (the strategy's old behaviour)."""
    assert find(conv_calls(layouts=LAYOUTS), lambda c: True).layouts == ()
    call = find(conv_calls(), lambda c: c.D > 3 and c.initial_state)
    assert call.layouts == () and all(call.layout(n) == "contiguous" for n in LAYOUT_TENSORS)


@pytest.mark.parametrize("name", LAYOUT_TENSORS)
@pytest.mark.parametrize("layout", [k for k in LAYOUTS if k != "contiguous"])
def test_every_tensor_reaches_every_layout(name, layout):
    call = find(conv_calls(layouts=LAYOUTS), lambda c: c.layout(name) == layout, settings=SEARCH)
    tensors = {**call.tensors(), **call.cotangents()}
    if tensors.get(name) is None:  # bias/initial_state absent: the layout is drawn, nothing carries it
        return
    assert tensors[name].shape == apply_layout(tensors[name].contiguous(), "contiguous").shape


def test_cuda_conformance_reaches_the_causal_conv1d_dfinal_states_input():
    """repro/causal_conv1d_dfinal_states.py: causal-conv1d 1.7.0 misreads a final-state gradient that is
    not channel-last, in channels 32 and up. The ``cuda`` backend's gradient property draws such a
    cotangent by itself (its strategy is the one the property uses), with at least 33 channels."""
    strategy = conformance_calls("cuda")
    call = find(
        strategy,
        lambda c: c.layout("dfinal") in ("sliced", "strided", "expanded") and c.D > 32 and c.W >= 2,
        settings=SEARCH,
    )
    dfinal = call.cotangents()["dfinal"]
    assert dfinal.stride(1) != 1  # not channel-last, as in the repro (there: stride(1) == 2)


# ---- planted: kernels that read storage with contiguous strides -------------------------------------


def _as_if_contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    """What a kernel that trusts ``.view``/contiguous strides reads: ``t``'s storage from its offset, with
    the strides a contiguous tensor of its shape would have."""
    if t is None:
        return None
    return torch.as_strided(t, t.shape, torch.empty(t.shape).stride(), t.storage_offset())


def _reads_x_as_contiguous(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    return tb.forward(_as_if_contiguous(x), weight, bias, activation, initial_state, output_final_state, cu_seqlens)


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward reads the incoming gradient as if it were contiguous."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        return _as_if_contiguous(grad).clone()


def _reads_dfinal_as_contiguous(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return y, (None if final is None else _ContiguousGrad.apply(final))


PLANTED = {
    "layout-x-contiguous": Backend("layout-x-contiguous", forward=_reads_x_as_contiguous),
    "layout-dfinal-contiguous": Backend("layout-dfinal-contiguous", forward=_reads_dfinal_as_contiguous),
}


@pytest.fixture(scope="module", autouse=True)
def planted_backends():
    with registered(*PLANTED.values()):
        yield


def _caught(check, backend: str, **options):
    def fails(call) -> bool:
        try:
            check(call, get_backend(backend), "cpu")
        except Mismatch:
            return True
        return False

    call = find(conformance_calls(backend, **options), fails, settings=SEARCH)
    print(f"{backend}: caught by {check.__name__}: {call}")
    return call


def test_forward_property_catches_a_kernel_reading_x_with_contiguous_strides():
    call = _caught(C.check_forward, "layout-x-contiguous", varlen=False)
    assert call.layout("x") in ("sliced", "strided", "transposed", "expanded")


def test_gradient_property_catches_a_backward_reading_dfinal_with_contiguous_strides():
    """The causal-conv1d defect's class (repro/causal_conv1d_dfinal_states.py), planted in a torch kernel."""
    call = _caught(C.check_gradients, "layout-dfinal-contiguous")
    assert call.layout("dfinal") != "contiguous"


def test_contiguous_calls_do_not_see_the_planted_defects():
    """Without layouts the planted kernels are correct: the layouts are what finds them."""
    for name in PLANTED:
        for seed in range(10):
            call = ConvCall(B=2, T=4, D=5, W=3, bias=True, activation="silu", initial_state=True, seed=seed)
            C.check_forward(call, get_backend(name), "cpu")
            C.check_gradients(call, get_backend(name), "cpu")
