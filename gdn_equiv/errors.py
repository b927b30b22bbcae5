"""Errors raised for bad input, following Hypothesis' habit of one clear exception type."""

from __future__ import annotations


class InvalidArgument(ValueError):
    """An argument broke a documented rule.

    The message names the offending value and the rule, e.g.
    ``cu_seqlens must end at 37 (B*T), got 36``.
    """


class BackendUnavailable(RuntimeError):
    """A conv backend is registered but cannot run here (package missing, no GPU)."""
