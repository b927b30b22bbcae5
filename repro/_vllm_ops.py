"""Load vLLM's Triton conv ops file alone (its vLLM imports stubbed: the platform, triton, two constants), from the
installed wheel or from a folder on PYTHONPATH holding ``vllm/model_executor/layers/mamba/ops/causal_conv1d.py``
(``.engines/vllm-<v>``, ``gdn-equiv engines fetch``). Exit 3 where no CUDA device is here."""

import importlib.metadata
import importlib.util
import os
import sys
import traceback
import types
from pathlib import Path

import torch

RELPATH = "vllm/model_executor/layers/mamba/ops/causal_conv1d.py"


def _could_not_run(kind, value, tb):  # a reproducer that crashes found nothing: never exit 1 (the finding's status)
    traceback.print_exception(kind, value, tb)
    print("the reproducer could not run: exit 4 (not a finding)")
    sys.stdout.flush()
    os._exit(4)


sys.excepthook = _could_not_run


def load():
    if not torch.cuda.is_available():
        print("cannot run here: no CUDA device (vLLM's conv ops are Triton kernels)")
        sys.exit(3)
    import triton
    import triton.language as tl

    for base in sys.path:
        path = Path(base or ".") / RELPATH
        if path.is_file():
            break
    else:
        path = Path(str(importlib.metadata.distribution("vllm").locate_file(RELPATH)))
    platform = types.SimpleNamespace(is_cpu=lambda: False, is_arch_support_pdl=lambda: False)
    sys.modules["vllm.platforms"] = types.SimpleNamespace(current_platform=platform)
    sys.modules["vllm.triton_utils"] = types.SimpleNamespace(tl=tl, triton=triton)
    sys.modules["vllm.v1.attention.backends.utils"] = types.SimpleNamespace(NULL_BLOCK_ID=0, PAD_SLOT_ID=-1)
    spec = importlib.util.spec_from_file_location("vllm_causal_conv1d", path)
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    print(f"vLLM ops from {path}, torch {torch.__version__}, triton {triton.__version__}")
    return ops
