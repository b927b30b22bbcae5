"""Does the serial backward's row loop stay exact when Triton pipelines it or groups its rows? (H200
probe, 2026-12-04; row groups added 2026-12-05)

The case the gate shrank on the H200 (B1 T3 D1 W3 fp32 silu, no bias) and two larger ones: serial vs
two-pass dx, for each pipeline depth of the loop and each row group (``_GPU_SERIAL``'s last two
entries)::

    PYTHONPATH=$PWD python3 tools/serial_stages_probe.py
"""

from __future__ import annotations

import os

import torch

from gdn_equiv.model.backends import triton_backend as tb


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
        for stages, rows in ((1, 1), (2, 1), (3, 1), (1, 2), (1, 4), (1, 8), (2, 4)):
            tb._GPU_SERIAL = (*default[:3], stages, rows)
            got = tb._backward_impl(x, w, None, "silu", None, vl, dy, None, need_dw=True, need_dstate=False)
            bad = (got[0] != two[0]).nonzero().tolist()
            print(f"T={T} W={W} D={D} stages={stages} rows={rows}: dx rows differing {sorted({r[1] for r in bad})[:8]}")
        tb._GPU_SERIAL = default


if __name__ == "__main__":
    main()
