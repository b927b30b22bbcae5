#!/usr/bin/env python
"""Standalone reproducer written by gdn-equiv: P3-forward-exact on backend 'gdn_equiv.harness.planted:scaled' (family kda).

Mismatch[P3 output: step kernel, beyond tolerance]: output: fused vs separate are not equal!
Mismatched elements: 8 / 8 (100.0%)
Greatest absolute difference: 3.707408905029297e-05 at index (0, 0, 6) (up to 0.0 allowed)
Greatest relative difference: 0.00011029657152845212 at index (0, 0, 2) (up to 0.0 allowed)
Example: Example(family=kda, dtype=float32, B=1, T=1, varlen=none, cache=none, use_cache=False, grad=False, train=False, scale=1.0, seed=0, config: hidden_size=8, conv_size=2, conv_bias=False, conv_backend='gdn_equiv.harness.planted:scaled', head_dim=2, num_heads=1)
Diagnosis ('gdn_equiv.harness.planted:scaled' kernel re-run on the conv inputs): the step kernel (update) and the full-sequence kernel differ on q alone (channels 0–1; the separate path ran the step kernel at T = 1): not a channel offset or count effect; up to 0.0025, past the float32 tolerance
"""
import os

import torch

if 'cpu' == "cpu" and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as gdn-equiv ran it: Triton kernels in the interpreter

from gdn_equiv.harness.interpreter import make_faithful

make_faithful()  # the interpreter rounding fp32->bf16 as a GPU does, as gdn-equiv ran it

from gdn_equiv.model.example import Example
from gdn_equiv.harness.properties import check_forward_exact

EXAMPLE = Example.from_json('{"batch": 1, "cache": "none", "config": {"allow_neg_eigval": false, "conv_backend": "gdn_equiv.harness.planted:scaled", "conv_bias": false, "conv_size": 2, "expand_v": 1, "head_dim": 2, "hidden_size": 8, "k_conv": {"activation": "silu", "backend": null, "bias": null, "dtype": null, "extras": [], "kernel_size": null}, "layer_idx": 0, "mode": "chunk", "norm_eps": 1e-05, "num_heads": 1, "num_v_heads": null, "q_conv": {"activation": "silu", "backend": null, "bias": null, "dtype": null, "extras": [], "kernel_size": null}, "use_short_conv": true, "v_conv": {"activation": "silu", "backend": null, "bias": null, "dtype": null, "extras": [], "kernel_size": null}}, "dtype": "float32", "family": "kda", "grad": false, "pad_side": "right", "prefix_len": 0, "scale": 1.0, "seed": 0, "seq_len": 1, "seq_lens": [], "train": false, "use_cache": false, "varlen": "none"}')

if __name__ == "__main__":
    check_forward_exact(EXAMPLE, device='cpu')
    print("no failure: the defect is gone")
