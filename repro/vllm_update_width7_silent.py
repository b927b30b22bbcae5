"""vLLM (0.28.0-0.33.0), Triton decode op: ``causal_conv1d_update`` with a width-7 conv answers without a word and
wrongly. Its wrapper checks no width; its kernel loads weights and state columns for widths up to 6 only, so a
seventh tap never enters the sum. Found on an H100 by issue #50's ``S0-outside`` row (kind ``width``) on every
``vllm-0.28.0-gpu`` ... ``vllm-0.33.0-gpu`` path, shrunk to one token, D 1, W 7. vLLM's layers use width 4: the
contract is the op's ("raise or answer right" outside what its callers pass).

Root cause: the op (``vllm/model_executor/layers/mamba/ops/causal_conv1d.py:_causal_conv1d_update_kernel``). Exit 1 =
a silent wrong answer; 0 = it raised, or answered right; 3 = no CUDA here.

    PYTHONPATH=.engines/vllm-0.33.0 python repro/vllm_update_width7_silent.py
"""

import sys

import torch
from _vllm_ops import load

ops = load()
D, W = 4, 7
g = torch.Generator().manual_seed(0)
state = torch.randn(2, D, W - 1, generator=g)  # slot 0 is vLLM's null block; the sequence's state is slot 1
weight = torch.randn(D, W, generator=g)
x = torch.randn(1, D, generator=g)
want = (torch.cat([state[1], x.T], dim=-1) * weight).sum(-1)  # the conv over the window and the token
try:
    y = ops.causal_conv1d_update(
        x.cuda().clone(), state.cuda(), weight.cuda(), None, None,
        conv_state_indices=torch.tensor([1], dtype=torch.int32, device="cuda"),
    )  # fmt: skip
except Exception as exc:
    print(f"refused: {type(exc).__name__}: {exc}")
    sys.exit(0)
got = y[0].cpu()
print(f"y    {got.tolist()}\nwant {want.tolist()}")
sys.exit(0 if torch.allclose(got, want, rtol=1e-4, atol=1e-4) else 1)
