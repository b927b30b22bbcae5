"""A per-layer cache compatible in shape with fla's: ``cache[layer_idx]`` is a dict with
``conv_state`` (a tuple of ``[N, D, W]``, one per conv slot), ``recurrent_state`` (the family's
shape, e.g. ``[N, Hv, Dv, Dk]``), ``offset`` (tokens seen) and any extra state a family keeps
(LightNet's ``ffn_state``).

A layer also takes the cache object a Hugging Face style caller hands over: fla's
``fla.models.utils.Cache`` (a transformers ``Cache`` subclass), read and written the way fla's layers
do (:func:`layer_cache`, :class:`FlaCacheView`). transformers' own caches (``DynamicCache`` and the
like) hold attention key/value states and are refused, as fla's layers refuse them."""

from __future__ import annotations

import inspect
from typing import Any, Protocol

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


class LayerCache(Protocol):
    """What a layer reads and writes: :class:`Cache` itself, or an fla cache seen through :class:`FlaCacheView`."""

    def __len__(self) -> int: ...

    def get(self, layer_idx: int) -> dict[str, Any] | None: ...

    def update(
        self,
        layer_idx: int,
        *,
        recurrent_state: torch.Tensor | None,
        conv_state: tuple[torch.Tensor | None, ...] | None,
        offset: int,
        **extra: torch.Tensor | None,
    ) -> dict[str, Any]: ...


#: fla's layer-cache API (``fla.layers.utils.get_layer_cache`` / ``update_layer_cache``): these
#: keywords of ``update``, named (not swallowed by ``**kwargs``), and ``get_seq_length``, ``len``, ``[i]``
FLA_UPDATE_KEYWORDS = ("recurrent_state", "conv_state", "layer_idx", "offset")
FLA_CACHE_RULE = (
    "past_key_values must be a gdn_equiv Cache or an fla cache (fla.models.utils.Cache: "
    f"update({'=, '.join(FLA_UPDATE_KEYWORDS)}=), get_seq_length(layer_idx), len() and [layer_idx], "
    "as fla's layers call it)"
)


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


_UPDATE_KEYWORDS: dict[type, frozenset[str]] = {}


def _update_keywords(cls: type) -> frozenset[str]:
    """The keywords ``cls.update`` names (an empty set when it has none or no signature)."""
    if cls not in _UPDATE_KEYWORDS:
        update = getattr(cls, "update", None)
        try:
            params = list(inspect.signature(update).parameters.values()) if callable(update) else []
        except (TypeError, ValueError):
            params = []
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        _UPDATE_KEYWORDS[cls] = frozenset(p.name for p in params if p.kind in named)
    return _UPDATE_KEYWORDS[cls]


def layer_cache(past_key_values: Any) -> LayerCache | None:
    """``past_key_values`` as a layer reads and writes it: ``None``, our :class:`Cache` (or a view
    already made), or an fla cache through :class:`FlaCacheView`; anything else raises
    :class:`InvalidArgument` naming its type and the rule (a transformers ``DynamicCache``: its
    ``update`` takes key/value states, and fla's layers fail on one with a ``TypeError``; fla's legacy
    tuple of per-layer dicts: fla's models convert it first, with ``Cache.from_legacy_cache``)."""
    if past_key_values is None or isinstance(past_key_values, (Cache, FlaCacheView)):
        return past_key_values
    name = _type_name(past_key_values)
    if isinstance(past_key_values, (list, tuple)):
        raise InvalidArgument(
            f"{FLA_CACHE_RULE}, got a {name} (fla's legacy per-layer states, which a layer cannot update in "
            "place); convert it with fla.models.utils.Cache.from_legacy_cache, as fla's models do"
        )
    keywords = _update_keywords(type(past_key_values))
    untaken = [k for k in FLA_UPDATE_KEYWORDS if k not in keywords]
    missing = [m for m in ("get_seq_length", "__len__", "__getitem__") if not hasattr(past_key_values, m)]
    if untaken or missing:
        why = [f"whose update() does not take {', '.join(untaken)}"] if untaken else []
        why += [f"which has no {', '.join(missing)}"] if missing else []
        kv = " (a transformers cache holds attention key/value states)" if name.startswith("transformers.") else ""
        raise InvalidArgument(f"{FLA_CACHE_RULE}, got {name}, {' and '.join(why)}{kv}")
    return FlaCacheView(past_key_values, keywords)


class FlaCacheView:
    """An fla cache read and written as fla's layers do, behind :class:`Cache`'s ``get``/``update``.

    A layer's state is ``cache[layer_idx]`` where ``len(cache) > layer_idx`` (``None`` for a layer the
    cache pads), plus ``offset = cache.get_seq_length(layer_idx)`` (fla keeps the token count beside the
    dict). ``update`` calls ``cache.update(layer_idx=..., ...)``, which changes the caller's cache in
    place and adds ``offset`` to its count; the view keeps no state of its own.
    """

    def __init__(self, cache: Any, keywords: frozenset[str]) -> None:
        self.cache = cache
        self.keywords = keywords

    def __len__(self) -> int:
        return len(self.cache)

    def get(self, layer_idx: int) -> dict[str, Any] | None:
        _check_layer_idx(layer_idx)
        if len(self.cache) <= layer_idx:
            return None
        state = self.cache[layer_idx]
        if state is None or not isinstance(state, dict):
            return state  # a dict is what check_layer_state asks of anything else
        if state.get("attn_state") is not None:
            # a hybrid model's attention layer sits at this index: reading it as ours would drop it
            raise InvalidArgument(
                f"cache state of layer {layer_idx} holds an attn_state (an attention layer's); a "
                "linear-attention layer's state holds recurrent_state and conv_state: check layer_idx"
            )
        # fla's state dict names every kind a layer may keep (PR #977's adds A_state=None): the unset
        # extras are not this layer's state
        kept = {k: v for k, v in state.items() if v is not None or k in ("recurrent_state", "conv_state")}
        return {**kept, "offset": self.cache.get_seq_length(layer_idx)}

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
        unknown = sorted(set(extra) - self.keywords)
        if unknown:
            raise InvalidArgument(
                f"{_type_name(self.cache)}.update() takes no {unknown}: this layer's state does not fit that cache"
            )
        state = self.cache.update(
            recurrent_state=recurrent_state, conv_state=conv_state, layer_idx=layer_idx, offset=offset, **extra
        )
        if len(self.cache) <= layer_idx:
            # fla's legacy cache appends a new layer's state at the end, wherever layer_idx points
            raise InvalidArgument(
                f"{_type_name(self.cache)}.update(layer_idx={layer_idx}) left {len(self.cache)} layers, so the "
                f"state is not at index {layer_idx}; this cache type must be filled in layer order from 0"
            )
        return state


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
