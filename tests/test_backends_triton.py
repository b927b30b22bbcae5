"""The ``triton`` conv backend against the torch ground truth, and its bitwise promises (SPEC §3, P3/P4, P7).

On a machine without CUDA the kernels run in Triton's interpreter (``TRITON_INTERPRET=1`` is set here,
before anything compiles a kernel), so shapes stay tiny: D <= 24, T <= 12, W in 2..5. With a GPU the
same tests run the compiled kernels on it.

Cross-backend comparisons use the SPEC §6 table; the properties the fused prologue relies on are
bitwise: a channel's y and dx do not depend on which call it shared (fused q|k|v vs three slices),
the step kernel equals the sequence kernel at T = 1, and T steps equal one T-token call.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from unittest import mock

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import given, settings
from hypothesis import strategies as st

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.compare import Mismatch, assert_equivalent
from gdn_equiv.model.backends import get_backend

pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
]

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TORCH = get_backend("torch")
TRITON = get_backend("triton")
PATHS = ("triton", "torch")


@pytest.fixture(autouse=True, scope="module")
def _triton_runs_here() -> None:
    reason = TRITON.unavailable()
    if reason is not None:
        pytest.skip(f"triton backend unavailable: {reason}")


# ---- strategies ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One conv call: shapes, options and a seed for the tensors (built by :func:`tensors`)."""

    B: int
    T: int
    D: int
    W: int
    dtype: torch.dtype
    bias: bool
    activation: str | None
    state: bool
    final: bool
    lens: tuple[int, ...] | None  # varlen sequence lengths (B == 1, T == sum)
    pad: tuple[int, int]  # x is channels [pad0, pad0 + D) of a [B, T, pad0 + D + pad1] tensor
    seed: int

    @property
    def N(self) -> int:
        return self.B if self.lens is None else len(self.lens)


@st.composite
def cases(
    draw: st.DrawFn,
    *,
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16),
    min_d: int = 1,
    max_d: int = 24,
    max_t: int = 12,
    min_w: int = 2,
    max_w: int = 5,
    varlen: bool | None = False,
    state: bool | None = None,
) -> Case:
    """A conv call small enough for the interpreter; shrinks to B=1, T=1, D=1, W=2, fp32, no options."""
    W = draw(st.integers(min_w, max_w))
    D = draw(st.integers(min_d, max_d))
    is_varlen = draw(st.booleans()) if varlen is None else varlen
    if is_varlen:
        # empty and one-token sequences are the edge cases worth reaching often
        drawn = draw(st.lists(st.sampled_from([0, 1, 2, 3, W - 1, W, 5]), min_size=1, max_size=4))
        kept = [n for i, n in enumerate(drawn) if sum(drawn[: i + 1]) <= max_t] or [0]
        lens, B, T = tuple(kept), 1, sum(kept)
    else:
        lens = None
        B, T = draw(st.integers(1, 2)), draw(st.integers(1, max_t))
    return Case(
        B=B,
        T=T,
        D=D,
        W=W,
        dtype=draw(st.sampled_from(dtypes)),
        bias=draw(st.booleans()),
        activation=draw(st.sampled_from(["silu", None, "swish"])),
        state=draw(st.booleans()) if state is None else state,
        final=draw(st.booleans()),
        lens=lens,
        pad=(draw(st.integers(0, 3)), draw(st.integers(0, 3))),
        seed=draw(st.integers(0, 2**16)),
    )


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(device=DEVICE, dtype=dtype)


