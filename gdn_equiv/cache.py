"""A per-layer cache compatible in shape with fla's: ``cache[layer_idx]`` is a dict with
``conv_state`` (a tuple of ``[N, D, W]``, one per conv slot), ``recurrent_state`` (the family's
shape, e.g. ``[N, Hv, Dv, Dk]``), ``offset`` (tokens seen) and any extra state a family keeps
(LightNet's ``ffn_state``)."""

from __future__ import annotations

from typing import Any

import torch

from gdn_equiv.errors import InvalidArgument

REQUIRED_KEYS = ("recurrent_state", "conv_state", "offset")


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
        _check_layer_idx(layer_idx)
        return self.states[layer_idx] if layer_idx < len(self.states) else None

    def update(
        self,
        layer_idx: int,
        *,
        recurrent_state: torch.Tensor | None,
        conv_state: tuple[torch.Tensor | None, ...] | None,
        offset: int,
        **extra: torch.Tensor | None,
    ) -> dict[str, Any]:
        _check_layer_idx(layer_idx)
        while len(self.states) <= layer_idx:
            self.states.append(None)
        previous = self.states[layer_idx]
        seen = 0 if previous is None else previous["offset"]
        state = {"recurrent_state": recurrent_state, "conv_state": conv_state, "offset": seen + offset, **extra}
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
            copy: dict[str, Any] = {}
            for key, value in state.items():
                if isinstance(value, tuple):
                    copy[key] = tuple(_clone(c, dtype) for c in value)
                elif isinstance(value, torch.Tensor):
                    copy[key] = _clone(value, dtype)
                else:
                    copy[key] = value
            out.states.append(copy)
        return out


def _check_layer_idx(layer_idx: Any) -> None:
    # a negative index would read (or overwrite) another layer's state from the end of the list
    if not isinstance(layer_idx, int) or isinstance(layer_idx, bool) or layer_idx < 0:
        raise InvalidArgument(f"layer_idx must be an integer >= 0, got {layer_idx!r}")


def _clone(t: torch.Tensor | None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    return None if t is None else t.detach().to(dtype=dtype, copy=True)


def check_layer_state(
    state: Any,
    layer_idx: int | None,
    *,
    recurrent_shape: tuple[int, ...],
    conv_shapes: dict[str, tuple[int, int, int]],
    dtype: torch.dtype,
    device: torch.device,
) -> None:
    """A cached layer state must be a dict with the cache's keys whose tensors fit this call:
    ``recurrent_state`` of ``recurrent_shape`` in fp32/fp64, one conv state per slot (or ``None``) of
    its shape in the call's dtype, an integer ``offset >= 0``; everything on ``device``."""
    where = f"cache state of layer {layer_idx}"
    if not isinstance(state, dict):
        raise InvalidArgument(f"{where} must be a dict with keys {REQUIRED_KEYS}, got {type(state).__name__}")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise InvalidArgument(f"{where} lacks {missing}; a state holds {REQUIRED_KEYS}")
    offset = state["offset"]
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidArgument(f"{where}: offset must be an integer >= 0, got {offset!r}")
    rec = state["recurrent_state"]
    if rec is not None:
        if not isinstance(rec, torch.Tensor) or tuple(rec.shape) != recurrent_shape:
            raise InvalidArgument(
                f"cached recurrent_state must have shape {recurrent_shape}, got {tuple(getattr(rec, 'shape', ()))}"
            )
        if rec.dtype not in (torch.float32, torch.float64) or rec.device != device:
            raise InvalidArgument(
                f"cached recurrent_state must be float32/float64 on {device}, got {rec.dtype} on {rec.device}"
            )
    conv = state["conv_state"]
    if not conv_shapes or conv is None:
        return
    if not isinstance(conv, tuple) or len(conv) != len(conv_shapes):
        raise InvalidArgument(
            f"cached conv_state must be a tuple of {len(conv_shapes)} ({', '.join(conv_shapes)}), "
            f"got {type(conv).__name__}{'' if not isinstance(conv, tuple) else f' of {len(conv)}'}"
        )
    for (name, shape), s in zip(conv_shapes.items(), conv, strict=True):
        if s is None:
            continue
        if not isinstance(s, torch.Tensor) or tuple(s.shape) != shape:
            raise InvalidArgument(
                f"cached {name} conv_state must have shape {shape}, got {tuple(getattr(s, 'shape', ()))}"
            )
        if s.dtype != dtype or s.device != device:
            raise InvalidArgument(f"cached {name} conv_state must be {dtype} on {device}, got {s.dtype} on {s.device}")
