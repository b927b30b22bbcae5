"""Bad calls for SPEC P8: a valid example with one thing made wrong (:mod:`gdn_equiv.harness.bad_input`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import strategies as st

from gdn_equiv import strategies  # strategies.examples read per draw: the package (still loading here) holds it
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.bad_input import KINDS, PROLOGUES, BadCall, applies
from gdn_equiv.model.example import Example


@st.composite
def bad_calls(
    draw: st.DrawFn,
    *,
    backends: Sequence[str] = ("torch",),
    family: str | Sequence[str] = "gated_deltanet",
    kinds: Sequence[str] | None = None,
    max_seq_len: int = 8,
) -> BadCall:
    """A :class:`BadCall`: a kind from ``kinds`` (default: every kind of :data:`KINDS`), an example
    meeting its premise (a populated cache for cached-state kinds, short convs for conv kinds), a
    prologue and the corruption's own choice. Shrinks towards the first kind, ``auto``, pick 0."""
    kinds = list(KINDS) if kinds is None else list(kinds)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise InvalidArgument(f"unknown bad-input kinds {unknown}; known: {sorted(KINDS)}")
    kind = draw(st.sampled_from(kinds))
    needs = KINDS[kind].needs.split()
    example: Example = draw(
        strategies.examples(
            backends=backends,
            family=family,
            max_seq_len=max_seq_len,
            grad=False,
            use_short_conv=True if "short_conv" in needs else None,
            varlen=False if "plain" in needs else None,
            cache=True if "populated" in needs else None,
        )
    )
    if "populated" in needs and example.cache != "populated":
        example = replace(example, cache="populated", prefix_len=max(example.prefix_len, 1))
    if not applies(kind, example):  # layer_idx=None drawn with a cache kind
        example = replace(example, config=example.config.replace(layer_idx=0))
    return BadCall(example, kind, draw(st.sampled_from(PROLOGUES)), draw(st.integers(0, 63)))