def tensors(case: Case, *, grad: bool = True) -> dict:
    """Inputs for ``case``; x is a strided channel slice (never contiguous when padded), leaves need grad."""
    gen = torch.Generator().manual_seed(case.seed)
    p0, p1 = case.pad
    wide = _randn(gen, case.B, case.T, p0 + case.D + p1, dtype=case.dtype).requires_grad_(grad)
    leaf = {
        "wide": wide,
        "weight": _randn(gen, case.D, case.W, dtype=case.dtype).requires_grad_(grad),
        "bias": _randn(gen, case.D, dtype=case.dtype).requires_grad_(grad) if case.bias else None,
        "initial_state": _randn(gen, case.N, case.D, case.W, dtype=case.dtype).requires_grad_(grad)
        if case.state
        else None,
        "dy": _randn(gen, case.B, case.T, case.D, dtype=case.dtype),
        "dfinal": _randn(gen, case.N, case.D, case.W, dtype=case.dtype),
    }
    leaf["x"] = wide[..., p0 : p0 + case.D]
    leaf["cu_seqlens"] = (
        None
        if case.lens is None
        else torch.tensor([0, *torch.tensor(case.lens).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    )
    return leaf


def run(backend, case: Case, t: dict) -> dict[str, torch.Tensor | None]:
    """Forward, then backward of ``<y, dy> + <final, dfinal>``: outputs and every input gradient."""
    y, final = backend.forward(
        t["x"], t["weight"], t["bias"], case.activation, t["initial_state"], case.final, t["cu_seqlens"]
    )
    out: dict[str, torch.Tensor | None] = {"y": y, "final_state": final}
    leaves = {k: t[k] for k in ("wide", "weight", "bias", "initial_state") if t[k] is not None}
    loss = (y.float() * t["dy"].float()).sum()
    if final is not None:
        loss = loss + (final.float() * t["dfinal"].float()).sum()
    grads = torch.autograd.grad(loss, list(leaves.values()))
    for name, g in zip(leaves, grads, strict=True):
        out["d" + name] = g
    return out


def assert_all_close(actual: dict, expected: dict, case: Case) -> None:
    assert actual.keys() == expected.keys()
    for name in actual:
        assert_equivalent(actual[name], expected[name], name=name, paths=PATHS, exact=False, context=case)


# ---- properties ----------------------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(case=cases())
def test_forward_and_gradients_match_torch(case: Case) -> None:
    """y, final_state, dx, dweight, dbias, d(initial_state) within the §6 table of the torch backend."""
    t = tensors(case)
    assert_all_close(run(TRITON, case, t), run(TORCH, case, t), case)


@settings(max_examples=10, deadline=None)
@given(case=cases(varlen=True, max_w=4))
def test_varlen_matches_torch(case: Case) -> None:
    """Packed sequences (empty and one-token ones included): no leakage, per-sequence states and gradients."""
    t = tensors(case)
    assert_all_close(run(TRITON, case, t), run(TORCH, case, t), case)


@pytest.mark.slow
@pytest.mark.parametrize("backward", ["two-pass", "serial"])
@settings(max_examples=6, deadline=None)
@given(case=cases(state=False, max_t=10, max_d=8, max_w=4), dk=st.integers(1, 8), dv=st.integers(1, 8))
def test_fused_channels_equal_split_bitwise(backward: str, case: Case, dk: int, dv: int) -> None:
    """One call over q|k|v gives each channel the bits of the three separate calls (y, dx; dweight too),
    with the default backward and with the serial one (whose dweight sums run in another order)."""
    with mock.patch.dict(os.environ, {"GDN_EQUIV_TRITON_BACKWARD": backward}):
        _fused_channels_equal_split_bitwise(case, dk, dv)


def _fused_channels_equal_split_bitwise(case: Case, dk: int, dv: int) -> None:
    dq = case.D
    fused_case = replace(case, D=dq + dk + dv, final=False)
    t = tensors(fused_case)
    fused = run(TRITON, fused_case, t)
    bounds = [0, dq, dq + dk, dq + dk + dv]
    for a, b in itertools.pairwise(bounds):
        part = replace(fused_case, D=b - a)
        p0 = fused_case.pad[0]
        sliced = {
            "wide": t["wide"],
            "x": t["wide"][..., p0 + a : p0 + b],
            "weight": t["weight"][a:b].detach().requires_grad_(),
            "bias": None if t["bias"] is None else t["bias"][a:b].detach().requires_grad_(),
            "initial_state": None,
            "dy": t["dy"][..., a:b],
            "dfinal": None,
            "cu_seqlens": None,
        }
        split = run(TRITON, part, sliced)
        ctx = (case, (a, b))
        paths = ("fused", "split")
        assert_equivalent(fused["y"][..., a:b], split["y"], name="y", paths=paths, context=ctx)
        dx = fused["dwide"][..., p0 + a : p0 + b]
        assert_equivalent(dx, split["dwide"][..., p0 + a : p0 + b], name="dx", paths=paths, context=ctx)
        # SPEC P4 allows the table here; this backend's reductions do not depend on D, so ask for bits
        assert_equivalent(fused["dweight"][a:b], split["dweight"], name="dweight", paths=paths, context=ctx)
        if t["bias"] is not None:
            assert_equivalent(fused["dbias"][a:b], split["dbias"], name="dbias", paths=paths, context=ctx)


@settings(max_examples=15, deadline=None)
@given(case=cases(state=True, max_w=8))
def test_update_equals_forward_at_one_token(case: Case) -> None:
    """The step kernel gives the sequence kernel's bits at T = 1, leaves its state alone, and matches torch."""
    step = replace(case, T=1)
    t = tensors(step, grad=False)
    x1, state = t["x"][:, 0], t["initial_state"]
    before = state.clone()
    y, new_state = TRITON.update(x1, state, t["weight"], t["bias"], case.activation)
    assert_equivalent(state, before, name="state (must be untouched)", paths=("after", "before"), context=case)
    y_seq, final = TRITON.forward(t["x"], t["weight"], t["bias"], case.activation, state, True, None)
    assert_equivalent(y, y_seq[:, 0], name="y", paths=("update", "forward"), context=case)
    assert_equivalent(new_state, final, name="new_state", paths=("update", "forward"), context=case)
    y_ref, state_ref = TORCH.update(x1, state, t["weight"], t["bias"], case.activation)
    assert_equivalent(y, y_ref, name="y", paths=PATHS, exact=False, context=case)
    assert_equivalent(new_state, state_ref, name="new_state", paths=PATHS, context=case)


@settings(max_examples=8, deadline=None)
@given(case=cases(state=True, max_t=6, max_d=12))
def test_update_chain_equals_forward(case: Case) -> None:
    """T single-token steps give one T-token call's bits, outputs and final state."""
    t = tensors(case, grad=False)
    y_seq, final = TRITON.forward(t["x"], t["weight"], t["bias"], case.activation, t["initial_state"], True, None)
    state, ys = t["initial_state"], []
    for i in range(case.T):
        y_i, state = TRITON.update(t["x"][:, i], state, t["weight"], t["bias"], case.activation)
        ys.append(y_i)
    assert_equivalent(torch.stack(ys, 1), y_seq, name="y", paths=("update chain", "forward"), context=case)
    assert_equivalent(state, final, name="final_state", paths=("update chain", "forward"), context=case)


# ---- teeth: planted defects must be caught ---------------------------------------------------


def _history_off_by_one(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    """The triton forward reading its history one column too early (a classic halo bug)."""
    shifted = torch.roll(initial_state, shifts=1, dims=-1)
    return TRITON.forward(x, weight, bias, activation, shifted, output_final_state, cu_seqlens)


@pytest.mark.teeth
@settings(max_examples=3, deadline=None)
@given(case=cases(state=True, max_t=3, max_d=6, dtypes=(torch.float32,)))
def test_history_off_by_one_is_caught(case: Case) -> None:
    t = tensors(case, grad=False)
    args = (t["x"], t["weight"], t["bias"], case.activation, t["initial_state"], False, t["cu_seqlens"])
    with pytest.raises(Mismatch, match="Mismatched elements"):
        assert_equivalent(_history_off_by_one(*args)[0], TORCH.forward(*args)[0], name="y", exact=False)


@pytest.mark.teeth
def test_dropped_final_state_gradient_is_caught() -> None:
    """A backward that ignores d(final_state) (fla #1140's neighbourhood: T < W-1) must fail the comparison."""
    case = Case(1, 2, 3, 4, torch.float32, False, "silu", True, True, None, (0, 0), 7)
    t = tensors(case)
    expected = run(TORCH, case, t)
    y, final = TRITON.forward(t["x"], t["weight"], None, "silu", t["initial_state"], True, None)
    dx_broken = torch.autograd.grad((y * t["dy"]).sum() + (final * t["dfinal"]).detach().sum(), [t["wide"]])[0]
    with pytest.raises(Mismatch):
        assert_equivalent(dx_broken, expected["dwide"], name="dx", paths=("broken", "torch"), exact=False)


# ---- the one-pass backward -----------------------------------------------------------------


@contextlib.contextmanager
def _backward(mode: str, tile: tuple[int, int, int] | None = None) -> Iterator[None]:
    """The triton backend's backward chosen as a user does (``GDN_EQUIV_TRITON_BACKWARD``); ``tile`` sets
    the one-pass tile (on a GPU, the two-pass tile makes the dweight/dbias sums comparable bit for bit)."""
    from gdn_equiv.model.backends import triton_backend as tb

    with mock.patch.dict(os.environ, {"GDN_EQUIV_TRITON_BACKWARD": mode}):
        if tile is None:
            yield
        else:
            with mock.patch.object(tb, "_GPU_ONEPASS", tile):
                yield


# the one-pass backward is opt-in (GDN_EQUIV_TRITON_BACKWARD=one-pass) and its H200 runs check it at
# length; on the interpreter a few examples keep its index arithmetic honest (CI time, issue #17)
@settings(max_examples=8, deadline=None)
@given(case=cases(varlen=None, max_w=5, dtypes=(torch.float32, torch.float16, torch.bfloat16)))
def test_one_pass_backward_is_bitwise_the_two_pass(case: Case) -> None:
    """dx, dweight, dbias and d(initial_state) of the one-pass backward (g recomputed in registers,
    shifted with tl.gather) are the two passes' bits, over every option: activations, bias, state,
    final-state gradient, packed sequences (empty and one-token ones), strided x, tile edges."""
    from gdn_equiv.model.backends import triton_backend as tb

    t = tensors(case)
    with _backward("two-pass"):
        two = run(TRITON, case, t)
    with _backward("one-pass", tb._GPU_BWD):
        one = run(TRITON, case, t)
    assert one.keys() == two.keys()
    for name in one:
        assert_equivalent(one[name], two[name], name=name, paths=("one-pass", "two-pass"), exact=True, context=case)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(
    case=cases(varlen=None, max_w=4, dtypes=(torch.float32, torch.float16, torch.bfloat16)),
    rows=st.sampled_from((1, 2, 4, 8)),
    chunk=st.sampled_from((2, 4, 8)),
)
def test_serial_backward_dx_is_bitwise_the_two_pass_and_its_sums_agree(case: Case, rows: int, chunk: int) -> None:
    """The serial backward (one row at a time, later rows' g carried in registers, its loads grouped
    ``rows`` at a time) gives the two passes' dx and d(initial_state) bit for bit over every option
    (packed sequences, states, final-state gradient, activations, strided x, chunk edges, halos
    rounded up to whole groups), and dweight/dbias, summed in another order, within the §6 table."""
    from gdn_equiv.model.backends import triton_backend as tb

    t = tensors(case)
    with _backward("two-pass"):
        two = run(TRITON, case, t)
    with _backward("serial"), mock.patch.object(tb, "_INTERP_SERIAL", (chunk, 32, 1, 1, rows)):
        serial = run(TRITON, case, t)
    assert serial.keys() == two.keys()
    paths = ("serial", "two-pass")
    for name in serial:
        exact = name not in ("dweight", "dbias")
        assert_equivalent(serial[name], two[name], name=name, paths=paths, exact=exact, context=case)


def test_the_serial_backward_sums_a_gpu_chunk_of_rows_as_accurately_as_torch() -> None:
    """The H100 lane's one failure on this backend: the serial backward's GPU tile sums dweight over chunks
    of 128 rows, and summed plainly one row at a time its error against the fp64 truth on this packed call
    (5 + 257 tokens) was 1.29e-05 where the gate allows 6.75e-06 (twice torch's, plus one ulp of the largest
    value). The interpreter with the GPU's chunk gives those same bits; the sums are compensated now and the
    gate's own gradient check passes (a 16-channel block: the channels do not change a channel's sums)."""
    from gdn_equiv.harness.conformance import check_gradients
    from gdn_equiv.model.backends import triton_backend as tb
    from gdn_equiv.strategies import ConvCall

    chunk = tb._GPU_SERIAL[0]
    call = ConvCall(B=1, T=262, D=16, W=4, dtype="float32", bias=False, activation=None, initial_state=True,
                    seq_lens=(5, 257), seed=36150)  # fmt: skip
    with _backward("serial"), mock.patch.object(tb, "_INTERP_SERIAL", (chunk, 16, 1, 1, 4)):
        check_gradients(call, get_backend("triton"), "cpu")


@pytest.mark.teeth
def test_serial_backward_that_forgets_the_sequence_end_is_caught() -> None:
    """Planted defect the bitwise property must catch: a serial walk whose carried g ignores where the
    sequence ends (packed sequences: the next sequence's first rows leak into this one's last dx)."""
    from gdn_equiv.model.backends import triton_backend as tb

    case = Case(1, 7, 3, 3, torch.float32, True, "silu", False, False, (4, 3), (0, 0), 11)
    t = tensors(case)
    with _backward("two-pass"):
        two = run(TRITON, case, t)
    # cu_seqlens that the serial kernel reads as one sequence: what ignoring the boundary computes
    with _backward("serial"), mock.patch.object(tb, "token_sequence_ids", lambda cu, T, dev: torch.zeros(
            T, dtype=torch.int32, device=dev)):  # fmt: skip
        leaky = run(TRITON, case, t)
    with pytest.raises(Mismatch, match="dwide"):
        assert_equivalent(leaky["dwide"], two["dwide"], name="dwide", paths=("leaky", "two-pass"), exact=True)


@pytest.mark.teeth
def test_one_pass_with_a_short_halo_is_caught() -> None:
    """Planted defect: a halo of two rows where the taps need W-1 = 3 (the one-pass kernel reads rows past
    its tile from the halo): dx at each tile's last row goes wrong, and the bitwise property sees it."""
    from gdn_equiv.model.backends import triton_backend as tb

    tile = tb._blocks(tb._GPU_BWD)[0]
    case = Case(1, tile + 3, 3, 4, torch.float32, True, "silu", False, False, None, (0, 0), 5)
    t = tensors(case)
    with _backward("two-pass"):
        two = run(TRITON, case, t)
    with _backward("one-pass", tb._GPU_BWD), mock.patch.object(tb, "_halo", lambda W: 2):
        one = run(TRITON, case, t)
    with pytest.raises(Mismatch, match="dwide"):
        assert_equivalent(one["dwide"], two["dwide"], name="dwide", paths=("one-pass", "two-pass"), exact=True)


# ---- the rows forward ----------------------------------------------------------------------


@contextlib.contextmanager
def _forward(mode: str, tile: tuple[int, int, int, int] | None = None) -> Iterator[None]:
    """The triton backend's forward chosen as a user does (``GDN_EQUIV_TRITON_FORWARD``); ``tile`` sets
    the rows forward's (chunk, channels, warps, rows) under the interpreter."""
    from gdn_equiv.model.backends import triton_backend as tb

    rows_tile = tile or tb._INTERP_FWD_ROWS
    with (
        mock.patch.dict(os.environ, {"GDN_EQUIV_TRITON_FORWARD": mode}),
        mock.patch.object(tb, "_INTERP_FWD_ROWS", rows_tile),
    ):
        yield


def _forward_only(case: Case, t: dict) -> dict[str, torch.Tensor | None]:
    y, final = TRITON.forward(
        t["x"], t["weight"], t["bias"], case.activation, t["initial_state"], case.final, t["cu_seqlens"]
    )
    return {"y": y, "final_state": final}


# one test per width: each carries a different number of taps (a carry bug at W=4 hides from a
# handful of examples drawn over all four widths)
@pytest.mark.parametrize("W", [1, 2, 3, 4])
@settings(max_examples=6, deadline=None)
@given(data=st.data(), rows=st.sampled_from((1, 2, 4, 8)), groups=st.integers(1, 2))
def test_rows_forward_is_bitwise_the_tiles_forward(W: int, data: st.DataObject, rows: int, groups: int) -> None:
    """The rows forward (each input row read once, the last W-1 carried in registers, rows read in
    groups) gives the tiles forward's y and final state bit for bit over every option: widths 1-4,
    activations, bias, history, packed sequences (empty and one-token ones), strided x, chunk edges
    that fall inside a sequence or on its start, channel blocks past D."""
    dtypes = (torch.float32, torch.float16, torch.bfloat16)
    case = data.draw(cases(varlen=None, min_w=W, max_w=W, dtypes=dtypes, max_d=40), label="case")
    t = tensors(case, grad=False)
    with _forward("tiles"):
        tiles = _forward_only(case, t)
    with _forward("rows", (rows * groups, 32, 1, rows)):
        by_rows = _forward_only(case, t)
    for name in tiles:
        assert_equivalent(by_rows[name], tiles[name], name=name, paths=("rows", "tiles"), exact=True, context=case)


@pytest.mark.teeth
def test_rows_forward_that_carries_across_a_sequence_start_is_caught() -> None:
    """Planted defect the bitwise property must catch: a rows walk that carries the previous rows'
    inputs into the next packed sequence (its first W-1 outputs see the last sequence's tokens
    instead of its history)."""
    from gdn_equiv.model.backends import triton_backend as tb

    case = Case(1, 9, 5, 3, torch.float32, True, "silu", True, False, (4, 5), (0, 0), 3)
    t = tensors(case, grad=False)
    with _forward("tiles"):
        tiles = _forward_only(case, t)
    with _forward("rows", (8, 32, 1, 4)), mock.patch.object(tb, "token_sequence_ids", lambda cu, T, dev: torch.zeros(
            T, dtype=torch.int32, device=dev)):  # fmt: skip
        leaky = _forward_only(case, t)
    with pytest.raises(Mismatch, match="y"):
        assert_equivalent(leaky["y"], tiles["y"], name="y", paths=("leaky", "tiles"), exact=True)


def test_an_unknown_forward_is_refused_with_the_rule() -> None:
    case = Case(1, 3, 2, 2, torch.float32, False, None, False, False, None, (0, 0), 1)
    with _forward("columns"), pytest.raises(InvalidArgument, match=r"'columns'.*tiles, rows"):
        _forward_only(case, tensors(case, grad=False))


@pytest.mark.parametrize("P", [1, 2, 4, 5, 6, 7, 8, 9])
def test_weight_sums_add_the_partials_in_row_order(P: int) -> None:
    """The weight-gradient reduction reads its rows four at a time but adds them one by one in row
    order: bitwise the sequential sum, for every remainder of P - 1 rows by four."""
    from gdn_equiv.model.backends import triton_backend as tb

    W, D = 3, 40
    part = torch.randn(P, W + 1, D, generator=torch.Generator().manual_seed(P)).to(DEVICE)
    out = torch.zeros(W + 1, D, device=DEVICE)
    tb._kernels()._reduce_kernel[(2, W + 1)](part, out, P, D, W=W, BD=32, num_warps=1)
    expected = part[0].clone()
    for i in range(1, P):
        expected = expected + part[i]
    assert torch.equal(out, expected)


@pytest.mark.parametrize("backward", ["serial", "two-pass"])
@pytest.mark.parametrize(
    ("weight_dtype", "bias_dtype"), [(torch.float32, torch.float16), (torch.bfloat16, torch.float32)]
)
def test_a_bias_in_another_dtype_than_the_weight_gets_its_own_gradient(
    backward: str, weight_dtype: torch.dtype, bias_dtype: torch.dtype
) -> None:
    """dweight in the weight's dtype and dbias in the bias's, each the torch backend's sum: the
    weight sums are cast once for both only where the two dtypes agree (the conformance strategies
    hold weight and bias in one dtype, so only this test reaches the other branch)."""
    case = Case(2, 7, 6, 3, weight_dtype, True, "silu", False, False, None, (0, 0), 5)
    t = tensors(case)
    t["bias"] = t["bias"].detach().to(bias_dtype).requires_grad_()
    with _backward(backward):
        got = run(TRITON, case, t)
    expected = run(TORCH, case, t)
    assert (got["dweight"].dtype, got["dbias"].dtype) == (weight_dtype, bias_dtype)
    assert_all_close(got, expected, case)


@pytest.mark.parametrize(("interpreting", "expected"), [(False, "rows"), (True, "tiles")])
def test_the_forward_left_unset_is_rows_on_a_gpu_and_tiles_in_the_interpreter(
    interpreting: bool, expected: str
) -> None:
    """Unset, the GPU runs the rows forward (faster there) and the interpreter the tiles one (3.3x
    faster there); a user's choice wins either way."""
    from gdn_equiv.model.backends import triton_backend as tb

    with mock.patch.object(tb, "_interpreting", lambda: interpreting):
        with mock.patch.dict(os.environ, {"GDN_EQUIV_TRITON_FORWARD": ""}):
            assert tb.forward_mode() == expected
        for mode in tb.FORWARDS:
            with mock.patch.dict(os.environ, {"GDN_EQUIV_TRITON_FORWARD": mode}):
                assert tb.forward_mode() == mode


def test_an_unknown_backward_is_refused_with_the_rule() -> None:
    case = Case(1, 3, 2, 2, torch.float32, False, None, False, False, None, (0, 0), 1)
    with _backward("three-pass"), pytest.raises(InvalidArgument, match=r"'three-pass'.*two-pass, one-pass, serial"):
        run(TRITON, case, tensors(case))


def test_a_row_group_the_kernels_cannot_unroll_is_refused() -> None:
    """The row kernels unroll groups of 1, 2, 4 or 8 rows; a tile constant of 3 would skip or repeat
    rows (the loop steps by 3, the body reads 4), so it is refused before any launch."""
    from gdn_equiv.model.backends import triton_backend as tb

    for rows in (1, 2, 4, 8):
        tb._check_group(rows)
    for rows in (0, 3, 5, 16):
        with pytest.raises(ValueError, match=f"a row group of {rows} rows"):
            tb._check_group(rows)
