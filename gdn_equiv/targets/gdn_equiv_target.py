"""The in-house target: each family's fused-prologue layer (:mod:`gdn_equiv.model.fused`) on any
registered conv backend.

Option ``defect``: a class mixed in front of the family's fused layer (a planted defect: another
guard, a broken fused path, a fallback that forgets its cache). It is a target option, so a
property never names a layer class and a defect written once runs on every family.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.backends import count_launches
from gdn_equiv.model.config import CallFacts, LayerFacts
from gdn_equiv.model.example import Example, Inputs, build_layer, materialize
from gdn_equiv.model.families import get_family
from gdn_equiv.model.guard import Decision

Tensor = torch.Tensor


@dataclass
class GdnEquivHandle:
    example: Example
    layer: Any
    device: str | torch.device
    _path: str | None = None
    _launches: int = 0
    _steps: int = 0
    _extra: dict[str, Any] = field(default_factory=dict)

    def inputs(self) -> Inputs:
        return materialize(self.example, self.layer, self.device)

    def run(self, inputs: Inputs, prologue: str = "auto") -> tuple[Tensor, Any]:
        from gdn_equiv.targets import check_prologue

        check_prologue(TARGET, prologue)
        cache = inputs.cache.clone() if inputs.cache is not None else None
        kwargs = inputs.kwargs() | {"past_key_values": cache}
        with count_launches() as launches:
            try:
                out, _, cache = self.layer(inputs.x, prologue=prologue, **kwargs)
            finally:
                # fused = one launch over every slot; separate = one per conv (forward or step update)
                n = launches.total()
                self._launches = n
                self._steps = launches.total("update")
                slots = len(self.layer.slots)
                self._path = {0: "none", 1: "fused", slots: "separate"}.get(n, f"{n} launches")
        return out, cache

    def path_taken(self) -> str | None:
        return self._path

    def launches(self) -> int:
        return self._launches

    def step_launches(self) -> int:
        """How many of the last run's conv launches were the single-step kernel (``update``)."""
        return self._steps

    def layer_facts(self) -> LayerFacts:
        return self.layer.layer_facts()

    def call_facts(self, inputs: Inputs) -> CallFacts:
        return self.layer.call_facts(inputs.x, inputs.attention_mask, inputs.cache, inputs.use_cache, inputs.cu_seqlens)

    def decision(self, inputs: Inputs) -> Decision:
        """The layer's own guard on this call."""
        return self.layer.decide(self.call_facts(inputs))

    def decide(self, call_facts: CallFacts) -> tuple[bool, str | None]:
        decision = self.layer.decide(call_facts)
        return decision.fuse, decision.reason

    def state_dict(self) -> dict[str, Tensor]:
        return self.layer.state_dict()


@dataclass(frozen=True)
class GdnEquivGuardProbe:
    """The guard of the family's fused layer on this target (its ``guard``, a planted one included), asked
    on a decision table's states: a pure function of facts, so every state is asked as it is."""

    family: str
    guard: Callable[[LayerFacts, CallFacts], Decision]
    layer_name: str = ""

    @property
    def name(self) -> str:
        return f"gdn_equiv {self.layer_name}.guard ({self.family})"

    def known_gaps(self) -> tuple[str, ...]:
        return ()  # ours has none: every disagreement is a finding

    def gap_kind(self, d: Any) -> str:
        if d.kind == "reasons":
            return "LaxReasons" if d.direction == "unsafe" else "StrictReasons"
        return {"unsafe": "UnsafeFusion", "missed": "MissedFusion"}[d.kind]

    def ask(self, layer: LayerFacts, call: CallFacts) -> tuple[bool, tuple[str, ...], LayerFacts]:
        decision = self.guard(layer, call)
        return decision.fuse, tuple(c.id for c in decision.failed), layer


@dataclass(frozen=True)
class GdnEquivTarget:
    name: str = "gdn_equiv"
    prologues: tuple[str, ...] = ("auto", "fused", "separate")
    defect: type | None = None

    def unavailable(self) -> str | None:
        return None

    def configured(self, *, defect: type | None = None, **options: Any) -> GdnEquivTarget:
        if options:
            raise InvalidArgument(f"target 'gdn_equiv' takes only the option 'defect', got {sorted(options)}")
        return GdnEquivTarget(defect=defect)

    def layer_cls(self, family: str) -> type:
        fused = get_family(family).fused_cls
        return fused if self.defect is None else _with_defect(self.defect, fused)

    def guard_probe(self, family: str) -> GdnEquivGuardProbe:
        """The guard the family's layer decides with, asked on facts directly (P1's decision tables)."""
        cls: Any = self.layer_cls(family)
        return GdnEquivGuardProbe(family, cls.guard, cls.__name__)

    def build(self, example: Example, device: str | torch.device = "cpu") -> GdnEquivHandle:
        return GdnEquivHandle(example, build_layer(example, self.layer_cls(example.family), device=device), device)


@functools.cache
def _with_defect(defect: type, fused: type) -> type:
    return type(f"{defect.__name__}{fused.__name__}", (defect, fused), {"__module__": defect.__module__})


TARGET = GdnEquivTarget()
