"""Load sglang's Triton conv ops file alone (its one sglang import stubbed), from the installed wheel or from a
folder on PYTHONPATH holding ``sglang/kernels/ops/mamba/causal_conv1d_triton.py`` (``.engines/sglang-<v>``,
``gdn-equiv engines fetch``). Shared by the sglang reproducers; exit 3 where no CUDA device is here."""

import importlib.metadata
import importlib.util
import os
import sys
import traceback
import types
from pathlib import Path

import torch

RELPATH = "sglang/kernels/ops/mamba/causal_conv1d_triton.py"


def _could_not_run(kind, value, tb):  # a reproducer that crashes found nothing: never exit 1 (the finding's status)
    traceback.print_exception(kind, value, tb)
    print("the reproducer could not run: exit 4 (not a finding)")
    sys.stdout.flush()
    os._exit(4)


sys.excepthook = _could_not_run


def load():
    if not torch.cuda.is_available():
        print("cannot run here: no CUDA device (sglang's conv ops are Triton kernels)")
        sys.exit(3)
    for base in sys.path:
        path = Path(base or ".") / RELPATH
        if path.is_file():
            break
    else:
        path = Path(str(importlib.metadata.distribution("sglang").locate_file(RELPATH)))
    version = path.parents[4].name  # .engines/sglang-<v>/sglang/kernels/ops/mamba/<file>
    sys.modules["sglang.kernels.jit.utils"] = types.SimpleNamespace(is_arch_support_pdl=lambda: False)
    spec = importlib.util.spec_from_file_location("sglang_causal_conv1d_triton", path)
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    print(f"sglang ops from {path} ({version}), torch {torch.__version__}")
    return ops
