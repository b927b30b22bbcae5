"""vLLM 0.28.0-0.32.0 (prefix caching in the Triton prefill; 0.33.0 removed it), a CANDIDATE from reading the
kernel, to be settled on a GPU: with prefix-cache arguments, the state stored at a block boundary that falls
within the first ``W-1`` tokens of the scheduled chunk is built from ``x`` alone (tokens before the chunk read
as zeros for the batch's first sequence, or as the previous sequence's tokens), not from the initial state.
Issue #50's S0-surface on ``vllm-<v>-gpu`` (addressing ``block-table``) draws it: ``num_computed_tokens`` not a
multiple of the block, a boundary 1 token into the chunk.

Root cause (if red): the op (``causal_conv1d.py:_causal_conv1d_fwd_kernel``, ``idx_tokens_last`` masked with
``>= 0`` over the packed ``x``). Whether vLLM's scheduler ever schedules such a chunk (a chunk starting off a
block boundary, with 'all' prefix caching) is not settled here. Exit 1 = the boundary block's state differs from
the last ``W-1`` inputs of (initial state | tokens up to the boundary); 0 = it matches; 3 = no CUDA.

    PYTHONPATH=.engines/vllm-0.30.0 python repro/vllm_apc_boundary_block_ignores_initial_state.py
"""

import inspect
import sys

import torch
from _vllm_ops import load

ops = load()
if "initial_state_idx" not in inspect.signature(ops.causal_conv1d_fn).parameters:
    print("this release's prefill takes no prefix-cache arguments: nothing to reproduce")
    sys.exit(0)
D, W, B, computed, n = 4, 4, 8, 7, 10  # 7 tokens computed: the boundary (8) falls after the chunk's first token
g = torch.Generator().manual_seed(0)
states = torch.randn(4, D, W - 1, generator=g).cuda()  # block 0: null; 1: initial; 2: boundary; 3: final
x = torch.randn(D, n, generator=g).cuda()
xt = x.T.contiguous().T  # [D, T] channels last, as the layers pass it
initial = states[1].clone()
ops.causal_conv1d_fn(
    xt, torch.randn(D, W, generator=g).cuda(), None, states,
    torch.tensor([0, n], dtype=torch.int32, device="cuda"),
    cache_indices=torch.tensor([[1, 2, 3]], dtype=torch.int32, device="cuda"),
    has_initial_state=torch.tensor([True], device="cuda"), activation=None,
    initial_state_idx=torch.tensor([0], dtype=torch.int32, device="cuda"),
    block_idx_first_scheduled_token=torch.tensor([1], dtype=torch.int32, device="cuda"),
    block_idx_last_scheduled_token=torch.tensor([2], dtype=torch.int32, device="cuda"),
    num_computed_tokens=torch.tensor([computed], dtype=torch.int32, device="cuda"), block_size_to_align=B,
)  # fmt: skip
want = torch.cat([initial, x[:, :1]], dim=-1)[:, -(W - 1) :]  # the state after 8 tokens: 2 initial + 1 new
got = states[2]
print(f"boundary block {got[0].tolist()}\nexpected       {want[0].tolist()}")
sys.exit(0 if torch.equal(got, want) else 1)
