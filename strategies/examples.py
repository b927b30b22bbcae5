"""Strategies for whole test cases: :class:`gdn_equiv.model.example.Example` (a config plus one call)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from hypothesis import strategies as st
from hypothesis import target
from hypothesis.errors import InvalidArgument

from gdn_equiv.harness.testing import fuzzing
from gdn_equiv.model.backends import capabilities
from gdn_equiv.model.config import LayerConfig
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import DEFAULT_FAMILY, fla_only_families, get_family, known_families
from gdn_equiv.model.guard import Condition
from gdn_equiv.strategies.sampling import sampled

from .facts import DTYPE_NAMES, _nonempty, rare
from .layers import fact_reasons, layer_configs, unbreakable_conditions
from .values import value_kinds

__all__ = ["CALL_REASONS", "REASONS", "attention_mask_lens", "cu_seqlens_for", "examples", "seq_lens"]

CALL_REASONS = tuple(c.id for c in Condition if not c.about_convs)  # G1-G4
REASONS = tuple(c.id for c in Condition)  # the guard's registry: G1-G9, then registered facts' (G10)
CHUNK = 64  # the chunked core's chunk size: lengths around it and its multiples matter
SCALES = (1.0, 0.0, 100.0, 1e4)


#: the input scale 0 (x == 0: every conv tap multiplies zero) as an edge case, not a quarter of the draws
ZERO_SCALE_RATE = 0.05


def draw_scale(draw: st.DrawFn, scales: Sequence[float]) -> float:
    """An input scale from ``scales``: 0 (when listed) at :data:`ZERO_SCALE_RATE`, the others uniformly;
    shrinks towards the first non-zero one."""
    nonzero = [s for s in scales if s != 0]
    if not nonzero:
        return 0.0
    if len(nonzero) == len(scales):
        return draw(sampled(nonzero))
    # one choice, zero last among repeated non-zero scales: a coin for zero first (rare()) left the
    # shrinker short of the smallest example (seq_len 6, bf16 instead of 1, fp32)
    repeat = max(1, round((1 - ZERO_SCALE_RATE) / ZERO_SCALE_RATE / len(nonzero)))
    return draw(sampled([s for s in nonzero for _ in range(repeat)] + [0.0]))


def cu_seqlens_for(
    total: int, *, min_seqs: int = 1, max_seqs: int | None = 4, allow_empty: bool = True
) -> st.SearchStrategy[tuple[int, ...]]:
    """Sequence lengths that sum to ``total`` (``cu_seqlens`` is their cumulative sum with a leading 0).

    ``min_seqs..max_seqs`` sequences (``None``: up to ``total + 1``); empty and length-1 sequences are
    ordinary draws unless ``allow_empty=False``. Shrinks towards one sequence of length ``total``.
    """
    if total < 0:
        raise InvalidArgument(f"total must be >= 0, got {total}")
    if min_seqs < 1:
        raise InvalidArgument(f"min_seqs must be >= 1, got {min_seqs}")
    if not allow_empty and min_seqs > total:  # total 0: no non-empty sequence at all
        raise InvalidArgument(f"{min_seqs} non-empty sequences cannot sum to {total}")
    hi = max_seqs if max_seqs is not None else total + 1
    if hi < min_seqs:
        raise InvalidArgument(f"need min_seqs <= max_seqs, got {min_seqs}, {max_seqs}")
    if not allow_empty:
        hi = min(hi, total)  # total >= min_seqs >= 1 here
    return _lengths(total, min_seqs, hi, allow_empty)


@functools.lru_cache(maxsize=1024)  # one strategy per arguments: see gdn_equiv.strategies.sampling.sampled
@st.composite
def _lengths(draw: st.DrawFn, total: int, min_seqs: int, max_seqs: int, allow_empty: bool) -> tuple[int, ...]:
    n = draw(st.integers(min_seqs, max_seqs))
    if n == 1:  # one sequence of all the tokens (st.integers(1, total - 1) is empty for total 1)
        cuts = []
    elif allow_empty:
        cuts = sorted(draw(st.lists(st.integers(0, total), min_size=n - 1, max_size=n - 1)))
    else:
        cuts = sorted(draw(st.lists(st.integers(1, total - 1), min_size=n - 1, max_size=n - 1, unique=True)))
    bounds = [0, *cuts, total]
    return tuple(b - a for a, b in pairwise(bounds))


def attention_mask_lens(
    *, batch: int, seq_len: int, min_tokens: int = 1, pad_sides: Sequence[str] = ("right", "left")
) -> st.SearchStrategy[tuple[tuple[int, ...], str]]:
    """Valid tokens per row of an ``attention_mask [batch, seq_len]`` and the padding side.

    Rows may be full, partly padded or all padding; at least ``min_tokens`` tokens in total.
    Shrinks towards full rows (no padding) on the first of ``pad_sides``.
    """
    if batch < 1 or seq_len < 1:
        raise InvalidArgument(f"need batch >= 1 and seq_len >= 1, got {batch}, {seq_len}")
    if not 0 <= min_tokens <= batch * seq_len:
        raise InvalidArgument(f"min_tokens must be in [0, {batch * seq_len}], got {min_tokens}")
    return _mask_lens(batch, seq_len, min_tokens, tuple(str(side) for side in _nonempty("pad_sides", pad_sides)))


@functools.lru_cache(maxsize=1024)  # one strategy per arguments: see gdn_equiv.strategies.sampling.sampled
@st.composite
def _mask_lens(
    draw: st.DrawFn, batch: int, seq_len: int, min_tokens: int, pad_sides: tuple[str, ...]
) -> tuple[tuple[int, ...], str]:
    # drawn as padding per row so that shrinking removes padding
    pads = draw(st.lists(st.integers(0, seq_len), min_size=batch, max_size=batch))
    lens = [seq_len - p for p in pads]
    missing = min_tokens - sum(lens)
    for b in range(batch):  # top up, first rows first, so the constraint holds by construction
        if missing <= 0:
            break
        add = min(missing, seq_len - lens[b])
        lens[b] += add
        missing -= add
    return tuple(lens), draw(sampled(pad_sides))


def seq_lens(*, min_value: int = 1, max_value: int = 140) -> st.SearchStrategy[int]:
    """Sequence lengths, mostly short: 70% in ``1..8``, 20% up to one chunk (64), 10% up to
    ``max_value`` (a few chunks). Shrinks towards ``min_value``."""
    if not 1 <= min_value <= max_value:
        raise InvalidArgument(f"need 1 <= min_value <= max_value, got {min_value}, {max_value}")
    return _seq_len(min_value, max_value)


@functools.lru_cache(maxsize=1024)  # one strategy per arguments: see gdn_equiv.strategies.sampling.sampled
@st.composite
def _seq_len(draw: st.DrawFn, min_value: int, max_value: int) -> int:
    band = draw(st.integers(0, 9))
    hi = 8 if band < 7 else CHUNK if band < 9 else max_value
    return draw(st.integers(min_value, max(min_value, min(hi, max_value))))


def _flag(value: bool | None, p: float) -> st.SearchStrategy[bool]:
    return rare(p) if value is None else sampled((value,))


def examples(
    *,
    backends: Sequence[str] = ("torch",),
    within: Sequence[str] = (),
    dtypes: Sequence[str] | None = None,
    conv_dtypes: Sequence[str] | None = None,
    min_batch: int = 1,
    max_batch: int = 2,
    min_seq_len: int = 1,
    max_seq_len: int = 140,
    varlen: bool | None = None,
    cache: bool | None = None,
    use_cache: bool | None = None,
    grad: bool | None = None,
    train: bool | None = None,
    fusable: bool | None = None,
    reasons: Sequence[str] | None = None,
    max_reasons: int = 3,
    scales: Sequence[float] = SCALES,
    vary_convs: float = 0.1,
    max_prefix_len: int = 6,
    max_seqs: int = 4,
    use_short_conv: bool | None = None,
    max_heads: int = 2,
    family: str | Sequence[str] = DEFAULT_FAMILY,
    fla_version: str | None = None,
) -> st.SearchStrategy[Example]:
    """Whole test cases: a small layer config (:func:`layer_configs`) and one call.

    The call: dtype from ``dtypes`` (default fp32/fp16/bf16 as the backends take them; their own declared
    dtypes where they take none of those: fp64 only); batch ``min_batch..max_batch``; length from :func:`seq_lens`
    (up to ``max_seq_len``); ``varlen`` kind ``none`` / ``cu_seqlens`` (``B = 1``, lengths from
    :func:`cu_seqlens_for`, empty and length-1 sequences included) / ``mask`` (rows from
    :func:`attention_mask_lens`, all-pad rows and left/right padding included); cache ``none`` /
    ``empty`` / ``populated`` (after a ``prefix_len``-token call); ``use_cache``; ``grad``; ``train``;
    a seed and an input ``scale`` from ``scales``. ``varlen``/``cache``/``use_cache``/``grad``/``train``:
    ``True``/``False`` pins them (``cache=True``: a cache object, empty or populated), ``None`` draws.

    ``fusable=True`` builds states where the guard fuses and ``fusable=False`` states where it does
    not, both by construction: a non-empty set of guard conditions (``reasons``, default: 1 to
    ``max_reasons`` drawn from G1–G9 as the pins and ``backends``/``dtypes`` allow) is broken on top of
    a fusable state. ``max_reasons=1`` breaks one condition at a time: states where no other broken
    condition can mask a guard's mistake on it.
    ``fusable=None`` draws freely, with per-conv variations rare (``vary_convs``), so most
    examples look fusable while every guard reason stays reachable.

    ``backends``: the convs' backends (the layer's drawn from them); everything is drawn inside their
    capabilities and those of ``within`` too (backends a property moves a conv to later, G5's).

    ``family``: one family name, or several to draw from (shrinking towards the first); an fla-only
    family (:func:`gdn_equiv.model.families.fla_only_families`) draws the configs it borrows, under its own
    name. ``fla_version``: only configs that fla version's class for the family accepts (see
    :func:`layer_configs`).

    In the ``fuzz`` profile, ``target()`` pushes towards long, large-valued inputs and wide fused conv calls.

    Shrinks towards ``B=1, T=1``, fp32, no varlen, no cache, no bias, seed 0, scale 1, the smallest
    config.
    """
    families = (family,) if isinstance(family, str) else tuple(_nonempty("family", family))
    for name in families:
        if name not in (*known_families(), *fla_only_families()):
            known = ", ".join(known_families())
            raise InvalidArgument(
                f"unknown family {name!r}; known families: {known} (fla only: {', '.join(fla_only_families())})"
            )
    # inside every chosen backend's capabilities (causal-conv1d: no fp64, no per-sequence states of packed
    # sequences); widths, activations and channel multiples are the config strategy's
    caps = capabilities((*backends, *within))
    if dtypes is None:  # fp32/fp16/bf16, or what the backends declare where they take none of those (fp64 only)
        dtypes = caps.dtypes_among(DTYPE_NAMES) or caps.dtypes or DTYPE_NAMES
    dtypes = _nonempty("dtypes", dtypes)  # type: ignore[assignment]
    conv_dtypes = tuple(conv_dtypes) if conv_dtypes is not None else tuple(dtypes)
    tokens = token_budget(caps.channel_step)
    if tokens is not None:  # a wide channel multiple: few tokens (issue #49: 21 GB at a multiple of 4096)
        max_seq_len = min(max_seq_len, tokens)
        min_seq_len = min(min_seq_len, max_seq_len)
        max_batch = max(min_batch, min(max_batch, tokens // max_seq_len))
        max_prefix_len = min(max_prefix_len, tokens)
    dtypes, conv_dtypes = caps.dtypes_among(dtypes), caps.dtypes_among(conv_dtypes)
    if not dtypes or not conv_dtypes:
        raise InvalidArgument(f"no dtype asked is run by all of {tuple(backends)} (they take {caps.dtypes})")
    if not 1 <= min_batch <= max_batch:
        raise InvalidArgument(f"need 1 <= min_batch <= max_batch, got {min_batch}, {max_batch}")
    if not 1 <= min_seq_len <= max_seq_len:
        raise InvalidArgument(f"need 1 <= min_seq_len <= max_seq_len, got {min_seq_len}, {max_seq_len}")
    _nonempty("scales", scales)
    if not (isinstance(max_reasons, int) and max_reasons >= 1):
        raise InvalidArgument(f"max_reasons must be an int >= 1, got {max_reasons!r}")
    allowed = _allowed_reasons(backends, conv_dtypes, dtypes, varlen, cache, use_cache, use_short_conv, min_batch)
    if fusable is True:
        for name, value in (("varlen", varlen), ("use_cache", use_cache)):
            if value:
                raise InvalidArgument(f"fusable=True cannot be combined with {name}={value}")
        if use_short_conv is False:
            raise InvalidArgument("fusable=True cannot be combined with use_short_conv=False")
        if reasons:
            raise InvalidArgument(f"fusable=True breaks no condition, got reasons={reasons}")
    if reasons is not None:
        if fusable is not False:
            raise InvalidArgument("reasons needs fusable=False")
        bad = set(reasons) - set(allowed)
        if bad or not reasons:
            raise InvalidArgument(f"reasons must be a non-empty subset of {allowed} here, got {sorted(reasons)}")
        if not caps.varlen_initial_state and {"G2", "G4"} <= set(reasons):
            raise InvalidArgument(
                f"reasons G2 and G4 together pass a cached state with cu_seqlens, which {tuple(backends)} do not take"
            )
    varlen_kinds = ("none", "cu_seqlens", "mask") if min_batch == 1 else ("none", "mask")

    return _examples(
        _ExampleParams(
            families=families,  # type: ignore[arg-type]
            fusable=fusable,
            reasons=None if reasons is None else tuple(reasons),
            max_reasons=max_reasons,
            allowed=allowed,
            dtypes=tuple(dtypes),
            conv_dtypes=conv_dtypes,
            backends=tuple(_nonempty("backends", backends)),  # type: ignore[arg-type]
            within=tuple(within),
            max_heads=max_heads,
            vary_convs=vary_convs,
            use_short_conv=use_short_conv,
            varlen=varlen,
            varlen_kinds=varlen_kinds,
            cache=cache,
            use_cache=use_cache,
            min_batch=min_batch,
            max_batch=max_batch,
            min_seq_len=min_seq_len,
            max_seq_len=max_seq_len,
            max_seqs=max_seqs,
            max_prefix_len=max_prefix_len,
            scales=tuple(scales),
            grad=grad,
            train=train,
            fla_version=fla_version,
            varlen_states=caps.varlen_initial_state,
        )
    )


#: a layer's recurrent state holds ``head_k_dim x head_v_dim`` per head and token; with a channel multiple ``m`` a
#: head dim is at least ``m`` (one or two heads carry every conv's channels), so an example keeps ``B*T*m*m``
#: under this many elements (a multiple of 4096: 1 token; of 2048: 4; of 1024: 16; of 128 and under: no bound)
STATE_ELEMENTS = 2**24


def token_budget(channel_multiple: int) -> int | None:
    """The most tokens (``B*T``, and a cached prefix) an example of a backend with ``channel_multiple`` draws,
    ``None`` for no bound (:data:`STATE_ELEMENTS`)."""
    tokens = STATE_ELEMENTS // channel_multiple**2
    return None if tokens >= 140 * 4 else max(1, tokens)


def _packs(kind: str, family: str) -> bool:
    """Whether a call of varlen ``kind`` reaches the convs as packed sequences (``cu_seqlens``)."""
    return kind == "cu_seqlens" or (kind == "mask" and get_family(family).mask != "dense")


def _allowed_reasons(
    backends: Sequence[str],
    conv_dtypes: Sequence[str],
    dtypes: Sequence[str],
    varlen: bool | None,
    cache: bool | None,
    use_cache: bool | None,
    use_short_conv: bool | None,
    min_batch: int,
) -> tuple[str, ...]:
    """The guard conditions an example can break under the given pins."""
    out = []
    if use_short_conv is not True:
        out.append("G1")
    if cache is not False:
        out.append("G2")
    if use_cache is not False:
        out.append("G3")
    if varlen is not False:
        out.append("G4")
    if use_short_conv is not False:
        unbreakable = unbreakable_conditions(backends)
        out += [r for r in ("G6", "G7") if r not in unbreakable] + ["G8", *fact_reasons()]
        if len(set(backends)) > 1:
            out.append("G5")
        if any(c != d for d in dtypes for c in conv_dtypes):
            out.append("G9")
    return tuple(sorted(out, key=lambda r: int(r[1:]) if r[1:].isdigit() else 99))


@dataclass(frozen=True)
class _ExampleParams:
    families: tuple[str, ...]
    fusable: bool | None
    reasons: tuple[str, ...] | None
    max_reasons: int
    allowed: tuple[str, ...]
    dtypes: tuple[str, ...]
    conv_dtypes: tuple[str, ...]
    backends: tuple[str, ...]
    within: tuple[str, ...]
    max_heads: int
    vary_convs: float
    use_short_conv: bool | None
    varlen: bool | None
    varlen_kinds: tuple[str, ...]
    cache: bool | None
    use_cache: bool | None
    min_batch: int
    max_batch: int
    min_seq_len: int
    max_seq_len: int
    max_seqs: int
    max_prefix_len: int
    scales: tuple[float, ...]
    grad: bool | None
    train: bool | None
    fla_version: str | None
    #: whether the backends take a cached (per-sequence) state together with cu_seqlens
    varlen_states: bool
    # The config strategies drawn from, one per (family, dtype, branch), built at their first draw: a
    # fresh one per example cost its construction (the family's dims strategy, its default config) and
    # Hypothesis's validation every time. So the registries (activations, conv facts) are read once per
    # branch, at its first draw, as ``allowed`` is read once, when examples() is called.
    _configs: dict[tuple[Any, ...], st.SearchStrategy[LayerConfig]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @functools.cached_property
    def reason_sets(self) -> st.SearchStrategy[list[str]]:
        sets = st.lists(st.sampled_from(self.allowed), min_size=1, max_size=self.max_reasons, unique=True)
        if self.varlen_states:
            return sets
        return sets.filter(lambda r: not {"G2", "G4"} <= set(r))  # a cached state with cu_seqlens

    def configs(self, family: str, dtype: str, **pins: Any) -> st.SearchStrategy[LayerConfig]:
        key = (family, dtype, *sorted(pins.items()))
        if key not in self._configs:
            self._configs[key] = layer_configs(
                family=family,
                backends=self.backends,
                within=self.within,
                max_heads=self.max_heads,
                vary_convs=self.vary_convs,
                conv_dtypes=self.conv_dtypes,
                dtype=dtype,
                fla_version=self.fla_version,
                **pins,
            )
        return self._configs[key]


@st.composite
def _examples(draw: st.DrawFn, p: _ExampleParams) -> Example:
    if p.fusable is None or p.fusable:
        broken: frozenset[str] = frozenset()
    elif p.reasons is not None:
        broken = frozenset(p.reasons)
    else:
        broken = frozenset(draw(p.reason_sets))
    conv_broken = sorted(broken & {"G5", "G6", "G7", "G8", "G9", *fact_reasons()})
    layer_dtypes: Sequence[str] = p.dtypes
    if "G9" in broken:  # the layer's dtype must leave another conv dtype to break G9 with
        layer_dtypes = [d for d in p.dtypes if any(c != d for c in p.conv_dtypes)]
    dtype = draw(sampled(layer_dtypes))
    family = draw(sampled(p.families))
    if p.fusable is None:
        config = draw(p.configs(family, dtype, use_short_conv=p.use_short_conv))
    elif "G1" in broken:
        config = draw(p.configs(family, dtype, use_short_conv=False))
    elif conv_broken:
        config = draw(p.configs(family, dtype, fusable_convs=False, break_conditions=tuple(conv_broken)))
    else:
        config = draw(p.configs(family, dtype, fusable_convs=True))

    # the call
    if p.fusable is None:
        kinds = ("none",) if p.varlen is False else p.varlen_kinds[1:] if p.varlen else ("none", *p.varlen_kinds)
        kind = draw(sampled(kinds))
        cache_kinds = {None: ("none", "none", "empty", "populated"), False: ("none",)}.get(
            p.cache, ("empty", "populated")
        )
        cache_kind = draw(sampled(cache_kinds))
        writes = draw(_flag(p.use_cache, 0.3))
    else:
        # a dense-mask family keeps the batch dense under a mask: only cu_seqlens break G4 there,
        # and a masked call is as fusable as an unmasked one
        dense = get_family(family).mask == "dense"
        if "G4" in broken:
            kinds = ("cu_seqlens",) if dense else p.varlen_kinds[1:]
        else:
            kinds = ("none", "mask") if dense and p.varlen is not False else ("none",)
        kind = draw(sampled(kinds))
        if "G2" in broken:
            cache_kind = "populated"
        else:
            cache_kind = draw(sampled({None: ("none", "empty"), False: ("none",)}.get(p.cache, ("empty",))))
        writes = "G3" in broken
    if cache_kind == "populated" and not p.varlen_states and _packs(kind, family):
        # the backends take no cached state with cu_seqlens: the packed call keeps an empty cache
        cache_kind = "empty"
    batch = 1 if kind == "cu_seqlens" else draw(st.integers(p.min_batch, p.max_batch))
    seq_len = draw(seq_lens(min_value=p.min_seq_len, max_value=p.max_seq_len))
    lens: tuple[int, ...] = ()
    pad_side = "right"
    if kind == "cu_seqlens" and draw(st.integers(0, 3)) == 3:
        # packed decoding: one new token per sequence (SPEC §2's step path under cu_seqlens)
        lens = (1,) * draw(st.integers(1, min(p.max_seqs or 4, p.max_seq_len)))  # within the token budget too
        seq_len = len(lens)
    elif kind == "cu_seqlens":
        lens = draw(cu_seqlens_for(seq_len, max_seqs=p.max_seqs))
    elif kind == "mask":
        lens, pad_side = draw(attention_mask_lens(batch=batch, seq_len=seq_len))
    prefix_len = draw(st.integers(1, p.max_prefix_len)) if cache_kind == "populated" else 0
    example = Example(
        config=config,
        family=family,
        dtype=dtype,
        batch=batch,
        seq_len=seq_len,
        seed=draw(st.integers(0, 2**16)),
        scale=draw_scale(draw, p.scales),  # 0 at a low rate: x == 0 hides every conv tap
        varlen=kind,
        seq_lens=lens,
        pad_side=pad_side,
        cache=cache_kind,
        prefix_len=prefix_len,
        use_cache=writes,
        grad=draw(_flag(p.grad, 0.5)),
        train=draw(_flag(p.train, 0.5)),
        conv_values=draw(value_kinds()),  # the fused conv call's values, checked alone by the P7 conv rows
    )
    if fuzzing():
        target(float(batch * seq_len), label="examples: tokens")
        target(float(example.scale), label="examples: input scale")
        if config.use_short_conv:  # the fused call's channels: where real kernels change code path
            target(float(sum(config.conv_channels(n) for n in config.SLOTS)), label="examples: conv channels")
    return example
