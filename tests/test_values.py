"""Extreme values (issue #52) and lengths past the time tiles (issue #49): the gate's sweep properties red on
planted backends wrong only there, green on correct kernels, and the strategies reaching every region.

The planted backends (:mod:`gdn_equiv.harness.planted`, ``# values``) are right on randn-like values of
up to 64 tokens: fp16 outputs 1% off from token 64 on, taps summed in fp16, subnormals flushed to zero, a
copied ``-0.0`` stored as ``+0.0``. Each sweep property moves its drawn call to every extreme (or past
every tile) in every dtype, so it is red on its first example, not when a random draw happens to land
there. Pure torch: cheap on a CPU.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import conformance as C
from gdn_equiv.harness import ground_truth as G
from gdn_equiv.harness import planted
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.model.backends import Backend, get_backend, registered
from gdn_equiv.model.backends import torch_backend as tb
from gdn_equiv.strategies import ConvCall
from gdn_equiv.strategies.conformance import conformance_calls
from gdn_equiv.strategies.values import LONG_MAX_CHANNELS, VALUE_KINDS
from gdn_equiv.suite import test_conformance as conformance
from gdn_equiv.suite import test_ground_truth as ground_truth

VALUE_SWEEPS = {
    "conformance": conformance.test_backend_matches_torch_at_every_value_extreme_in_every_dtype,
    "ground-truth": ground_truth.test_backend_matches_fp64_ground_truth_at_every_value_extreme_in_every_dtype,
}
LENGTH_SWEEPS = {
    "conformance": conformance.test_backend_matches_torch_past_every_time_tile_in_every_dtype,
    "ground-truth": ground_truth.test_backend_matches_fp64_ground_truth_past_every_time_tile_in_every_dtype,
}
#: planted value defect -> the value kind that shows it (and fp16 only where the defect is fp16's)
VALUE_DEFECTS = {
    "planted-fp16-accumulate": ("huge", "float16"),
    "planted-flush-subnormals": ("subnormal", None),
    "planted-drops-negative-zero": ("negative-zero", None),
}


def _mismatches(exc: BaseException) -> list[BaseException]:
    """The failures a Hypothesis run raised: one, or a group of distinct ones."""
    group = getattr(exc, "exceptions", None)
    return list(group) if group is not None else [exc]


def few(prop, examples: int = 2):
    """The gate's property ``prop`` (its body and its strategy) for ``examples`` generated examples, no
    shrinking, no database, derandomized: whether a sweep is red on these examples is a fact of the code (a
    random CI run drew two base calls on which fp16 accumulation stayed in range, and the test missed)."""
    inner = prop.hypothesis.inner_test
    quick = settings(
        max_examples=examples,
        derandomize=True,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    run = quick(given(data=st.data())(inner))
    if "part" not in inspect.signature(inner).parameters:
        return run
    # a sweep in parts (on a GPU): every part, the whole sweep (as many as the test's own parametrization)
    parts = next(m.args[1] for m in getattr(prop, "pytestmark", []) if m.name == "parametrize" and m.args[0] == "part")
    return lambda **kwargs: [run(part=part, **kwargs) for part in parts]


def _red(prop, backend: Backend) -> list[BaseException]:
    with registered(backend), pytest.raises(Exception) as info:
        few(prop)(gdn_backend=backend.name, device="cpu")
    found = _mismatches(info.value)
    assert all(isinstance(e, Mismatch) for e in found), found
    return found


@pytest.mark.parametrize("sweep", sorted(VALUE_SWEEPS))
@pytest.mark.parametrize("defect", sorted(VALUE_DEFECTS))
def test_the_gates_value_sweep_is_red_on_each_planted_value_defect(sweep, defect) -> None:
    """The gate's value sweep (conformance against torch, and against the fp64 truth) on each planted value
    defect: red, with the defect's own value kind in the failing call."""
    kind, dtype = VALUE_DEFECTS[defect]
    found = _red(VALUE_SWEEPS[sweep], planted.BACKENDS[defect])
    assert any(f"values='{kind}'" in str(e) for e in found), [str(e)[:400] for e in found]
    if dtype is not None:
        assert any(f"dtype='{dtype}'" in str(e) for e in found), [str(e)[:400] for e in found]


@pytest.mark.parametrize("sweep", sorted(LENGTH_SWEEPS))
def test_the_gates_length_sweep_is_red_on_fp16_past_64_tokens(sweep) -> None:
    """Issue #49's escaped defect (fp16 outputs off from token 64 on): red on the length sweep's first example."""
    found = _red(LENGTH_SWEEPS[sweep], planted.FP16_PAST_64)
    assert any("dtype='float16'" in str(e) for e in found), [str(e)[:400] for e in found]


