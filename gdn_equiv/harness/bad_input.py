"""SPEC P8 as data: a valid example with one thing made wrong, and what the refusal must name.

A :class:`BadCall` is an :class:`~gdn_equiv.model.example.Example` (valid, drawn like every other), a
``kind`` from :data:`KINDS` (what is made wrong) and ``pick`` (the corruption's own choices: which
conv, which bad value). :func:`prepare` builds the layer and inputs, applies the corruption and returns
the call that must raise :class:`~gdn_equiv.errors.InvalidArgument`, the texts its message must contain
(the argument's name and the offending value, written from the value itself, not from the message the
code under test formats) and every tensor the caller holds, so the property
(:func:`gdn_equiv.harness.properties.check_refuses_bad_input`) can check that nothing was modified.

Each corruption breaks exactly one rule and leaves the rest of the call valid: hidden-state and
``cu_seqlens`` corruptions run a plain call (no mask, no cache) so no other check can answer first;
cached-state corruptions keep the example's own call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.cache import REQUIRED_KEYS, Cache
from gdn_equiv.model.example import DTYPES, Example, Inputs, build_layer, materialize
from gdn_equiv.model.families import get_family, known_families

Tensor = torch.Tensor
PROLOGUES = ("auto", "fused", "separate")

#: A needle is a text the message must contain, or a tuple of texts of which one must appear.
Needle = str | tuple[str, ...]


@dataclass(frozen=True)
class BadCall:
    """One bad call: ``example`` (valid) with ``kind`` applied, run with ``prologue``."""

    example: Example
    kind: str
    prologue: str = "auto"
    pick: int = 0

    def short(self) -> str:
        return f"BadCall(kind={self.kind!r}, prologue={self.prologue}, pick={self.pick}) on {self.example.short()}"

    def to_json(self) -> str:
        data = {"kind": self.kind, "prologue": self.prologue, "pick": self.pick}
        return json.dumps({"bad_call": data, "example": json.loads(self.example.to_json())}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> BadCall:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        return cls(Example.from_json(data["example"]), **data["bad_call"])


@dataclass
class Prepared:
    """The call that must be refused, what its message must name, and what the caller holds."""

    call: Callable[[], Any]
    needles: tuple[Needle, ...]
    tracked: dict[str, Tensor] = field(default_factory=dict)
    cache: Cache | None = None


@dataclass(frozen=True)
class Kind:
    """A corruption: ``needs`` is the premise on the example (``populated`` cache, ``short_conv``s,
    or ``any``), ``apply`` makes the bad call."""

    needs: str
    apply: Callable[[BadCall, Any, Inputs, str], Prepared]


def names(message: str, needle: Needle) -> bool:
    """Whether ``message`` contains ``needle`` (one of them, for a tuple); a number must stand as a
    token of its own (``7`` is not found in ``17`` or ``0.7``)."""
    if isinstance(needle, tuple):
        return any(names(message, n) for n in needle)
    if re.fullmatch(r"-?[0-9][0-9.e+-]*", needle):
        return re.search(rf"(?<![\w.]){re.escape(needle)}(?![\w.]|\.\d)", message) is not None
    return needle in message


def _shape(t: Any) -> str:
    return str(tuple(t.shape))


def _plain(bad: BadCall, layer: Any, x: Any, **kwargs: Any) -> Callable[[], Any]:
    return lambda: layer(x, prologue=bad.prologue, **kwargs)


def _own_call(bad: BadCall, layer: Any, inputs: Inputs, **changes: Any) -> Callable[[], Any]:
    kwargs = {**inputs.kwargs(), **changes}
    return lambda: layer(inputs.x, prologue=bad.prologue, **kwargs)


def _held(inputs: Inputs) -> dict[str, Tensor]:
    """The tensors of the example's own call (``x``, mask, ``cu_seqlens``)."""
    call = {"x": inputs.x, "attention_mask": inputs.attention_mask, "cu_seqlens": inputs.cu_seqlens}
    return {name: t for name, t in call.items() if t is not None}


