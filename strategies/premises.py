"""The properties' premises (:mod:`gdn_equiv.harness.registry`'s ``PropertyRecord.premise``): the strategies of
:class:`~gdn_equiv.harness.premise.Draw` s each property runs on, for one backend, families, dtype and sequence
length. ``check``, ``fuzz`` and the pytest gate draw a record's examples from here, through its record."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from gdn_equiv import strategies  # read per draw (strategies.examples), so that a replaced strategy is used
from gdn_equiv.harness.premise import Draw
from gdn_equiv.model.backends import BUILTIN_BACKENDS, available_backends, capabilities
from gdn_equiv.model.example import Example
from gdn_equiv.model.guard import Condition

__all__ = [
    "any_examples",
    "either_side",
    "gap_search_examples",
    "no_short_conv",
    "other_builtins",
    "refused",
    "trainable_upstream",
    "violating",
]


def other_builtins(backend: str) -> tuple[str, ...]:
    """The built-in kernels besides ``backend`` that run here, the one that runs the most first (no declared
    limits: torch, triton): G5's second backend, whose states are drawn inside both backends' capabilities.
    Built-ins only, which differ numerically; a plug-in registered by a test (a bitwise twin of torch, say)
    would make the search look for a difference that cannot exist. Only the built-ins are asked whether they
    run here: asking every known backend imported fla (~5 s of CPU) in each plan with a G5 row."""
    others = [b for b in available_backends(sorted(BUILTIN_BACKENDS)) if b != backend and b in BUILTIN_BACKENDS]
    return tuple(sorted(others, key=lambda b: capabilities([b]).declared))


def _kwargs(dtype: str | None, max_seq_len: int) -> dict[str, Any]:
    return {"max_seq_len": max_seq_len, **({"dtypes": (dtype,)} if dtype is not None else {})}


@functools.cache
def any_examples(
    backend: str, families: tuple[str, ...], dtype: str | None, max_seq_len: int
) -> st.SearchStrategy[Draw]:
    drawn = strategies.examples(backends=(backend,), fusable=None, family=families, **_kwargs(dtype, max_seq_len))
    return drawn.map(lambda e: Draw(e, False))


@functools.cache
def no_short_conv(
    backend: str, families: tuple[str, ...], dtype: str | None, max_seq_len: int
) -> st.SearchStrategy[Draw]:
    kwargs = _kwargs(dtype, max_seq_len)
    drawn = strategies.examples(backends=(backend,), fusable=None, use_short_conv=False, family=families, **kwargs)
    return drawn.map(lambda e: Draw(e, True))


def either_side(grad: bool) -> Callable[..., st.SearchStrategy[Draw]]:
    """Mostly states the spec fuses (built to apply: P3/P4 must compare them), a third refused for one
    condition alone (a guard that fuses too often must meet them; not applicable where it refuses)."""

    @functools.cache
    def premise(
        backend: str, families: tuple[str, ...], dtype: str | None, max_seq_len: int
    ) -> st.SearchStrategy[Draw]:
        kwargs = {**_kwargs(dtype, max_seq_len), **({"grad": True} if grad else {})}
        # one condition broken alone, among those the pins leave breakable (one backend: never G5)
        one_reason = strategies.examples(backends=(backend,), fusable=False, max_reasons=1, family=families, **kwargs)
        fusable = strategies.examples(backends=(backend,), fusable=True, family=families, **kwargs).map(
            lambda e: Draw(e, True)
        )
        return st.one_of(fusable, fusable, one_reason.map(lambda e: Draw(e, False)))

    return premise


@functools.cache
def refused(backend: str, families: tuple[str, ...], dtype: str | None, max_seq_len: int) -> st.SearchStrategy[Draw]:
    drawn = strategies.examples(backends=(backend,), fusable=False, family=families, **_kwargs(dtype, max_seq_len))
    return drawn.map(lambda e: Draw(e, True))


def violating(condition: Condition) -> Callable[..., st.SearchStrategy[Draw]]:
    """States breaking ``condition`` alone (G5: between this backend and another built-in one)."""

    @functools.cache
    def premise(
        backend: str, families: tuple[str, ...], dtype: str | None, max_seq_len: int
    ) -> st.SearchStrategy[Draw]:
        backends = (backend, *other_builtins(backend)[:1]) if condition is Condition.G5 else (backend,)
        per_family = [
            strategies.violating(condition, backends=backends, family=f, max_seq_len=max_seq_len) for f in families
        ]
        return st.one_of(per_family).map(lambda e: Draw(e, False))

    return premise


def gap_search_examples(family: Any, **pins: Any) -> st.SearchStrategy[Example]:
    """The examples P1's gap search against an upstream target draws (:func:`gdn_equiv.run.runner.search_gaps`),
    with the target's ``pins``. A third of the draws break one guard condition alone: the states where a guard's
    mistake on that condition shows (another broken condition can make both guards fall back). SPEC §1's two
    gaps are such states: 14 searches found both in 137-480 guard calls (shrinking included), 6 searches with
    free draws only in 136-1,093."""
    return st.one_of(
        strategies.examples(fusable=True, family=family, **pins),
        strategies.examples(fusable=False, max_reasons=1, family=family, **pins),
        strategies.examples(fusable=False, family=family, **pins),
    )


def trainable_upstream(drawn: st.SearchStrategy[Draw]) -> st.SearchStrategy[Draw]:
    """``drawn`` without the training examples of a ``recurrent`` core: fla refuses to train a layer whose core
    mode is ``fused_recurrent`` ("Only chunk mode is supported in training."), a config refusal of fla's, not a
    finding, so the gate leaves them out of an upstream target's draws."""
    return drawn.filter(lambda d: not (d.example.train and getattr(d.example.config, "mode", None) == "recurrent"))
