"""vLLM (0.28.0-0.34.0 by source), Triton decode op: ``causal_conv1d_update`` on its speculative path
(``num_accepted_tokens``) given an accepted count of 0 answers without a word, from memory outside the row's
state. Found on an H100 by issue #50's ``S0-outside`` row (kind ``count-0``) on ``vllm-0.34.0-gpu``, shrunk to
``SurfaceCase(update/slots D1 W2 float32 S1 k=1 spec OUTSIDE count-0 rows=[1:0>0a0])``: one row, one token,
width 2. (0.28.0-0.33.0 have the same kernel lines; their gate rows stopped at the width-7 finding first.)

What the op reads: the kernel's window offset is ``num_accepted_tokens - 1`` (``conv_state_token_offset``), so a
count of 0 reads the state's columns ``-1 .. W-3``: column ``-1`` is the element just before the row's state in
memory (for a contiguous ``[slots, D, W-1]`` pool: channel ``c-1``'s last column, for channel 0 the previous
slot's: here vLLM's null block). The wrapper checks no count.

The right answer is a refusal. The op's contract (its kernel comment, "The rolling of conv state"): after a
verify of ``N`` drafts the state holds ``[history2, ..., historyM, draft1, ..., draftN]`` and a count of ``a``
continues from the window after ``a`` of those tokens (1: ``[history2, ..., historyM, draft1]``). Its callers
count the always-accepted target token, so the count is ``>= 1`` (the GDN builder pads rows with 1; the runner
sets 1 for a fresh request). A count of 0 would continue from ``[history1, ..., historyM]``, the window before
the previous call, whose ``history1`` the state no longer holds: no answer computable from the state is right,
and "keep the state as is" (offset 0) is the window after one token, i.e. the count-1 answer.

Root cause: the op (``vllm/model_executor/layers/mamba/ops/causal_conv1d.py:causal_conv1d_update`` checks no
count; ``_causal_conv1d_update_kernel`` reads at ``count - 1``). No vLLM caller is known to pass 0: outside the
surface, a finding under "raise or answer right". Exit 1 = answered (silently); 0 = it raised; 3 = no CUDA here;
4 = the reproducer could not run.

    PYTHONPATH=.engines/vllm-0.34.0 python repro/vllm_update_count0_silent.py
"""

import sys

import torch
from _vllm_ops import load

ops = load()
D, W = 2, 3
L = W - 1
g = torch.Generator().manual_seed(0)
pool = torch.randn(2, D, L, generator=g)  # slot 0 is vLLM's null block; the sequence's state is slot 1
weight = torch.randn(D, W, generator=g)
x = torch.randn(1, D, generator=g)  # varlen: one row of one token (k=1 drafts at most, none sent)


def conv(window):
    return (torch.cat([window, x.T], dim=-1) * weight).sum(-1)


# what the kernel reads at offset -1: the flat element before each channel's window, then the window's first W-2
flat = pool.flatten()
base = torch.arange(D) * L + 1 * D * L  # slot 1, channel c, column 0
read_at_minus_one = torch.stack([flat[base + j - 1] for j in range(L)], dim=-1)
as_offset_minus_one = conv(read_at_minus_one)
as_count_one = conv(pool[1])  # offset 0: "keep the state as is" = the window after one accepted token
args = dict(
    conv_state_indices=torch.tensor([1], dtype=torch.int32),
    num_accepted_tokens=torch.tensor([0], dtype=torch.int32),
    query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
)
cuda = {name: t.cuda() for name, t in args.items()}
xc, pc, wc = x.cuda().clone(), pool.cuda(), weight.cuda()
try:
    y = ops.causal_conv1d_update(xc, pc, wc, None, None, max_query_len=1, **cuda)
except Exception as exc:
    print(f"refused: {type(exc).__name__}: {exc}")
    sys.exit(0)
got = y[0].cpu()
print(f"y                                  {got.tolist()}")
print(f"conv over what offset -1 reads     {as_offset_minus_one.tolist()}  (window {read_at_minus_one.tolist()})")
print(f"conv over the window after 1 token {as_count_one.tolist()}  (window {pool[1].tolist()})")
close = torch.allclose(got, as_offset_minus_one, rtol=1e-4, atol=1e-4)
print(f"answered a count of 0 without raising (it equals the offset -1 read: {close}): no state holds that window")
sys.exit(1)
