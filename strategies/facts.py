"""Strategies over the guard's raw facts (:mod:`gdn_equiv.model.config`): for guard-level properties.

These never build a module, so they reach states no real layer is in (a conv on another device,
a bias in another dtype than its weight) as cheaply as the common ones.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from gdn_equiv.model.backends import BUILTIN_BACKENDS
from gdn_equiv.model.config import CONV_ACTIVATIONS, CallFacts, ConvFacts, LayerFacts
from gdn_equiv.model.conv_ops import conv_facts as registered_conv_facts
from gdn_equiv.strategies.sampling import DrawnChoices

DTYPE_NAMES = ("float32", "float16", "bfloat16")
DEVICES = ("cpu", "cuda:0", "cuda:1")
#: the channel count registered facts' values are drawn for (a head_dim must divide it)
FACT_CHANNELS = (8,)

__all__ = ["call_facts", "conv_facts", "dtypes", "layer_facts", "rare"]


def _nonempty(name: str, values: Sequence[object]) -> tuple[object, ...]:
    values = tuple(values)
    if not values:
        raise InvalidArgument(f"{name} must not be empty")
    return values


def rare(p: float) -> st.SearchStrategy[bool]:
    """``True`` with probability about ``p``; shrinks to ``False``.

    ``st.booleans()`` is a fair coin; this is a biased one that still shrinks to the common case.
    """
    if not 0 <= p <= 1:
        raise InvalidArgument(f"p must be a probability in [0, 1], got {p!r}")
    return _rare(round(p * 1000))


@functools.lru_cache(maxsize=1024)  # one strategy per probability: see gdn_equiv.strategies.sampling.sampled
def _rare(permille: int) -> st.SearchStrategy[bool]:
    threshold = 1000 - permille
    return st.integers(0, 999).map(lambda n: n >= threshold)


def dtypes(*, allowed: Sequence[str] = DTYPE_NAMES) -> st.SearchStrategy[str]:
    """Floating dtype names (``"float32"``, ...), as :class:`gdn_equiv.model.example.Example` holds them.

    Shrinks towards the first of ``allowed`` (``float32`` by default).
    """
    return st.sampled_from(_nonempty("allowed", allowed))


def conv_facts(
    *,
    backends: Sequence[str] = BUILTIN_BACKENDS,
    activations: Sequence[str | None] = CONV_ACTIVATIONS,
    min_kernel_size: int = 1,
    max_kernel_size: int = 8,
    dtypes: Sequence[str] = DTYPE_NAMES,
    devices: Sequence[str] = DEVICES,
) -> st.SearchStrategy[ConvFacts]:
    """One conv's facts, every field independent (a bias may even differ in dtype from its weight).
    ``activations`` defaults to every registered one (:mod:`gdn_equiv.model.conv_ops`); registered per-conv
    facts (the L2 norm) are drawn by their own strategies.

    Shrinks towards the first backend and activation, ``min_kernel_size``, no bias, the first dtype
    and device, every registered fact at its default.
    """
    return _conv_facts(_fields(backends, activations, min_kernel_size, max_kernel_size, dtypes, devices))


def _fields(
    backends: Sequence[str],
    activations: Sequence[str | None],
    min_kernel_size: int,
    max_kernel_size: int,
    dtypes: Sequence[str],
    devices: Sequence[str],
) -> _Fields:
    if min_kernel_size < 1 or max_kernel_size < min_kernel_size:
        raise InvalidArgument(f"need 1 <= min_kernel_size <= max_kernel_size, got {min_kernel_size}, {max_kernel_size}")
    return _Fields(
        st.sampled_from(_nonempty("backends", backends)),
        st.sampled_from(_nonempty("activations", activations)),
        st.integers(min_kernel_size, max_kernel_size),
        st.sampled_from(_nonempty("dtypes", dtypes)),
        st.sampled_from(_nonempty("devices", devices)),
        extras_strategy(FACT_CHANNELS),
    )


def extras_strategy(channels: Sequence[int]) -> st.SearchStrategy[tuple[tuple[str, object], ...]]:
    """Values of every registered per-conv fact for convs of ``channels`` (``ConvSpec.extras`` /
    ``ConvFacts.extras`` form); each fact's own ``draw`` shrinks to its defaults (no norm)."""
    return _extras(tuple(channels))


# one module-level composite: a composite defined inside the function was decorated again on every
# layer draw (Hypothesis builds a signature-preserving wrapper each time), ~8 ms of a ~30 ms draw
@functools.lru_cache(maxsize=1024)  # one strategy per channels: see gdn_equiv.strategies.sampling.sampled
@st.composite
def _extras(draw: st.DrawFn, channels: tuple[int, ...]) -> tuple[tuple[str, object], ...]:
    facts = registered_conv_facts()
    out: dict[str, object] = {}
    for fact in facts:
        out.update(fact.draw(DrawnChoices(draw), channels))
    defaults = {p: d for f in facts for p, d in f.params}
    return tuple(sorted((k, v) for k, v in out.items() if v != defaults[k]))


