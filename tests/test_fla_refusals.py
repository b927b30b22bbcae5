"""An fla constructor that refuses a drawn config never ends a run (SPEC §10): a planted fla-only family
whose class refuses every two-head config (a rule no family record lists, as a newer fla would add one)
is searched by the fla target's gap search and by ``gdn-equiv fuzz``; the refusal is an ``upstream
refused`` row with the config and the class's message, and the search still finds the family's gap.

CPU, construction and fla's guard only; skipped with the reason where no fla the target knows is installed.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from gdn_equiv.model.families import fla_only
from gdn_equiv.model.families.fla_only import FlaOnlyFamily, _gdn2_kwargs, _kkv
from gdn_equiv.run import cli
from gdn_equiv.run.cli import common as cli_common
from gdn_equiv.run.runner import search_gaps
from gdn_equiv.targets import get_target

_REASON = get_target("fla").unavailable()
pytestmark = [
    pytest.mark.fla,
    pytest.mark.skipif(_REASON is not None, reason=f"fla target unavailable: {_REASON}"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
PLANTED_MESSAGE = "planted: this layer refuses two heads"

if _REASON is None:
    from fla.layers import GatedDeltaNet

    class RefusingGatedDeltaNet(GatedDeltaNet):
        """fla's Gated DeltaNet with one more constructor rule than any record lists."""

        def __init__(self, *args, **kwargs):
            if kwargs.get("num_heads") == 2:
                raise AssertionError(PLANTED_MESSAGE)
            super().__init__(*args, **kwargs)

    # the adapter passes only the arguments the class declares: declare fla's own
    RefusingGatedDeltaNet.__init__.__signature__ = inspect.signature(GatedDeltaNet.__init__)  # type: ignore[attr-defined]


@pytest.fixture
def refusing_family(monkeypatch: pytest.MonkeyPatch) -> str:
    """The planted family, registered for the test: Gated DeltaNet's examples (half of them two-headed),
    no rules listed, and no fused prologue in any version (so its clean examples are a known gap)."""
    family = FlaOnlyFamily(
        "refusing",
        f"{__name__}.RefusingGatedDeltaNet",
        "gated_deltanet",
        _gdn2_kwargs,
        _kkv,
        "planted refusals",
        fuses_from=(),
    )
    monkeypatch.setitem(fla_only.FAMILIES, family.name, family)
    return family.name


def test_a_refused_config_is_recorded_and_the_search_finds_the_gap(refusing_family: str) -> None:
    checks = list(search_gaps("fla", max_examples=60, family=refusing_family))
    refused = [c for c in checks if c.result == "upstream refused"]
    assert [c.name for c in refused] == ["P1-fla-upstream-refused"]
    (row,) = refused
    assert row.family == refusing_family and row.example is not None and row.example.config.num_heads == 2
    assert f"RefusingGatedDeltaNet refused the arguments of a 'refusing' config: AssertionError: {PLANTED_MESSAGE}" in (
        row.failure
    )
    assert "'num_heads': 2" in row.failure  # the arguments fla was given
    gaps = [c for c in checks if c.result == "FAIL"]
    assert [c.name for c in gaps] == ["P1-fla-gap-NoFusedPrologue"]
    assert gaps[0].example is not None and gaps[0].example.config.num_heads == 1  # shrunk past the refusals
    summary = checks[-1]
    assert summary.name == "P1-fla-guard-vs-spec" and summary.result == "pass"
    assert 0 < summary.not_applicable < summary.examples


def test_fuzz_reports_the_refusal_and_exits_for_the_finding_not_as_an_internal_error(
    refusing_family: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 4 is gdn-equiv's own bug; a refusing upstream constructor is not one. The run ends with the
    gap's status (1), the refusal in the table and in the report's rows."""
    report = tmp_path / "report"
    argv = ["fuzz", "--target", "fla", "--family", refusing_family, "--seconds", "8", "--report", str(report)]
    status = cli.main(argv)
    out = capsys.readouterr()
    assert status == cli_common.EXIT_FAILED, out.err
    assert "upstream refused" in out.out and "internal error" not in out.err
    rows = [json.loads(line) for line in (report / "rows.jsonl").read_text().splitlines()]
    refused = [r for r in rows if r["result"] == "upstream refused"]
    assert refused and PLANTED_MESSAGE in refused[0]["failure"] and refused[0]["example"]["config"]["num_heads"] == 2
