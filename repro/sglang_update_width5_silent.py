"""sglang (0.5.17-0.5.23, the same kernel), Triton decode op: ``causal_conv1d_update`` with a width-5 conv answers
without a word and wrongly. Its wrapper checks no width; its kernel loads a fifth state column for width 5 but its
tap loop and state shift have branches for widths 2-4 only, so every tap reads column 0 with weight 0. Issue #50's
"outside the surface" property: ``gdn-equiv check --derandomize --serving-engine sglang-0.5.23-gpu --examples 40
--property S0-outside`` (kind ``width``). sglang's GDN/KDA layers use width 4; the contract is the op's.

Root cause: the op (``sglang/kernels/ops/mamba/causal_conv1d_triton.py:_causal_conv1d_update_kernel``). Exit 1 =
a silent wrong answer; 0 = it raised, or answered right; 3 = no CUDA here.

    PYTHONPATH=.engines/sglang-0.5.23 python repro/sglang_update_width5_silent.py
"""

import sys

import torch
from _sglang_ops import load

ops = load()
D, W = 4, 5
g = torch.Generator().manual_seed(0)
state = torch.randn(1, D, W - 1, generator=g)
weight = torch.randn(D, W, generator=g)
x = torch.randn(1, D, 1, generator=g)
want = (torch.cat([state, x], dim=-1)[0] * weight).sum(-1)  # the conv over the window and the token
try:
    y = ops.causal_conv1d_update(
        x.cuda().clone(), state.cuda(), weight.cuda(), None, None,
        conv_state_indices=torch.tensor([0], dtype=torch.int32, device="cuda"),
    )  # fmt: skip
except Exception as exc:
    print(f"refused: {type(exc).__name__}: {exc}")
    sys.exit(0)
got = y[0, :, 0].cpu()
print(f"y = {got.tolist()}\nwant {want.tolist()}")
sys.exit(0 if torch.allclose(got, want, rtol=1e-4, atol=1e-4) else 1)