class _Fields(NamedTuple):
    """One strategy per conv field."""

    backend: st.SearchStrategy[str]
    activation: st.SearchStrategy[str | None]
    kernel_size: st.SearchStrategy[int]
    dtype: st.SearchStrategy[str]
    device: st.SearchStrategy[str]
    extras: st.SearchStrategy[tuple[tuple[str, object], ...]]


def _bias(draw: st.DrawFn, f: _Fields, weight_dtype: str) -> tuple[bool, str | None]:
    if not draw(st.booleans()):
        return False, None
    return True, weight_dtype if draw(st.booleans()) else draw(f.dtype)


@st.composite
def _conv_facts(draw: st.DrawFn, f: _Fields) -> ConvFacts:
    weight_dtype = draw(f.dtype)
    has_bias, bias_dtype = _bias(draw, f, weight_dtype)
    return ConvFacts(
        backend=draw(f.backend),
        activation=draw(f.activation),
        kernel_size=draw(f.kernel_size),
        has_bias=has_bias,
        weight_dtype=weight_dtype,
        bias_dtype=bias_dtype,
        device=draw(f.device),
        extras=draw(f.extras),
    )


def _varied(draw: st.DrawFn, base: ConvFacts, f: _Fields, vary: st.SearchStrategy[bool]) -> ConvFacts:
    """``base`` with each field redrawn when ``vary`` draws true (bias presence and dtype together)."""
    changes: dict[str, object] = {}
    for name, strategy in (
        ("backend", f.backend),
        ("activation", f.activation),
        ("kernel_size", f.kernel_size),
        ("weight_dtype", f.dtype),
        ("device", f.device),
        ("extras", f.extras),
    ):
        if draw(vary):
            changes[name] = draw(strategy)
    if draw(vary):
        changes["has_bias"], changes["bias_dtype"] = _bias(draw, f, str(changes.get("weight_dtype", base.weight_dtype)))
    elif "weight_dtype" in changes and base.has_bias and draw(st.booleans()):
        changes["bias_dtype"] = changes["weight_dtype"]  # a whole conv cast to another dtype
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def layer_facts(
    *,
    backends: Sequence[str] = BUILTIN_BACKENDS,
    activations: Sequence[str | None] = CONV_ACTIVATIONS,
    min_kernel_size: int = 1,
    max_kernel_size: int = 8,
    dtypes: Sequence[str] = DTYPE_NAMES,
    devices: Sequence[str] = DEVICES,
    use_short_conv: bool | None = None,
    vary: float = 0.15,
) -> st.SearchStrategy[LayerFacts]:
    """A layer's facts. The three convs are drawn as one base conv with each field of each conv
    replaced with probability ``vary``, so agreeing convs (the fusable case) are common; the layer's
    ``conv_bias`` flag usually matches the base conv's bias.

    ``use_short_conv=False`` layers come with ``convs=None`` (what a real layer reports) or with
    leftover convs the guard must ignore. Shrinks towards short conv on, three identical minimal
    convs (see :func:`conv_facts`) and ``conv_bias=False``.
    """
    fields = _fields(backends, activations, min_kernel_size, max_kernel_size, dtypes, devices)
    short = st.sampled_from([True, True, True, False]) if use_short_conv is None else st.just(use_short_conv)
    return _layer_facts(fields, short, rare(vary))


@st.composite
def _layer_facts(
    draw: st.DrawFn,
    fields: _Fields,
    short_st: st.SearchStrategy[bool],
    vary: st.SearchStrategy[bool],
) -> LayerFacts:
    short = draw(short_st)
    base = draw(_conv_facts(fields))
    convs = tuple(_varied(draw, base, fields, vary) for _ in range(3))
    conv_bias = base.has_bias if not draw(vary) else not base.has_bias
    if not short and draw(st.booleans()):
        return LayerFacts(use_short_conv=False, conv_bias=conv_bias)
    return LayerFacts(use_short_conv=short, conv_bias=conv_bias, convs=convs)  # type: ignore[arg-type]


def call_facts(
    *, has_cached_state: bool | None = None, use_cache: bool | None = None, varlen: bool | None = None
) -> st.SearchStrategy[CallFacts]:
    """One call's facts; a fixed value pins a field. Shrinks towards the plain call (all ``False``)."""

    def flag(value: bool | None) -> st.SearchStrategy[bool]:
        return st.booleans() if value is None else st.just(value)

    return st.builds(CallFacts, has_cached_state=flag(has_cached_state), use_cache=flag(use_cache), varlen=flag(varlen))
