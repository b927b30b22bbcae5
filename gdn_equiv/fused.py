"""The fused-prologue layer: the guard, one conv over q|k|v, and the separate path as fallback.

``forward(..., prologue="auto" | "fused" | "separate")`` chooses the path by argument. ``"fused"``
runs the fused path even where the guard says no, with PR #972's semantics (bias taken from the
layer's ``conv_bias`` flag, no cache, no ``cu_seqlens``), so the suite can show what goes wrong
(SPEC P6): a wrong result, or the error that path really raises.
"""

from __future__ import annotations

from typing import Any

import torch

from gdn_equiv.backends import causal_conv1d
from gdn_equiv.config import CallFacts
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.guard import Decision, decide
from gdn_equiv.reference import ConvStates, GatedDeltaNet, Projections, _Call

Tensor = torch.Tensor
PROLOGUES = ("auto", "fused", "separate")


class FusedGatedDeltaNet(GatedDeltaNet):
    """Same parameters and maths as :class:`GatedDeltaNet`; fuses the three convs when the guard allows."""

    last_decision: Decision | None = None
    #: The guard in use: a pure function of (LayerFacts, CallFacts). A subclass may supply another
    #: (the suite's planted defects do), which is injection by argument, not patching.
    guard = staticmethod(decide)

    def decide(self, call_facts: CallFacts) -> Decision:
        return self.guard(self.layer_facts(), call_facts)

    def _prologue(
        self, proj: Projections, call: _Call, use_cache: bool, prologue: str = "auto", **kwargs: Any
    ) -> tuple[tuple[Tensor, Tensor, Tensor], ConvStates]:
        if kwargs:
            raise InvalidArgument(f"unexpected keyword arguments: {sorted(kwargs)}")
        if prologue not in PROLOGUES:
            raise InvalidArgument(f"prologue must be one of {PROLOGUES}, got {prologue!r}")
        decision = self.decide(call.facts(use_cache))
        self.last_decision = decision
        if prologue == "fused" or (prologue == "auto" and decision.fuse):
            return self._fused_prologue(proj), (None, None, None)
        return self._separate_prologue(proj, call, use_cache)

    def _fused_prologue(self, proj: Projections) -> tuple[Tensor, Tensor, Tensor]:
        """One conv over the q|k|v channels; they are adjacent in the projection output, so no copy."""
        if not self.use_short_conv:
            raise InvalidArgument("prologue='fused' needs use_short_conv=True: there are no convs to fuse")
        qc, kc, vc = self.convs()
        weight = torch.cat([qc.weight[:, 0], kc.weight[:, 0], vc.weight[:, 0]], dim=0)  # [Dk+Dk+Dv, W]
        # PR #972's rule: the layer flag decides whether biases exist (G8 is what makes this safe).
        bias = torch.cat([qc.bias, kc.bias, vc.bias], dim=0) if self.conv_bias else None  # type: ignore[list-item]
        y, _ = causal_conv1d(proj.qkv, weight, bias, qc.activation, backend=qc.backend)
        q, k, v = torch.split(y, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        return q.contiguous(), k.contiguous(), v.contiguous()
