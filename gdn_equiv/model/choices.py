"""What the model may be asked to choose, with no Hypothesis in it: the draw layer (``strategies/``) answers.

A family's dims (:attr:`gdn_equiv.model.families.base.Family.dims`) and a conv fact's values
(:attr:`gdn_equiv.model.conv_ops.ConvFact.draw` / ``violate``) are declared as functions of a :class:`Choices`:
which values, which integer ranges, which flags, and how one choice narrows the next (a head dim the value
dims must divide). :class:`gdn_equiv.strategies.sampling.DrawnChoices` answers each with one Hypothesis draw
(``one``: ``sampled_from``, ``integer``: ``integers``, ``flag``: ``booleans``), so the model declares the
distributions and the strategies draw them; each shrinks to the first value, the low end, ``False``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Choices(Protocol):
    """One answer per question, from the draw layer."""

    def one(self, values: Iterable[T]) -> T:
        """One of ``values`` (not empty); shrinks to the first."""
        ...

    def integer(self, lo: int, hi: int) -> int:
        """An integer in ``lo..hi`` (both included); shrinks to ``lo``."""
        ...

    def flag(self) -> bool:
        """``True`` or ``False``; shrinks to ``False``."""
        ...
