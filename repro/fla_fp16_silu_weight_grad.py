"""fla's Triton conv (0.6.0 and the PR #977 build): fp16 + silu conv-weight gradient beyond SPEC §6.

Found unaided by the gating suite over fla's conv (``pytest --pyargs gdn_equiv.suite --gdn-backend
fla-triton,fla-gluon``) on the H200 with fla 0.6.0 (2026-12-04; both fla-triton and fla-gluon), and on CPU
(Triton's interpreter) with the PR #977 build a session earlier: ``test_backend_final_state_continues_the_sequence``
shrunk to ``ConvCall(B=1, T=32, D=64, W=2, float16, bias=False, silu)`` split at 1: ``continued.grad.weight``
1 of 128 elements off, abs 0.0039 where fp16 allows 0.001 + 0.001 * |expected|. fp16 without activation and
fp32 with silu pass. Likely cause, read from fla's source: the backward recomputes the pre-activation into
a buffer of x's dtype, so silu's derivative is taken at an fp16-rounded value (torch keeps fp32).
This script runs that one check of the property (the call split after token 1, the first part's final
state fed to the second as its initial state, every gradient compared with the torch backend's) on the
shrunk call, for fla-triton and, as the control, the torch backend itself, and exits 1 while fla's
departs beyond §6::

    TRITON_INTERPRET=1 python repro/fla_fp16_silu_weight_grad.py    # CPU (or on a GPU without the variable)
"""

import sys

import fla
import torch

from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.strategies import ConvCall
from gdn_equiv.suite.test_conformance import check_continuation

device = "cuda" if torch.cuda.is_available() else "cpu"
call = ConvCall(B=1, T=32, D=64, W=2, dtype="float16", bias=False, activation="silu")
print(f"fla {fla.__version__} on {device}: {call}, split at 1")
failed = []
for backend in ("torch", "fla-triton"):
    try:
        check_continuation(call, 1, backend, device)
        print(f"{backend:>10}: within §6")
    except Mismatch as exc:
        failed.append(backend)
        lines = str(exc).splitlines()
        print(f"{backend:>10}: " + "; ".join(line.strip() for line in lines[:4]))
sys.exit(1 if failed else 0)
