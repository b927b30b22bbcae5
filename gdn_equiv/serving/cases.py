"""Serving cases as plain data (drawn by :mod:`gdn_equiv.strategies.pools`), and their tensors.

A case holds only small numbers and a seed, so it prints, shrinks and replays; :func:`materialize` turns it
into the tensors of one §11 call for a given adapter (its pad id, its reserved slots).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

Tensor = torch.Tensor

__all__ = ["Batch", "ConvSpec", "HandoffCase", "PackedCase", "PrefixCase", "SpecCase", "conv_tensors", "materialize"]


@dataclass(frozen=True)
class ConvSpec:
    dim: int
    width: int
    bias: bool = False
    activation: str | None = None
    dtype: str = "float32"

    def short(self) -> str:
        act = self.activation or "none"
        return f"D{self.dim} W{self.width} {self.dtype} bias={self.bias} act={act}"


@dataclass(frozen=True)
class Batch:
    """One §11 call: sequence ``i`` has ``lens[i]`` tokens, slot ``slots[i]`` (``None``: the pad id) and
    continues its state when ``has_state[i]``; the pool has ``num_slots`` slots, all holding random states."""

    conv: ConvSpec
    num_slots: int
    lens: tuple[int, ...]
    slots: tuple[int | None, ...]
    has_state: tuple[bool, ...]
    seed: int = 0

    def short(self) -> str:
        slots = ",".join("pad" if s is None else str(s) for s in self.slots)
        fresh = "".join("c" if h else "f" for h in self.has_state)
        lens = list(self.lens)
        return f"Batch({self.conv.short()}, S{self.num_slots}, lens={lens}, slots=[{slots}], {fresh}, seed={self.seed})"

    def named(self) -> list[int]:
        """Indices of the sequences with a real slot."""
        return [i for i, s in enumerate(self.slots) if s is not None]


@dataclass(frozen=True)
class SpecCase:
    """A prefill, then a verify step of ``k`` draft tokens per sequence keeping ``accepted[i]`` of them, then one
    more decode token (where an engine applies the count it was given)."""

    batch: Batch
    k: int
    accepted: tuple[int, ...]

    def short(self) -> str:
        return f"SpecCase({self.batch.short()}, k={self.k}, accepted={list(self.accepted)})"


@dataclass(frozen=True)
class HandoffCase:
    """A prefill, then decode steps of ``steps[j]`` tokens each (all kept)."""

    batch: Batch
    steps: tuple[int, ...]

    def short(self) -> str:
        return f"HandoffCase({self.batch.short()}, steps={list(self.steps)})"


@dataclass(frozen=True)
class PrefixCase:
    conv: ConvSpec
    length: int
    block_size: int
    has_state: bool
    seed: int = 0

    def short(self) -> str:
        block = f"block={self.block_size}, has_state={self.has_state}"
        return f"PrefixCase({self.conv.short()}, T{self.length}, {block}, seed={self.seed})"


@dataclass(frozen=True)
class PackedCase:
    """A batch over ``sum(sizes)`` channels, q|k|v concatenated (``batch.conv.dim == sum(sizes)``)."""

    batch: Batch
    sizes: tuple[int, ...] = field(default=(1, 1, 1))

    def short(self) -> str:
        return f"PackedCase({self.batch.short()}, sizes={list(self.sizes)})"


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def conv_tensors(conv: ConvSpec, seed: int) -> tuple[Tensor, Tensor | None]:
    """``weight [D, W]`` and ``bias [D] | None`` of a case, in its dtype."""
    g = _generator(seed + 1)
    dtype = getattr(torch, conv.dtype)
    weight = (torch.randn(conv.dim, conv.width, generator=g) * 0.5).to(dtype)
    bias = torch.randn(conv.dim, generator=g).to(dtype) if conv.bias else None
    return weight, bias


def materialize(batch: Batch, adapter: Any, device: str = "cpu") -> dict[str, Any]:
    """The call's tensors for ``adapter``: slot ``s`` is ``adapter.first_slot + s`` (rows below are the
    engine's reserved ones, random too, so S2 sees a write to them), a pad is ``adapter.pad_slot``."""
    conv = batch.conv
    dtype = getattr(torch, conv.dtype)
    g = _generator(batch.seed)
    first = adapter.first_slot
    states = torch.randn(first + batch.num_slots, conv.dim, conv.width - 1, generator=g).to(dtype)
    x = torch.randn(sum(batch.lens), conv.dim, generator=g).to(dtype)
    weight, bias = conv_tensors(conv, batch.seed)
    starts = torch.tensor([0, *torch.tensor(batch.lens, dtype=torch.int64).cumsum(0).tolist()], dtype=torch.int32)
    slots = torch.tensor([adapter.pad_slot if s is None else first + s for s in batch.slots], dtype=torch.int32)
    has_state = torch.tensor(batch.has_state, dtype=torch.bool)
    out = {
        "x": x,
        "weight": weight,
        "bias": bias,
        "states": states,
        "starts": starts,
        "slots": slots,
        "has_state": has_state,
    }
    return {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in out.items()}


def draft_tokens(batch: Batch, k: int, salt: int = 7) -> Tensor:
    """``[N, k, D]`` tokens of a step after ``batch`` (another stream of its seed)."""
    g = _generator(batch.seed * 1000 + salt)
    return torch.randn(len(batch.slots), k, batch.conv.dim, generator=g).to(getattr(torch, batch.conv.dtype))
