"""fla's ``backend='cuda'`` conv (causal-conv1d underneath), called as a SPEC §3 backend: what the
installed gating suite reported on the H200 (``pytest --pyargs gdn_equiv.suite --gdn-backend fla-cuda``,
fla 0.6.0, 2026-12-04), one minimal call per finding, against the ``torch`` backend::

    python repro/fla_cuda_conv.py        # exit 1 while any finding is present

1. ``y`` ignores the initial state (fla passes ``initial_states=None`` to the package).
2. The final state carries no gradient (fla computes it with a separate Triton kernel, outside autograd).
3. Channel counts not divisible by 8 raise (the package's limit; fla does not pad, our ``cuda`` adapter does).
4. A bias that is not contiguous raises in the step kernel (``bias.stride(-1) == 1``).
5. ``dy`` as a channel slice of a wider tensor (how the fused q|k|v prologue hands it over) raises in
   the backward (strides must be multiples of 8).

fla's own layers avoid 1 and 2 (they switch to Triton when there is a cache) and 5 (their ``dy`` is
whole); 3 and 4 are limits of the backend as a general conv. Each line prints PRESENT or absent.
"""

from __future__ import annotations

import sys

import torch

from gdn_equiv.model.backends import causal_conv1d, causal_conv1d_update

torch.manual_seed(0)
dev = "cuda"
found = []


def report(name: str, present: bool, detail: str) -> None:
    print(f"{'PRESENT' if present else 'absent '}  {name}: {detail}")
    if present:
        found.append(name)


def attempt(fn):
    try:
        return fn(), None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


x = torch.randn(1, 1, 64, device=dev)
w = torch.randn(64, 2, device=dev)
s = torch.randn(1, 64, 2, device=dev)
y_fla, _ = causal_conv1d(x, w, None, None, s, False, None, backend="fla-cuda")
y_ref, _ = causal_conv1d(x, w, None, None, s, False, None, backend="torch")
err = (y_fla - y_ref).abs().max().item()
report("1 y ignores initial_state", err > 1e-5, f"B1 T1 D64 W2 fp32, max |y - torch| = {err:.3g}")

xg = torch.randn(1, 4, 64, device=dev, requires_grad=True)
_, final = causal_conv1d(xg, w, None, None, None, True, None, backend="fla-cuda")
report("2 final state without gradient", final.grad_fn is None, f"final.requires_grad = {final.requires_grad}")

_, why = attempt(lambda: causal_conv1d(torch.randn(1, 4, 12, device=dev), torch.randn(12, 4, device=dev),
                                       backend="fla-cuda"))  # fmt: skip
report("3 D % 8 != 0 raises", why is not None, why or "D=12 ran")

b = torch.randn(64, 2, device=dev)[:, 0]  # stride 2
_, why = attempt(lambda: causal_conv1d_update(torch.randn(1, 64, device=dev), s, w, b, None, backend="fla-cuda"))
report("4 strided bias raises in update", why is not None, why or "ran")

wide = torch.randn(2, 8, 3 * 64 + 4, device=dev)
xs = torch.randn(2, 8, 64, device=dev, requires_grad=True)
y, _ = causal_conv1d(xs, w, None, "silu", None, False, None, backend="fla-cuda")
_, why = attempt(lambda: torch.autograd.grad(y, xs, wide[..., 4 : 4 + 64]))
report("5 dy channel slice raises in backward", why is not None, why or "ran")

print(f"{len(found)} of 5 present")
sys.exit(1 if found else 0)
