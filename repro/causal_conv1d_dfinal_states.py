"""causal-conv1d 1.7.0 silently misreads a final-state gradient that is not channel-last.

Finding (H200, torch 2.11+cu130, causal-conv1d 1.7.0 from ../shared/wheels, 2026-12-02): with
``return_final_states=True``, the backward computes ``dx`` from ``dfinal_states`` assuming channel
stride 1. Handed the same values as a column of a wider ``[B, D, 2]`` tensor (stride(1) == 2, what
autograd passes when the caller slices or concatenates the final state), ``dx`` is wrong in every
channel from 32 on (|diff| up to 3.9 against the package's own ``causal_conv1d_ref``; D = 40, 48, 64,
T = 1, 2, 5), with no error; D = 24 and the channel-last layout agree. It first showed as 8 wrong
channels (32-39) of a D = 40 example in tests/test_backends_cuda.py; the gdn_equiv ``cuda`` adapter
now hands the gradient over channel-last (``_ChannelLastGrad``), so the suite's cuda backend is not
affected. Printed on the H200::

    D=40 T=1 dfinal=strided stride(80, 2, 1): max |dx diff| 2.03 in channels [32, ..., 39]
    D=64 T=5 dfinal=strided stride(128, 2, 1): max |dx diff| 3.93 in channels [32, ..., 63]
    exit 1

Exit status 1 = the package's dx disagrees with its reference (the defect is present).

    python repro/causal_conv1d_dfinal_states.py
"""

import sys

import torch
from causal_conv1d import causal_conv1d_fn
from causal_conv1d.causal_conv1d_interface import causal_conv1d_ref

torch.manual_seed(0)
bad = []
for D, T, layout in [(D, T, layout) for D in (40, 48, 64, 24) for T in (1, 2, 5) for layout in ("last", "strided")]:
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
            f"D={D} T={T} dfinal={layout} stride{tuple(dfin.stride())}: "
            f"max |dx diff| {diff.max().item():.3g} in channels {chans}"
        )
print("\n".join(bad) or "package dx agrees with its reference in every case")
sys.exit(1 if bad else 0)
