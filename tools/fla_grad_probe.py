"""Where fla's fused and separate prologues disagree on ``grad.x`` (H200 finding on the PR #977 build,
``tests/test_fla_target.py::test_fla_fused_equals_separate_where_spec_fuses``: Gated DeltaNet fp32 B=2 T=1
hidden 32 conv_size 2, silu, no bias, reference core: every element of ``grad.x`` differs, up to 3.7).

Two views of the same question, each a small sweep, printed as tables:

1. the layer: the suite's P4 (``properties.check_gradients``) on that example over B and T;
2. fla's conv alone (our ``fla-triton`` backend) against the ``torch`` backend, over all 96 channels of
   a contiguous buffer (the fused path's one call after ``torch.cat``) and over 32 of them as a channel
   slice (how each separate conv gets its input), so the disagreement can be pinned on one path.

    PYTHONPATH=$PWD python3 tools/fla_grad_probe.py      # on a GPU with fla installed
"""

from __future__ import annotations

import os
import sys

import torch

from gdn_equiv.harness import properties as P
from gdn_equiv.model.backends import causal_conv1d
from gdn_equiv.model.config import ConvSpec
from gdn_equiv.model.example import Example
from gdn_equiv.model.families.gated_deltanet import GDNConfig
from gdn_equiv.targets import get_target

DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    sys.exit("needs a CUDA device (or TRITON_INTERPRET=1 for the conv sweep alone)")
import fla  # noqa: E402

print(f"fla {fla.__version__}, torch {torch.__version__}")
silu = ConvSpec(activation="silu")
print("\n1. layer P4 (fused vs separate, reference core), gated_deltanet fp32 hidden 32 W2 silu no bias")
target = get_target("fla", core="reference")
for B in (1, 2, 3) if DEV == "cuda" else ():
    for T in (1, 2, 3, 8, 65):
        cfg = GDNConfig(hidden_size=32, conv_size=2, conv_bias=False, head_dim=16, num_heads=2, expand_v=1,
                        q_conv=silu, k_conv=silu, v_conv=silu)  # fmt: skip
        ex = Example(config=cfg, dtype="float32", batch=B, seq_len=T, grad=True)
        try:
            P.check_gradients(ex, device=DEV, target=target)
            verdict = "equal"
        except Exception as exc:
            verdict = str(exc).splitlines()[0][:110]
        print(f"  B={B} T={T:<3} {verdict}")

print("\n2. fla-triton conv vs torch, grad.x max |diff| in channels 32-63 (fp32, W=2): 'fused' convolves all")
print("   96 channels of a contiguous buffer (the fused path's one call), 'slice' channels 32-63 as a view")
for act in ("silu", None):
    for B in (1, 2, 3):
        for T in (1, 2, 3, 8, 65):
            row = []
            for layout in ("fused", "slice"):
                g = torch.Generator(device=DEV).manual_seed(0)
                wide = torch.randn(B, T, 96, device=DEV, generator=g)
                w = torch.randn(96, 2, device=DEV, generator=g)
                dy = torch.randn(B, T, 96, device=DEV, generator=g)
                grads = []
                for backend in ("fla-triton", "torch"):
                    base = wide.clone().requires_grad_()
                    if layout == "fused":
                        y, _ = causal_conv1d(base, w, None, act, None, False, None, backend=backend)
                        grads.append(torch.autograd.grad(y, base, dy)[0][..., 32:64])
                    else:
                        x = base[..., 32:64]
                        y, _ = causal_conv1d(x, w[32:64], None, act, None, False, None, backend=backend)
                        grads.append(torch.autograd.grad(y, base, dy[..., 32:64])[0][..., 32:64])
                row.append(f"{layout} {(grads[0] - grads[1]).abs().max().item():.3g}")
            print(f"  act={act!s:<5} B={B} T={T:<3} " + "   ".join(row))
