"""``gdn-equiv faithful``: the faithfulness table as a command (it was a script). Its arguments are refused
before any example runs; a cell that fails, or that no example reached, makes the table FAIL (exit 1); a
planted reference edit shows as a FAIL cell; our reference layers pass against the installed fla."""

from __future__ import annotations

import os

import pytest

from gdn_equiv.harness.faithful import unfaithful_reason
from gdn_equiv.harness.planted import reference_defects
from gdn_equiv.run import cli
from gdn_equiv.run.cli import faithful

_REASON = unfaithful_reason("gated_deltanet")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
needs_fla = pytest.mark.skipif(_REASON is not None, reason=str(_REASON))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--examples", "0"], "--examples 0: must be at least 1"),
        (["--family", "no-such-family"], "no-such-family has no naive-core adapter"),
        (["--family", ","], "no family has no naive-core adapter"),
    ],
)
def test_a_bad_argument_is_refused_before_any_example(argv: list[str], says: str, capsys, monkeypatch) -> None:
    monkeypatch.setattr(faithful, "measure", lambda *a, **k: pytest.fail("an example ran"))
    assert cli.main(["faithful", "--device", "cpu", *argv]) == 2
    assert says in capsys.readouterr().err


def test_a_failing_or_empty_cell_fails_the_table() -> None:
    table = faithful.Table()
    table.ran = {("gla", "fla-defaults"): 3}
    table.worst = {("gla", "fla-defaults", "forward"): (1e-7, 1e-6)}
    assert faithful.rows(table) == (["| gla | fla-defaults | forward | pass | 1.00e-07 | 1.00e-06 |"], False)
    table.failed = {("gla", "fla-defaults", "backward"): (2.0, 1e-6)}
    lines, failed = faithful.rows(table)
    assert failed and "| gla | fla-defaults | backward | FAIL | 2.00e+00 | 1.00e-06 |" in lines
    empty = faithful.Table(ran={("kda", "our-conv-facts"): 0})
    lines, failed = faithful.rows(empty)
    assert failed and lines == ["| kda | our-conv-facts | - | FAIL (not reached: no example ran) | - | - |"]


@needs_fla
def test_a_planted_reference_edit_is_a_fail_cell() -> None:
    """Our v conv without fla's default silu, against fla's own conv defaults: every output differs (silu
    is not the identity on any drawn input), so every example fails forward, by construction."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("fla's convs run in Triton's interpreter here (the plugin sets it without a GPU)")
    table = faithful.Table()
    layer_cls = reference_defects()["reference-v-conv-no-activation"]
    faithful.measure("gated_deltanet", "fla-defaults", 2, table, layer_cls=layer_cls)
    assert table.ran == {("gated_deltanet", "fla-defaults"): 2}
    assert ("gated_deltanet", "fla-defaults", "forward") in table.failed
    assert faithful.rows(table)[1]


@needs_fla
@pytest.mark.slow
def test_our_reference_layer_passes_against_fla(capsys) -> None:
    status = cli.main(["faithful", "--device", "cpu", "--family", "gated_deltanet", "--examples", "1"])
    out = capsys.readouterr().out
    assert status == 0, out
    for variant in ("our-conv-facts", "fla-defaults"):
        for direction in ("forward", "backward"):
            assert f"| gated_deltanet | {variant} | {direction} | pass |" in out, out
