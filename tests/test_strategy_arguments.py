"""The strategies' own argument checks (issue #21's mutation scope): each refusal names the value, and
each boundary the check draws is accepted exactly at the boundary (a check moved by one refuses a
valid call, or accepts an invalid one). Strategies are lazy: the check runs when the strategy is
built, so the refusal is raised by the call itself, before any example."""

from __future__ import annotations

import pytest
from hypothesis import find
from hypothesis.errors import InvalidArgument

from gdn_equiv.strategies import attention_mask_lens, cu_seqlens_for, examples, seq_lens

REFUSED = [
    ("cu_seqlens_for total -1", lambda: cu_seqlens_for(-1), "total must be >= 0, got -1"),
    ("cu_seqlens_for min_seqs 0", lambda: cu_seqlens_for(5, min_seqs=0), "min_seqs must be >= 1, got 0"),
    (
        "cu_seqlens_for 4 non-empty in 3",
        lambda: cu_seqlens_for(3, min_seqs=4, max_seqs=None, allow_empty=False),
        "4 non-empty sequences cannot sum to 3",
    ),
    ("cu_seqlens_for min > max", lambda: cu_seqlens_for(9, min_seqs=3, max_seqs=2), "got 3, 2"),
    ("cu_seqlens_for min > total + 1", lambda: cu_seqlens_for(2, min_seqs=4, max_seqs=None), "got 4, None"),
    ("attention_mask_lens batch 0", lambda: attention_mask_lens(batch=0, seq_len=3), "got 0, 3"),
    ("attention_mask_lens seq_len 0", lambda: attention_mask_lens(batch=2, seq_len=0), "got 2, 0"),
    ("attention_mask_lens min_tokens -1", lambda: attention_mask_lens(batch=2, seq_len=3, min_tokens=-1), "got -1"),
    (
        "attention_mask_lens min_tokens 7",
        lambda: attention_mask_lens(batch=2, seq_len=3, min_tokens=7),
        "min_tokens must be in [0, 6], got 7",
    ),
    ("seq_lens min 0", lambda: seq_lens(min_value=0), "got 0, 140"),
    ("seq_lens min > max", lambda: seq_lens(min_value=5, max_value=4), "got 5, 4"),
    ("examples unknown family", lambda: examples(family="mamba9"), "unknown family 'mamba9'"),
    ("examples min_batch 0", lambda: examples(min_batch=0), "got 0, 2"),
    ("examples min_seq_len 0", lambda: examples(min_seq_len=0), "got 0, 140"),
    ("fusable with varlen", lambda: examples(fusable=True, varlen=True), "cannot be combined with varlen=True"),
    ("fusable with use_cache", lambda: examples(fusable=True, use_cache=True), "combined with use_cache=True"),
    ("fusable without convs", lambda: examples(fusable=True, use_short_conv=False), "with use_short_conv=False"),
    ("fusable with reasons", lambda: examples(fusable=True, reasons=["G2"]), "breaks no condition, got reasons=['G2']"),
    ("reasons without fusable=False", lambda: examples(reasons=["G2"]), "reasons needs fusable=False"),
    ("an unknown reason", lambda: examples(fusable=False, reasons=["G99"]), "non-empty subset of"),
    ("no reasons", lambda: examples(fusable=False, reasons=[]), "got []"),
    (
        "cu_seqlens_for no non-empty sequence in 0 tokens",
        lambda: cu_seqlens_for(0, allow_empty=False),
        "1 non-empty sequences cannot sum to 0",
    ),
    ("examples min_seq_len > max", lambda: examples(min_seq_len=9, max_seq_len=8), "got 9, 8"),
    ("examples max_reasons 0", lambda: examples(fusable=False, max_reasons=0), "must be an int >= 1, got 0"),
]  # fmt: skip


@pytest.mark.parametrize(("build", "needle"), [pytest.param(b, n, id=i) for i, b, n in REFUSED])
def test_a_strategy_refuses_a_bad_argument_naming_it(build, needle):
    with pytest.raises(InvalidArgument) as info:
        build()
    assert needle in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("strategy", "holds"),
    [
        (cu_seqlens_for(0), lambda lens: lens == (0,)),  # total 0: one empty sequence
        (cu_seqlens_for(3, min_seqs=3, max_seqs=None, allow_empty=False), lambda lens: lens == (1, 1, 1)),
        (cu_seqlens_for(1, min_seqs=1, max_seqs=None, allow_empty=False), lambda lens: lens == (1,)),
        (cu_seqlens_for(2, min_seqs=3, max_seqs=None), lambda lens: sum(lens) == 2 and len(lens) == 3),
        (cu_seqlens_for(4, min_seqs=2, max_seqs=2), lambda lens: len(lens) == 2 and sum(lens) == 4),
        (attention_mask_lens(batch=1, seq_len=1), lambda drawn: drawn[0] == (1,)),
        (attention_mask_lens(batch=2, seq_len=3, min_tokens=0), lambda drawn: sum(drawn[0]) == 0),
        (attention_mask_lens(batch=2, seq_len=3, min_tokens=6), lambda drawn: drawn[0] == (3, 3)),
        (seq_lens(min_value=1, max_value=1), lambda n: n == 1),
        (seq_lens(min_value=7, max_value=7), lambda n: n == 7),
        (examples(min_batch=1, max_batch=1, min_seq_len=3, max_seq_len=3), lambda ex: (ex.batch, ex.seq_len) == (1, 3)),
        (examples(fusable=True, use_short_conv=True), lambda ex: ex.config.use_short_conv),
        (examples(fusable=False, max_reasons=1), lambda ex: ex.varlen != "none"),
    ],
    ids=[
        "total 0", "3 non-empty in 3", "1 non-empty in 1", "3 in 2 with empties", "min = max seqs",
        "mask 1x1", "mask min_tokens 0 (all padding)", "mask min_tokens = B*T", "seq_lens 1..1", "seq_lens 7..7",
        "examples B and T pinned", "fusable with convs pinned on", "one broken condition",
    ],
)  # fmt: skip
def test_a_strategy_accepts_its_boundary_and_draws_it(strategy, holds):
    find(strategy, holds)  # raises NoSuchExample if the boundary is refused or never drawn
