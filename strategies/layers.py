"""Strategies for layer configs (:class:`gdn_equiv.config.GDNConfig`) and per-conv specs."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from gdn_equiv.config import CONV_ACTIVATIONS, GATE_ACTIVATIONS, ConvSpec, GDNConfig

from .facts import DTYPE_NAMES, _nonempty, rare

__all__ = ["CONV_REASONS", "conv_specs", "layer_configs"]

# The guard conditions a config alone can break (given short conv is on).
CONV_REASONS = ("G5", "G6", "G7", "G8", "G9")
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
    draw: st.DrawFn, *, activation: str | None, backend: str, conv_size: int, conv_bias: bool, dtype: str | None
) -> ConvSpec:
    """A spec that spells out the layer's own values (or the silu/swish alias): fusion stays legal."""
    act = activation
    if activation in _SILU_CLASS:
        act = draw(st.sampled_from((activation, *(a for a in _SILU_CLASS if a != activation))))
    return ConvSpec(
        backend=draw(st.none() | st.just(backend)),
        activation=act,
        kernel_size=draw(st.none() | st.just(conv_size)),
        bias=draw(st.none() | st.just(conv_bias)),
        dtype=draw(st.none() | st.just(dtype)) if dtype is not None else None,
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
) -> ConvSpec:
    """``spec`` changed so that its conv disagrees with the layer's values on ``reason``'s field."""
    if reason == "G5":
        return replace(spec, backend=draw(st.sampled_from([b for b in backends if b != backend])))
    if reason == "G6":
        other = [a for a in CONV_ACTIVATIONS if (a in _SILU_CLASS) != (activation in _SILU_CLASS)]
        return replace(spec, activation=draw(st.sampled_from(other)))
    if reason == "G7":
        sizes = [k for k in range(min_kernel_size, max_kernel_size + 1) if k != conv_size]
        return replace(spec, kernel_size=draw(st.sampled_from(sizes)))
    if reason == "G8":
        return replace(spec, bias=not conv_bias)
    if reason == "G9":
        return replace(spec, dtype=draw(st.sampled_from([d for d in dtypes if d != dtype])))
    raise AssertionError(reason)


def _breakable(backends: Sequence[str], dtypes: Sequence[str], dtype: str | None) -> tuple[str, ...]:
    out = ["G6", "G7", "G8"]
    if len(set(backends)) > 1:
        out.insert(0, "G5")
    if dtype is not None and any(d != dtype for d in dtypes):
        out.append("G9")
    return tuple(sorted(out))


def layer_configs(
    *,
    backends: Sequence[str] = ("torch",),
    min_heads: int = 1,
    max_heads: int = 2,
    head_dims: Sequence[int] = tuple(range(2, 9)),
    max_gva_ratio: int = 2,
    expand_vs: Sequence[float] = (1, 2, 0.5),
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
) -> st.SearchStrategy[GDNConfig]:
    """Small, valid :class:`GDNConfig` objects (fla's validation holds by construction).

    Heads ``min_heads..max_heads``, ``head_dim`` from ``head_dims``, GVA ratio ``1..max_gva_ratio``,
    ``expand_v`` from ``expand_vs`` (only where ``head_dim * expand_v`` is an integer), gate on/off with
    its activation, negative eigenvalues, short conv (off rarely), ``conv_bias``, ``conv_size``, core
    mode, and the layer's conv backend from ``backends``.

    The three convs share one drawn activation. With probability ``vary_convs`` each conv also gets its
    own :class:`ConvSpec`: free (:func:`conv_specs`) when ``fusable_convs`` is ``None``; when ``True``,
    only variations under which fusion stays legal (explicit copies of the layer's values, silu/swish
    aliases); when ``False``, short conv is on and at least one of G5–G9 is broken by construction
    (``break_conditions`` picks which; G5 needs two backends, G9 a known ``dtype`` and another one in
    ``conv_dtypes``). ``dtype`` is the dtype the layer will be built in (``None``: unknown).

    Shrinks towards one head of dim 2, ``expand_v=1``, hidden size ``min_hidden_size``, no gate, short
    conv on, no bias, ``conv_size=min_conv_size``, ``chunk`` mode, silu, identical convs.
    """
    if not 1 <= min_heads <= max_heads:
        raise InvalidArgument(f"need 1 <= min_heads <= max_heads, got {min_heads}, {max_heads}")
    if max_gva_ratio < 1:
        raise InvalidArgument(f"max_gva_ratio must be >= 1, got {max_gva_ratio}")
    if not 1 <= min_hidden_size <= max_hidden_size:
        raise InvalidArgument(f"need 1 <= min_hidden_size <= max_hidden_size, got {min_hidden_size}, {max_hidden_size}")
    if not 1 <= min_conv_size <= max_conv_size:
        raise InvalidArgument(f"need 1 <= min_conv_size <= max_conv_size, got {min_conv_size}, {max_conv_size}")
    _nonempty("expand_vs", expand_vs)
    pairs = [(h, e) for h in head_dims for e in expand_vs if h >= 1 and float(h * e).is_integer() and h * e >= 1]
    if not pairs:
        raise InvalidArgument(f"no head_dim in {head_dims} gives an integer head_dim*expand_v for {expand_vs}")
    backends = _nonempty("backends", backends)  # type: ignore[assignment]
    if fusable_convs is not None and use_short_conv is False:
        raise InvalidArgument("fusable_convs needs short convs; got use_short_conv=False")
    # e.g. causal-conv1d runs widths 2-4 only: draw what every chosen backend supports
    from gdn_equiv.backends import supported_widths

    lo, hi = supported_widths(tuple(backends))
    min_conv_size, max_conv_size = max(min_conv_size, lo), min(max_conv_size, hi)
    if min_conv_size > max_conv_size:
        raise InvalidArgument(f"no conv size in range is supported by all of {backends} (widths {lo}..{hi})")
    breakable = _breakable(backends, conv_dtypes, dtype)
    if break_conditions is not None:
        if fusable_convs is not False:
            raise InvalidArgument("break_conditions needs fusable_convs=False")
        unknown = set(break_conditions) - set(breakable)
        if unknown or not break_conditions:
            raise InvalidArgument(
                f"break_conditions must be a non-empty subset of {breakable} here, got {sorted(break_conditions)}"
            )

    return _configs(
        _ConfigParams(
            min_heads=min_heads,
            max_heads=max_heads,
            max_gva_ratio=max_gva_ratio,
            min_hidden_size=min_hidden_size,
            max_hidden_size=max_hidden_size,
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
            pairs=tuple(pairs),
            breakable=breakable,
        )
    )


