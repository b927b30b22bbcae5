"""What a property's premise strategy draws: the example and whether it was built to meet the premise.

Its own module below the registry, so that the records the registry gathers (the layer properties,
the serving engines' S1-S7) can build their premises without importing the registry back.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Draw(NamedTuple):
    """One drawn example and whether it was built to meet the property's premise (a layer
    :class:`~gdn_equiv.model.example.Example`, or a serving engine's case)."""

    example: Any
    must_apply: bool
