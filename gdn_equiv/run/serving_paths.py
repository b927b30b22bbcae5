"""What ``gdn-equiv check --serving-engine`` says about each engine path before its rows: its version, whether it
runs here (S0 on the smallest case, D1 W2 fp32 one token, against the reference: on a GPU, the first compile too,
so a row's seconds are not spent compiling) and the callers its adapter names. Said once per path, on a line and
in the report's ``meta["serving_paths"]``; it decides no row (each row is asked and judged in the ledger).
"""

from __future__ import annotations

from typing import Any

from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.serving import properties as S
from gdn_equiv.serving.cases import Batch, ConvSpec, SpecCase
from gdn_equiv.serving.records import adapter

__all__ = ["SMALLEST", "describe"]

#: the smallest S0 case: one fresh sequence of one token, D1 W2 fp32, no bias, no activation
SMALLEST = SpecCase(Batch(ConvSpec(1, 2), 1, (1,), (0,), (False,), 0), 1, (1,))


def _runs(engine: Any) -> str:
    """``runs here``, or what the smallest S0 case says instead (an engine's error is said, never raised: its
    rows report it as they run)."""
    try:
        S.check_s0_reference(engine, SMALLEST)
    except Mismatch as exc:
        return f"does not compute right (S0 on the smallest case): {str(exc).splitlines()[0]}"
    except Exception as exc:
        return f"raises on the smallest case: {type(exc).__name__}: {str(exc)[:200]}"
    return "runs here (S0 on the smallest case: = the reference)"


def describe(paths: list[str]) -> dict[str, dict[str, Any]]:
    """Each path that runs here: its version, :func:`_runs` and its adapter's callers."""
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        engine = adapter(path)
        callers = getattr(engine, "callers", None)
        said = callers() if callable(callers) else {}
        out[path] = {"version": engine.version, "runs": _runs(engine), "callers": said}
    return out
