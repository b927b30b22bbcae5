"""The engines' whole argument surface (SPEC §11, issue #50): the declared surfaces as data, the strategy that
draws every read/write pair apart, S0-surface and S0-outside on the reference, the reference by hand, and the
serving counterpart of issue #49's meta-test. The teeth (one planted engine per class of what valid, aliased,
narrow calls never show) are ``tests/test_serving.py``'s, through ``PLANTED``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st

from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.serving import properties as S
from gdn_equiv.serving import surface as su
from gdn_equiv.serving.adapters import ReferenceAdapter
from gdn_equiv.serving.engines import EngineOps, release_dirs
from gdn_equiv.strategies.pools import surface_calls, surface_cases


def _fails(prop: Any, adapter: Any) -> Any:
    def predicate(case: Any) -> bool:
        try:
            prop(adapter, case)
        except S.NotExercised:
            return False
        except Mismatch:
            return True
        return False

    return predicate


@pytest.mark.parametrize("outside", [False, True])
def test_the_reference_passes_its_own_surface_and_refuses_outside_it(outside: bool) -> None:
    prop = S.check_s0_outside if outside else S.check_s0_surface
    with pytest.raises(Exception) as caught:
        find(surface_calls(su.REFERENCE_SURFACES, outside=outside), _fails(prop, ReferenceAdapter()),
             settings=first_hit(25))  # fmt: skip
    assert type(caught.value).__name__ == "NoSuchExample"


@pytest.mark.parametrize(
    ("what", "holds"),
    [
        (
            "a draft window row apart from its state row",
            lambda c: any(r.window is not None and r.window != r.read for r in c.rows),
        ),
        (
            "a draft window row equal to its state row",
            lambda c: any(r.window is not None and r.window == r.read for r in c.rows),
        ),
        (
            "a prefix-cache read block apart from the write block",
            lambda c: any(r.blocks is not None and r.read is not None and r.read != r.write for r in c.rows),
        ),
        (
            "a prefix-cache read block equal to the write block",
            lambda c: any(r.blocks is not None and r.read is not None and r.read == r.write for r in c.rows),
        ),
        (
            "boundary blocks between first and last",
            lambda c: any(r.blocks is not None and r.blocks[2] > r.blocks[1] for r in c.rows),
        ),
        (
            "a pad between two rows",
            lambda c: any(
                c.rows[i].read is None and c.rows[i - 1].read is not None and c.rows[i + 1].read is not None
                for i in range(1, len(c.rows) - 1)
            ),
        ),
        ("a state wider than W-1", lambda c: c.extra > 0),
        ("a circular state", lambda c: c.circular and any(r.seqlen for r in c.rows)),
        ("channels past a 256 block", lambda c: c.dim > 256),
        ("a width past 4", lambda c: c.width > 4),
        ("an accepted count past 1", lambda c: c.spec and any(r.accepted > 1 for r in c.rows)),
    ],
)
def test_the_surface_strategy_draws_every_location_apart_and_together(what: str, holds: Any) -> None:
    """Equal read/write locations are one case among others: each kind of each is reachable."""
    find(surface_calls(su.REFERENCE_SURFACES), holds, settings=first_hit(2000))


def test_the_reference_by_hand_windows_apart_from_state_rows() -> None:
    """W=2, one channel, weight [1, 10]: a verify step of two tokens 5, 6 on state row 1 ([3]) writes draft
    windows at row 0 ([5], then [6]); the state row takes the last input; row 0 of the pool is untouched."""
    case = su.SurfaceCase("update", su.WINDOWS, 1, 2, (su.Row(2, 1, 1, True, window=0),), 2, k=2, num_windows=1)
    t = {"x": torch.tensor([[5.0], [6.0]]), "pool": torch.tensor([[[7.0]], [[3.0]]]),
         "windows": torch.zeros(1, 2, 1, 1), "weight": torch.tensor([[1.0, 10.0]]), "bias": None,
         "activation": None}  # fmt: skip
    out = su.expected(case, t, reserved=0)
    assert out["y"][:, 0].tolist() == [3 + 50, 5 + 60]
    assert out["pool"].flatten().tolist() == [7.0, 6.0]
    assert out["windows"].flatten().tolist() == [5.0, 6.0]


def test_the_reference_by_hand_prefix_cache_blocks() -> None:
    """W=2, block size 2, 1 token computed: 3 new tokens 1, 2, 3 cross one boundary (after token 1: 2 computed),
    whose state goes to the table's first block (table[0] = block 1); the final state to its last (table[1] =
    block 0); the initial state read from table[2] = block 2 ([7]); block 3 untouched."""
    row = su.Row(3, 2, 0, True, blocks=(2, 0, 1), table=(1, 0, 2), computed=1)
    case = su.SurfaceCase("prefill", su.BLOCK_TABLE, 1, 2, (row,), 4, block_size=2)
    t = {
        "x": torch.tensor([[1.0], [2.0], [3.0]]),
        "pool": torch.tensor([[[9.0]], [[8.0]], [[7.0]], [[6.0]]]),
        "windows": torch.zeros(0, 1, 1, 1),
        "weight": torch.tensor([[1.0, 1.0]]),
        "bias": None,
        "activation": None,
    }
    out = su.expected(case, t, reserved=0)
    assert out["y"][:, 0].tolist() == [8.0, 3.0, 5.0]
    assert out["pool"].flatten().tolist() == [3.0, 1.0, 7.0, 6.0]


@st.composite
def _declarations(draw: st.DrawFn) -> su.OpSurface:
    """Legal surface declarations (issue #49 for serving): an op, some of its addressings, a width range, a
    channel block, a state margin, counts, circular states and pads as an engine could declare them."""
    op = draw(st.sampled_from(("prefill", "update")))
    kinds = (su.SLOTS, su.POSITIONAL, su.BLOCK_TABLE) + ((su.WINDOWS,) if op == "update" else ())
    addressing = tuple(draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=3, unique=True)))
    lo = draw(st.integers(2, 4))
    return su.OpSurface(
        "declared", "0", "cpu-torch", op, "-", "-", (), addressing, (lo, draw(st.integers(lo, 6))),
        block_n=draw(st.sampled_from((None, 4, 256))), max_extra=draw(st.integers(0, 2)),
        accepted=op == "update" and draw(st.booleans()), circular=op == "update" and draw(st.booleans()),
        pad_id=draw(st.sampled_from((None, -1))), block_sizes=(draw(st.sampled_from((2, 3))),),
    )  # fmt: skip


class _Restricted(ReferenceAdapter):
    def __init__(self, surface: su.OpSurface, op: type[su.SurfaceOp]) -> None:
        self.surface, self.op = surface, op

    def surface_ops(self) -> dict[str, su.SurfaceOp]:
        return {f"{self.surface.op}/{a}": self.op(self.surface) for a in self.surface.addressing}


class _ZerosOp(su.SurfaceOp):
    def call(self, case: su.SurfaceCase, t: dict[str, Any]) -> torch.Tensor:
        return torch.zeros_like(t["x"])


@settings(max_examples=10, deadline=None)
@given(decl=_declarations(), data=st.data())
def test_a_correct_engine_restricted_to_a_drawn_surface_passes_and_a_wrong_one_fails(
    decl: su.OpSurface, data: st.DataObject
) -> None:
    case = data.draw(surface_cases(decl, max_rows=2, max_tokens=3, max_k=2))
    S.check_s0_surface(_Restricted(decl, su.SurfaceOp), case)  # the reference op on exactly that surface
    if any(r.read is not None and r.tokens for r in case.rows):
        with pytest.raises(Mismatch):
            S.check_s0_surface(_Restricted(decl, _ZerosOp), case)


def test_each_declared_surface_names_every_argument_its_function_takes() -> None:
    """Data against source: every extracted release's op function takes exactly the arguments its surface lists
    (runs where ``.engines`` holds releases, ``gdn-equiv engines fetch``)."""
    checked = 0
    for engine in ("vllm", "sglang"):
        for release in release_dirs(engine):
            for path in ("cpu-torch", "gpu"):
                ops = su.surface_ops(EngineOps(engine, path, release=release))
                for op in ops.values():
                    try:
                        args = su.signature_args(op)
                    except (ImportError, FileNotFoundError, AttributeError):
                        continue
                    assert set(args) == set(op.surface.args), (op.surface.key, args)
                    checked += 1
    if not checked:
        pytest.skip("no engine release extracted here (gdn-equiv engines fetch)")


@pytest.mark.parametrize(("engine", "version"), [("vllm", "0.30.0"), ("vllm", "0.34.0"), ("sglang", "0.5.23")])
def test_the_gpu_drivers_pass_each_op_only_arguments_its_version_declares(
    engine: str, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Triton ops run only on a device; here a stand-in op (zeros of x's shape) checks what the drivers hand
    it on every drawn call: keyword arguments its surface declares, and outputs shaped as the rows' tokens."""
    monkeypatch.setattr(su, "_DEVICE", "cpu")
    for s in su.surfaces()[(engine, version)]:
        if s.path == "gpu":
            _drive_with_a_stand_in(s)


def _drive_with_a_stand_in(s: su.OpSurface) -> None:
    passed: set[str] = set()

    def stand_in(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        passed.update(kwargs)
        return torch.zeros_like(x)

    op = su.EngineSurfaceOp(s, lambda: stand_in)

    @settings(max_examples=15, deadline=None, database=None)
    @given(surface_calls([s]))
    def drive(case: su.SurfaceCase) -> None:
        t = su.tensors(case, s.reserved)
        t["activation"] = case.activation
        assert op.call(case, t).shape == t["x"].shape, case.short()

    drive()
    assert passed and passed <= set(s.args), (s.key, passed - set(s.args))
