"""Load sglang's Triton conv ops file alone (its one sglang import stubbed), from the installed wheel or from a
folder on PYTHONPATH holding ``sglang/kernels/ops/mamba/causal_conv1d_triton.py`` (``.engines/sglang-<v>``,
``gdn-equiv engines fetch``). Shared by the sglang reproducers; exit 3 where no CUDA device is here."""

import sys
import types
from pathlib import Path

import torch

RELPATH = "sglang/kernels/ops/mamba/causal_conv1d_triton.py"


def load():
    if not torch.cuda.is_available():
        print("cannot run here: no CUDA device (sglang's conv ops are Triton kernels)")
        sys.exit(3)
    for base in sys.path:
        path = Path(base or ".") / RELPATH
        if path.is_file():
            break
    else:
        import importlib.metadata

        path = Path(str(importlib.metadata.distribution("sglang").locate_file(RELPATH)))
    version = path.parents[4].name  # .engines/sglang-<v>/sglang/kernels/ops/mamba/<file>
    sys.modules["sglang.kernels.jit.utils"] = types.SimpleNamespace(is_arch_support_pdl=lambda: False)
    spec = importlib.util.spec_from_file_location("sglang_causal_conv1d_triton", path)
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    print(f"sglang ops from {path} ({version}), torch {torch.__version__}")
    return ops
