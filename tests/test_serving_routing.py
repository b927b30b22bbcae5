"""S6-routing (SPEC §11, issue #50 item 6): the engines' own metadata builders on drawn scheduler batches, against
the pool's contract on a symbolic pool (:mod:`gdn_equiv.serving.routing`). The teeth (the planted builder caught)
are in ``tests/test_serving.py`` with every planted engine; a release's builder is driven here where its whole
source is unpacked (``GDN_EQUIV_ENGINE_SOURCES``, docs/serving-routing.md). Mamba2's "all" prefix-caching mode
(:mod:`gdn_equiv.serving.routing_apc`) has its contract, strategy, teeth and releases here too."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import find, given, settings

from gdn_equiv.harness.testing import first_hit
from gdn_equiv.serving import routing as R
from gdn_equiv.serving import routing_apc as A
from gdn_equiv.serving.adapters import ReferenceAdapter
from gdn_equiv.serving.engines import EngineOps
from gdn_equiv.serving.planted import PLANTED_APC, OnePromptAsDecode, Zeros
from gdn_equiv.serving.records import SERVING
from gdn_equiv.strategies.pools import apc_cases, routing_cases

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


# ---- Mamba2's "all" prefix-caching mode (gdn_equiv/serving/routing_apc.py) ---------------------------------------


def test_an_all_mode_chunk_writes_each_boundary_window_to_its_column_and_its_last_window_to_the_last() -> None:
    """W=4, B=2: a chunk of 5 tokens after 1 computed crosses the boundaries at 2 and 4 tokens: columns 0 and 1
    (``first`` = 0) get the windows after tokens 2 and 4 of the request, column 2 (``last``) the one after 6."""
    case = A.ApcCase(2, ((4, 5, 6, 7),), (0,), (((0, 5),),))
    pool, out = A.ApcPool(case), {}
    pool.blocks[4] = (None, None, "r0.0")  # the window after the 1 computed token
    call = A.ConvCall("fn", (0, 1, 2, 3, 4), (4, 5, 6, 7), True, 0, 2, 0, 1, 2)
    pool.run(call, ["r0.1", "r0.2", "r0.3", "r0.4", "r0.5"], out)
    assert pool.blocks[4] == (None, "r0.0", "r0.1") and pool.blocks[5] == ("r0.1", "r0.2", "r0.3")
    assert pool.blocks[6] == ("r0.3", "r0.4", "r0.5") and pool.blocks[7] == ("init7.0", "init7.1", "init7.2")
    assert out[0] == (None, None, "r0.0", "r0.1")
    skipped, none = A.ApcPool(case), {}
    skipped.run(A.ConvCall("fn", (0,), (0, 5), True, 0, 1), ["r0.1"], none)  # the null block: no output, no write
    assert none == {} and skipped.blocks == A.ApcPool(case).blocks


def test_the_all_mode_contract_reads_a_cached_prefix_and_leaves_other_blocks_alone() -> None:
    """A prefix-cache hit of 2 blocks (B=2): its columns hold the windows after 2 and 4 tokens before any step;
    one decode after it must see tokens 2..4 and write column 2 only."""
    case = A.ApcCase(2, ((1, 2, 3), (4,)), (4, 0), (((0, 1),),))
    pool = A.ApcPool(case)
    assert pool.blocks[1] == (None, "r0.0", "r0.1") and pool.blocks[2] == ("r0.1", "r0.2", "r0.3")
    blocks = dict(pool.blocks)
    want = A.reference_step(case, 0, blocks)
    assert want == {0: ("r0.1", "r0.2", "r0.3", "r0.4")}
    assert {b for b in blocks if blocks[b] != pool.blocks[b]} == {3}
    A.check_apc(A.ReferenceApcRouting(), case)


@settings(max_examples=30, deadline=None, database=None)
@given(case=apc_cases())
def test_the_in_house_all_mode_builder_keeps_the_contract(case: A.ApcCase) -> None:
    A.check_apc(A.ReferenceApcRouting(), case)


def _decode_only(c: A.ApcCase, s: int) -> bool:
    return all(n == 1 and k for t, _, n, k in c.rows() if t == s)


@pytest.mark.parametrize(
    ("what", "holds"),
    [
        ("a prefix-cache hit", lambda c: any(c.cached)),
        ("a chunk resuming on a block boundary",
         lambda c: any(n > 1 and k and k % c.block_size == 0 for _, _, n, k in c.rows())),
        ("a chunk resuming inside a block", lambda c: any(n > 1 and k % c.block_size for _, _, n, k in c.rows())),
        ("a chunk crossing two boundaries",
         lambda c: any(r >= 0 and (k + n - 1) // c.block_size - k // c.block_size >= 2 for _, r, n, k in c.rows())),
        ("a decode completing a block",
         lambda c: any(n == 1 and k and (k + 1) % c.block_size == 0 for _, _, n, k in c.rows())),
        ("a decode-only step staged for a full CUDA graph",
         lambda c: c.full_cudagraph and any(_decode_only(c, s) for s in range(len(c.steps)))),
        ("decodes and prefills in one step",
         lambda c: any(any(n == 1 and k for t, _, n, k in c.rows() if t == s)
                       and any(n > 1 or (n and not k) for t, _, n, k in c.rows() if t == s)
                       for s in range(len(c.steps)))),
        ("a fresh one-token prompt", lambda c: any(n == 1 and not k for _, _, n, k in c.rows())),
        ("a pad", lambda c: any(r < 0 for _, r, _, _ in c.rows())),
        ("three steps", lambda c: len(c.steps) == 3),
    ],
)  # fmt: skip
def test_the_all_mode_strategy_reaches_each_kind_of_row(what: str, holds) -> None:
    find(apc_cases(), holds, settings=first_hit(2000))


@settings(max_examples=20, deadline=None, database=None)
@given(case=apc_cases(min_spec=1, max_spec=3))
def test_the_in_house_all_mode_builder_keeps_the_contract_with_verify_rows(case: A.ApcCase) -> None:
    A.check_apc(A.ReferenceApcRouting(), case)


def _straddles(c: A.ApcCase) -> bool:
    """A verify row after a verify row whose drafts crossed a block boundary its accepted tokens did not reach."""
    B = c.block_size
    return any(x.drafts >= 0 and x.prev_last >= 0 and x.prev_last != max(-(-x.computed // B) - 1, 0)
               for step in c.timeline() for x in step)  # fmt: skip


@pytest.mark.parametrize(
    ("what", "holds"),
    [
        ("a verify row of 0 drafts", lambda c: any(x.drafts == 0 for s in c.timeline() for x in s)),
        ("an accepted count past 1", lambda c: any(x.counts > 1 for s in c.timeline() for x in s)),
        ("a verify after a verify that crossed a boundary its accepted tokens did not reach", _straddles),
        ("a verify-only step staged for a full CUDA graph",
         lambda c: c.full_cudagraph and any(all(x.drafts >= 0 for x in s) for s in c.timeline())),
        ("verify rows and chunks in one step",
         lambda c: any(any(x.drafts >= 0 for x in s) and any(x.drafts < 0 and x.tokens > 1 for x in s)
                       for s in c.timeline())),
    ],
)  # fmt: skip
def test_the_all_mode_strategy_reaches_each_kind_of_verify_row(what: str, holds) -> None:
    find(apc_cases(min_spec=1, max_spec=3), holds, settings=first_hit(2000))


#: each planted all-mode builder and the drafts its cases draw (the verify-row defect needs verify rows)
PLANTED_SPEC = {"apc-reads-first-scheduled-block": 0, "apc-writes-past-last-block": 0,
                "apc-verify-reads-last-computed-block": 3}  # fmt: skip


def test_every_planted_all_mode_builder_has_its_catch_test() -> None:
    assert set(PLANTED_SPEC) == set(PLANTED_APC)


@pytest.mark.parametrize(("name", "spec"), sorted(PLANTED_SPEC.items()))
def test_each_planted_all_mode_builder_is_caught_and_the_in_house_one_passes_its_case(name: str, spec: int) -> None:
    engine = PLANTED_APC[name]()

    def caught(case: A.ApcCase) -> bool:
        try:
            A.check_apc(engine, case)
        except R.Misrouted:
            return True
        return False

    case = find(apc_cases(min_spec=min(spec, 1), max_spec=spec), caught, settings=first_hit(400))
    A.check_apc(A.ReferenceApcRouting(), case)
    with pytest.raises(R.Misrouted, match=f"{type(engine).__name__} \\(a Mamba2 all-mode metadata builder\\)"):
        A.check_apc(engine, case)


def test_a_release_whose_all_mode_cannot_be_loaded_is_a_named_reason_never_a_pass(monkeypatch) -> None:
    monkeypatch.delenv(R.SOURCES_ENV, raising=False)
    monkeypatch.setattr(R, "_FAILED", {})
    monkeypatch.setattr(R, "_LOADED", {})
    why = A.VllmMamba2ApcRouting("0.31.0").unavailable()
    assert why is not None and why.startswith(f"not reached: {A.APC_BUILDER} (vllm 0.31.0) cannot be loaded: ")


@pytest.mark.skipif(not os.environ.get(R.SOURCES_ENV), reason=f"{R.SOURCES_ENV} unset: no release's whole source here")
def test_a_release_without_the_all_mode_says_so_from_its_source() -> None:
    """0.32.0 on: no "all" mode (the process's release is 0.34.0, as the builder test's above)."""
    why = A.VllmMamba2ApcRouting("0.34.0").unavailable()
    if why is not None and why.startswith("not reached"):
        pytest.skip(why)
    assert why is not None and why.startswith("n/a: vllm 0.34.0 has no Mamba 'all' prefix-caching mode")


@pytest.mark.skipif(not os.environ.get(R.SOURCES_ENV), reason=f"{R.SOURCES_ENV} unset: no release's whole source here")
def test_a_release_all_mode_builder_keeps_the_contract_in_its_own_process() -> None:
    """0.31.0's Mamba2 builder and mixer routing on 30 derandomized cases (its own process: one release per
    process), its Mamba1 builder and mixer likewise, and the Mamba2 builder with the read column planted one off
    caught, shrunk to a prefix hit."""
    tool = os.path.join(os.path.dirname(__file__), "..", "tools", "routing_mamba2_all.py")
    run = subprocess.run([sys.executable, tool, "0.31.0", "--examples", "30"], capture_output=True, text=True)
    if run.returncode == 3:
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0 and "0.31.0 Mamba2 all mode: pass, 30 cases" in run.stdout, run.stdout + run.stderr
    run = subprocess.run([sys.executable, tool, "0.31.0", "--mixer", "mamba1", "--examples", "30"],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0 and "0.31.0 Mamba1 all mode: pass, 30 cases" in run.stdout, run.stdout + run.stderr
    planted = "0.31.0+reads-first-scheduled-block"
    run = subprocess.run([sys.executable, tool, planted, "--examples", "30"], capture_output=True, text=True)
    assert run.returncode == 1 and f"{planted} Mamba2 all mode: FINDING" in run.stdout, run.stdout + run.stderr
    assert "first scheduled: ApcCase(B=2 tables=[[1, 2]] cached=[2] steps=[r0+1c2])" in run.stdout, run.stdout


@pytest.mark.skipif(not os.environ.get(R.SOURCES_ENV), reason=f"{R.SOURCES_ENV} unset: no release's whole source here")
def test_a_release_all_mode_verify_row_reads_the_stale_block_the_finding() -> None:
    """0.28.0-0.31.0's MambaMixer2 hands the conv update of a verify row ``block_idx_last_computed_token`` as its
    read column, not the column the previous verify ended in (docs/serving-routing.md, Findings): 0.31.0 with
    one draft, shrunk to its smallest case (its own process)."""
    tool = os.path.join(os.path.dirname(__file__), "..", "tools", "routing_mamba2_all.py")
    run = subprocess.run([sys.executable, tool, "0.31.0", "--max-spec", "1"], capture_output=True, text=True)
    if run.returncode == 3:
        pytest.skip(run.stdout.strip())
    assert run.returncode == 1 and "verify rows of 0..1 drafts: FINDING" in run.stdout, run.stdout + run.stderr
    assert "v1a1c1 | " in run.stdout and "its conv saw" in run.stdout, run.stdout


def test_a_plug_in_engine_without_a_routing_of_its_own_is_n_a_not_the_references_pass() -> None:
    """The routing rows drive an engine's own builders. A plug-in engine (here a planted one) that declares no
    routing caller got the in-house reference's routing driven in its name: S6-routing and S6-routing-all said
    "pass" having checked nothing of it (seen through ``check --serving-engine gdn_equiv.serving.planted:Zeros``).
    Now its rows are n/a with the reason; the reference engine itself still runs them, and a plug-in routing one
    layer routes the other as the reference."""
    assert "declares no routing of its own" in (R.unavailable(Zeros()) or ""), R.unavailable(Zeros())
    assert "declares no routing of its own" in (A.apc_unavailable(Zeros()) or "")
    assert R.unavailable(ReferenceAdapter()) is None and A.apc_unavailable(ReferenceAdapter()) is None
    assert R.unavailable(OnePromptAsDecode()) is None
