"""vLLM 0.34.0, CPU torch path: one causal_conv1d_fn_cpu call over packed q|k|v channels is not bitwise the three calls
over q, k and v (SPEC §11 S7). Found by ``gdn-equiv check --derandomize --serving-engine vllm-cpu-torch``, shrunk:
``PackedCase(Batch(D3 W4 float32 bias=True act=none, S1, lens=[1], slots=[0], f, seed=0), sizes=[1, 1, 1])`` (slot 0
of the suite is vLLM's slot 1: slot 0 is its null block).

The difference is one fp32 rounding (``F.conv1d`` with ``groups=D`` sums a channel's taps in an order that
depends on how many channels share the call); within SPEC §6's fp32 tolerance, but S7 asks for the same
bits, which is what sglang claims for its packed call. Exit status 1 = the packed and split results differ.

Needs vLLM 0.34.0's ``vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py``: imported normally where
vLLM imports (a CPU build); otherwise loaded alone from the installed wheel with its three top-level imports
stubbed (the C++ decode op it names is not called here):

    python repro/vllm_cpu_packed_qkv_not_bitwise.py
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
    path = importlib.metadata.distribution("vllm").locate_file(
        "vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py"
    )
    spec = importlib.util.spec_from_file_location("vllm_cpu_causal_conv1d", path)
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    return ops


ops = load_cpu_ops()
print(f"vllm {importlib.metadata.version('vllm')}, torch {torch.__version__}")


def exact(hexes, shape):
    return torch.tensor([float.fromhex(h) for h in hexes]).reshape(shape)


# the shrunk case's tensors, bit for bit (the suite draws them from seed 0)
D, W, S = 3, 4, 2
x = exact(["0x1.a28662p-2", "0x1.6be20cp+0", "0x1.31f70ep-3"], (1, D))  # [T, D]: one token, q|k|v one channel each
weight = exact(
    [
        *("0x1.529ccp-2", "0x1.11548ep-3", "0x1.f94296p-6", "0x1.3e1d4ep-2", "-0x1.cec07p-3", "-0x1.543c16p-4"),
        *("-0x1.85d428p-1", "0x1.86d826p-3", "-0x1.07115cp-1", "-0x1.204874p-2", "-0x1.c8da4ep-2", "-0x1.dd2f7ap-6"),
    ],
    (D, W),
)
bias = exact(["-0x1.906754p-3", "-0x1.ee67d6p-1", "0x1.b08da4p-2"], (D,))
states = torch.randn(S, D, W - 1)  # never read: the sequence is fresh (has_initial_state False)
qsl = torch.tensor([0, 1], dtype=torch.int32)
idx = torch.tensor([1], dtype=torch.int32)
fresh = torch.tensor([False])

packed_states = states.clone()
packed = ops.causal_conv1d_fn_cpu(x.T, weight, bias, packed_states, qsl, idx, fresh, None).T
worst = 0.0
for c, name in enumerate("qkv"):
    part_states = states[:, c : c + 1].clone()
    part = ops.causal_conv1d_fn_cpu(
        x[:, c : c + 1].contiguous().T, weight[c : c + 1], bias[c : c + 1], part_states, qsl, idx, fresh, None
    ).T
    diff = (packed[:, c : c + 1] - part).abs().max().item()
    same_state = torch.equal(packed_states[:, c : c + 1], part_states)
    print(f"{name}: packed {packed[0, c].item()!r} vs alone {part[0, 0].item()!r}, |diff| {diff:.3g}")
    print(f"   state equal: {same_state}")
    worst = max(worst, diff)
if worst > 0:
    print("DEFECT (S7): the packed q|k|v call differs from the three convs")
    sys.exit(1)
print("packed == split, bitwise")
