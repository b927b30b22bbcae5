"""vLLM (0.28.0-0.34.0 alike), CPU path: the torch decode op handed a conv state narrower than ``W-1`` answers without
a word, with fewer outputs than tokens (SPEC §11 "outside its declared surface an op raises with a message or
answers right"; issue #50). Found by ``gdn-equiv check --derandomize --serving-engine vllm-0.34.0-cpu-torch
--examples 100 --property S0-outside``, shrunk: ``SurfaceCase(update/positional D2 W3 float32 bias=False act=none S1
extra=-1 k=2 OUTSIDE narrow-state rows=[2:0>0] seed=0)``.

Root cause: the op (``vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py:causal_conv1d_update_torch``, the
aarch64 fallback) takes ``state_len = conv_state.shape[-1]`` and never checks ``state_len >= width - 1`` (the
Triton op's ``validate_data`` does); ``F.conv1d`` over ``state_len + k < width + k - 1`` inputs gives
``state_len + k - width + 1`` outputs, sliced ``[-k:]``: ``k - 1`` outputs for ``k`` tokens (none for one token),
and the state is still shifted. No vLLM caller is known to pass such a state (its layers size it from the
width); the contract is the op's. Exit status 1 = the call answered with the wrong number of outputs and raised
nothing; 0 = it raised, or answered ``k`` outputs.

    PYTHONPATH=.engines/vllm-0.34.0 python repro/vllm_cpu_update_narrow_state_silent.py
"""

import importlib.metadata
import importlib.util
import sys
import types

import torch


def load_cpu_ops():
    try:
        from vllm.model_executor.layers.mamba.ops.cpu import causal_conv1d as ops

        return ops
    except Exception as exc:  # a CUDA wheel on a machine without its torch: load the one file alone
        print(f"(vllm does not import here: {type(exc).__name__}; loading the ops file alone)")
    stubs = {
        "vllm._cpu_ops": {"causal_conv1d_update_cpu_vec": None},  # 0.34.0
        "vllm._custom_ops": {"causal_conv1d_update_cpu_vec": None},  # 0.28.0-0.33.0
        "vllm.v1.attention.backends.utils": {"NULL_BLOCK_ID": 0, "PAD_SLOT_ID": -1},
    }
    for name, attrs in stubs.items():
        sys.modules[name] = types.SimpleNamespace(**attrs)
    path = importlib.metadata.distribution("vllm").locate_file(
        "vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py"
    )
    spec = importlib.util.spec_from_file_location("vllm_cpu_causal_conv1d", path)
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    return ops


ops = load_cpu_ops()
print(f"vllm {importlib.metadata.version('vllm')}, torch {torch.__version__}")
D, W, k = 2, 4, 2
state = torch.randn(1, D, W - 2)  # one column short of W - 1
x = torch.randn(1, D, k)  # [batch, dim, tokens]
try:
    y = ops.causal_conv1d_update_torch(x, state, torch.randn(D, W), None, None)
except Exception as exc:
    print(f"refused: {type(exc).__name__}: {exc}")
    sys.exit(0)
if y.shape[-1] != k:
    print(f"{k} tokens in, {y.shape[-1]} outputs out (y {tuple(y.shape)}), no error: a state {W - 2} wide for W={W}")
    sys.exit(1)
print("no failure: k outputs")