def _choice(bad: BadCall, options: Any) -> Any:
    options = list(options)
    return options[bad.pick % len(options)]


# ---- hidden states (a plain call) --------------------------------------------------------------------


def _x_changed(change: Callable[[BadCall, Tensor], Any], needle: Callable[[Any], tuple[Needle, ...]]) -> Kind:
    def apply(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
        x = change(bad, inputs.x)
        return Prepared(_plain(bad, layer, x), ("hidden_states", *needle(x)), {"x": inputs.x})

    return Kind("any", apply)


def _other_dtype(bad: BadCall, x: Tensor) -> Tensor:
    return x.to(_choice(bad, (d for d in DTYPES.values() if d != x.dtype)))


def _wider(bad: BadCall, x: Tensor) -> Tensor:
    extra = 1 + bad.pick % 3
    return (
        torch.cat([x, x[..., :extra]], dim=-1)
        if x.shape[-1] >= extra
        else x.new_zeros(*x.shape[:-1], 2 * x.shape[-1] + 1)
    )


# ---- attention_mask (the example's B, T, no cache) ---------------------------------------------------


def _mask_kind(make: Callable[[BadCall, Tensor], Any], needle: Callable[[Any], tuple[Needle, ...]]) -> Kind:
    def apply(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
        x = inputs.x
        mask = make(bad, x)
        tracked = {"x": x, **({"attention_mask": mask} if isinstance(mask, Tensor) else {})}
        return Prepared(_plain(bad, layer, x, attention_mask=mask), ("attention_mask", *needle(mask)), tracked)

    return Kind("any", apply)


def _ones(x: Tensor, *shape: int) -> Tensor:
    return torch.ones(*shape, dtype=torch.long, device=x.device)


def _mask_other_batch(bad: BadCall, x: Tensor) -> Tensor:
    return _ones(x, x.shape[0] + 1 + bad.pick % 2, x.shape[1])


def _mask_with_value(bad: BadCall, x: Tensor) -> Tensor:
    B, T = x.shape[:2]
    floating, which = bad.pick % 2 == 1, (bad.pick // 2) % 4
    value = (0.5, 2.0, -1.0, 3.5)[which] if floating else (2, 7, -1, 5)[which]
    mask = _ones(x, B, T).to(torch.float32 if floating else torch.long)
    mask.view(-1)[bad.pick % (B * T)] = value
    return mask


def _mask_value(mask: Tensor) -> tuple[Needle, ...]:
    bad = mask[(mask != 0) & (mask != 1)]
    return (str(bad[0].item()),)


# ---- cu_seqlens (a plain packed call, B = 1) ---------------------------------------------------------


def _cu_kind(
    make: Callable[[BadCall, int], Any], needle: Callable[[Any, int], tuple[Needle, ...]], batch: int = 1
) -> Kind:
    def apply(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
        x = inputs.x[:1]
        if batch > 1:
            x = x.expand(batch + bad.pick % 3, *x.shape[1:]).contiguous()
        T = x.shape[1]
        cu = make(bad, T)
        if isinstance(cu, Tensor) and cu.device.type != "meta":
            cu = cu.to(device)
        tracked = {"x": x, **({"cu_seqlens": cu} if isinstance(cu, Tensor) else {})}
        return Prepared(_plain(bad, layer, x, cu_seqlens=cu), ("cu_seqlens", *needle(cu, x.shape[0])), tracked)

    return Kind("any", apply)


def _i32(*values: int) -> Tensor:
    return torch.tensor(values, dtype=torch.int32)


def _cu_decreasing(bad: BadCall, T: int) -> Tensor:
    a = T + 1 + bad.pick % 3  # a boundary past the end, then a smaller one: decreasing before the total is read
    return _i32(0, a, a - 1 - bad.pick % 2, T)


def _cu_total(bad: BadCall, T: int) -> Tensor:
    end = T + 1 + bad.pick % 4 if bad.pick % 2 == 0 or T < 2 else T - 1
    return _i32(0, end)


# ---- the cached state (the example's own call; the example has a populated cache) ---------------------


def _state_tensors(state: dict[str, Any]) -> list[tuple[str, int | None, Tensor]]:
    found: list[tuple[str, int | None, Tensor]] = []
    if isinstance(state.get("recurrent_state"), Tensor):
        found.append(("recurrent_state", None, state["recurrent_state"]))
    for i, s in enumerate(state.get("conv_state") or ()):
        if isinstance(s, Tensor):
            found.append(("conv_state", i, s))
    return found


def _state_kind(
    change: Callable[[BadCall, dict[str, Any], Inputs], tuple[dict[str, Any], tuple[Needle, ...]]],
    needs: str = "populated",
) -> Kind:
    def apply(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
        cache = inputs.cache
        assert cache is not None and bad.example.config.layer_idx is not None
        idx = bad.example.config.layer_idx
        state, needles = change(bad, dict(cache[idx]), inputs)
        cache.states[idx] = state
        return Prepared(_own_call(bad, layer, inputs), needles, _held(inputs), cache)

    return Kind(needs, apply)


def _with_tensor(state: dict[str, Any], which: tuple[str, int | None, Tensor], new: Tensor) -> dict[str, Any]:
    name, i, _ = which
    if i is None:
        return {**state, name: new}
    conv = list(state["conv_state"])
    conv[i] = new
    return {**state, "conv_state": tuple(conv)}


def _state_shape(bad: BadCall, state: dict[str, Any], inputs: Inputs) -> tuple[dict[str, Any], tuple[Needle, ...]]:
    which = _choice(bad, _state_tensors(state))
    t = which[2]
    new = t[..., :-1] if t.shape[-1] > 1 and bad.pick % 2 == 0 else torch.cat([t, t[..., :1]], dim=-1)
    return _with_tensor(state, which, new), (which[0], _shape(new))


def _state_dtype(bad: BadCall, state: dict[str, Any], inputs: Inputs) -> tuple[dict[str, Any], tuple[Needle, ...]]:
    which = _choice(bad, _state_tensors(state))
    t = which[2]
    if which[1] is None:  # a recurrent state is held in fp32/fp64
        dtype = _choice(bad, (torch.float16, torch.bfloat16))
    else:  # a conv state is in the call's dtype
        dtype = _choice(bad, (d for d in DTYPES.values() if d != t.dtype))
    return _with_tensor(state, which, t.to(dtype)), (which[0], str(dtype))


def _conv_state_list(bad: BadCall, state: dict[str, Any], inputs: Inputs) -> tuple[dict[str, Any], tuple[Needle, ...]]:
    return {**state, "conv_state": list(state["conv_state"])}, ("conv_state", "list")


def _state_offset(bad: BadCall, state: dict[str, Any], inputs: Inputs) -> tuple[dict[str, Any], tuple[Needle, ...]]:
    value = _choice(bad, ("3", -1, 2.5, True, None))
    return {**state, "offset": value}, ("offset", repr(value))


def _state_missing(bad: BadCall, state: dict[str, Any], inputs: Inputs) -> tuple[dict[str, Any], tuple[Needle, ...]]:
    key = _choice(bad, REQUIRED_KEYS)
    return {k: v for k, v in state.items() if k != key}, (key,)


def _state_not_dict(bad: BadCall, state: dict[str, Any], inputs: Inputs) -> tuple[Any, tuple[Needle, ...]]:
    value = _choice(bad, ([1, 2], "state", (None, None)))
    return value, (type(value).__name__,)


def _more_sequences(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    """A cache for N sequences, called with N + k (a plain ``[N + k, T]`` batch)."""
    cache, idx = inputs.cache, bad.example.config.layer_idx
    assert cache is not None and idx is not None
    state = cache[idx]
    held = [t for _, _, t in _state_tensors(state)]
    n = held[0].shape[0]
    x = inputs.x[:1].expand(n + 1 + bad.pick % 2, *inputs.x.shape[1:]).contiguous()
    call = _plain(bad, layer, x, past_key_values=cache, use_cache=inputs.use_cache)
    return Prepared(call, (tuple(_shape(t) for t in held),), {"x": x}, cache)


# ---- modules and configs -----------------------------------------------------------------------------


def _conv(bad: BadCall, layer: Any) -> Any:
    return _choice(bad, layer.convs())


def _conv_weight(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    conv = _conv(bad, layer)
    D, _, W = conv.weight.shape
    bad_weight = torch.zeros(D, 2 + bad.pick % 2, W, dtype=conv.weight.dtype, device=conv.weight.device)
    conv.weight = torch.nn.Parameter(bad_weight)
    return Prepared(_own_call(bad, layer, inputs), ("weight", _shape(bad_weight)), _held(inputs), inputs.cache)


def _conv_attr(attr: str, values: tuple[str, ...]) -> Kind:
    def apply(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
        value = _choice(bad, values)
        setattr(_conv(bad, layer), attr, value)
        return Prepared(_own_call(bad, layer, inputs), (repr(value),), _held(inputs), inputs.cache)

    return Kind("short_conv", apply)


def _conv_unknown_argument(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    """A conv module built with a keyword no registered conv fact takes."""
    conv, name = _conv(bad, layer), _choice(bad, ("window", "dilation_rate", "no_such_fact"))
    return Prepared(lambda: type(conv)(conv.channels, conv.kernel_size, **{name: 3}), (name,))


def _use_cache(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    value = _choice(bad, ("yes", 1, "False", None))
    return Prepared(_plain(bad, layer, inputs.x, use_cache=value), ("use_cache", repr(value)), {"x": inputs.x})


def _unexpected_keyword(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    name = _choice(bad, ("window", "cache_params", "output_attentions_extra"))
    return Prepared(_own_call(bad, layer, inputs, **{name: 3}), (name,), _held(inputs), inputs.cache)


def _reference_unexpected_keyword(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    """The family's reference layer (separate prologue only, no ``prologue=``) given a keyword it lacks."""
    reference = build_layer(bad.example, cls=get_family(bad.example.family).layer_cls, device=device)
    own = materialize(bad.example, reference, device)
    name = _choice(bad, ("prologue", "window", "cache_params"))
    kwargs = {**own.kwargs(), name: "auto"}
    prepared = Prepared(lambda: reference(own.x, **kwargs), (name,), _held(own), own.cache)
    prepared.tracked.update({f"reference param {n}": p for n, p in reference.named_parameters()})
    return prepared


def _unknown_prologue(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    value = _choice(bad, ("both", "fuse", "Separate", ""))
    kwargs = inputs.kwargs()
    call = lambda: layer(inputs.x, prologue=value, **kwargs)  # noqa: E731
    return Prepared(call, ("prologue", repr(value)), _held(inputs), inputs.cache)


def _fused_without_short_convs(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    """``prologue="fused"`` forced on the example's layer built without short convs: nothing to fuse."""
    example = replace(bad.example, config=bad.example.config.replace(use_short_conv=False))
    plain = build_layer(example, device=device)
    own = materialize(example, plain, device)
    kwargs = own.kwargs()
    call = lambda: plain(own.x, prologue="fused", **kwargs)  # noqa: E731
    prepared = Prepared(call, ("prologue", "use_short_conv"), _held(own), own.cache)
    prepared.tracked.update({f"layer without convs param {n}": p for n, p in plain.named_parameters()})
    return prepared


def _config_and_kwargs(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    name = _choice(bad, ("hidden_size", "conv_size", "layer_idx"))
    cls, config = type(layer), bad.example.config
    return Prepared(lambda: cls(config=config, **{name: getattr(config, name)}), (name,))


def _config_of_another_family(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    own = get_family(bad.example.family).config_cls
    others = [get_family(f).config_cls for f in known_families() if get_family(f).config_cls is not own]
    other = _choice(bad, others)
    cls = type(layer)
    return Prepared(lambda: cls(config=other()), (other.__name__,))


#: (field, bad values): fields every family's config has (SPEC §8), with values each rule refuses
CONFIG_FIELDS: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("hidden_size", (0, -8, 8.0, "8", True)),
    ("conv_size", (0, -1, 2.5, "4", False)),
    ("use_short_conv", ("true", 1, None)),
    ("conv_bias", ("False", 0, None)),
    ("norm_eps", (0.0, -1e-5, float("inf"), float("nan"), "1e-5")),
    ("layer_idx", (-1, "0", 1.5, True)),
    ("mode", ("fused_recurrent", "", None)),
)


def _config_field(bad: BadCall, layer: Any, inputs: Inputs, device: str) -> Prepared:
    name, values = _choice(bad, CONFIG_FIELDS)
    value = values[(bad.pick // len(CONFIG_FIELDS)) % len(values)]
    config = bad.example.config
    return Prepared(lambda: config.replace(**{name: value}), (name, repr(value)))


KINDS: dict[str, Kind] = {
    "hidden_states rank 2": _x_changed(lambda bad, x: x[0], lambda x: (_shape(x),)),
    "hidden_states rank 4": _x_changed(lambda bad, x: x[None], lambda x: (_shape(x),)),
    "hidden_states size": _x_changed(_wider, lambda x: (_shape(x),)),
    "hidden_states T=0": _x_changed(lambda bad, x: x[:, :0], lambda x: (_shape(x),)),
    "hidden_states B=0": _x_changed(lambda bad, x: x[:0], lambda x: (_shape(x),)),
    "hidden_states dtype": _x_changed(_other_dtype, lambda x: (str(x.dtype),)),
    "hidden_states device": _x_changed(lambda bad, x: x.to("meta"), lambda x: ("meta",)),
    "hidden_states a list": _x_changed(lambda bad, x: x.tolist(), lambda x: ("list",)),
    "use_cache not a bool": Kind("any", _use_cache),
    "cache without layer_idx": Kind("any", lambda bad, layer, inputs, device: _without_layer_idx(bad, device)),
    "attention_mask too short": _mask_kind(lambda bad, x: _ones(x, x.shape[0], x.shape[1] - 1), lambda m: (_shape(m),)),
    "attention_mask wrong batch": _mask_kind(_mask_other_batch, lambda m: (_shape(m),)),
    "attention_mask rank 3": _mask_kind(lambda bad, x: _ones(x, 1, *x.shape[:2]), lambda m: (_shape(m),)),
    "attention_mask rank 1": _mask_kind(lambda bad, x: _ones(x, x.shape[0] * x.shape[1]), lambda m: (_shape(m),)),
    "attention_mask value": _mask_kind(_mask_with_value, _mask_value),
    "attention_mask device": _mask_kind(lambda bad, x: _ones(x, *x.shape[:2]).to("meta"), lambda m: ("meta",)),
    "attention_mask a list": _mask_kind(lambda bad, x: _ones(x, *x.shape[:2]).tolist(), lambda m: ("list",)),
    "cu_seqlens start": _cu_kind(lambda bad, T: _i32(1 + bad.pick % T, T), lambda cu, B: (str(int(cu[0])),)),
    "cu_seqlens decreasing": _cu_kind(_cu_decreasing, lambda cu, B: (str(int(cu[1])), str(int(cu[2])))),
    "cu_seqlens total": _cu_kind(_cu_total, lambda cu, B: (str(int(cu[-1])),)),
    "cu_seqlens dtype": _cu_kind(
        lambda bad, T: _i32(0, T).to(_choice(bad, (torch.float32, torch.int16, torch.uint8, torch.float64))),
        lambda cu, B: (str(cu.dtype),),
    ),
    "cu_seqlens rank 2": _cu_kind(lambda bad, T: _i32(0, T)[None], lambda cu, B: (_shape(cu),)),
    "cu_seqlens one entry": _cu_kind(lambda bad, T: _i32(0), lambda cu, B: (_shape(cu),)),
    "cu_seqlens a list": _cu_kind(lambda bad, T: [0, T], lambda cu, B: ("list",)),
    "cu_seqlens device": _cu_kind(lambda bad, T: _i32(0, T).to("meta"), lambda cu, B: ("meta",)),
    "cu_seqlens with B > 1": _cu_kind(lambda bad, T: _i32(0, T), lambda cu, B: (str(B),), batch=2),
    "cached state shape": _state_kind(_state_shape),
    "cached state dtype": _state_kind(_state_dtype),
    "cached conv_state a list": _state_kind(_conv_state_list, needs="populated short_conv"),
    "cached offset": _state_kind(_state_offset),
    "cached state lacks a key": _state_kind(_state_missing),
    "cached state not a dict": _state_kind(_state_not_dict),
    "cache for fewer sequences": Kind("populated plain", _more_sequences),
    "conv weight [D, >1, W]": Kind("short_conv", _conv_weight),
    "conv module unknown argument": Kind("short_conv", _conv_unknown_argument),
    "conv activation": _conv_attr("activation", ("gelu", "tanh", "softplus", "no-such-activation")),
    "conv backend": _conv_attr("backend", ("no-such-backend", "tpu-magic")),
    "unexpected keyword": Kind("any", _unexpected_keyword),
    "unknown prologue": Kind("any", _unknown_prologue),
    "fused prologue without short convs": Kind("any", _fused_without_short_convs),
    "unexpected keyword, reference layer": Kind("any", _reference_unexpected_keyword),
    "config and keywords": Kind("any", _config_and_kwargs),
    "config of another family": Kind("any", _config_of_another_family),
    "config field": Kind("any", _config_field),
}  # fmt: skip


def _without_layer_idx(bad: BadCall, device: str) -> Prepared:
    example = replace(bad.example, config=bad.example.config.replace(layer_idx=None))
    layer = build_layer(example, device=device)
    x = materialize(replace(example, cache="none", varlen="none", seq_lens=()), layer, device).x
    cache_kwargs = _choice(bad, ({"use_cache": True}, {"past_key_values": Cache()}))
    return Prepared(_plain(bad, layer, x, **cache_kwargs), ("layer_idx", "None"), {"x": x})


def applies(kind: str, example: Example) -> bool:
    """Whether ``kind``'s premise holds for ``example``."""
    needs = KINDS[kind].needs.split()
    if "populated" in needs and (example.cache != "populated" or example.config.layer_idx is None):
        return False
    if "short_conv" in needs and not example.config.use_short_conv:
        return False
    return not ("plain" in needs and example.varlen != "none")


def prepare(bad: BadCall, device: str = "cpu") -> Prepared:
    """The layer and inputs of ``bad.example`` (built fresh), with ``bad.kind`` applied."""
    if bad.kind not in KINDS:
        raise InvalidArgument(f"unknown bad-input kind {bad.kind!r}; known: {sorted(KINDS)}")
    if bad.prologue not in PROLOGUES:
        raise InvalidArgument(f"prologue must be one of {PROLOGUES}, got {bad.prologue!r}")
    if not applies(bad.kind, bad.example):
        raise InvalidArgument(f"bad-input kind {bad.kind!r} needs {KINDS[bad.kind].needs!r}: {bad.example.short()}")
    layer = build_layer(bad.example, device=device)
    inputs = materialize(bad.example, layer, device)
    prepared = KINDS[bad.kind].apply(bad, layer, inputs, device)
    prepared.tracked.update({f"param {n}": p for n, p in layer.named_parameters()})
    return prepared
