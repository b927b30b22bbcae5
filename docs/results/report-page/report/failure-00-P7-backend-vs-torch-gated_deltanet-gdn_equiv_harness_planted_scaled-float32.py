#!/usr/bin/env python
"""Standalone reproducer written by gdn-equiv: P7-backend-vs-torch on backend 'gdn_equiv.harness.planted:scaled' (family gated_deltanet).

Mismatch: output: gdn_equiv.harness.planted:scaled vs torch are not close!
Mismatched elements: 4 / 8 (50.0%)
Greatest absolute difference: 3.8504600524902344e-05 at index (0, 0, 3) (up to 1e-05 allowed)
Greatest relative difference: 4.358117741399255e-05 at index (0, 0, 1) (up to 1e-05 allowed)
Example: Example(family=gated_deltanet, dtype=float32, B=1, T=1, varlen=none, cache=none, use_cache=False, grad=False, train=False, scale=1.0, seed=0, config: hidden_size=8, conv_size=2, conv_bias=False, conv_backend='gdn_equiv.harness.planted:scaled', head_dim=2, num_heads=1, use_gate=False)
"""
import os

import torch

if 'cpu' == "cpu" and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as gdn-equiv ran it: Triton kernels in the interpreter

from gdn_equiv.harness.interpreter import make_faithful

make_faithful()  # the interpreter rounding fp32->bf16 as a GPU does, as gdn-equiv ran it

from gdn_equiv.model.example import Example
from gdn_equiv.harness.properties import check_backend_matches_torch

EXAMPLE = Example.from_json('{"batch": 1, "cache": "none", "config": {"allow_neg_eigval": false, "conv_backend": "gdn_equiv.harness.planted:scaled", "conv_bias": false, "conv_size": 2, "expand_v": 2, "head_dim": 2, "hidden_size": 8, "k_conv": {"activation": "silu", "backend": null, "bias": null, "dtype": null, "extras": [], "kernel_size": null}, "layer_idx": 0, "mode": "chunk", "norm_eps": 1e-05, "num_heads": 1, "num_v_heads": null, "output_gate_activation": "swish", "q_conv": {"activation": "silu", "backend": null, "bias": null, "dtype": null, "extras": [], "kernel_size": null}, "use_gate": false, "use_short_conv": true, "v_conv": {"activation": "silu", "backend": null, "bias": null, "dtype": null, "extras": [], "kernel_size": null}}, "dtype": "float32", "family": "gated_deltanet", "grad": false, "pad_side": "right", "prefix_len": 0, "scale": 1.0, "seed": 0, "seq_len": 1, "seq_lens": [], "train": false, "use_cache": false, "varlen": "none"}')

if __name__ == "__main__":
    check_backend_matches_torch(EXAMPLE, device='cpu')
    print("no failure: the defect is gone")
