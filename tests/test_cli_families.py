"""``gdn-equiv families``: one aligned row per family under a header."""

from __future__ import annotations

import pytest

from gdn_equiv.model import families
from gdn_equiv.run import cli
from gdn_equiv.run.cli import common as cli_common

HEADER = ("family", "fla layer", "mask", "q / k / v channels", "activation", "targets", "what it is")


def _table(capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert cli.main(["families"]) == cli_common.EXIT_OK
    return capsys.readouterr().out.splitlines()


def _assert_aligned(lines: list[str]) -> None:
    """Each column starts where its header does, two spaces after the widest cell before it."""
    header, rule, *rows = lines
    starts = [header.index(title) for title in HEADER]
    assert starts == sorted(starts) and set(rule) <= {"-", " "}, lines[:2]
    for row in rows:
        for start in starts[1:]:
            assert row[start - 2 : start] == "  " and row[start] != " ", f"column at {start} misaligned in:\n{row}"


def test_families_prints_a_header_and_aligned_rows(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _table(capsys)
    _assert_aligned(lines)
    names = [row.split()[0] for row in lines[2:]]
    assert names == [*families.known_families(), *families.fla_only_families()]
    gdn = next(row for row in lines if row.startswith("gated_deltanet "))
    assert "fla.layers.GatedDeltaNet " in gdn and "1536 / 1536 / 3072" in gdn and " silu " in gdn, gdn
    assert "[fla-only] fla, gated_deltanet's examples" in next(row for row in lines if row.startswith("gdn2 "))


def test_a_family_that_cannot_load_keeps_its_row(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    loadable = families.get_family

    def get_family(name: str) -> object:
        if name == "kda":
            raise ImportError("No module named 'planted_missing_extra'")
        return loadable(name)

    monkeypatch.setattr(families, "get_family", get_family)
    lines = _table(capsys)
    _assert_aligned(lines)
    kda = next(row for row in lines if row.startswith("kda "))
    assert "cannot be loaded here: No module named 'planted_missing_extra'" in kda, kda
