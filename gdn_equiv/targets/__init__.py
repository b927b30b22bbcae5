"""Targets (SPEC §4): a layer implementation the suite can build from an :class:`Example` and run.

One small protocol, so a property is written once and runs on any target::

    target = get_target("fla")
    if (reason := target.unavailable()) is not None:
        pytest.skip(reason)
    handle = target.build(example, device="cuda")
    inputs = handle.inputs()
    out, cache = handle.run(inputs, prologue="auto")
    handle.path_taken()   # "fused" | "separate" | "none" (no short conv), observed, not asked
    handle.call_facts(inputs), handle.layer_facts(), handle.decide(facts)   # the target's own guard
    handle.launches()     # conv launches (gdn_equiv) or conv-module calls (fla) of that run

The path is chosen by argument; a target that cannot force a path lists what it supports in
``Target.prologues`` and raises :class:`InvalidArgument` for the rest. Nothing is mocked.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

import torch

from gdn_equiv._source import load_plugin
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.config import CallFacts, LayerFacts
from gdn_equiv.model.example import Example, Inputs

Tensor = torch.Tensor
PROLOGUES = ("auto", "fused", "separate")

__all__ = ["PROLOGUES", "Handle", "Target", "get_target", "known_targets"]


@runtime_checkable
class Handle(Protocol):
    """One built layer of a target, with the facts and guard the suite compares against the spec."""

    @property
    def example(self) -> Example: ...

    @property
    def layer(self) -> torch.nn.Module: ...

    def inputs(self) -> Inputs:
        """The example's call arguments for this layer (a fresh cache each time)."""
        ...

    def run(self, inputs: Inputs, prologue: str = "auto") -> tuple[Tensor, Any]:
        """``(output [B, T, H], cache)``; the cache is a :class:`gdn_equiv.model.cache.Cache` or ``None``.

        ``inputs`` is not modified (its cache is cloned first)."""
        ...

    def path_taken(self) -> str | None:
        """Which prologue the last :meth:`run` executed: ``"fused"``, ``"separate"`` or ``"none"``."""
        ...

    def launches(self) -> int:
        """Conv launches (or conv-module calls) of the last :meth:`run`."""
        ...

    def layer_facts(self) -> LayerFacts: ...

    def call_facts(self, inputs: Inputs) -> CallFacts:
        """The guard's facts of one call of :meth:`run` (after unpadding)."""
        ...

    def decide(self, call_facts: CallFacts) -> tuple[bool, str | None]:
        """The target's own guard on these facts: ``(fuse, reason or None when it gives none)``."""
        ...

    def state_dict(self) -> dict[str, Tensor]: ...


class Target(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def prologues(self) -> tuple[str, ...]: ...

    def unavailable(self) -> str | None:
        """``None`` when the target can be built here, else why not (a pytest skip reason)."""
        ...

    def build(self, example: Example, device: str | torch.device = "cpu") -> Handle: ...


_TARGETS = {
    "gdn_equiv": "gdn_equiv.targets.gdn_equiv_target:TARGET",
    "fla": "gdn_equiv.targets.fla_target:TARGET",
}


def known_targets() -> list[str]:
    return sorted(_TARGETS)


def get_target(name: str, **options: Any) -> Target:
    """The target called ``name``; ``options`` configure it (``fla``: ``core="fla"|"reference"``;
    ``gdn_equiv``: ``defect=<class mixed into the family's fused layer>``)."""
    if name not in _TARGETS:
        raise InvalidArgument(f"unknown target {name!r}; known targets: {', '.join(known_targets())}")
    target: Any = load_plugin(_TARGETS[name], kind="target")
    return target.configured(**options) if options else target


def check_prologue(target: Target, prologue: str) -> None:
    if prologue not in PROLOGUES:
        raise InvalidArgument(f"prologue must be one of {PROLOGUES}, got {prologue!r}")
    if prologue not in target.prologues:
        raise InvalidArgument(f"target {target.name!r} supports prologue in {target.prologues}, got {prologue!r}")


class UpstreamRefused(Exception):
    """An upstream constructor refused the arguments a family record built from a drawn config: not a
    finding about the prologue and not gdn-equiv's own error; a search records it and goes on.

    ``family``: the family; ``constructor``: what refused (a class name); ``arguments``: what it was
    given; ``error``: what it raised (its message is upstream's words)."""

    def __init__(self, family: str, constructor: str, arguments: dict[str, Any], error: BaseException) -> None:
        self.family, self.constructor, self.arguments, self.error = family, constructor, dict(arguments), error
        super().__init__(
            f"{constructor} refused the arguments of a {family!r} config: {type(error).__name__}: {error}; "
            f"arguments: {self.arguments}"
        )

    @property
    def kind(self) -> str:
        """What identifies the refusal (a search reports each once): the class, the error type and the
        message with its numbers and addresses masked ("Rotary dimension must be even, got 1" and "got 3"
        are one rule, whatever the config)."""
        message = re.sub(r"\d+", "#", re.sub(r"0x[0-9a-fA-F]+", "0x#", str(self.error)))
        return f"{self.constructor}: {type(self.error).__name__}: {message}"
