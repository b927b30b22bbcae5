"""P9 (part): the strategies reach both guard outcomes and every guard reason, build valid data by
construction, shrink to small examples, and round-trip through JSON.

Reachability is checked on materialised layers: the guard sees what ``layer.layer_facts()`` and
``layer.call_facts(...)`` report, not what the strategy meant to build.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from gdn_equiv.harness.testing import count_example
from gdn_equiv.model.backends import register_backend
from gdn_equiv.model.backends.base import Backend
from gdn_equiv.model.backends.torch_backend import BACKEND as TORCH
from gdn_equiv.model.config import CallFacts, LayerFacts
from gdn_equiv.model.example import Example, build_layer, materialize
from gdn_equiv.model.families import known_families
from gdn_equiv.model.families.gated_deltanet import GDNConfig
from gdn_equiv.model.guard import Decision, decide
from gdn_equiv.strategies import (
    CONV_REASONS,
    REASONS,
    attention_mask_lens,
    conv_specs,
    cu_seqlens_for,
    examples,
    layer_configs,
    seq_lens,
)
from gdn_equiv.strategies.sampling import sampled

# A second backend name for G5 (backends disagree): the torch kernels registered as a plug-in.
TWIN = register_backend(
    Backend(name="torch_twin", forward=TORCH.forward, update=TORCH.update, description="torch, under another name"),
    replace=True,
).name
TWO_BACKENDS = ("torch", TWIN)

FIND = settings(max_examples=1000, database=None, deadline=None, suppress_health_check=list(HealthCheck))
# reachability only needs one hit, not a shrunk one. Hypothesis' generation clusters (it mutates earlier
# draws), so hits come in bursts: G8 from the default strategy, 3.6% of 3,000 @given draws, took 4 to
# 548 draws to its first hit over 40 fresh searches (median ~65), and one CI run missed it in 1,000.
# A search stops at its first hit, so a larger budget costs only near-misses.
SEARCH = settings(FIND, max_examples=5000, phases=[Phase.generate])
PLAIN_CALL = CallFacts(has_cached_state=False, use_cache=False, varlen=False)


def facts(example: Example) -> tuple[LayerFacts, CallFacts]:
    layer = build_layer(example)
    inputs = materialize(example, layer)
    call = layer.call_facts(inputs.x, inputs.attention_mask, inputs.cache, inputs.use_cache, inputs.cu_seqlens)
    return layer.layer_facts(), call


def decision(example: Example) -> Decision:
    return decide(*facts(example))


def _failed(example: Example) -> list[str]:
    return [c.id for c in decision(example).failed]


def _layer_failed(example: Example) -> list[str]:
    """G5–G9 depend on the layer alone: skip materialising the call (a populated cache runs the layer)."""
    return [c.id for c in decide(build_layer(example).layer_facts(), PLAIN_CALL).failed]


# ---- reachability ---------------------------------------------------------------------------


@pytest.mark.parametrize("reason", REASONS)
def test_every_reason_is_reachable_as_the_first_failed_condition(reason: str) -> None:
    strategy = examples(backends=TWO_BACKENDS, fusable=False, max_seq_len=16)
    found = find(strategy, lambda ex: decision(ex).reason_id == reason, settings=SEARCH)
    assert decision(found).reason_id == reason


@pytest.mark.parametrize("reason", REASONS)
def test_every_reason_is_reachable_from_the_default_strategy(reason: str) -> None:
    """From ``examples()`` with no pins, as any failed condition (G5 needs a second backend)."""
    backends = TWO_BACKENDS if reason == "G5" else ("torch",)
    failed = _layer_failed if reason in CONV_REASONS else _failed
    found = find(examples(backends=backends, max_seq_len=16), lambda ex: reason in failed(ex), settings=SEARCH)
    assert reason in _failed(found)


def test_both_outcomes_are_reachable_from_the_default_strategy() -> None:
    assert decision(find(examples(max_seq_len=16), lambda ex: decision(ex).fuse, settings=SEARCH)).fuse
    assert not decision(find(examples(max_seq_len=16), lambda ex: not decision(ex).fuse, settings=SEARCH)).fuse


@settings(max_examples=max(20, settings.default.max_examples // 2), deadline=None)
@given(ex=examples(backends=TWO_BACKENDS, fusable=True))
def test_fusable_true_builds_states_the_guard_fuses(ex: Example) -> None:
    count_example()
    assert decision(ex).fuse, ex.short()


@settings(max_examples=max(20, settings.default.max_examples // 2), deadline=None)
@given(ex=examples(backends=TWO_BACKENDS, fusable=False), data=st.data())
def test_fusable_false_builds_states_the_guard_refuses(ex: Example, data: st.DataObject) -> None:
    count_example()
    assert not decision(ex).fuse, ex.short()


@pytest.mark.parametrize("reason", REASONS)
def test_pinned_reason_is_among_the_failed_conditions(reason: str) -> None:
    @settings(max_examples=10, deadline=None, database=None)
    @given(ex=examples(backends=TWO_BACKENDS, fusable=False, reasons=[reason], max_seq_len=16))
    def check(ex: Example) -> None:
        count_example()
        failed = _failed(ex)
        # G1 (no short conv) hides the conv-level conditions, so only ask for G1 then
        assert reason in failed or (failed[:1] == ["G1"] and reason >= "G5"), (reason, failed, ex.short())

    check()


@settings(max_examples=max(20, settings.default.max_examples // 2), deadline=None)
@given(ex=examples(backends=TWO_BACKENDS, fusable=False, max_reasons=1, max_seq_len=16, family=known_families()))
def test_max_reasons_one_breaks_exactly_one_condition(ex: Example) -> None:
    """The gap search's one-condition states, on every family: the guard refuses for one reason, never two."""
    count_example()
    assert len(_failed(ex)) == 1, (_failed(ex), ex.short())


