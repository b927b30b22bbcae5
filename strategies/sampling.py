"""One Hypothesis strategy object per distinct set of values, and the model's :class:`~gdn_equiv.model.choices.Choices`
answered by draws: the strategies, the families' dims and the conv facts draw through these."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

T = TypeVar("T")


def sampled(values: Iterable[T]) -> SearchStrategy[T]:
    """``st.sampled_from(values)``, one strategy object per distinct (hashable) values, compared with
    their types, so ``(1, 2)`` is not ``(1.0, 2.0)``. Hypothesis validates a strategy at its first draw
    (~40 us); a fresh ``sampled_from`` inside a composite is validated every example, ~20% of drawing one."""
    values = tuple(values)
    return _sampled(tuple((type(v), v) for v in values), values)


@functools.lru_cache(maxsize=4096)
def _sampled(_key: tuple[tuple[type, Any], ...], values: tuple[Any, ...]) -> SearchStrategy[Any]:
    return st.sampled_from(values)


_BOOLEANS = st.booleans()


class DrawnChoices:
    """The model's :class:`~gdn_equiv.model.choices.Choices`, each answered by one draw of ``draw`` (a
    composite's ``draw`` or ``data.draw``): ``one`` is :func:`sampled`, ``integer`` ``st.integers``, ``flag``
    ``st.booleans``, exactly the draws the model's functions made when they drew themselves."""

    def __init__(self, draw: Any) -> None:
        self._draw = draw

    def one(self, values: Iterable[T]) -> T:
        return self._draw(sampled(values))

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(st.integers(lo, hi))

    def flag(self) -> bool:
        return self._draw(_BOOLEANS)

    def __call__(self, strategy: SearchStrategy[T]) -> T:
        """A plug-in fact written before :class:`~gdn_equiv.model.choices.Choices` draws a strategy itself."""
        return self._draw(strategy)
