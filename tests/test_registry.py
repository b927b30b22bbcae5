"""The property registry (:mod:`gdn_equiv.harness.registry`): every driver reads it, and every record has teeth.

Each record names the planted defects it must catch (:mod:`gdn_equiv.harness.planted`; a serving record's are planted
engines, :mod:`gdn_equiv.serving.planted`); here each record runs on its own premise against each of them and
must find, by itself, an example where it fails. A record added without teeth, or with teeth it does not
catch, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import find

from gdn_equiv.harness import planted, registry
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.model.backends import registered
from gdn_equiv.run import cli
from gdn_equiv.run.cli import check as cli_check
from gdn_equiv.serving.planted import PLANTED
from gdn_equiv.targets import get_target

ROOT = Path(__file__).resolve().parent.parent
#: records whose teeth live elsewhere, and why
TEETH_ELSEWHERE = {
    "P2-no-short-conv": "a layer without convs has no fused path to plant a defect in; P2's teeth cover the count",
}

RECORDS = [*registry.property_records(), *registry.serving_records()]
TEETH = [(r.name, tooth) for r in RECORDS for tooth in r.teeth]


@pytest.mark.teeth
@pytest.mark.parametrize(("name", "tooth"), TEETH, ids=[f"{n}-{t}" for n, t in TEETH])
def test_every_property_catches_its_planted_defects(name: str, tooth: str) -> None:
    record = registry.get_record(name)
    assert record.check is not None
    backend, target = "torch", None
    if record.serving:  # the planted engine is the row's engine path
        backend, kernels = tooth, registered()
    elif tooth.startswith("backend:"):
        backend = tooth.removeprefix("backend:")
        kernels = registered(planted.BACKENDS[backend])
    else:
        target = get_target("gdn_equiv", defect=planted.LAYER_DEFECTS[tooth])
        kernels = registered()

    def fails(draw: registry.Draw) -> bool:
        try:
            record.check(draw.example, device="cpu", target=target)  # type: ignore[misc]
        except P.NotApplicable:
            return False
        except Mismatch:
            return True
        return False

    with kernels:
        drawn = (
            record.strategy(backend) if record.serving else record.strategy(backend, "gated_deltanet", max_seq_len=20)
        )
        draw = find(drawn, fails, settings=first_hit())
    print(f"{name} caught {tooth}: {draw.example.short()}")


def test_every_example_property_has_teeth_or_says_where_they_are() -> None:
    for record in RECORDS:
        assert record.teeth or record.name in TEETH_ELSEWHERE, f"{record.name} names no planted defect"
        for tooth in record.teeth:
            known = PLANTED if record.serving else {**planted.BACKENDS, **planted.LAYER_DEFECTS}
            assert tooth.removeprefix("backend:") in known, tooth


def test_the_command_line_accepts_exactly_the_registry() -> None:
    args = cli.build_parser().parse_args(["check", "--device", "cpu"])
    properties, conditions = cli_check._properties(args)
    assert properties == [r.name for r in RECORDS]
    assert [registry.necessity_name(c) for c in conditions] == [r.name for r in registry.necessity_records()]


def test_the_readme_lists_every_property_row_of_the_registry() -> None:
    """The README's table of the rows check and fuzz run is the registry's, name for name."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("<!-- registry table -->") : readme.index("<!-- end registry table -->")]
    listed = re.findall(r"^\| `([^`]+)` \|", table, flags=re.M)
    assert listed == [r.name for r in RECORDS] + [registry.NECESSITY + "-G<n>"]


def test_one_profile_table_gives_every_driver_its_example_count() -> None:
    from gdn_equiv.harness.testing import PROFILES

    for name, values in PROFILES.items():
        assert registry.examples_per_row(name) == values["max_examples"]
    args = cli.build_parser().parse_args(["check", "--device", "cpu", "--profile", "dev"])
    assert cli_check.plan_run(args).examples == PROFILES["dev"]["max_examples"]
