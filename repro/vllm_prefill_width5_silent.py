"""vLLM (0.28.0-0.33.0; 0.34.0 fixed), Triton prefill op: ``causal_conv1d_fn`` with a width-5 conv answers without a
word and wrongly. Its wrapper checks no width; its kernel loads a five-column state for width 5, but loads the
weights of taps 1-4 only and its tap loop has branches for widths 2-4, so the fifth tap never enters the sum.
Found on an H100 by issue #50's whole-surface row (``S0-surface`` on every ``vllm-0.28.0-gpu`` ...
``vllm-0.33.0-gpu`` path, shrunk to one sequence of one token, D 1, W 5, no initial state; 0.34.0 passes).
vLLM's GDN and Mamba layers use width 4; the contract is the op's.

Root cause: the op (``vllm/model_executor/layers/mamba/ops/causal_conv1d.py:_causal_conv1d_fwd_kernel``). Exit 1 =
a silent wrong answer; 0 = it raised, or answered right; 3 = no CUDA here.

    PYTHONPATH=.engines/vllm-0.33.0 python repro/vllm_prefill_width5_silent.py
"""

import sys

import torch
from _vllm_ops import load

ops = load()
D, W, n = 4, 5, 6
g = torch.Generator().manual_seed(0)
x = torch.randn(D, n, generator=g)
weight = torch.randn(D, W, generator=g)
states = torch.zeros(2, D, W - 1)  # slot 0 is vLLM's null block; the sequence's state is slot 1
padded = torch.cat([torch.zeros(D, W - 1), x], dim=-1)  # no initial state: zeros before the first token
want = torch.stack([(padded[:, t : t + W] * weight).sum(-1) for t in range(n)], dim=-1)
try:
    y = ops.causal_conv1d_fn(
        x.cuda().T.contiguous().T, weight.cuda(), None, states.cuda(),
        torch.tensor([0, n], dtype=torch.int32, device="cuda"),
        cache_indices=torch.tensor([1], dtype=torch.int32, device="cuda"),
        has_initial_state=torch.tensor([False], device="cuda"), activation=None,
    )  # fmt: skip
except Exception as exc:
    print(f"refused: {type(exc).__name__}: {exc}")
    sys.exit(0)
got = y.cpu()
print(f"y[0]    {got[0].tolist()}\nwant[0] {want[0].tolist()}")
sys.exit(0 if torch.allclose(got, want, rtol=1e-4, atol=1e-4) else 1)
