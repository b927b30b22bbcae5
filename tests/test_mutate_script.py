"""``tools/mutate.py``'s equivalence list: mutants argued equivalent are named by what they change, not
by id, so the list survives edits elsewhere in the file; every committed entry names a mutant the
current source still has, and says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _gen import load_script

ROOT = Path(__file__).resolve().parents[1]


M = load_script("mutate")

SOURCE = """def f(x):
    if x > 0:
        return x + 1
    return 0


class C:
    def g(self, x):
        return x + 1
"""


def _entry(source: str, mutant) -> dict:
    return {
        "target": "pkg/f.py",
        "against": ["suite"],
        "kind": mutant.kind,
        "before": mutant.before,
        "after": mutant.after,
        "line": M.line_text(source, mutant),
        "scope": M.scope(source, mutant),
        "why": "planted for the test",
    }


def test_an_entry_names_its_mutant_by_content_so_ids_and_lines_may_move() -> None:
    mutants = M.mutants(SOURCE)
    plus = next(m for m in mutants if m.kind == "arithmetic")
    entry = _entry(SOURCE, plus)
    assert M.equivalent_entry([entry], "pkg/f.py", "suite", SOURCE, plus) is entry
    # the same mutant after an edit above it: another id and line, the same entry
    moved_source = "import os\n\n\n" + SOURCE
    moved = next(m for m in M.mutants(moved_source) if m.kind == "arithmetic")
    assert moved.line == plus.line + 3
    assert M.equivalent_entry([entry], "pkg/f.py", "suite", moved_source, moved) is entry
    # another selection, another target, another mutant on the same line, or a changed line: no match
    assert M.equivalent_entry([entry], "pkg/f.py", "tree", SOURCE, plus) is None
    assert M.equivalent_entry([entry], "pkg/g.py", "suite", SOURCE, plus) is None
    other = next(m for m in mutants if m.line == plus.line and m is not plus)
    assert M.equivalent_entry([entry], "pkg/f.py", "suite", SOURCE, other) is None
    # the same line in another function (C.g's `return x + 1`) is another mutant
    twin = next(m for m in mutants if m.kind == "arithmetic" and m is not plus)
    assert M.line_text(SOURCE, twin) == M.line_text(SOURCE, plus) and M.scope(SOURCE, twin) == "C.g"
    assert M.equivalent_entry([entry], "pkg/f.py", "suite", SOURCE, twin) is None
    edited = SOURCE.replace("return x + 1", "return x + 1  # one more")
    again = next(m for m in M.mutants(edited) if m.kind == "arithmetic")
    assert M.equivalent_entry([entry], "pkg/f.py", "suite", edited, again) is None


def test_an_entry_without_its_argument_is_refused(tmp_path: Path) -> None:
    plus = next(m for m in M.mutants(SOURCE) if m.kind == "arithmetic")
    entry = _entry(SOURCE, plus)
    del entry["why"]
    path = tmp_path / "eq.json"
    path.write_text(json.dumps({"equivalent": [entry]}))
    with pytest.raises(SystemExit, match=r"lacks \['why'\]"):
        M.load_equivalent(path)
    assert M.load_equivalent(tmp_path / "absent.json") == []


def test_a_selection_passes_on_its_score_without_the_equivalent_mutants() -> None:
    report = {"killed": 19, "survived": 1, "timeout": 0, "error": 0, "equivalent": 4, "score": 19 / 20}
    assert M.passes(report, 0.95) and not M.passes(report, 1.0)
    assert not M.passes(report | {"error": 1}, 0.0)
    assert M.passes(report | {"score": None}, 1.0)  # every mutant listed as equivalent


def test_every_committed_entry_names_a_mutant_of_the_current_source() -> None:
    """An entry whose mutant no longer exists (the line was edited) is stale: argue it again or drop it."""
    entries = M.load_equivalent(M.EQUIVALENT)
    assert entries, f"{M.EQUIVALENT} lists no mutant"
    sources = {t: (ROOT / t).read_text() for t in {e["target"] for e in entries}}
    mutants = {t: M.mutants(source) for t, source in sources.items()}
    for e in entries:
        source = sources[e["target"]]
        found = [
            m
            for m in mutants[e["target"]]
            for against in e["against"]
            if M.equivalent_entry([e], e["target"], against, source, m) is e
        ]
        assert found, f"stale entry (no such mutant in {e['target']} now): {e}"
        assert set(e["against"]) <= {"tree", "suite"} and len(e["why"]) > 20, e