# ---- no false alarm: correct kernels at the same extremes ---------------------------------------------


def _conv1d_fp32(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    """A correct kernel that sums in another order than torch's backend: ``F.conv1d`` in fp32 per sequence
    (its own summation and weight-gradient reductions), the states as copies."""
    _, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    W = weight.shape[-1]
    w = weight.float().unsqueeze(1)  # once: each sequence's weight gradient summed in fp32, rounded once
    b = None if bias is None else bias.float()
    ys = []
    for xs, state in planted._sequences(x, initial_state, cu_seqlens):
        B, T, D = xs.shape
        if T == 0:  # an empty sequence (cu_seqlens+empty): no output rows
            ys.append(xs)
            continue
        history = xs.new_zeros(B, D, W - 1) if state is None else state[..., 1:].to(xs.dtype)
        seq = torch.cat([history, xs.transpose(1, 2)], dim=-1).float()  # [B, D, W-1+T]
        y = F.conv1d(seq, w, b, groups=D).transpose(1, 2)
        ys.append(tb._activate(y, activation).to(x.dtype))
    return torch.cat(ys, dim=1), final


CONV1D_FP32 = Backend("correct-conv1d-fp32", forward=_conv1d_fp32, update=tb.update)


@pytest.mark.parametrize("sweeps", [VALUE_SWEEPS, LENGTH_SWEEPS], ids=["values", "lengths"])
def test_the_sweeps_are_green_on_correct_kernels(sweeps) -> None:
    """A kernel that sums in its own order (F.conv1d in fp32) against torch and the fp64 truth: no false alarm
    at the extremes (an overflowing fp16 sum is the same infinity on every side; bf16/fp32 sums stay inside
    fp32's range in every order). torch against the truth is the gate's own test (test_ground_truth)."""
    with registered(CONV1D_FP32):
        for prop in sweeps.values():
            few(prop, 3)(gdn_backend=CONV1D_FP32.name, device="cpu")


# ---- which value catches which defect ----------------------------------------------------------------


def _caught(backend: str, call: ConvCall) -> bool:
    try:
        impl = get_backend(backend)
        G.check_forward(call, impl, "cpu")
        G.check_gradients(call, impl, "cpu")
        C.check_forward(call, impl, "cpu")
    except Mismatch:
        return True
    return False


@pytest.mark.parametrize("defect", sorted(VALUE_DEFECTS))
def test_each_value_defect_agrees_with_the_reference_on_randn_values(defect) -> None:
    """Why the value dimension is needed: on a randn call (40 tokens, in every dtype) each planted value defect
    agrees with torch and the fp64 truth, and on the same call at its own extreme it does not. (fp16
    accumulation can also show on randn values, where cancelling taps round past fp16's tolerance: the
    length sweeps' hundreds of tokens caught it in a dev run.)"""
    kind, dtype = VALUE_DEFECTS[defect]
    base = ConvCall(B=2, T=40, D=8, W=4, bias=True, initial_state=True, seed=11)
    with registered(planted.BACKENDS[defect]):
        for d in ("float32", "float16", "bfloat16"):
            assert not _caught(defect, dataclasses.replace(base, dtype=d)), (defect, d)
        assert _caught(defect, dataclasses.replace(base, dtype=dtype or "float32", values=kind))


# ---- reach of the strategies --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", VALUE_KINDS)
def test_the_conformance_calls_carry_every_value_kind(kind) -> None:
    find(conformance_calls("torch"), lambda c: c.values == kind, settings=first_hit())


@pytest.mark.parametrize("varlen", [False, True])
def test_the_conformance_calls_reach_past_the_tiles_at_small_shapes(varlen) -> None:
    """A drawn call past 128 tokens (dense, or one sequence of a packed call), on a CPU: one row, a few channels."""

    def long(c: ConvCall) -> bool:
        return max(c.seq_lens or (c.T,)) > 128

    call = find(conformance_calls("torch", varlen=varlen), long, settings=first_hit())
    assert call.B == 1 and call.D <= LONG_MAX_CHANNELS, call


def test_the_update_calls_stay_one_token_short() -> None:
    """A step property draws ``max_seq_len=1``: no long call there (its labels would claim a reach it never ran)."""
    strategy = conformance_calls("torch", varlen=False, initial_state=True, max_seq_len=1)
    with pytest.raises(NoSuchExample):
        find(strategy, lambda c: c.T > 65, settings=first_hit(200))


def test_the_layers_conv_call_carries_the_examples_drawn_values() -> None:
    """The layer property rows that check a layer's fused conv call alone (P7-conv-conformance and the fp64
    ground truth at the layer) draw its values too: ``Example.conv_values``, every kind reached."""
    from gdn_equiv.harness.conformance import conv_call_of
    from gdn_equiv.strategies import examples

    for kind in VALUE_KINDS:
        example = find(
            examples(fusable=True),
            lambda e, kind=kind: e.conv_values == kind and e.config.use_short_conv,
            settings=first_hit(),
        )
        assert conv_call_of(example)[0].values == kind


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_huge_sums_stay_where_a_squaring_activation_keeps_them_finite(dtype: str) -> None:
    """``huge`` aims the conv's sums at the dtype's limit; relu2 squares them. Without the activation's room
    (``activation_room``) a bf16 call's sums squared past fp32's range, torch's own gradient met inf * 0 and
    the README's first command failed torch against the fp64 truth (CI: ``ConvCall(B=1, T=2, D=6, W=2,
    bfloat16, relu2, seq_lens=(1, 1), seed=1, values='huge')``). Correct torch meets the truth on such calls."""
    from gdn_equiv.harness import ground_truth

    for seed in range(12):
        for T, lens in ((2, (1, 1)), (9, ()), (12, (5, 7))):
            call = ConvCall(
                B=1, T=T, D=6, W=2, dtype=dtype, bias=seed % 2 == 0, activation="relu2", initial_state=False,
                seq_lens=lens, seed=seed, layouts=(), param_dtype=None, values="huge",
            )  # fmt: skip
            ground_truth.check_forward(call, get_backend("torch"), "cpu")
            ground_truth.check_gradients(call, get_backend("torch"), "cpu")


def test_the_truth_takes_relus_registered_slope_at_zero() -> None:
    """Signed zeros make a relu call's pre-activations exactly zero, where relu's derivative is a convention:
    the registered definition (``where(y < 0, 0, y)``, slope 1 at +-0) is the contract every kernel meets. The
    truth took F.relu's (slope 0) and failed torch on every dx (CI: 6 of 6, 0.72 apart)."""
    from gdn_equiv.harness import ground_truth

    for seed in range(8):
        call = ConvCall(
            B=1, T=1 + seed % 3, D=6, W=2, dtype="float32", bias=False, activation="relu", initial_state=False,
            seq_lens=(), seed=seed, layouts=(), param_dtype=None, values="negative-zero",
        )  # fmt: skip
        ground_truth.check_gradients(call, get_backend("torch"), "cpu")


@pytest.mark.parametrize("kind", VALUE_KINDS)
def test_a_calls_tensors_all_sit_on_the_device_asked_whatever_their_values(kind: str) -> None:
    """Each value kind's tensors land on the device the test asked for (the meta device stands in for a GPU
    here): on an H100 the extreme values had stayed on the CPU beside a CUDA bias, and every such example
    failed the sanitized gate with "bias is on cuda:0 but x is on cpu"."""
    call = ConvCall(B=1, T=9, D=3, W=3, dtype="float32", bias=True, initial_state=True, values=kind)
    tensors = call.tensors("meta")
    placed = {name: str(t.device) for name, t in tensors.items() if t is not None and name != "cu_seqlens"}
    assert set(placed) == {"x", "weight", "bias", "initial_state"}
    assert set(placed.values()) == {"meta"}, placed


@pytest.mark.parametrize(
    ("parts", "gpu_parts", "share", "calls", "fewer"),
    [
        ("length_parts", C.GPU_LENGTH_PARTS, C.length_share, 12, 9),
        ("value_parts", C.GPU_VALUE_PARTS, C.value_share, 15, 10),
    ],
    ids=["lengths", "values"],
)
def test_the_sweeps_parts_cover_every_swept_call_once(
    monkeypatch: pytest.MonkeyPatch, parts, gpu_parts, share, calls, fewer
) -> None:
    """On a GPU the length and value sweeps run in parts (``length_share``, ``value_share``): every swept call in
    exactly one part, no part empty; with fewer calls than parts (a backend of fewer dtypes) a part repeats a call
    rather than run none."""
    monkeypatch.setattr(C, parts, lambda: gpu_parts)
    swept = list(range(calls))
    shares = [share(swept, part) for part in range(gpu_parts)]
    assert sorted(c for one in shares for c in one) == swept and all(shares)
    short = [share(swept[:fewer], part) for part in range(gpu_parts)]
    assert all(short) and {c for one in short for c in one} == set(range(fewer))


# ---- the combination grid's cells at the extremes (P7-combinations) ---------------------------------------


def _fp64_inside(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    """A correct kernel more accurate than torch's: the conv in fp64, each output rounded once."""

    def wide(t):
        return None if t is None else t.double()

    y, final = tb.forward(
        wide(x), wide(weight), wide(bias), activation, wide(initial_state), output_final_state, cu_seqlens
    )
    return y.to(x.dtype), None if final is None else final.to(x.dtype)


FP64_INSIDE = Backend("correct-fp64-inside", forward=_fp64_inside, update=tb.update)


def _grid_at(kind: str, dtype: str, seeds: range) -> list:
    """Every feasible cell of the combination grid (widths 1-4) at a call of ``kind``'s values: the H100 lane's
    failing call's shape (8 tokens, 24 channels, W=3, silu, no bias), each seed its own lengths and values."""
    import random

    from gdn_equiv.harness import cells as K

    grid = []
    for seed in seeds:
        base = ConvCall(B=1, T=8, D=24, W=3, dtype=dtype, bias=seed % 2 == 1, activation="silu", seed=seed, values=kind)
        rng = random.Random(seed)
        grid += [(c, K.cell_call(rng, base, c, (1, 4))) for c in K.all_cells() if K.feasible(c, widths=(1, 4)) is None]
    return grid


@pytest.mark.parametrize("kind", [k for k in VALUE_KINDS if k != "randn"])
def test_every_combination_cell_at_the_extremes_passes_correct_kernels(kind) -> None:
    """The every-cell check (P7-combinations' gate test moves each example's conv call, values and all, into
    every cell) on correct kernels, in the cells with gradients: torch itself (against the fp64 truth) and one
    summing in fp64 and rounding once (against torch). Red before the cell check read the call's values (H100 lane,
    2026-12-07: our Triton kernel failed a subnormal call's grad.x, 1 ulp of 1.6e36 apart from torch; on a CPU
    the fp64 kernel and torch itself failed 32 of 180 such cells; this test, subnormal and cancel)."""
    from gdn_equiv.harness import cells as K

    with registered(FP64_INSIDE):
        for cell, call in _grid_at(kind, "float32", range(1)):
            if cell.grad:  # the sums a kernel may order otherwise (the forward's taps agree to the bit here)
                for backend in (get_backend("torch"), FP64_INSIDE):
                    K.check_cell(call, cell, backend, "cpu")


@pytest.mark.parametrize("defect", sorted(VALUE_DEFECTS))
def test_every_combination_cell_at_the_extremes_catches_each_value_defect(defect) -> None:
    """The same cells on each planted value defect: red in some cell of its kind (a dropped ``-0.0`` sign in a
    final state's cells: the cell check compares zero signs as the conv checks do)."""
    from gdn_equiv.harness import cells as K

    kind, dtype = VALUE_DEFECTS[defect]
    caught = 0
    with registered(planted.BACKENDS[defect]):
        for cell, call in _grid_at(kind, dtype or "float32", range(2)):
            try:
                K.check_cell(call, cell, planted.BACKENDS[defect], "cpu")
            except Mismatch:
                caught += 1
    assert caught, f"{defect}: no cell of {kind} values caught it"


def _final_always(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    """Planted: a final state returned whether it was asked for or not."""
    return tb.forward(x, weight, bias, activation, initial_state, True, cu_seqlens)


def _final_one_percent_off(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    """Planted: y right, the final state 1% too large (its zeros, and their signs, kept)."""
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return y, None if final is None else final * 1.01


@pytest.mark.parametrize("forward", [_final_always, _final_one_percent_off], ids=["not-asked", "one-percent-off"])
def test_every_combination_cell_catches_a_wrong_final_state(forward) -> None:
    """The cell check's final-state comparisons have teeth: a kernel returning a final state nobody asked for, and
    one whose final state is 1% off (y right), each fail some cell of a randn call's grid (the first refused by
    the registry's dispatch before the cell check sees it)."""
    from gdn_equiv.harness import cells as K

    planted_backend = Backend(f"planted-{forward.__name__}", forward=forward, update=tb.update)
    caught = 0
    with registered(planted_backend):
        # cells without gradients: there only the final state's comparison can see it (under gradients a wrong final
        # state also shows in the gradients that flow back from it)
        for cell, call in _grid_at("randn", "float32", range(1)):
            if cell.grad:
                continue
            try:
                K.check_cell(call, cell, planted_backend, "cpu")
            except (AssertionError, InvalidArgument):  # the dispatch refuses a final state not asked for first
                caught += 1
    assert caught, f"{planted_backend.name}: no cell caught it"