@dataclass(frozen=True)
class _ConfigParams:
    min_heads: int
    max_heads: int
    max_gva_ratio: int
    min_hidden_size: int
    max_hidden_size: int
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
    pairs: tuple[tuple[int, float], ...]
    breakable: tuple[str, ...]


@st.composite
def _configs(draw: st.DrawFn, p: _ConfigParams) -> GDNConfig:
    num_heads = draw(st.integers(p.min_heads, p.max_heads))
    ratio = draw(st.integers(1, p.max_gva_ratio))
    head_dim = draw(st.sampled_from(sorted({h for h, _ in p.pairs})))
    expand_v = draw(st.sampled_from([e for h, e in p.pairs if h == head_dim]))
    use_gate = draw(st.booleans())
    short = p.use_short_conv
    if short is None:
        short = True if p.fusable_convs is not None else not draw(rare(0.05))
    conv_size = draw(st.integers(p.min_conv_size, p.max_conv_size))
    bias = draw(st.booleans()) if p.conv_bias is None else p.conv_bias
    backend = draw(st.sampled_from(p.backends))
    activation = draw(st.sampled_from(CONV_ACTIVATIONS))
    specs = [ConvSpec(activation=activation)] * 3
    max_kernel_size = min(max(p.max_conv_size, p.min_conv_size + 1, 8), p.max_width)
    # The vary flag is drawn whether or not short convs exist: the shrinker prefers fewer choices,
    # and a short skipped draw would make "no short conv" look simpler than the default layer.
    vary = draw(rare(p.vary_convs))
    if short and p.fusable_convs is None:
        if vary:
            spec_st = conv_specs(
                backends=p.backends,
                min_kernel_size=p.min_conv_size,
                max_kernel_size=max_kernel_size,
                dtypes=p.conv_dtypes,
            )
            specs = [draw(spec_st) for _ in range(3)]
    elif short:
        layer = {
            "activation": activation,
            "backend": backend,
            "conv_size": conv_size,
            "conv_bias": bias,
            "dtype": p.dtype,
        }
        if vary:
            specs = [_fusable_spec(draw, **layer) for _ in range(3)]
        if p.fusable_convs is False:
            reasons = p.break_conditions
            if reasons is None:
                reasons = draw(st.lists(st.sampled_from(p.breakable), min_size=1, max_size=2, unique=True))
            for reason in sorted(reasons):
                i = draw(st.integers(0, 2))
                specs[i] = _break(
                    draw,
                    reason,
                    specs[i],
                    backends=p.backends,
                    dtypes=p.conv_dtypes,
                    min_kernel_size=p.min_conv_size,
                    max_kernel_size=max_kernel_size,
                    **layer,
                )
    return GDNConfig(
        hidden_size=draw(st.integers(p.min_hidden_size, p.max_hidden_size)),
        expand_v=expand_v,
        head_dim=head_dim,
        num_heads=num_heads,
        num_v_heads=None if ratio == 1 else num_heads * ratio,
        use_gate=use_gate,
        use_short_conv=short,
        allow_neg_eigval=draw(st.booleans()),
        conv_size=conv_size,
        conv_bias=bias,
        output_gate_activation=draw(st.sampled_from(GATE_ACTIVATIONS)),
        mode=draw(st.sampled_from(p.modes)),
        conv_backend=backend,
        q_conv=specs[0],
        k_conv=specs[1],
        v_conv=specs[2],
    )
