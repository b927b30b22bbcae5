"""One protocol for a serving engine's short-conv ops under a state pool (SPEC §11), and our reference.

An adapter speaks §11's words (``x [T, D]`` packed tokens, ``weight [D, W]``, ``pool`` of logical states
``[S, D, W-1]``, ``starts``, ``slots``, ``has_state``) and maps them onto its engine's names and layouts
inside. The pool it hands out is its own object (an engine may keep a wider buffer, or a count of accepted
tokens for its next call); :meth:`EngineAdapter.states` reads back the logical states, and
:meth:`EngineAdapter.storage` every tensor the engine owns, so S2 can see writes outside the named slots.
Properties (:mod:`gdn_equiv.serving.properties`) only ever call this protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from gdn_equiv.harness.properties import NotApplicable
from gdn_equiv.serving import pool as ref

Tensor = torch.Tensor

__all__ = ["EngineAdapter", "NotExercised", "ReferenceAdapter", "ReferencePool", "uniform_decode"]


class NotExercised(NotApplicable):
    """The case holds nothing this property can compare (ledger: ``not exercised``; the runner counts it as
    not applicable). Here, below the properties, the engines and the surfaces, which all raise it."""


@runtime_checkable
class EngineAdapter(Protocol):
    name: str
    version: str
    pad_slot: int
    #: slots below this are the engine's own (vLLM's null block): never named, and S2 checks they stay untouched
    first_slot: int
    #: whether the engine's prefill and step kernels promise the same bits (else S3 compares within §6)
    handoff_exact: bool

    def unavailable(self) -> str | None:
        """Why this engine cannot run here (not installed, a version the table lacks, no device), or None."""
        ...

    def new_pool(self, states: Tensor, *, max_step: int) -> Any:
        """A pool holding ``states [S, D, W-1]``, able to take steps of up to ``max_step`` tokens."""
        ...

    def states(self, pool: Any) -> Tensor:
        """The logical states ``[S, D, W-1]``: what the engine's next call reads for each slot."""
        ...

    def storage(self, pool: Any) -> list[Tensor]:
        """Every tensor of the pool, each with the slot as its first dim (S2 compares the unnamed rows)."""
        ...

    def prefill(
        self,
        pool: Any,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        starts: Tensor,
        slots: Tensor,
        has_state: Tensor,
        *,
        path: str = "general",
    ) -> Tensor:
        """§11's call. ``path="fast"`` asks for the engine's fast path (S6) on a batch it admits."""
        ...

    def step(
        self,
        pool: Any,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        slots: Tensor,
        accepted: Tensor | None = None,
    ) -> Tensor:
        """§11's step: ``x [N, k, D]`` -> ``y [N, k, D]``, keeping ``accepted[i]`` tokens (all if None)."""
        ...

    def fast_admits(self, starts: Tensor, has_state: Tensor) -> tuple[bool, str]:
        """The engine's own guard for its fast path on this batch, with its reason."""
        ...

    def packed_prefill(
        self,
        pool: Any,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        starts: Tensor,
        slots: Tensor,
        has_state: Tensor,
        sizes: tuple[int, ...],
    ) -> Tensor:
        """The engine's one call over concatenated q|k|v channels (``sizes`` of each), one pool per slot."""
        ...

    def snapshots(
        self, x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, state: Tensor, block_size: int
    ) -> Tensor:
        """Prefix caching as the engine takes it: ``[T // block_size, D, W-1]`` states at block ends."""
        ...


def uniform_decode(starts: Tensor, has_state: Tensor) -> tuple[bool, str]:
    """The reference's fast-path guard: every sequence continues its state with the same number of tokens."""
    lens = starts.diff().tolist()
    if not bool(has_state.all()):
        return False, "a fresh sequence (has_state false) needs the prefill kernel"
    if len(set(lens)) > 1:
        return False, f"sequence lengths differ ({lens}): the decode kernel takes [N, k, D]"
    if lens and lens[0] == 0:
        return False, "empty sequences"
    return True, "uniform decode"


@dataclass
class ReferencePool:
    states: Tensor  # [S, D, W-1]


class ReferenceAdapter:
    """The in-house reference (:mod:`gdn_equiv.serving.pool`): runs everywhere, and is what planted engine
    defects (:mod:`gdn_equiv.serving.planted`) subclass."""

    name = "reference"
    version = "in-house"
    pad_slot = ref.PAD_SLOT
    first_slot = 0
    handoff_exact = True

    def unavailable(self) -> str | None:
        return None

    def new_pool(self, states: Tensor, *, max_step: int) -> ReferencePool:
        return ReferencePool(states.clone())

    def states(self, pool: ReferencePool) -> Tensor:
        return pool.states

    def storage(self, pool: ReferencePool) -> list[Tensor]:
        return [pool.states]

    def prefill(
        self,
        pool: ReferencePool,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        starts: Tensor,
        slots: Tensor,
        has_state: Tensor,
        *,
        path: str = "general",
    ) -> Tensor:
        if path == "fast":
            return self._decode(pool, x, weight, bias, activation, starts, slots)
        return ref.prefill(x, weight, bias, activation, pool.states, starts, slots, has_state, pad_slot=self.pad_slot)

    def _decode(
        self,
        pool: ReferencePool,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        starts: Tensor,
        slots: Tensor,
    ) -> Tensor:
        """The fast path: a uniform batch as ``[N, k, D]`` through the decode step."""
        n, k = slots.numel(), int(starts[1] - starts[0])
        y = self.step(pool, x.reshape(n, k, -1), weight, bias, activation, slots)
        return y.reshape(n * k, -1)

    def fast_admits(self, starts: Tensor, has_state: Tensor) -> tuple[bool, str]:
        return uniform_decode(starts, has_state)

    def step(
        self,
        pool: ReferencePool,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        slots: Tensor,
        accepted: Tensor | None = None,
    ) -> Tensor:
        return ref.step(x, weight, bias, activation, pool.states, slots, accepted, pad_slot=self.pad_slot)

    def packed_prefill(
        self,
        pool: ReferencePool,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        starts: Tensor,
        slots: Tensor,
        has_state: Tensor,
        sizes: tuple[int, ...],
    ) -> Tensor:
        return self.prefill(pool, x, weight, bias, activation, starts, slots, has_state)

    def snapshots(
        self, x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, state: Tensor, block_size: int
    ) -> Tensor:
        return ref.snapshots(x, weight, bias, activation, state, block_size)
