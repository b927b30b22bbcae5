"""S6-routing (SPEC §11, issue #50 item 6): the engines' own metadata builders on drawn scheduler batches, against
the pool's contract on a symbolic pool (:mod:`gdn_equiv.serving.routing`). The teeth (the planted builder caught)
are in ``tests/test_serving.py`` with every planted engine; a release's builder is driven here where its whole
source is unpacked (``GDN_EQUIV_ENGINE_SOURCES``, docs/serving-routing.md)."""

from __future__ import annotations

import os

import pytest
from hypothesis import find, given, settings

from gdn_equiv.harness.testing import first_hit
from gdn_equiv.serving import routing as R
from gdn_equiv.serving.engines import EngineOps
from gdn_equiv.serving.records import SERVING
from gdn_equiv.strategies.pools import routing_cases

ROUTING = next(r for r in SERVING if r.name == "S6-routing")


def test_a_verify_count_reads_the_window_after_that_many_of_the_last_verify_tokens() -> None:
    """W=4: a verify of tokens a, b, c on block 1 leaves windows after each; a count of 2 reads (x, a, b)."""
    pool, out = R.Pool(2), {}
    pool.run(R.Call("verify", (0, 1, 2), 1, True, 1), ["a", "b", "c"], out)
    assert out[2] == ("init1.2", "a", "b", "c") and out[0] == ("init1.0", "init1.1", "init1.2", "a")
    assert pool.window(1, 2) == ("init1.2", "a", "b") and pool.window(1, None) == ("init1.1", "init1.2", "a")
    with pytest.raises(R.Misrouted, match=r"a count of 4 where it holds windows for counts 1\.\.3"):
        pool.window(1, 4)
    with pytest.raises(R.Misrouted, match="a count of 0"):
        pool.window(1, 0)


def test_a_prefill_without_state_starts_from_zeros_and_a_pad_block_stays() -> None:
    pool, out = R.Pool(2), {}
    pool.run(R.Call("prefill", (0, 1), 2, False), ["a", "b"], out)
    assert out[1] == (None, None, "a", "b") and pool.blocks[2] == (None, "a", "b")
    assert pool.blocks[1] == ("init1.0", "init1.1", "init1.2")


def test_a_token_routed_twice_or_never_is_misrouted() -> None:
    case = R.RoutingCase(0, ((R.SchedRow(2, 1),),), 2)

    class Twice(R.ReferenceRouting):
        def route(self, rows, case):
            return [R.Call("prefill", (0, 1), 1, False), R.Call("prefill", (1,), 2, False)]

    class Never(R.ReferenceRouting):
        def route(self, rows, case):
            return [R.Call("prefill", (0,), 1, False)]

    with pytest.raises(R.Misrouted, match="reaches two conv calls"):
        R.check_routing(Twice(), case)
    with pytest.raises(R.Misrouted, match="token 1: its conv saw None"):
        R.check_routing(Never(), case)


@settings(max_examples=40, deadline=None, database=None)
@given(case=routing_cases(pads_between=False))
def test_the_schedulers_order_puts_verify_rows_first_and_pads_last(case: R.RoutingCase) -> None:
    for rows in case.steps:
        rank = [0 if r.drafts >= 0 else 2 if r.tokens == 0 else 1 for r in rows]
        assert rank == sorted(rank) or any(r.drafts < 0 and r.tokens == 1 for r in rows), rank


