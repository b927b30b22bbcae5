"""Does the serial backward's row loop stay exact when Triton pipelines it? (H200 probe, 2026-12-04)

The case the gate shrank on the H200 (B1 T3 D1 W3 fp32 silu, no bias): serial vs two-pass dx, for each
pipeline depth of the loop (``_GPU_SERIAL``'s last entry)::

    PYTHONPATH=$PWD python3 scripts/serial_stages_probe.py
"""

from __future__ import annotations

import os

import torch

from gdn_equiv.backends import triton_backend as tb


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    for T, W, D in ((3, 3, 1), (5, 4, 7), (130, 4, 300)):
        x = torch.randn(1, T, D, device="cuda", generator=gen)
        w = torch.randn(D, W, device="cuda", generator=gen)
        dy = torch.randn(1, T, D, device="cuda", generator=gen)
        vl = tb._Varlen(x, None)
        os.environ["GDN_EQUIV_TRITON_BACKWARD"] = "two-pass"
        two = tb._backward_impl(x, w, None, "silu", None, vl, dy, None, need_dw=True, need_dstate=False)
        os.environ["GDN_EQUIV_TRITON_BACKWARD"] = "serial"
        default = tb._GPU_SERIAL
        for stages in (1, 2, 3):
            tb._GPU_SERIAL = (*default[:3], stages)
            got = tb._backward_impl(x, w, None, "silu", None, vl, dy, None, need_dw=True, need_dstate=False)
            bad = (got[0] != two[0]).nonzero().tolist()
            print(f"T={T} W={W} D={D} stages={stages}: dx rows differing {sorted({r[1] for r in bad})[:8]}")
        tb._GPU_SERIAL = default


if __name__ == "__main__":
    main()
