"""causal-conv1d 1.7.0: dx with return_final_states, against autograd through the package's own ref.

Seen through the gdn_equiv ``cuda`` adapter on the H200 (tests/test_backends_cuda.py, shrunk example
B=1, T=1, D=40, W=2, fp32, silu, no bias, no initial state, final state returned): dx differed from the
torch backend in exactly 8 of 40 channels (channels 32-39, |diff| up to 2.0). This script calls the
package directly, with no adapter, to tell whether the package's backward (with ``dfinal_states``)
or the adapter is at fault. Run on the H200 (2026-12-02) in its earlier form, which passed dfinal_states through a product-sum
(autograd then hands the package a fresh contiguous copy): the package agreed with its reference in
every case. So the defect was in the adapter/package interface: our adapter handed over a column
slice of its [N, D, W] gradient (stride(1) == W); handing it over channel-last fixed the adapter
(tests/test_backends_cuda.py: 7 passed on the H200). This form passes the strided gradient as-is, to
tell whether the package silently misreads it; it has NOT been run yet.
Exit status 1 = the package's dx disagrees with its reference.

    python repro/causal_conv1d_dfinal_states.py
"""

import sys

import torch
from causal_conv1d import causal_conv1d_fn
from causal_conv1d.causal_conv1d_interface import causal_conv1d_ref

torch.manual_seed(0)
bad = []
for D, T, layout in [(D, T, layout) for D in (40, 48, 64, 24) for T in (1, 2, 5) for layout in ("last", "strided")]:
    if True:
        x = torch.randn(1, T, D, device="cuda").transpose(1, 2).requires_grad_(True)  # channel-last [B, D, T]
        w = torch.randn(D, 2, device="cuda", requires_grad=True)
        dy = torch.randn(1, T, D, device="cuda").transpose(1, 2)  # channel-last, as the package requires
        # "strided": the final-state gradient as a column of a wider [B, D, 2] tensor (stride(1) == 2),
        # which is what autograd hands over when the caller concatenates the final state with more columns.
        dfin = (
            torch.randn(1, 1, D, device="cuda").transpose(1, 2)
            if layout == "last"
            else (torch.randn(1, D, 2, device="cuda")[..., 1:])
        )
        grads = []
        for fn in (causal_conv1d_fn, causal_conv1d_ref):
            x.grad = None
            y, fin = fn(x, w, None, return_final_states=True, activation="silu")
            # hand the gradients over as they are (a product-sum would give the package a fresh copy)
            torch.autograd.backward([y, fin], [dy, dfin])
            grads.append(x.grad.clone())
        diff = (grads[0] - grads[1]).abs()
        if diff.max() > 1e-4:
            chans = sorted({int(c) for c in (diff > 1e-4).nonzero()[:, 1]})
            bad.append(
                f"D={D} T={T} dfinal={layout} stride{tuple(dfin.stride())}: max |dx diff| {diff.max().item():.3g} in channels {chans}"
            )
print("\n".join(bad) or "package dx agrees with its reference in every case")
sys.exit(1 if bad else 0)
