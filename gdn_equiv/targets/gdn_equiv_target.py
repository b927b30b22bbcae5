"""The in-house target: :class:`gdn_equiv.fused.FusedGatedDeltaNet` on any registered conv backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from gdn_equiv.backends import count_launches
from gdn_equiv.config import CallFacts, LayerFacts
from gdn_equiv.example import Example, Inputs, build_layer, materialize
from gdn_equiv.fused import FusedGatedDeltaNet

Tensor = torch.Tensor


@dataclass
class GdnEquivHandle:
    example: Example
    layer: FusedGatedDeltaNet
    device: str | torch.device
    _path: str | None = None
    _launches: int = 0
    _extra: dict[str, Any] = field(default_factory=dict)

    def inputs(self) -> Inputs:
        return materialize(self.example, self.layer, self.device)

    def run(self, inputs: Inputs, prologue: str = "auto") -> tuple[Tensor, Any]:
        from gdn_equiv.targets import check_prologue

        check_prologue(TARGET, prologue)
        cache = inputs.cache.clone() if inputs.cache is not None else None
        kwargs = inputs.kwargs() | {"past_key_values": cache}
        with count_launches() as launches:
            out, _, cache = self.layer(inputs.x, prologue=prologue, **kwargs)
        # fused = one launch over q|k|v; separate = one per conv (forward or step update)
        n = launches.total()
        self._launches = n
        self._path = "none" if n == 0 else ("fused" if n == 1 else "separate")
        return out, cache

    def path_taken(self) -> str | None:
        return self._path

    def launches(self) -> int:
        return self._launches

    def layer_facts(self) -> LayerFacts:
        return self.layer.layer_facts()

    def decide(self, call_facts: CallFacts) -> tuple[bool, str | None]:
        decision = self.layer.decide(call_facts)
        return decision.fuse, decision.reason

    def state_dict(self) -> dict[str, Tensor]:
        return self.layer.state_dict()


@dataclass(frozen=True)
class GdnEquivTarget:
    name: str = "gdn_equiv"
    prologues: tuple[str, ...] = ("auto", "fused", "separate")

    def unavailable(self) -> str | None:
        return None

    def configured(self, **options: Any) -> GdnEquivTarget:
        if options:
            from gdn_equiv.errors import InvalidArgument

            raise InvalidArgument(f"target 'gdn_equiv' takes no options, got {sorted(options)}")
        return self

    def build(self, example: Example, device: str | torch.device = "cpu") -> GdnEquivHandle:
        layer = build_layer(example, FusedGatedDeltaNet, device=device)
        assert isinstance(layer, FusedGatedDeltaNet)
        return GdnEquivHandle(example, layer, device)


TARGET = GdnEquivTarget()
