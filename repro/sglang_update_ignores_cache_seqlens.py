"""sglang (0.5.17-0.5.23, the same kernel), Triton decode op: ``causal_conv1d_update(..., cache_seqlens=...)``
documents a circular conv state ("updated by copying x to the conv_state starting at the index cache_seqlens %
state_len") but its kernel never reads ``cache_seqlens_ptr``: the call answers as if no ``cache_seqlens`` were
given, without a word (its ``validate_data`` asserts ``cache_seqlens is None``, "not implemented yet", but that
check is off by default). Issue #50's "outside the surface" property: ``gdn-equiv check --derandomize
--serving-engine sglang-0.5.23-gpu --examples 40 --property S0-outside`` (kind ``circular``).

Root cause: the op (``sglang/kernels/ops/mamba/causal_conv1d_triton.py:causal_conv1d_update``), not a caller:
sglang's GDN callers never pass ``cache_seqlens``. Exit 1 = the output and state ignore ``cache_seqlens`` (a
silent answer that is not the documented one); 0 = it raised, or answered as documented; 3 = no CUDA here.

    PYTHONPATH=.engines/sglang-0.5.23 python repro/sglang_update_ignores_cache_seqlens.py
"""

import sys

import torch
from _sglang_ops import load

ops = load()
D, W, L = 4, 3, 4  # a state of 4 columns, circular, for a width-3 conv
state = torch.arange(L, dtype=torch.float32).repeat(1, D, 1).cuda() + 1  # columns 1 2 3 4
seqlen = 1  # the next write goes to column 1 % 4: the oldest input is column 1, the newest column 0
weight = torch.ones(D, W, device="cuda")
x = torch.full((1, D, 1), 10.0, device="cuda")
try:
    y = ops.causal_conv1d_update(
        x.clone(), state, weight, None, None,
        cache_seqlens=torch.tensor([seqlen], dtype=torch.int32, device="cuda"),
        conv_state_indices=torch.tensor([0], dtype=torch.int32, device="cuda"),
    )  # fmt: skip
except Exception as exc:
    print(f"refused: {type(exc).__name__}: {exc}")
    sys.exit(0)
values = [c + 1.0 for c in range(L)]  # column c holds c + 1
oldest_first = [values[(seqlen + j) % L] for j in range(L)]  # 2 3 4 1
documented = sum(oldest_first[-(W - 1) :]) + 10.0  # the last W-1 inputs (4, 1) and the token: 15
got = float(y[0, 0, 0])
print(f"y = {got}, documented circular answer {documented}; as a plain window (1, 2 and the token): 13.0")
sys.exit(1 if got != documented else 0)
