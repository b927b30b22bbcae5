"""The gap search behind ``gdn-equiv check/fuzz --target``, on its own: a synthetic target handed in as
its ``check`` (no upstream package needed; the fla searches are in test_fla_target.py)."""

from __future__ import annotations

import types
from typing import Any

from gdn_equiv import properties as P
from gdn_equiv.compare import Report
from gdn_equiv.example import Example
from gdn_equiv.runner import search_gaps


def test_gap_search_reports_each_kind_at_its_own_minimum() -> None:
    """Two overlapping gap kinds of a synthetic target (``A`` wherever batch >= 2, else ``B`` wherever
    seq_len >= 2, handed to the search as its ``check``): shrinking one kind meets the other, and each must
    still come out at its own minimum, not as the first example that failed (reporting that one instead
    of the shrunk one fails this with ``(2, 3) != (2, 1)``)."""

    class GapA(P.UpstreamGap):
        pass

    class GapB(P.UpstreamGap):
        pass

    report = Report("guard", ("synthetic", "spec"), False, 1)

    def synthetic_guard(example: Example, **_: object) -> Any:
        if example.batch >= 2:
            raise GapA("A", report)
        if example.seq_len >= 2:
            raise GapB("B", report)
        return types.SimpleNamespace(reason_id="fuse")

    found = search_gaps("synthetic", max_examples=300, check=synthetic_guard)
    checks = {c.name: c.example for c in found if c.result == "FAIL"}
    assert checks.keys() == {"P1-synthetic-gap-A", "P1-synthetic-gap-B"}
    a, b = checks["P1-synthetic-gap-A"], checks["P1-synthetic-gap-B"]
    assert a is not None and b is not None
    assert (a.batch, a.seq_len) == (2, 1), a
    assert (b.batch, b.seq_len) == (1, 2), b
