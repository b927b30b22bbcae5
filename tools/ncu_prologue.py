"""One fused-prologue forward+backward of the triton backend for Nsight Compute to profile.

Same shape as ``bwd_tiles.py`` (B=2, T=2048, D=6144, W=4, bf16, bias, silu: the fused q|k|v prologue
of the bench's first shape). Three warm-up iterations compile and settle; only the fourth is inside
``cudaProfilerStart``/``Stop``, so with ``--profile-from-start off`` ncu profiles exactly the kernels of
one forward+backward::

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \\
        python3 tools/ncu_prologue.py
"""

from __future__ import annotations

import torch

B, T, D, W = 2, 2048, 6144, 4


def main() -> None:
    from gdn_equiv.model.backends import triton_backend as tb

    if not torch.cuda.is_available() or tb.unavailable() is not None:
        raise SystemExit("needs a CUDA device and triton")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, weight, bias = (
        torch.randn(shape, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_()
        for shape in ((B, T, D), (D, W), (D,))
    )
    dy = torch.randn(B, T, D, device="cuda", generator=gen).to(torch.bfloat16)

    def step() -> None:
        y, _ = tb.forward(x, weight, bias, "silu", None, False, None)
        torch.autograd.grad(y, (x, weight, bias), dy)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"profiled one forward+backward: B={B} T={T} D={D} W={W} bf16 silu bias")


if __name__ == "__main__":
    main()
