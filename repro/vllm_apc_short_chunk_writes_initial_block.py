"""vLLM 0.28.0-0.32.0 (prefix caching in the Triton prefill; 0.33.0 removed it), a CANDIDATE from reading the
kernel, to be settled on a GPU: with prefix-cache arguments, a chunk of fewer than ``W-1`` tokens that resumes
from an initial state stores its final state in the initial-state block (``cache_indices[initial_state_idx]``),
not in ``cache_indices[block_idx_last_scheduled_token]``: the cached state of the block before is overwritten and
the block the chunk ends in is left as it was. The two differ when the chunk resumes on a block boundary or
crosses one (here: 8 tokens computed, B=8, a chunk of 2 with W=4: read column 0, end column 1).

Found by reading the op while driving Mamba2's "all" mode (``tools/routing_mamba2_all.py``, docs/serving-routing.md):
in 0.28.0-0.31.0 the builder and ``MambaMixer2`` hand the op exactly these arguments for such a chunk (the
scheduler has no block-aligned split in "all" mode; 29 of the tool's 200 chunk-and-decode draws hold one), and
that row passes, since it judges the arguments, not the kernel. Root cause (if red): the op
(``causal_conv1d.py:_causal_conv1d_fwd_kernel``: when ``state_len > seqlen`` it stores ``new_conv_state`` at
``conv_states_base``, the input coordinate, where the ``state_len <= seqlen`` branch stores at
``conv_states_output_coord``, the last scheduled block). Exit 1 = the end block is not the last ``W-1`` inputs of
(initial state | chunk), or the initial block changed; 0 = both right; 3 = no CUDA.

    PYTHONPATH=.engines/vllm-0.31.0 python repro/vllm_apc_short_chunk_writes_initial_block.py
"""

import inspect
import sys

import torch
from _vllm_ops import load

ops = load()
if "initial_state_idx" not in inspect.signature(ops.causal_conv1d_fn).parameters:
    print("this release's prefill takes no prefix-cache arguments: nothing to reproduce")
    sys.exit(0)
D, W, B, computed, n = 4, 4, 8, 8, 2  # 8 tokens computed (a boundary), a chunk of 2 < W-1: ends in the next block
g = torch.Generator().manual_seed(0)
states = torch.randn(4, D, W - 1, generator=g).cuda()  # block 0: null; 1: the state after 8 tokens; 2: the end; 3
x = torch.randn(D, n, generator=g).cuda()
xt = x.T.contiguous().T  # [D, T] channels last, as the layers pass it
initial, end_before = states[1].clone(), states[2].clone()
ops.causal_conv1d_fn(
    xt, torch.randn(D, W, generator=g).cuda(), None, states,
    torch.tensor([0, n], dtype=torch.int32, device="cuda"),
    cache_indices=torch.tensor([[1, 2, 3]], dtype=torch.int32, device="cuda"),
    has_initial_state=torch.tensor([True], device="cuda"), activation=None,
    initial_state_idx=torch.tensor([0], dtype=torch.int32, device="cuda"),  # ceil(8/8) - 1
    block_idx_first_scheduled_token=torch.tensor([1], dtype=torch.int32, device="cuda"),  # floor(8/8)
    block_idx_last_scheduled_token=torch.tensor([1], dtype=torch.int32, device="cuda"),  # ceil(10/8) - 1
    num_computed_tokens=torch.tensor([computed], dtype=torch.int32, device="cuda"), block_size_to_align=B,
)  # fmt: skip
want = torch.cat([initial, x], dim=-1)[:, -(W - 1) :]  # the state after 10 tokens
print(f"end block     {states[2][0].tolist()} (before: {end_before[0].tolist()})\nexpected      {want[0].tolist()}")
print(f"initial block {states[1][0].tolist()}\nexpected      {initial[0].tolist()} (unchanged)")
sys.exit(0 if torch.equal(states[2], want) and torch.equal(states[1], initial) else 1)
