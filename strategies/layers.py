"""Strategies for layer configs (:class:`gdn_equiv.model.config.GDNConfig`) and per-conv specs."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from gdn_equiv.model.backends import capabilities, supported_activations
from gdn_equiv.model.backends.capabilities import DTYPE_NAMES as ALL_DTYPES
from gdn_equiv.model.config import CONV_ACTIVATIONS, ConvSpec, LayerConfig, canonical_activation
from gdn_equiv.model.conv_ops import conv_facts as registered_conv_facts
from gdn_equiv.model.families import DEFAULT_FAMILY, get_family, is_fla_only
from gdn_equiv.model.fla_versions import VERSIONS
from gdn_equiv.model.guard import Condition
from gdn_equiv.strategies.sampling import DrawnChoices, sampled

from .facts import DTYPE_NAMES, _nonempty, extras_strategy, rare

__all__ = ["CONV_REASONS", "conv_specs", "family_dims", "layer_configs"]

# The guard conditions a config alone can break (given short conv is on): G5-G9, then each registered
# per-conv fact's (G10: the L2-norm conv), as they were registered when this module was imported.
CONV_REASONS = tuple(c.id for c in Condition if c.about_convs)  # G5-G9, then registered facts' (G10)


def fact_reasons() -> tuple[str, ...]:
    """The condition ids of the registered per-conv facts, now (plug-ins may register after import)."""
    return tuple(f.condition_id for f in registered_conv_facts())


_SILU_CLASS = ("silu", "swish")


def conv_specs(
    *,
    backends: Sequence[str] = ("torch",),
    activations: Sequence[str | None] = CONV_ACTIVATIONS,
    min_kernel_size: int = 2,
    max_kernel_size: int = 8,
    dtypes: Sequence[str] = DTYPE_NAMES,
) -> st.SearchStrategy[ConvSpec]:
    """How one conv deviates from its layer: backend (``None`` = the layer's), activation, kernel size
    (``None`` = the layer's ``conv_size``), bias (``None`` = the layer's flag, else present/absent
    whatever the flag says) and parameter dtype (``None`` = the layer's).

    Free: the spec may or may not break fusion. Shrinks towards ``ConvSpec()`` (all ``None``, silu).
    """
    if not 1 <= min_kernel_size <= max_kernel_size:
        raise InvalidArgument(f"need 1 <= min_kernel_size <= max_kernel_size, got {min_kernel_size}, {max_kernel_size}")
    return st.builds(
        ConvSpec,
        backend=st.none() | st.sampled_from(_nonempty("backends", backends)),
        activation=st.sampled_from(_nonempty("activations", activations)),
        kernel_size=st.none() | st.integers(min_kernel_size, max_kernel_size),
        bias=st.none() | st.booleans(),
        dtype=st.none() | st.sampled_from(_nonempty("dtypes", dtypes)),
    )


def _fusable_spec(
    draw: st.DrawFn,
    *,
    activation: str | None,
    backend: str,
    conv_size: int,
    conv_bias: bool,
    dtype: str | None,
    own_dtype: bool = False,
) -> ConvSpec:
    """A spec that spells out the layer's own values (or the silu/swish alias): fusion stays legal.
    ``own_dtype``: ``dtype`` is the convs' own parameter dtype (not the layer's), so it is always spelled out."""
    act = activation
    if activation in _SILU_CLASS:
        act = draw(sampled((activation, *(a for a in _SILU_CLASS if a != activation))))
    return ConvSpec(
        backend=draw(sampled((None, backend))),
        activation=act,
        kernel_size=draw(sampled((None, conv_size))),
        bias=draw(sampled((None, conv_bias))),
        dtype=dtype if own_dtype else draw(sampled((None, dtype))) if dtype is not None else None,
    )


def _break(
    draw: st.DrawFn,
    reason: str,
    spec: ConvSpec,
    *,
    backend: str,
    activation: str | None,
    conv_size: int,
    conv_bias: bool,
    dtype: str | None,
    backends: Sequence[str],
    dtypes: Sequence[str],
    min_kernel_size: int,
    max_kernel_size: int,
    activations: Sequence[str | None] = CONV_ACTIVATIONS,
) -> ConvSpec:
    """``spec`` changed so that its conv disagrees with the layer's values on ``reason``'s field."""
    if reason == "G5":
        return replace(spec, backend=draw(sampled(b for b in backends if b != backend)))
    if reason == "G6":
        other = [a for a in activations if canonical_activation(a) != canonical_activation(activation)]
        return replace(spec, activation=draw(sampled(other)))
    if reason == "G7":
        sizes = [k for k in range(min_kernel_size, max_kernel_size + 1) if k != conv_size]
        return replace(spec, kernel_size=draw(sampled(sizes)))
    if reason == "G8":
        return replace(spec, bias=not conv_bias)
    if reason == "G9":
        return replace(spec, dtype=draw(sampled(d for d in dtypes if d != dtype)))
    raise AssertionError(reason)


#: a channel multiple from which configs take one head of the smallest head dim a multiple allows (a
#: layer's state grows with the square of the head dim: issue #49's 21 GB at a multiple of 4096)
WIDE_MULTIPLE = 256


def _widest_kernel(min_conv_size: int, max_conv_size: int, max_width: int) -> int:
    """The widest kernel a conv of a config may carry (G7 breaks the layer's size with another up to it)."""
    return min(max(max_conv_size, min_conv_size + 1, 8), max_width)


def unbreakable_conditions(backends: Sequence[str], min_conv_size: int = 2, max_conv_size: int = 5) -> dict[str, str]:
    """G6/G7/G9 where the backends' declaration leaves a conv nothing else to carry, and why: one activation (a
    kernel declaring ``(None,)``), one kernel width (``(4, 4)``), one dtype (``("float64",)``: no conv's
    parameters can be of another). Not breakable there, so never drawn."""
    caps = capabilities(backends)
    out = {}
    classes = {canonical_activation(a) for a in supported_activations(backends)}
    if len(classes) < 2:
        out["G6"] = f"G6 needs two activations; {tuple(backends)} run {sorted(map(str, classes))} only"
    lo, hi = caps.widths or (1, 64)
    if _widest_kernel(max(min_conv_size, lo), min(max_conv_size, hi), hi) <= max(min_conv_size, lo):
        out["G7"] = f"G7 needs two kernel widths; {tuple(backends)} take {lo}..{hi}"
    dtypes = caps.dtypes_among(ALL_DTYPES)
    if len(dtypes) < 2:
        out["G9"] = f"G9 needs conv parameters of two dtypes; {tuple(backends)} take {', '.join(dtypes)} only"
    return out


def _breakable(
    backends: Sequence[str], dtypes: Sequence[str], dtype: str | None, unbreakable: Collection[str] = ()
) -> tuple[str, ...]:
    out = [r for r in ("G6", "G7") if r not in unbreakable] + ["G8", *fact_reasons()]
    if len(set(backends)) > 1:
        out.insert(0, "G5")
    if dtype is not None and any(d != dtype for d in dtypes):
        out.append("G9")
    return tuple(sorted(out, key=lambda r: int(r[1:]) if r[1:].isdigit() else 99))


def _activations(own: str | None, supported: Sequence[str | None]) -> tuple[str | None, ...]:
    """The family's own conv activation first (shrinking goes there) where the backends run it, then every
    other one they run; refused where they run none."""
    out = (*((own,) if own in supported else ()), *(a for a in supported if a != own))
    if not out:
        raise InvalidArgument(f"the backends run no conv activation (the family's own is {own!r})")
    return out


def layer_configs(
    *,
    backends: Sequence[str] = ("torch",),
    within: Sequence[str] = (),
    family: str = DEFAULT_FAMILY,
    max_heads: int = 2,
    min_hidden_size: int = 8,
    max_hidden_size: int = 16,
    use_short_conv: bool | None = None,
    conv_bias: bool | None = None,
    min_conv_size: int = 2,
    max_conv_size: int = 5,
    modes: Sequence[str] = ("chunk", "recurrent"),
    vary_convs: float = 0.1,
    conv_dtypes: Sequence[str] = DTYPE_NAMES,
    dtype: str | None = None,
    fusable_convs: bool | None = None,
    break_conditions: Collection[str] | None = None,
    fla_version: str | None = None,
) -> st.SearchStrategy[LayerConfig]:
    """Small, valid configs of ``family`` (fla's validation holds by construction).

    The family's own fields (heads, dims, gates: its ``dims`` strategy, up to ``max_heads`` heads and
    a hidden size in ``min_hidden_size..max_hidden_size``), then what every family shares: short conv
    (off rarely), ``conv_bias``, ``conv_size``, core mode, and the layer's conv backend from ``backends``.

    The three convs share one drawn activation. With probability ``vary_convs`` each conv also gets its
    own :class:`ConvSpec`: free (:func:`conv_specs`) when ``fusable_convs`` is ``None``; when ``True``,
    only variations under which fusion stays legal (explicit copies of the layer's values, silu/swish
    aliases); when ``False``, short conv is on and at least one of G5–G9 is broken by construction
    (``break_conditions`` picks which; G5 needs two backends, G9 a known ``dtype`` and another one in
    ``conv_dtypes``). ``dtype`` is the dtype the layer will be built in (``None``: unknown).

    ``fla_version``: only configs whose arguments that fla version's class for ``family`` accepts (the
    family record's ``fla_rules``; ``None``: any config of the in-house layer). ``within``: backends whose
    capabilities the config stays inside too (a conv a property moves to one of them later, G5's). An
    fla-only family
    (borrowed configs) always keeps only what its class accepts, in every version when none is named.

    Shrinks towards the family's smallest dims, short conv on, no bias, ``conv_size=min_conv_size``,
    ``chunk`` mode, silu, identical convs.
    """
    if max_heads < 1:
        raise InvalidArgument(f"max_heads must be >= 1, got {max_heads}")
    if not 1 <= min_hidden_size <= max_hidden_size:
        raise InvalidArgument(f"need 1 <= min_hidden_size <= max_hidden_size, got {min_hidden_size}, {max_hidden_size}")
    if not 1 <= min_conv_size <= max_conv_size:
        raise InvalidArgument(f"need 1 <= min_conv_size <= max_conv_size, got {min_conv_size}, {max_conv_size}")
    fam = get_family(family)  # InvalidArgument for an unknown name
    backends = _nonempty("backends", backends)  # type: ignore[assignment]
    if fusable_convs is not None and use_short_conv is False:
        raise InvalidArgument("fusable_convs needs short convs; got use_short_conv=False")
    # draw inside every chosen backend's capabilities (causal-conv1d: widths 2-4, no fp64, channels in 8s)
    caps = capabilities((*backends, *within))
    if caps.channel_step >= WIDE_MULTIPLE:  # one head of the narrowest dims that are multiples of it
        max_heads = 1
    lo, hi = caps.widths or (1, 64)
    if max(min_conv_size, lo) > min(max_conv_size, hi):  # the backends take none of the sizes asked: theirs
        min_conv_size, max_conv_size = lo, min(hi, max(lo, max_conv_size))
    min_conv_size, max_conv_size = max(min_conv_size, lo), min(max_conv_size, hi)
    if min_conv_size > max_conv_size:
        raise InvalidArgument(f"no conv size in range is supported by all of {backends} (widths {lo}..{hi})")
    conv_dtypes = caps.dtypes_among(conv_dtypes)
    if not conv_dtypes or (dtype is not None and not caps.dtypes_among([dtype])):
        raise InvalidArgument(f"the dtypes asked ({dtype}, convs {conv_dtypes}) are outside {backends}' {caps.dtypes}")

    if fla_version is not None and fla_version not in VERSIONS:
        raise InvalidArgument(
            f"fla_version must be one of {sorted(VERSIONS)} for family {family!r}, got {fla_version!r}"
        )
    unbreakable = unbreakable_conditions((*backends, *within), min_conv_size, max_conv_size)
    breakable = _breakable(backends, conv_dtypes, dtype, unbreakable)
    if break_conditions is not None:
        if fusable_convs is not False:
            raise InvalidArgument("break_conditions needs fusable_convs=False")
        unknown = set(break_conditions) - set(breakable)
        if unknown or not break_conditions:
            raise InvalidArgument(
                f"break_conditions must be a non-empty subset of {breakable} here, got {sorted(break_conditions)}"
            )

    configs = _configs(
        _ConfigParams(
            family=family,
            # the family's own conv activation first: shrinking goes there; then every registered one
            # that all of ``backends`` run (relu/relu2 on torch and triton, not on causal-conv1d)
            # (where the backends run it: a kernel declaring activations (None,) gets None-activated convs)
            activations=_activations(fam.config_cls().q_conv.activation, supported_activations((*backends, *within))),
            dims=_dims(fam, max_heads, tuple(range(min_hidden_size, max_hidden_size + 1)), caps.channel_step),
            use_short_conv=use_short_conv,
            conv_bias=conv_bias,
            min_conv_size=min_conv_size,
            max_conv_size=max_conv_size,
            max_width=hi,
            modes=tuple(_nonempty("modes", modes)),  # type: ignore[arg-type]
            vary_convs=vary_convs,
            conv_dtypes=tuple(conv_dtypes),
            dtype=dtype,
            fusable_convs=fusable_convs,
            break_conditions=None if break_conditions is None else tuple(sorted(break_conditions)),
            backends=tuple(backends),
            breakable=breakable,
        )
    )
    m = caps.channel_step
    if m > 1:  # the dims were drawn for it; a plug-in family's dims that cannot be are filtered here
        configs = configs.filter(lambda config: all(config.conv_channels(n) % m == 0 for n in config.SLOTS))
    if fla_version is None and not is_fla_only(fam):
        return configs
    # a filter, not a construction: the rules are fla's, over its constructor arguments, and reject
    # few draws (fla 0.6.0's ABC: an odd head_k_dim in about one GLA config in five)
    return configs.filter(lambda config: fam.fla_refusal(config, fla_version) is None)


def _dims(fam: Any, max_heads: int, hidden_sizes: tuple[int, ...], channel_multiple: int) -> st.SearchStrategy:
    """The family's own fields; for a backend with a channel multiple, drawn so that every conv's channel
    count is one (a family whose ``dims`` takes no ``channel_multiple`` is filtered by the caller)."""
    if channel_multiple > 1 and "channel_multiple" in inspect.signature(fam.dims).parameters:
        return family_dims(fam, max_heads=max_heads, hidden_sizes=hidden_sizes, channel_multiple=channel_multiple)
    return family_dims(fam, max_heads=max_heads, hidden_sizes=hidden_sizes)


def family_dims(fam: Any, **kwargs: Any) -> st.SearchStrategy[dict[str, Any]]:
    """The draws of a family record's own config fields: its ``dims(choices, **kwargs)`` (the ranges and choices
    the model declares, :class:`~gdn_equiv.model.choices.Choices`) answered by Hypothesis draws. A plug-in
    family whose ``dims`` is itself a strategy function (keyword arguments only) is called as it is."""
    params = inspect.signature(fam.dims).parameters.values()
    if not any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        return fam.dims(**kwargs)
    return _family_dims(fam.dims, **kwargs)


@st.composite
def _family_dims(draw: st.DrawFn, dims: Any, **kwargs: Any) -> dict[str, Any]:
    return dims(DrawnChoices(draw), **kwargs)


@dataclass(frozen=True)
class _ConfigParams:
    family: str
    activations: tuple[str | None, ...]
    dims: st.SearchStrategy[dict[str, Any]]
    use_short_conv: bool | None
    conv_bias: bool | None
    min_conv_size: int
    max_conv_size: int
    max_width: int
    modes: tuple[str, ...]
    vary_convs: float
    conv_dtypes: tuple[str, ...]
    dtype: str | None
    fusable_convs: bool | None
    break_conditions: tuple[str, ...] | None
    backends: tuple[str, ...]
    breakable: tuple[str, ...]

    @functools.cached_property
    def reason_sets(self) -> st.SearchStrategy[list[str]]:
        return st.lists(sampled(self.breakable), min_size=1, max_size=2, unique=True)


#: how often a config with short convs draws their parameters in a dtype other than the layer's
_MIXED_PRECISION = 0.15


@st.composite
def _configs(draw: st.DrawFn, p: _ConfigParams) -> LayerConfig:
    dims = draw(p.dims)
    short = p.use_short_conv
    if short is None:
        short = True if p.fusable_convs is not None else not draw(rare(0.05))
    conv_size = draw(st.integers(p.min_conv_size, p.max_conv_size))
    bias = draw(st.booleans()) if p.conv_bias is None else p.conv_bias
    backend = draw(sampled(p.backends))
    activation = draw(sampled(p.activations))
    specs = [ConvSpec(activation=activation)] * 3
    max_kernel_size = _widest_kernel(p.min_conv_size, p.max_conv_size, p.max_width)
    # The vary flag is drawn whether or not short convs exist: the shrinker prefers fewer choices,
    # and a short skipped draw would make "no short conv" look simpler than the default layer.
    vary = draw(rare(p.vary_convs))
    reasons: Sequence[str] = ()
    if short and p.fusable_convs is None:
        if vary:
            spec_st = conv_specs(
                backends=p.backends,
                activations=p.activations,  # only those every backend runs (relu not on causal-conv1d)
                min_kernel_size=p.min_conv_size,
                max_kernel_size=max_kernel_size,
                dtypes=p.conv_dtypes,
            )
            specs = [draw(spec_st) for _ in range(3)]
    elif short:
        # mixed precision: the three convs' parameters in a dtype of their own (fp32 convs under bf16
        # activations is the ordinary setup), drawn now and then, shrinking to the layer's dtype
        param_dtype = p.dtype
        others = [d for d in p.conv_dtypes if d != p.dtype]
        if p.dtype is not None and others and draw(rare(_MIXED_PRECISION)):
            param_dtype = draw(sampled(others))
        own = param_dtype != p.dtype
        layer = {
            "activation": activation,
            "backend": backend,
            "conv_size": conv_size,
            "conv_bias": bias,
            "dtype": param_dtype,
        }
        if vary:
            specs = [_fusable_spec(draw, **layer, own_dtype=own) for _ in range(3)]
        elif own:
            specs = [replace(spec, dtype=param_dtype) for spec in specs]
        if p.fusable_convs is False:
            reasons = p.break_conditions
            if reasons is None:
                reasons = draw(p.reason_sets)
            for reason in sorted(reasons):
                if reason in fact_reasons():
                    continue  # broken once the facts are drawn (_with_facts)
                i = draw(st.integers(0, 2))
                specs[i] = _break(
                    draw,
                    reason,
                    specs[i],
                    backends=p.backends,
                    dtypes=p.conv_dtypes,
                    min_kernel_size=p.min_conv_size,
                    max_kernel_size=max_kernel_size,
                    activations=p.activations,
                    **layer,
                )
    config = get_family(p.family).config_cls(
        **dims,
        use_short_conv=short,
        conv_size=conv_size,
        conv_bias=bias,
        mode=draw(sampled(p.modes)),
        conv_backend=backend,
        q_conv=specs[0],
        k_conv=specs[1],
        v_conv=specs[2],
    )
    if not registered_conv_facts():
        return config
    # drawn with or without short convs, like ``vary``: else "no short conv" shrinks better
    with_facts = _with_facts(draw, config, p, vary, reasons)
    return with_facts if short else config


def _with_facts(
    draw: st.DrawFn, config: LayerConfig, p: _ConfigParams, vary: bool, reasons: Sequence[str]
) -> LayerConfig:
    """Registered per-conv facts (the L2 norm): one layer-wide draw shared by every conv (as the
    activation is), then, free, each conv redrawn rarely; or one conv changed so that each pinned fact
    condition breaks. Drawn after the rest, so shrinking takes them to their defaults first."""
    slots = config.SLOTS
    channels = [config.conv_channels(n) for n in slots]
    shared = draw(extras_strategy(channels))
    extras = [dict(shared) for _ in slots]
    if p.fusable_convs is None and vary:
        extras = [dict(draw(extras_strategy(channels))) if draw(st.booleans()) else e for e in extras]
    broken = [f for f in registered_conv_facts() if p.fusable_convs is False and f.condition_id in reasons]
    for fact in broken:
        i = draw(st.integers(0, len(slots) - 1))
        values = fact.violate(DrawnChoices(draw), fact.values(extras[i]), channels)
        extras[i] = {**extras[i], **values}
    pairs = zip(slots, extras, strict=True)
    specs = {f"{n}_conv": replace(config.conv_spec(n), extras=tuple(e.items())) for n, e in pairs}
    return config.replace(**specs)
