"""vLLM 0.34.0, CPU torch path: a decode batch through its torch update op (``causal_conv1d_update_torch``) is not
bitwise the same tokens through its prefill op (``causal_conv1d_fn_cpu``) from the same states (SPEC §11 S6: the
fast path = the general path on every input its guard admits). Found by ``gdn-equiv check --derandomize
--serving-engine vllm-cpu-torch``, shrunk: ``Batch(D1 W2 float32 bias=False act=none, S2, lens=[1, 1], slots=[0,1],
cc, seed=0)`` (two continued sequences of one token; suite slots 0, 1 are vLLM's 1, 2).

One fp32 rounding: ``F.conv1d`` over a batch of two sequences rounds the first one's output differently from
the same sequence alone; one sequence alone agrees. Within SPEC §6's fp32 tolerance; S6 asks for the same bits
where an engine does not document another reduction. Exit status 1 = the two ops differ.

    python repro/vllm_cpu_decode_vs_prefill_not_bitwise.py
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
        "vllm._cpu_ops": {"causal_conv1d_update_cpu_vec": None},
        "vllm.v1.attention.backends.utils": {"NULL_BLOCK_ID": 0, "PAD_SLOT_ID": -1},
    }
    for name, attrs in stubs.items():
        sys.modules[name] = types.SimpleNamespace(**attrs)
    rel = "vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py"
    spec = importlib.util.spec_from_file_location(
        "vllm_cpu_causal_conv1d", importlib.metadata.distribution("vllm").locate_file(rel)
    )
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    return ops


def exact(hexes, shape):
    return torch.tensor([float.fromhex(h) for h in hexes]).reshape(shape)


ops = load_cpu_ops()
print(f"vllm {importlib.metadata.version('vllm')}, torch {torch.__version__}")
x = exact(["0x1.23096cp-1", "-0x1.15a342p+0"], (2, 1))  # [N, D]: one token for each of two sequences
weight = exact(["0x1.529ccp-2", "0x1.11548ep-3"], (1, 2))  # [D, W]
states = exact(["0x1.8a7eb8p+0", "-0x1.2c78ap-2", "-0x1.16e292p+1"], (3, 1, 1))  # [S, D, W-1]; slot 0: null block
slots = torch.tensor([1, 2], dtype=torch.int32)

prefill_states = states.clone()
prefill = ops.causal_conv1d_fn_cpu(
    x.T,
    weight,
    None,
    prefill_states,
    torch.tensor([0, 1, 2], dtype=torch.int32),
    slots,
    torch.tensor([True, True]),
    None,
).T  # [D, T] -> [T, D]
decode_states = states[slots.long()].clone()  # the torch update op takes the batch's states, staged
decode = ops.causal_conv1d_update_torch(x[:, :, None].clone(), decode_states, weight, None, None)[:, :, 0]
for i in range(2):
    print(f"sequence {i}: prefill op {prefill[i, 0].item()!r}, decode op {decode[i, 0].item()!r}")
print("states equal:", torch.equal(prefill_states[slots.long()], decode_states))
if not torch.equal(prefill, decode):
    print(f"DEFECT (S6): decode and prefill ops differ by {(prefill - decode).abs().max().item():.3g}")
    sys.exit(1)
print("decode == prefill, bitwise")