# ---- validity -------------------------------------------------------------------------------


@settings(max_examples=max(20, settings.default.max_examples // 2), deadline=None)
@given(ex=examples(backends=TWO_BACKENDS))
def test_generated_examples_run_through_the_reference_path(ex: Example) -> None:
    """Valid by construction: the config validates, the layer builds, the inputs pass every check."""
    count_example()
    layer = build_layer(ex)
    inputs = materialize(ex, layer)
    with torch.set_grad_enabled(ex.grad):
        out, _, _ = layer(inputs.x, **inputs.kwargs(), prologue="separate")
    assert out.shape == inputs.x.shape and out.dtype == inputs.x.dtype


@given(config=layer_configs(backends=TWO_BACKENDS, vary_convs=0.5))
def test_generated_configs_are_valid(config: GDNConfig) -> None:
    count_example()
    assert GDNConfig.from_dict(config.as_dict()) == config  # __post_init__ validates again
    assert config.value_dim == config.n_v_heads * config.head_dim * config.expand_v
    assert config.n_v_heads % config.num_heads == 0


@given(ex=examples(backends=TWO_BACKENDS))
def test_examples_round_trip_through_json(ex: Example) -> None:
    count_example()
    assert Example.from_json(ex.to_json()) == ex


@given(data=st.data(), total=st.integers(0, 20), max_seqs=st.integers(1, 6))
def test_cu_seqlens_lengths_sum_to_the_total(data: st.DataObject, total: int, max_seqs: int) -> None:
    count_example()
    lens = data.draw(cu_seqlens_for(total, max_seqs=max_seqs))
    assert sum(lens) == total and 1 <= len(lens) <= max_seqs and min(lens) >= 0


@given(data=st.data(), batch=st.integers(1, 4), seq_len=st.integers(1, 9))
def test_mask_lengths_fit_their_rows(data: st.DataObject, batch: int, seq_len: int) -> None:
    count_example()
    lens, side = data.draw(attention_mask_lens(batch=batch, seq_len=seq_len))
    assert len(lens) == batch and all(0 <= n <= seq_len for n in lens) and sum(lens) >= 1
    assert side in ("left", "right")


def test_edge_lengths_are_reachable() -> None:
    assert 0 in find(cu_seqlens_for(10), lambda lens: 0 in lens and len(lens) > 1, settings=FIND)
    assert 1 in find(cu_seqlens_for(10), lambda lens: 1 in lens, settings=FIND)
    lens, side = find(attention_mask_lens(batch=2, seq_len=5), lambda m: 0 in m[0] and m[1] == "left", settings=FIND)
    assert 0 in lens and side == "left"


# ---- shrinking ------------------------------------------------------------------------------


def test_examples_shrink_to_the_smallest_case() -> None:
    ex = find(examples(), lambda ex: True, settings=FIND)
    assert (ex.batch, ex.seq_len, ex.dtype, ex.varlen, ex.cache, ex.use_cache) == (
        1,
        1,
        "float32",
        "none",
        "none",
        False,
    )
    assert (ex.seed, ex.scale, ex.prefix_len) == (0, 1.0, 0)
    c = ex.config
    assert (c.num_heads, c.n_v_heads, c.head_dim, c.expand_v, c.hidden_size) == (1, 1, 2, 1, 8)
    assert c.use_short_conv and not c.conv_bias and not c.use_gate
    assert all(c.conv_spec(n) == c.conv_spec("q") for n in "kv")


def test_long_sequences_shrink_to_the_first_length_past_a_chunk() -> None:
    assert find(seq_lens(), lambda n: n > 64, settings=FIND) == 65
    assert find(seq_lens(max_value=200), lambda n: n > 128, settings=FIND) == 129


@pytest.mark.slow
def test_bias_parity_states_shrink_to_one_odd_bias() -> None:
    ex = find(examples(fusable=False, reasons=["G8"], max_seq_len=16), lambda ex: _failed(ex) == ["G8"], settings=FIND)
    specs = [ex.config.conv_spec(n) for n in "qkv"]
    assert sum(s.bias is not None for s in specs) == 1 and not ex.config.conv_bias
    assert (ex.batch, ex.seq_len, ex.dtype, ex.cache) == (1, 1, "float32", "none")


def test_conv_specs_shrink_to_the_layer_defaults() -> None:
    from gdn_equiv.model.config import ConvSpec

    assert find(conv_specs(), lambda s: True, settings=FIND) == ConvSpec()


@pytest.mark.parametrize(
    ("what", "condition"),
    [
        ("a channel count at a block edge past 1,000", lambda c: c.D in (1023, 1024, 1025)),
        ("a sequence one shorter than the kernel width", lambda c: not c.seq_lens and c.T == c.W - 1),
        ("a sequence at a tile edge", lambda c: not c.seq_lens and c.T in (63, 64, 65, 127, 128, 129)),
        ("a wide call with an initial state", lambda c: c.D > 40 and c.initial_state),
    ],
)
def test_conv_calls_reach_where_kernels_change_code_path(what, condition):
    """Reach by construction (issue #18): the regions where real kernels break are drawn, not hoped for."""
    from gdn_equiv.strategies import conv_calls

    find(conv_calls(widths=(2, 4), wide_channels=1025, long_seq_len=129), condition, settings=SEARCH)


# ---- shared strategy objects ----------------------------------------------------------------


def test_sampled_shares_one_strategy_per_typed_values_and_draws_each_value() -> None:
    """``sampled`` hands back the strategy it built for equal values (so Hypothesis validates it once),
    never the one built for values that are equal but of other types (``1 == 1.0 == True``)."""
    assert sampled((1, 2)) is sampled([1, 2]) is sampled(v for v in (1, 2))
    ints, floats, flags = sampled((1, 0)), sampled((1.0, 0.0)), sampled((True, False))
    assert ints is not floats and floats is not flags and ints is not flags
    for strategy, kind in ((ints, int), (floats, float), (flags, bool)):
        assert {type(find(strategy, lambda v: v == 1)), type(find(strategy, lambda v: v == 0))} == {kind}
    assert find(sampled((None, 5)), lambda v: True) is None  # shrinks to the first value
