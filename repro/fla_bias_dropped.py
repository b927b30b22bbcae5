"""fla 0.6.0: conv_bias=False but one conv carries a bias -> the fused prologue silently drops it.

Standalone (needs only flash-linear-attention 0.6.0, einops, transformers, and a CUDA device for fla's
Triton kernels). The same layer and input are run twice: ``use_cache=False`` (fla's guard fuses) and
``use_cache=True`` with a fresh cache (fla's guard falls back to the three separate convs). The
cache changes nothing in the output, so the two must agree; on 0.6.0 they differ by O(1), because
the fused branch builds its bias only ``if self.conv_bias``. Forward hooks on the conv modules show
which path ran (the fused branch never calls a conv module). Exit status 1 = defect present.

    python repro/fla_bias_dropped.py
"""

import sys
import warnings

import torch

warnings.simplefilter("ignore")
if not torch.cuda.is_available():
    print("SKIP: fla's fused conv runs a Triton kernel and needs a CUDA device")
    sys.exit(77)

import fla  # noqa: E402
from fla.layers.gated_deltanet import GatedDeltaNet  # noqa: E402
from fla.models.utils import Cache  # noqa: E402

torch.manual_seed(0)
layer = GatedDeltaNet(hidden_size=64, head_dim=16, num_heads=2, conv_bias=False, layer_idx=0).cuda().eval()
layer.q_conv1d.bias = torch.nn.Parameter(torch.randn(layer.key_dim, device="cuda"))  # the state: one conv has a bias
calls = []
for name in ("q_conv1d", "k_conv1d", "v_conv1d"):
    getattr(layer, name).register_forward_hook(lambda m, a, o, name=name: calls.append(name))
x = torch.randn(2, 16, 64, device="cuda")

with torch.no_grad():
    calls.clear()
    fused, _, _ = layer(x.clone(), use_cache=False)
    fused_calls = len(calls)
    calls.clear()
    separate, _, _ = layer(x.clone(), past_key_values=Cache(), use_cache=True)
    separate_calls = len(calls)

diff = (fused - separate).abs().max().item()
print(
    f"fla {fla.__version__}: use_cache=False ran {'fused' if fused_calls == 0 else 'separate'} "
    f"({fused_calls} conv-module calls), use_cache=True ran separate ({separate_calls} calls)"
)
print(f"max |fused - separate| = {diff:.4g}")
if fused_calls == 0 and diff > 1e-3:
    print("DEFECT: the fused prologue dropped q_conv1d.bias (layer conv_bias=False); the output depends on use_cache")
    sys.exit(1)
print("OK: outputs agree (the guard fell back, or the fused path kept the bias)")
