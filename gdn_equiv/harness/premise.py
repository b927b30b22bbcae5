"""A property's premise: what its strategy draws (the example, and whether it was built to meet the
premise), and the exception a check raises on an example that does not meet it.

Its own module below the registry, so that the records the registry gathers (the layer properties,
the serving engines' S1-S7) can build their premises without importing the registry back.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class NotApplicable(Exception):
    """The example does not meet the property's premise (e.g. P3 on a state the guard refuses)."""


class Draw(NamedTuple):
    """One drawn example and whether it was built to meet the property's premise (a layer
    :class:`~gdn_equiv.model.example.Example`, or a serving engine's case)."""

    example: Any
    must_apply: bool
