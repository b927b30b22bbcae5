"""A per-layer cache compatible in shape with fla's: ``cache[layer_idx]`` is a dict with
``conv_state`` (a ``(q, k, v)`` tuple of ``[N, D, W]``), ``recurrent_state`` ``[N, Hv, Dv, Dk]`` and
``offset`` (tokens seen)."""

from __future__ import annotations

from typing import Any

import torch


class Cache:
    """Layer states indexed by ``layer_idx``; ``len(cache) > layer_idx`` means the layer has a state."""

    def __init__(self) -> None:
        self.states: list[dict[str, Any] | None] = []

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, layer_idx: int) -> dict[str, Any]:
        state = self.get(layer_idx)
        if state is None:
            raise KeyError(f"cache holds no state for layer {layer_idx}")
        return state

    def get(self, layer_idx: int) -> dict[str, Any] | None:
        return self.states[layer_idx] if 0 <= layer_idx < len(self.states) else None

    def update(
        self,
        layer_idx: int,
        *,
        recurrent_state: torch.Tensor | None,
        conv_state: tuple[torch.Tensor | None, ...] | None,
        offset: int,
    ) -> dict[str, Any]:
        while len(self.states) <= layer_idx:
            self.states.append(None)
        previous = self.states[layer_idx]
        seen = 0 if previous is None else previous["offset"]
        state = {"recurrent_state": recurrent_state, "conv_state": conv_state, "offset": seen + offset}
        self.states[layer_idx] = state
        return state

    def clone(self, dtype: torch.dtype | None = None) -> Cache:
        """A deep copy, so one cache can feed two paths without either seeing the other's writes;
        with ``dtype``, every state is also cast to it (the fp64 twin of a run reads its cache so)."""
        out = Cache()
        for state in self.states:
            if state is None:
                out.states.append(None)
                continue
            conv = state["conv_state"]
            out.states.append(
                {
                    "recurrent_state": _clone(state["recurrent_state"], dtype),
                    "conv_state": None if conv is None else tuple(_clone(c, dtype) for c in conv),
                    "offset": state["offset"],
                }
            )
        return out


def _clone(t: torch.Tensor | None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    return None if t is None else t.detach().to(dtype=dtype, copy=True)
