"""P1 in the installed gate (issue #53): its decision-table verdict catches every planted guard, in both
directions, and reads an upstream target's known gaps strictly; its drawn-states check tells unsafe from missed.

The gate's own tests are :mod:`gdn_equiv.suite.test_guard` (tables) and ``test_guard_matches_spec_on_drawn_states``
(generated in ``gdn_equiv.suite.test_properties``); here their pieces (:mod:`gdn_equiv.harness.guard_tables`) are
checked against planted guards (:mod:`gdn_equiv.harness.planted_guards`) and stand-in probes, without a pytest run
inside a test.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gdn_equiv.harness import guard_oracle
from gdn_equiv.harness import guard_tables as tables
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.ledger import Outcome, exit_status
from gdn_equiv.harness.planted_guards import GUARD_DEFECTS
from gdn_equiv.model.config import ConvSpec
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import get_family
from gdn_equiv.targets import get_target

LAX = sorted(n for n in GUARD_DEFECTS if n.startswith("guard-ignores-"))
STRICT = sorted(n for n in GUARD_DEFECTS if not n.startswith("guard-ignores-"))


#: the table where each condition's planted guards show (the gate walks all four; here one keeps CI fast)
TABLE_OF = {
    **dict.fromkeys(("G1", "G2", "G3", "G4", "G6", "G8", "cu-seqlens", "fuses"), "bias x activation"),
    **dict.fromkeys(("G5", "G7", "G9"), "kernel x backend x dtype"),
    "G10": "conv norm x relu activations",
}


def _tables(defect: str) -> tuple[str, ...]:
    return (TABLE_OF[defect.rsplit("-", 1)[-1]],)


def _probe(defect: str | None = None):
    target = get_target("gdn_equiv") if defect is None else get_target("gdn_equiv", defect=GUARD_DEFECTS[defect])
    return target.guard_probe("gated_deltanet")


def test_the_in_house_guard_passes_the_tables() -> None:
    probe = _probe()
    differences, counts = tables.walk(probe)
    assert differences == [] and tables.verdict(probe, differences, allow_missed=False) == (Outcome.PASSED, "")
    assert counts == {name: (guard_oracle.table_size(t), 0) for name, t in guard_oracle.TABLES.items()}


@pytest.mark.teeth
@pytest.mark.parametrize("defect", LAX)
def test_a_guard_that_drops_a_condition_is_an_unsafe_fusion(defect: str) -> None:
    probe = _probe(defect)
    differences, _ = tables.walk(probe, _tables(defect))
    outcome, text = tables.verdict(probe, differences, allow_missed=True)  # allowing missed fusions changes nothing
    cid = defect.removeprefix("guard-ignores-")
    assert outcome == Outcome.FAILED and f"[NEW] UnsafeFusion ({cid}):" in text, text
    assert f"[NEW] LaxReasons ({cid}):" in text  # and where another condition fails, it does not name this one


@pytest.mark.teeth
@pytest.mark.parametrize("defect", STRICT)
def test_a_guard_stricter_than_the_spec_is_a_missed_fusion(defect: str) -> None:
    probe = _probe(defect)
    differences, _ = tables.walk(probe, _tables(defect))
    assert differences and all(d.kind in ("missed", "reasons") for d in differences)
    missed = [d for d in differences if d.kind == "missed"]
    cid = defect.removeprefix("guard-strict-")
    assert missed and all(d.conditions == ((cid,) if cid.startswith("G") else ("G1",)) for d in missed)
    outcome, text = tables.verdict(probe, missed, allow_missed=False)
    assert outcome == Outcome.MISSED_FUSION and "falls back where fusion is exact" in text, text
    assert tables.verdict(probe, missed, allow_missed=True)[0] == "xfailed"
    # where others fail it names a condition that holds besides: stricter reasons, the same missed-fusion defect
    assert all(d.direction == "missed" for d in differences)
    assert tables.verdict(probe, differences, allow_missed=False)[0] == Outcome.MISSED_FUSION
    assert tables.verdict(probe, differences, allow_missed=True)[0] == "xfailed"


@dataclass
class _Upstream:
    """A stand-in upstream probe: fla 0.6.0's rule (G1-G5, G7, raw activation strings), listing ``known``."""

    known: tuple[str, ...]
    name: str = "stand-in"
    family: str = "gated_deltanet"

    def known_gaps(self) -> tuple[str, ...]:
        return self.known

    def gap_kind(self, d: guard_oracle.Difference) -> str:
        return "Unsafe" if d.kind == "unsafe" else "Missed"

    def ask(self, layer, call):
        failed = [c for c in guard_oracle.oracle(layer, call) if c in ("G1", "G2", "G3", "G4", "G5", "G7")]
        same = len({c.activation for c in (layer.convs or ()) if layer.use_short_conv}) <= 1
        return not failed and same, None, layer


def test_known_upstream_gaps_are_a_strict_xfail_and_a_new_or_vanished_one_fails() -> None:
    differences, _ = tables.walk(_Upstream(()), ("bias x activation",))
    assert {d.kind for d in differences} == {"unsafe", "missed"}
    outcome, text = tables.verdict(_Upstream(("Unsafe", "Missed")), differences, allow_missed=False)
    assert outcome == "xfailed" and "[known] Unsafe (G8)" in text and "[known] Missed (-)" in text, text
    assert tables.verdict(_Upstream(("Missed",)), differences, allow_missed=True)[0] == Outcome.FAILED  # new unsafe
    assert tables.verdict(_Upstream(("Unsafe",)), differences, allow_missed=False)[0] == Outcome.MISSED_FUSION
    outcome, text = tables.verdict(_Upstream(("Unsafe", "Missed", "Gone")), differences, allow_missed=False)
    assert outcome == Outcome.FAILED and "version row is stale" in text and "Gone" in text


def test_a_missed_fusion_fails_a_run_unless_allowed() -> None:
    assert Outcome.MISSED_FUSION.fails and exit_status([Outcome.PASSED, Outcome.MISSED_FUSION]) == 1
    assert Outcome.MISSED_FUSION_ALLOWED.reports and not Outcome.MISSED_FUSION_ALLOWED.fails
    assert exit_status([Outcome.PASSED, Outcome.MISSED_FUSION_ALLOWED]) == 0


def _example(**conv: ConvSpec) -> Example:
    fam = get_family("gated_deltanet")
    return Example(config=fam.config_cls(**{**fam.small, **conv}), dtype="float32", batch=1, seq_len=3, seed=0)


def test_the_drawn_state_check_names_the_direction() -> None:
    swish = _example(k_conv=ConvSpec(activation="swish"))
    assert P.check_guard_matches_spec(swish).fuse
    strict = get_target("gdn_equiv", defect=GUARD_DEFECTS["guard-strict-G6"])
    no_act = _example(
        q_conv=ConvSpec(activation=None), k_conv=ConvSpec(activation=None), v_conv=ConvSpec(activation=None)
    )
    with pytest.raises(P.MissedFusion, match=r"missed fusion.*G6"):
        P.check_guard_matches_spec(no_act, target=strict)
    assert P.check_guard_matches_spec(no_act, target=strict, allow_missed=True) is not None
    lax = get_target("gdn_equiv", defect=GUARD_DEFECTS["guard-ignores-G8"])
    with pytest.raises(P.UnsafeFusion, match=r"unsafe fusion.*G8"):
        P.check_guard_matches_spec(_example(k_conv=ConvSpec(bias=True)), target=lax)
