"""fla 0.6.0: conv_bias=True but k_conv1d.bias is None -> the fused prologue raises TypeError.

Standalone (flash-linear-attention 0.6.0, einops, transformers). Runs on CPU: the fused branch fails
in ``torch.cat([q_conv1d.bias, k_conv1d.bias, v_conv1d.bias])`` before any kernel is launched. On a
CUDA device the script also shows that the separate path (``use_cache=True``) runs the same layer
fine. Exit status 1 = defect present.

    python repro/fla_missing_bias_typeerror.py
"""

import sys
import warnings

import torch

warnings.simplefilter("ignore")
import fla  # noqa: E402
from fla.layers.gated_deltanet import GatedDeltaNet  # noqa: E402
from fla.models.utils import Cache  # noqa: E402

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
layer = GatedDeltaNet(hidden_size=64, head_dim=16, num_heads=2, conv_bias=True, layer_idx=0).to(device).eval()
layer.k_conv1d.bias = None  # the state: the layer says conv_bias=True, one conv has no bias
x = torch.randn(2, 16, 64, device=device)

print(f"fla {fla.__version__} on {device}: guard says fuse = {layer._use_fused_qkv_conv(None, False, None)}")
if device == "cuda":
    with torch.no_grad():
        layer(x.clone(), past_key_values=Cache(), use_cache=True)
    print("separate path (use_cache=True): ran fine")
try:
    with torch.no_grad():
        layer(x.clone(), use_cache=False)
except TypeError as exc:
    print(f"DEFECT: the fused path raised TypeError: {exc}")
    sys.exit(1)
except Exception as exc:  # e.g. a Triton kernel on CPU, after the bias concatenation succeeded
    print(f"INCONCLUSIVE: the fused path failed with {type(exc).__name__}: {exc}")
    sys.exit(2)
print("OK: the fused path ran (the guard fell back, or it handles a missing bias)")
