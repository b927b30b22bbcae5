"""vLLM (0.28.0-0.34.0 alike), CPU path: the prefill op writes vLLM's null block for a pad sequence
(SPEC §11 S2; S6 sees the same through the decode op, which skips it). Found by ``scripts/serving_search.py
vllm-0.34.0-cpu-torch``, shrunk: ``SpecCase(Batch(D1 W2 float32 bias=False act=none, S2, lens=[1], slots=[pad],
f, seed=0), k=1, accepted=[1])``.

vLLM's layers call ``causal_conv1d_fn`` (on a CPU build: ``causal_conv1d_fn_cpu``) without ``pad_slot_id`` and
mark a pad entry of ``cache_indices`` with ``NULL_BLOCK_ID = 0``; the Triton kernel skips that entry
(``null_block_id``), the CPU op skips only ``pad_slot_id`` (default ``PAD_SLOT_ID = -1``) and so writes the pad
sequence's inputs into block 0. Block 0 is vLLM's reserved null block: no request's state, so this is harmless
as long as nothing reads it; it is a difference between vLLM's two prefill ops on the same call.
Exit status 1 = block 0 was written.

    PYTHONPATH=.engines/vllm-0.34.0 python repro/vllm_cpu_prefill_writes_null_block.py
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
NULL_BLOCK_ID = 0
D, W = 1, 2
storage = torch.full((2, W - 1, D), 7.0)  # SD layout [blocks, state_len, dim], vLLM's default
conv_states = storage.transpose(-1, -2)  # what the layer hands the op: [blocks, dim, state_len]
before = storage.clone()
x = torch.tensor([[3.0]])  # [dim, tokens]: one pad sequence of one token
ops.causal_conv1d_fn_cpu(
    x,
    torch.ones(D, W),
    None,
    conv_states=conv_states,
    query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
    cache_indices=torch.tensor([NULL_BLOCK_ID], dtype=torch.int32),
    has_initial_state=torch.tensor([False]),
    activation=None,
)
if not torch.equal(storage[0], before[0]):
    print(f"the null block was written: {before[0].flatten().tolist()} -> {storage[0].flatten().tolist()}")
    sys.exit(1)
print("no failure: the null block is untouched")
