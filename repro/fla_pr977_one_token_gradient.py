"""fla PR #977 (0.5.2+pr977): a one-token ShortConvolution call loses its gradient.

Found unaided on the H200 (2026-12-04) by ``tests/test_fla_target.py::test_fla_fused_equals_separate_where_spec_fuses``
(P4 on the fla target, reference core), shrunk to gated_deltanet fp32 B=2 T=1 hidden 32 conv_size 2, silu,
no bias: ``grad.x`` of the fused and the separate prologue differ in 64 of 64 elements, up to 3.7.
``scripts/fla_grad_probe.py`` then showed it at T=1 for every B (T >= 2 equal) while fla's conv kernel
alone is right in both layouts: the PR's ``ShortConvolution.forward`` takes its step kernel whenever
``B * T == N``, autograd on or off, and the step kernel has no backward, so ``y`` comes back detached.
0.6.0 takes the step only when ``not torch.is_grad_enabled()``. Any separate-path training call of one
token per sequence (the guard refusing fusion, ``use_cache``, ``cu_seqlens`` of one-token sequences)
silently trains without the conv's gradient. Prints, on 0.6.0 / the PR build::

    0.6.0: y.requires_grad True, max |grad.x - exact| 7.45e-09     exit 0
    0.5.2+pr977: y.requires_grad False (the gradient is lost)      exit 1

    TRITON_INTERPRET=1 python repro/fla_pr977_one_token_gradient.py    # CPU (or on a GPU without the variable)
"""

import sys

import fla
import torch
from fla.modules import ShortConvolution

from gdn_equiv.model.backends import fla_backend

if fla_backend._interpreting():
    fla_backend.interpreter_ready(fla_backend.conv_row())  # fla's autotuned kernels, pinned for the interpreter
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
conv = ShortConvolution(hidden_size=8, kernel_size=2, bias=False, activation="silu", backend="triton").to(device)
x = torch.randn(2, 1, 8, device=device, requires_grad=True)  # B=2 sequences of one token
y, _ = conv(x)
if not y.requires_grad:
    print(f"{fla.__version__}: y.requires_grad False (the gradient is lost)")
    sys.exit(1)
(grad,) = torch.autograd.grad(y.sum(), x)
w = conv.weight.detach()[:, 0, -1]  # at T = 1 only the newest tap sees a token
a = x.detach()[:, 0] * w
exact = torch.sigmoid(a) * (1 + a * (1 - torch.sigmoid(a))) * w
err = (grad[:, 0] - exact).abs().max().item()
print(f"{fla.__version__}: y.requires_grad True, max |grad.x - exact| {err:.3g}")
sys.exit(0 if err < 1e-5 else 1)
