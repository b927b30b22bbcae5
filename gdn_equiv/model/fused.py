"""The fused prologue, for every family: the guard, one conv over all slots' channels, and the
separate path as fallback.

``forward(..., prologue="auto" | "fused" | "separate")`` chooses the path by argument. ``"fused"``
runs the fused path even where the guard says no, with upstream's semantics (PR #972/#977: bias
concatenated only when the layer's ``conv_bias`` flag is on, the first slot's activation,
registered per-conv facts (the L2 norm: branch fuse-conv-l2 would fuse that way) and backend, no
cache, no ``cu_seqlens``, a dense mask multiplied into the input), so the suite can
show what goes wrong (SPEC P6): a wrong result, or the error that path really raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.backends import causal_conv1d
from gdn_equiv.model.config import CallFacts
from gdn_equiv.model.conv_ops import apply_conv_facts
from gdn_equiv.model.guard import Decision, decide
from gdn_equiv.model.reference import ConvStates, LayerCall, Projections, ShortConv, ShortConvLayer

Tensor = torch.Tensor
PROLOGUES = ("auto", "fused", "separate")


def fused_short_conv(
    x: Tensor, convs: Sequence[ShortConv], *, with_bias: bool, mask: Tensor | None = None
) -> tuple[Tensor, ...]:
    """One depthwise conv over ``x [B, T, sum D_i]`` (the slots' inputs side by side) with the convs'
    weights concatenated, split back by each weight's rows (grouped k/v and expanded v need nothing
    else). ``with_bias`` concatenates every conv's bias (a ``None`` among them raises, as upstream
    does); ``mask [B, T]`` is multiplied into the input first, out of place."""
    first = convs[0]
    weight = torch.cat([c.depthwise_weight() for c in convs], dim=0)  # [sum D_i, W]
    bias = torch.cat([c.bias for c in convs], dim=0) if with_bias else None  # type: ignore[misc]
    if mask is not None:
        x = x * mask.unsqueeze(-1)
    y, _ = causal_conv1d(x, weight, bias, first.activation, backend=first.backend)
    y = apply_conv_facts(y, first.extras())  # the first slot's norm over every slot's heads (G10)
    return tuple(part.contiguous() for part in torch.split(y, [c.channels for c in convs], dim=-1))


class FusedPrologue:
    """Mixed into a family's reference layer: same parameters and maths, fuses its convs when the
    guard allows (:func:`fused_variant` makes the class)."""

    last_decision: Decision | None = None
    #: The guard in use: a pure function of (LayerFacts, CallFacts). A subclass may supply another
    #: (the suite's planted defects do), which is injection by argument, not patching.
    guard = staticmethod(decide)

    def decide(self: Any, call_facts: CallFacts) -> Decision:
        return self.guard(self.layer_facts(), call_facts)

    def _prologue(
        self: Any, proj: Projections, call: LayerCall, use_cache: bool, prologue: str = "auto", **kwargs: Any
    ) -> tuple[tuple[Tensor, ...], ConvStates]:
        if kwargs:
            raise InvalidArgument(f"unexpected keyword arguments: {sorted(kwargs)}")
        if prologue not in PROLOGUES:
            raise InvalidArgument(f"prologue must be one of {PROLOGUES}, got {prologue!r}")
        decision = self.decide(call.facts(use_cache))
        self.last_decision = decision
        if prologue == "fused" or (prologue == "auto" and decision.fuse):
            return self._fused_prologue(proj, call), tuple(None for _ in self.slots)
        return self._separate_prologue(proj, call, use_cache)

    def _fused_prologue(self: Any, proj: Projections, call: LayerCall) -> tuple[Tensor, ...]:
        """One conv over the slots' channels; they are adjacent in the projection output, so no copy."""
        if not self.use_short_conv:
            raise InvalidArgument("prologue='fused' needs use_short_conv=True: there are no convs to fuse")
        # upstream's rule: the layer flag decides whether biases exist (G8 is what makes this safe)
        return fused_short_conv(proj.conv_in, self.convs(), with_bias=self.conv_bias, mask=call.conv_mask)


@cache
def fused_variant(layer_cls: type[ShortConvLayer]) -> type[ShortConvLayer]:
    """``Fused<Name>``: ``layer_cls`` with the fused prologue and the ``prologue=`` argument."""
    return type(f"Fused{layer_cls.__name__}", (FusedPrologue, layer_cls), {"__module__": layer_cls.__module__})
