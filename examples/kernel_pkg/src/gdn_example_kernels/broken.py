"""The example kernel with one planted defect each, selectable by name (:data:`DEFECTS`).

Each is a bare forward function (SPEC §3 signature) without an ``update``: gdn-equiv then runs the
step path through ``forward`` on a one-token window, so the defect shows in decoding too.

- ``state_shift``: reads the cached conv state one slot off (history ``[0, s0, .., s(W-2)]``
  instead of ``[s0, .., s(W-1)]``): wrong whenever a call continues from a state (decode, prefill
  after a prefix). Fused vs separate agree (both wrong); the conformance checks against torch catch it.
- ``bias_block``: drops the bias of channels 8-15 (a second 8-channel tile): wrong against torch,
  and the fused q|k|v call drops a different channel's bias than the separate calls do.
- ``wide_rounding``: calls wider than 16 channels (the fused one) sum the taps in reverse order:
  within every tolerance of torch, but fused != separate bitwise (P3) and channel slices differ.
"""

from __future__ import annotations

import torch

from gdn_example_kernels import conv

BLOCK = slice(8, 16)


def _shifted(state: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros_like(state[..., :1]), state[..., :-1]], dim=-1)


def _bias_without_block(bias: torch.Tensor) -> torch.Tensor:
    out = bias.clone()
    out[BLOCK] = 0
    return out


def state_shift(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    return conv(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens, history=_shifted)


def bias_block(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    return conv(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens, bias_of=_bias_without_block)


def wide_rounding(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    order = range(weight.shape[1] - 1, -1, -1) if x.shape[-1] > 16 else None
    return conv(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens, order=order)


#: defect name -> forward function (the entry points name them ``example-<name with dashes>``)
DEFECTS = {"state-shift": state_shift, "bias-block": bias_block, "wide-rounding": wide_rounding}
