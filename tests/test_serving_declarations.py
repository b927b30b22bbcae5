"""The serving gate judged by its own method (issue #49, "the same for serving engines' declared surfaces"): any
legal :class:`~gdn_equiv.serving.surface.OpSurface` declaration is drawn, and the installed gate's own test
(``gdn_equiv.suite.test_serving.test_serving_property``, what ``pytest --pyargs gdn_equiv.suite.test_serving
--gdn-serving-engine <plug-in>`` runs) judges an engine restricted to it through the plug-in door:

- the reference restricted to the declaration, refusing (with a message) what it declares outside: S0-surface
  passes; S0-outside passes, or is n/a with its reason where nothing declared outside can be drawn;
- wrong inside (zeros, and one added to every state): S0-surface fails;
- silently wrong outside (one answer to every call outside, no word, every state changed): S0-outside fails, or
  is n/a with its reason where nothing declared outside can be drawn; never a pass.

Both wrong engines are wrong on every call they make (the pool always changes), so a verdict does not depend on
which case a run draws. The backends' version is ``tests/test_declarations.py``.
"""

from __future__ import annotations

import itertools
import sys
from types import SimpleNamespace
from typing import Any

import torch
from _gen import gate_verdict
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness import registry
from gdn_equiv.serving import surface as su
from gdn_equiv.serving.adapters import ReferenceAdapter
from gdn_equiv.strategies.pools import outside_draws
from gdn_equiv.suite import test_serving as gate_suite  # a module: pytest collects none of its tests here

#: the drawn engines, each under a name of its own (the plug-in door caches an engine's draws by its name)
ENGINES = SimpleNamespace()
_NAMES = itertools.count()


@st.composite
def declarations(draw: st.DrawFn) -> su.OpSurface:
    """Any legal declaration of one op: its addressings, widths, channel block, state margin, counts, circular
    states, pads, block sizes and what it declares outside (any subset of the kinds that apply to its op, none
    included). Shrinks to a prefill by slots, widths 2-2, nothing outside."""
    op = draw(st.sampled_from(("prefill", "update")))
    kinds = (su.SLOTS, su.POSITIONAL, su.BLOCK_TABLE) + ((su.WINDOWS,) if op == "update" else ())
    addressing = tuple(draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=3, unique=True)))
    lo = draw(st.integers(2, 4))
    accepted = op == "update" and draw(st.booleans())
    circular = op == "update" and draw(st.booleans())
    outside = ["width", "narrow-state", "index"]
    outside += (["count-0", "count-k+1"] if accepted else []) + (
        ["circular"] if op == "update" and not circular else []
    )
    return su.OpSurface(
        "declared", "0", "cpu-torch", op, "-", "-", (), addressing, (lo, draw(st.integers(lo, 6))),
        block_n=draw(st.sampled_from((None, 4, 256))), max_extra=draw(st.integers(0, 2)), accepted=accepted,
        circular=circular, pad_id=draw(st.sampled_from((None, -1))), block_sizes=(draw(st.sampled_from((2, 3))),),
        outside=tuple(draw(st.lists(st.sampled_from(outside), max_size=3, unique=True))),
    )  # fmt: skip


class _Refusing(su.SurfaceOp):
    """Right inside; outside, a message (or the right answer where the reference defines one)."""

    def call(self, case: su.SurfaceCase, t: dict[str, Any]) -> torch.Tensor:
        if case.outside is not None and case.outside not in su.ANSWERABLE:
            raise ValueError(f"{case.outside}: outside the declared surface")
        return super().call(case, t)


class _WrongInside(su.SurfaceOp):
    def call(self, case: su.SurfaceCase, t: dict[str, Any]) -> torch.Tensor:
        t["pool"].add_(1)
        return torch.zeros_like(t["x"])


class _SilentOutside(_Refusing):
    def call(self, case: su.SurfaceCase, t: dict[str, Any]) -> torch.Tensor:
        if case.outside is None:
            return super().call(case, t)
        t["pool"].add_(1)
        return torch.zeros_like(t["x"])


class Declared(ReferenceAdapter):
    """The reference adapter whose only ops are ``surface``'s, each ``op``."""

    def __init__(self, surface: su.OpSurface, op: type[su.SurfaceOp]) -> None:
        self.surface, self.op = surface, op
        self.name = f"declared-{op.__name__}"

    def surface_ops(self) -> dict[str, su.SurfaceOp]:
        return {f"{self.surface.op}/{a}": self.op(self.surface) for a in self.surface.addressing}


def plug_in(surface: su.OpSurface, op: type[su.SurfaceOp]) -> str:
    """``module:attr`` naming a fresh engine restricted to ``surface`` (what ``--gdn-serving-engine`` takes)."""
    name = f"e{next(_NAMES)}"
    setattr(ENGINES, name, Declared(surface, op))
    return f"{__name__}:ENGINES.{name}"


def gate(record_name: str, engine: str, data: st.DataObject) -> str:
    """One example of the gate's serving test for ``record_name`` on ``engine``: ``pass``, ``n/a: <reason>`` (its
    skip, or nothing compared) or ``FAIL: <message>``."""
    record = registry.get_record(record_name)
    inner = gate_suite.test_serving_property.hypothesis.inner_test
    return gate_verdict(lambda: inner(data=data, record=record, gdn_serving_engine=engine), limit=300)


def _drawable_outside(decl: su.OpSurface) -> bool:
    return bool(outside_draws([decl]))


@settings(max_examples=12, deadline=None, database=None)
@given(decl=declarations(), data=st.data())
def test_a_correct_engine_passes_the_gate_whatever_it_declares(decl: su.OpSurface, data: st.DataObject) -> None:
    note(repr(decl))
    engine = plug_in(decl, _Refusing)
    assert gate("S0-surface", engine, data) == "pass"
    verdict = gate("S0-outside", engine, data)
    if _drawable_outside(decl):
        assert verdict == "pass", verdict
    else:  # nothing to draw outside: n/a with the record's reason, never a failure of a right engine
        assert verdict.startswith("n/a: ") and "outside" in verdict, verdict


@settings(max_examples=12, deadline=None, database=None)
@given(decl=declarations(), data=st.data())
def test_an_engine_wrong_inside_its_declaration_fails_s0_surface(decl: su.OpSurface, data: st.DataObject) -> None:
    note(repr(decl))
    verdict = gate("S0-surface", plug_in(decl, _WrongInside), data)
    assert verdict.startswith("FAIL: "), verdict


@settings(max_examples=12, deadline=None, database=None)
@given(decl=declarations(), data=st.data())
def test_an_engine_silently_wrong_outside_its_declaration_fails_s0_outside(
    decl: su.OpSurface, data: st.DataObject
) -> None:
    note(repr(decl))
    engine = plug_in(decl, _SilentOutside)
    assert gate("S0-surface", engine, data) == "pass"  # right inside
    verdict = gate("S0-outside", engine, data)
    if _drawable_outside(decl):
        assert verdict.startswith("FAIL: "), verdict
    else:
        assert verdict.startswith("n/a: ") and "outside" in verdict, verdict


def test_declarations_reach_both_n_a_and_drawable_outsides() -> None:
    """The drawn declarations hold both kinds the tests above branch on (so neither branch is dead)."""
    from hypothesis import find

    find(declarations(), lambda d: not d.outside)
    find(declarations(), lambda d: bool(d.outside) and not _drawable_outside(d))
    find(declarations(), _drawable_outside)


assert __name__ in sys.modules  # the plug-in door imports this module by name