@pytest.mark.parametrize(
    ("what", "holds"),
    [
        ("a verify count past 1", lambda c: any(r.accepted > 1 for s in c.steps for r in s)),
        ("a verify row of 0 drafts", lambda c: any(r.drafts == 0 for s in c.steps for r in s)),
        ("a fresh one-token prompt", lambda c: any(r.tokens == 1 and r.computed == 0 for s in c.steps for r in s)),
        ("a pad on a real block", lambda c: any(r.tokens == 0 and r.block > 0 for s in c.steps for r in s)),
        (
            "a pad between rows",
            lambda c: any(s[i].tokens == 0 < s[i + 1].tokens for s in c.steps for i in range(len(s) - 1)),
        ),
        (
            "mixed verify and prefill rows",
            lambda c: any(any(r.drafts >= 0 for r in s) and any(r.drafts < 0 and r.tokens for r in s) for s in c.steps),
        ),
        ("three steps", lambda c: len(c.steps) == 3),
    ],
)
def test_the_routing_strategy_reaches_each_kind_of_row(what: str, holds) -> None:
    find(routing_cases(), holds, settings=first_hit(2000))


def test_a_planted_short_conv_builder_is_judged_through_the_short_conv_layer_only() -> None:
    """S6-routing drives both layers; the planted short-conv builder (a fresh one-token prompt sent to the decode
    update) is caught there, by the short-conv caller, and leaves the GDN layer's routing as the reference's."""
    from gdn_equiv.serving.planted import OnePromptAsDecode

    case = R.RoutingCase(0, ((R.SchedRow(1, 1),),), 3)
    with pytest.raises(R.Misrouted, match=r"OnePromptAsDecode \(a short-conv metadata builder\).*token 0"):
        R.check_s6_routing(OnePromptAsDecode(), case)
    assert isinstance(R.routing_engine(OnePromptAsDecode(), "gdn"), R.ReferenceRouting)
    R.check_s6_routing(OnePromptAsDecode(), R.RoutingCase(0, ((R.SchedRow(2, 1),),), 3))


def test_a_release_whose_builder_cannot_be_loaded_is_a_named_reason_never_a_pass(monkeypatch) -> None:
    monkeypatch.delenv(R.SOURCES_ENV, raising=False)
    monkeypatch.setattr(R, "_FAILED", {})
    monkeypatch.setattr(R, "_LOADED", {})
    # a side-by-side release's path (named only where .engines holds the release: built here, as its row has it)
    why = R.unavailable(EngineOps("vllm", "cpu-torch", release="0.31.0"))
    assert why is not None and why.startswith(f"not reached: {R.GDN_BUILDER} (vllm 0.31.0) cannot be loaded: ")
    # the installed release's path, known everywhere: where no vLLM is installed its row says so, never a pass
    assert ROUTING.not_applicable("vllm-cpu-torch") is not None or R.unavailable(EngineOps("vllm", "cpu-torch")) is None
    assert f"; not reached: {R.SHORT_CONV_BUILDER} (vllm 0.31.0) cannot be loaded: " in why  # both layers named
    short = R.VllmShortConvRouting("0.31.0").unavailable()
    assert short is not None and short.startswith(f"not reached: {R.SHORT_CONV_BUILDER} (vllm 0.31.0) cannot be loaded")
    sglang = R.unavailable(EngineOps("sglang", "gpu", release="0.5.23"))
    assert sglang is not None and "update_mamba_state_after_mtp_verify" in sglang and "cannot be loaded" in sglang


@pytest.mark.skipif(not os.environ.get(R.SOURCES_ENV), reason=f"{R.SOURCES_ENV} unset: no release's whole source here")
@pytest.mark.parametrize(("version", "fixed"), [("0.34.0", True)])
def test_a_release_builder_routes_a_mixed_batch_as_the_pool_says(version: str, fixed: bool) -> None:
    """One release per process (torch keeps a release's registered types)."""
    rows = (R.SchedRow(3, 1, 3, drafts=2, accepted=2), R.SchedRow(4, 2, 0), R.SchedRow(0, 0))
    case = R.RoutingCase(2, ((R.SchedRow(2, 1),), (R.SchedRow(2, 1, 2, drafts=1),), rows), 3)
    for engine in (R.VllmGdnRouting(version), R.VllmShortConvRouting(version)):
        if engine.unavailable():
            pytest.skip(str(engine.unavailable()))
        R.check_routing(engine, case)
