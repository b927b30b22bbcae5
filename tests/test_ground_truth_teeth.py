"""The ground truth inside the gate, and why it must be independent.

The checks of :mod:`gdn_equiv.harness.ground_truth` (the properties of ``gdn_equiv.suite.test_ground_truth``)
run here.
Below, a torch-backend-like kernel with a subtle defect is registered *as* ``torch``: the
torch-relative conformance suite then compares it with itself and passes, while the fp64
``F.conv1d`` ground truth finds, by itself, a call it gets wrong.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import find

from gdn_equiv.harness import ground_truth as G
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.model.backends import get_backend, registered
from gdn_equiv.model.backends import torch_backend as tb
from gdn_equiv.strategies import conv_calls
from gdn_equiv.suite import test_conformance as conformance

SEARCH = first_hit()


def _reversed_taps_forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    """Tap ``j`` multiplies the input ``j`` steps before the current one instead of ``W-1-j``."""
    return tb.forward(x, weight.flip(-1), bias, activation, initial_state, output_final_state, cu_seqlens)


def _reversed_taps_update(x, state, weight, bias, activation):
    return tb.update(x, state, weight.flip(-1), bias, activation)


def _shifted(state):
    """The state read one slot off: slot ``j`` is taken from slot ``j-1`` (zero for the first)."""
    return None if state is None else torch.nn.functional.pad(state[..., :-1], (1, 0))


def _state_off_by_one_forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    y, final = tb.forward(x, weight, bias, activation, _shifted(initial_state), output_final_state, cu_seqlens)
    return y, final


def _state_off_by_one_update(x, state, weight, bias, activation):
    return tb.update(x, _shifted(state), weight, bias, activation)


def _one_percent_off_forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    """Every output 1% too large: past every tolerance of the table, under an atol of 1 at randn's scale."""
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return y * 1.01, final


def _one_percent_off_update(x, state, weight, bias, activation):
    y, new_state = tb.update(x, state, weight, bias, activation)
    return y * 1.01, new_state


DEFECTS = {
    "reversed_taps": (_reversed_taps_forward, _reversed_taps_update),
    "state_off_by_one": (_state_off_by_one_forward, _state_off_by_one_update),
    "one_percent_off": (_one_percent_off_forward, _one_percent_off_update),
}


@pytest.fixture(params=sorted(DEFECTS))
def broken_torch(request):
    """The ``torch`` backend replaced by a defective copy for one test, then restored."""
    forward, update = DEFECTS[request.param]
    with registered(dataclasses.replace(get_backend("torch"), forward=forward, update=update)):
        yield request.param


def test_torch_relative_conformance_is_na_on_torch_never_a_pass_of_a_shared_defect(broken_torch):
    """The defective torch backend compared with itself compares nothing: every torch-relative conformance
    property passed it (a vacuous pass, its calls labelled reached). Now each is n/a on torch with the
    record's reason (the ledger's, as ``check`` says it), and the ground truth below is what catches it."""
    for prop in (
        conformance.test_backend_forward_matches_torch,
        conformance.test_backend_varlen_matches_torch,
        conformance.test_backend_gradients_match_torch,
        conformance.test_backend_final_state_continues_the_sequence,
        conformance.test_backend_decode_continues_the_prefill,
    ):
        with pytest.raises(pytest.skip.Exception, match="n/a: same backend"):
            prop(gdn_backend="torch", device="cpu")


@pytest.mark.parametrize(
    "check, options",
    [
        (G.check_forward, {"varlen": False}),
        (G.check_forward, {"varlen": True}),
        (G.check_gradients, {}),
        (G.check_update, {"varlen": False, "initial_state": True, "max_seq_len": 1}),
    ],
    ids=["forward", "varlen", "gradients", "update"],
)
def test_ground_truth_catches_a_shared_defect(broken_torch, check, options):
    """The fp64 ground truth finds, by itself, a call the defective torch backend gets wrong."""

    def wrong(call) -> bool:
        try:
            check(call, get_backend("torch"), "cpu")  # the defective copy registered in its place
        except Mismatch:
            return True
        return False

    call = find(conv_calls(widths=(1, 4), **options), wrong, settings=SEARCH)
    print(f"{broken_torch}: ground truth caught {call}")
    if broken_torch == "state_off_by_one":  # only a state can be read off by one slot: it shows in y
        # from W >= 2, and at W = 1 in the final state an empty sequence passes through (seen in CI)
        assert call.initial_state and (call.W >= 2 or 0 in call.seq_lens), call


@pytest.mark.parametrize("activation", ["relu", "relu2", "silu", None])
def test_ground_truth_computes_each_builtin_activation_on_its_own(activation):
    """The ground truth's activations are its own (``F.relu``, its square, ``F.silu``): they agree with
    the registry's maths that the torch backend applies, and relu is not silu (it once applied silu
    to every activation but ``None``)."""
    from gdn_equiv.harness.ground_truth import conv1d_truth

    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((2, 5, 6), (6, 3), (6,)))
    truth, _ = conv1d_truth(x, w, b, activation)
    ours, _ = tb.forward(x, w, b, activation, None, False, None)
    torch.testing.assert_close(truth, ours, rtol=1e-12, atol=1e-12)
    if activation in ("relu", "relu2"):
        silu, _ = conv1d_truth(x, w, b, "silu")
        assert not torch.allclose(truth, silu)
        assert (truth >= 0).all()


def test_the_combination_cells_judge_torch_by_the_fp64_truth(broken_torch):
    """P7-combinations on the torch backend compares each cell with the fp64 truth (torch against itself would
    compare nothing): a defective torch registered in its place fails some cell of a plain call's grid."""
    import random

    from gdn_equiv.harness import cells as K
    from gdn_equiv.strategies import ConvCall

    impl = get_backend("torch")  # the defective copy
    caught = 0
    for seed in range(2):
        base = ConvCall(B=1, T=8, D=4, W=3, dtype="float32", bias=True, activation="silu", seed=seed)
        rng = random.Random(seed)
        for cell in K.all_cells():
            if K.feasible(cell, widths=(1, 4)) is None:
                try:
                    K.check_cell(K.cell_call(rng, base, cell, (1, 4)), cell, impl, "cpu")
                except Mismatch:
                    caught += 1
    assert caught, f"{broken_torch}: no cell caught it"
