"""GPU: why the sanitizer teeth came back clean (docs/kernel-engineer.md). Runs compute-sanitizer directly on the
planted out-of-bounds and race probes and on a bare Triton kernel that reads one element past a 40-float tensor,
and counts in the planted kernel's PTX the global loads, the racing shared buffer and the barriers::

    python tools/sanitize_probe.py all
"""

import glob
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
mode = sys.argv[1]
if mode == "probe":
    from gdn_equiv.harness import planted
    from gdn_equiv.model.backends import get_backend

    print("probe", sys.argv[2], planted.sanitizer_probe(get_backend(sys.argv[2])))
elif mode == "raw":
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def k(x_ptr, y_ptr, N, BD: tl.constexpr):
        d = tl.arange(0, BD)
        v = tl.load(x_ptr + d, mask=d < N + 1, other=0.0)
        tl.store(y_ptr + d, v, mask=d < N)

    x = torch.randn(40, device="cuda")
    y = torch.empty_like(x)
    k[(1,)](x, y, 40, BD=64)
    torch.cuda.synchronize()
    print("raw done", bool((x == y).all()))
else:
    env = {
        **os.environ,
        "TRITON_KERNEL_DUMP": "1",
        "TRITON_DUMP_DIR": "/tmp/tdump",
        "TRITON_CACHE_DIR": "/tmp/tcache-dbg",
    }
    for name in ("SANITIZER_OOB", "SANITIZER_RACE"):
        for tool in ("memcheck", "racecheck"):
            r = subprocess.run(
                [
                    "compute-sanitizer",
                    "--tool",
                    tool,
                    sys.executable,
                    __file__,
                    "probe",
                    "gdn_equiv.harness.planted:" + name,
                ],
                env=env,
                capture_output=True,
                text=True,
            )
            print("==", name, tool, "rc", r.returncode)
            print((r.stdout + r.stderr)[-1500:])
    r = subprocess.run(
        ["compute-sanitizer", "--tool", "memcheck", sys.executable, __file__, "raw"],
        env=env,
        capture_output=True,
        text=True,
    )
    print("== raw memcheck rc", r.returncode)
    print((r.stdout + r.stderr)[-1500:])
    for p in glob.glob("/tmp/tdump/**/planted_conv_fwd_kernel*.ptx", recursive=True) + glob.glob(
        "/tmp/tcache-dbg/**/planted_conv_fwd_kernel*.ptx", recursive=True
    ):
        s = Path(p).read_text()
        print(
            "PTX",
            p,
            "ld.global:",
            s.count("ld.global"),
            "race sym:",
            s.count("gdn_equiv_race"),
            "bar:",
            s.count("bar.sync"),
        )
