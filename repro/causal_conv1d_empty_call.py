"""causal-conv1d on a call of no tokens: ``CUDA error: invalid argument`` instead of an empty result.

An ``attention_mask`` whose every position is padding unpads to zero tokens (``x [1, 0, D]``,
``cu_seqlens = [0, 0]``); a layer then runs its short convs on that empty call. The gate met it on an
H100 (2026-12-06, causal-conv1d 1.7.0, torch 2.11+cu130, fla 0.6.0) through P6's G4 search
(``Example(family=gla, B=1, T=1, varlen=mask(0,), ...)``): the separate path raised
``AcceleratorError: CUDA error: invalid argument`` both through gdn-equiv's ``cuda`` adapter (since fixed
there: a call of no tokens is answered without the package) and through fla's ``backend='cuda'`` conv
(``--gdn-backend fla-cuda``), which hands the call to the package as it is. The package launches an empty
grid. A depthwise causal conv of no tokens is an empty output and each sequence's state unchanged.

Run on a machine with CUDA and causal-conv1d (and fla for the second call)::

    python repro/causal_conv1d_empty_call.py

Exit 1 while either call raises, 0 once both return empty results. Written from the gate's report; not yet
run standalone (the session's device time ran out): the next GPU session runs it first.
"""

from __future__ import annotations

import sys

import torch


def main() -> int:
    from causal_conv1d import causal_conv1d_fn

    D, W = 16, 4
    x = torch.randn(1, 0, D, device="cuda")  # [B, T, D], T = 0: an all-padding batch unpadded
    weight = torch.randn(D, W, device="cuda")
    failed = False
    calls = {
        "causal_conv1d_fn, channel-last": lambda: causal_conv1d_fn(x.transpose(1, 2), weight, None, activation="silu")
    }
    try:
        from fla.modules.causal_conv1d import causal_conv1d as fla_conv  # fla 0.6.0's conv package

        cu = torch.tensor([0, 0], dtype=torch.int32, device="cuda")
        calls["fla causal_conv1d(backend='cuda'), cu_seqlens [0, 0]"] = lambda: fla_conv(
            x=x, weight=weight, bias=None, activation="silu", backend="cuda", cu_seqlens=cu
        )
    except ImportError:
        print("fla not installed: its call skipped")
    for name, call in calls.items():
        try:
            out = call()
            y = out[0] if isinstance(out, tuple) else out
            print(f"{name}: returned {tuple(y.shape)}")
        except Exception as exc:  # the finding: an error instead of an empty result
            failed = True
            print(f"{name}: raised {type(exc).__name__}: {str(exc).splitlines()[0]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
