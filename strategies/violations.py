"""States that break exactly one guard condition, for the necessity searches (SPEC P6)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from gdn_equiv import strategies  # strategies.examples read per draw: the package (still loading here) holds it
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.backends import available_backends, capabilities, supported_widths
from gdn_equiv.model.backends.capabilities import DTYPE_NAMES
from gdn_equiv.model.config import ConvSpec
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import get_family
from gdn_equiv.model.guard import Condition
from gdn_equiv.strategies.sampling import DrawnChoices

_OTHER_DTYPE = {"float32": "float64", "float64": "float32", "float16": "float32", "bfloat16": "float32"}


def _with_conv(example: Example, name: str, **changes: object) -> Example:
    c = example.config
    spec = replace(c.conv_spec(name), **changes)
    return replace(example, config=c.replace(**{f"{name}_conv": spec}))


@st.composite
def violating(
    draw: st.DrawFn,
    condition: Condition,
    *,
    backends: tuple[str, ...] = ("torch",),
    max_seq_len: int = 12,
    family: str = "gated_deltanet",
) -> Example:
    """A fusable example changed so that ``condition`` (and, by construction, only it) fails; a
    registered per-conv fact's condition (G10) by the fact's own ``violate``.

    Shrinks towards the smallest fusable example with the smallest change: q's conv is the one
    changed, towards no bias and no cache.
    """
    # every conv on the first backend, drawn inside all of ``backends``' capabilities (G5 moves one conv to
    # another of them, which must take the call too)
    base: Example = draw(
        strategies.examples(
            backends=backends[:1], within=backends, fusable=True, max_seq_len=max_seq_len, family=family
        )
    )
    c = base.config
    name = draw(st.sampled_from(c.SLOTS))
    if condition is Condition.G1:
        return replace(base, config=c.replace(use_short_conv=False))
    if condition is Condition.G2:
        return replace(base, cache="populated", prefix_len=draw(st.integers(1, 6)), use_cache=False)
    if condition is Condition.G3:
        return replace(base, cache=draw(st.sampled_from(["none", "empty"])), use_cache=True)
    if condition is Condition.G4:
        # a dense-mask family keeps a masked batch dense (still fusable): only cu_seqlens break G4

        if get_family(base.family).mask == "dense" or draw(st.booleans()):
            lens = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4))
            return replace(
                base,
                batch=1,
                seq_len=max(sum(lens), 1) if sum(lens) else 1,
                varlen="cu_seqlens",
                seq_lens=tuple(lens) if sum(lens) else (1,),
            )
        lens = tuple(draw(st.integers(0, base.seq_len)) for _ in range(base.batch))
        return replace(base, varlen="mask", seq_lens=lens, pad_side=draw(st.sampled_from(["right", "left"])))
    if condition is Condition.G5:
        current = c.conv_backend
        # the backends named after the first; else any available one
        others = [b for b in (backends[1:] or available_backends()) if b != current]
        if not others:
            raise InvalidArgument(f"G5 needs a second conv backend besides {current!r}; none is available here")
        return _with_conv(base, name, backend=draw(st.sampled_from(others)))
    if condition is Condition.G6:
        current = c.conv_spec(name).activation
        other = None if current in ("silu", "swish") else "silu"
        return _with_conv(base, name, activation=other)
    if condition is Condition.G7:
        size = c.slot_kernel_size(name)
        lo, hi = supported_widths(backends)
        sizes = [w for w in range(max(lo, 2), min(hi, 6) + 1) if w != size]
        return _with_conv(base, name, kernel_size=draw(st.sampled_from(sizes)))
    if condition is Condition.G8:
        if draw(st.booleans()):
            return replace(
                base,
                config=c.replace(
                    conv_bias=not c.conv_bias,
                    **{f"{n}_conv": replace(c.conv_spec(n), bias=c.conv_bias) for n in c.SLOTS if n != name},
                ),
            )
        return _with_conv(base, name, bias=not c.conv_bias)
    if condition is Condition.G9:
        current = c.conv_spec(name).dtype or base.dtype
        taken = capabilities(backends).dtypes_among(DTYPE_NAMES)
        other = _OTHER_DTYPE[current]
        others = [d for d in taken if d != current]
        if not others:
            raise InvalidArgument(
                f"G9 needs conv parameters of another dtype than {current}; the backends take {taken}"
            )
        return _with_conv(base, name, dtype=other if other in taken else others[0])
    if condition.fact is not None:
        # a registered per-conv fact (the L2 norm): the fact says how one conv disagrees with the
        # others (the base is fusable, so they agree); shrinks to its simplest disagreement
        fact = condition.fact
        channels = [c.conv_channels(n) for n in c.SLOTS]
        spec = c.conv_spec(name)
        values = fact.violate(DrawnChoices(draw), fact.values(spec.extras), channels)
        return _with_conv(base, name, extras=tuple({**dict(spec.extras), **values}.items()))
    raise AssertionError(condition)


__all__ = ["ConvSpec", "violating"]
