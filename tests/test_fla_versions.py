"""The fla version table (gdn_equiv/model/fla_versions.py): one row per version, and a family fuses on
every version whose decider its record names. No fla needed: the table and the records are plain data.
"""

from __future__ import annotations

import hypothesis.errors
import pytest

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model import families
from gdn_equiv.model.families import fla_only_families, get_family, known_families
from gdn_equiv.model.families.base import Family
from gdn_equiv.model.families.gated_deltanet import FAMILY as GDN
from gdn_equiv.model.fla_versions import CONV_0_5, GAPS, QKV_HELPER, VERSIONS, version_row
from gdn_equiv.strategies import layer_configs
from gdn_equiv.targets import fla_target

#: a third-party family through PR #977's shared helper: Gated DeltaNet's layer under another name
PLANTED = Family(
    name="planted_ep",
    layer_cls=GDN.layer_cls,
    dims=GDN.dims,
    description="planted entry-point family",
    fla_class="fla.layers.GatedDeltaNet",
    fla_kwargs=GDN.fla_kwargs,
    small=GDN.small,
    fuses_from=(QKV_HELPER,),
    fla_rules=GDN.fla_rules,
)


@pytest.fixture
def entry_point_family(monkeypatch: pytest.MonkeyPatch) -> str:
    """``PLANTED`` registered as an entry point (``gdn_equiv.families`` group), as a package would."""
    monkeypatch.setattr(families, "_entry_point_specs", lambda: {PLANTED.name: f"{__name__}:PLANTED"})
    monkeypatch.setattr(families, "_LOADED", {})
    return PLANTED.name


def test_an_entry_point_family_fuses_on_every_version_that_decides_where_it_says(entry_point_family: str) -> None:
    """No row names it: it fuses on the PR #977 build (the helper), not where Gated DeltaNet's method
    decides, and its known gaps follow."""
    fusing = {v for v, row in VERSIONS.items() if row.fuses(entry_point_family)}
    assert fusing == {v for v, row in VERSIONS.items() if row.decider == QKV_HELPER} == {"0.5.2+pr977"}
    assert version_row("0.5.2+pr977").known_gaps(entry_point_family) == GAPS
    assert version_row("0.6.0").known_gaps(entry_point_family) == ("NoFusedPrologue",)
    assert version_row("0.5.2").rules(entry_point_family) == version_row("0.5.2").rules("gated_deltanet")


def test_a_family_naming_no_decider_fuses_nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    silent = Family(name="silent", layer_cls=GDN.layer_cls, dims=GDN.dims, description="no fla fusion")
    assert not any(row.fuses(silent) for row in VERSIONS.values())
    assert {row.known_gaps(silent) for row in VERSIONS.values()} == {("NoFusedPrologue",)}


def test_every_family_names_only_deciders_the_table_has() -> None:
    deciders = {row.decider for row in VERSIONS.values()}
    for name in (*known_families(), *fla_only_families()):
        assert get_family(name).fuses_from, name
        assert set(get_family(name).fuses_from) <= deciders, name


def test_what_each_version_fuses() -> None:
    """SPEC §9: 0.6.0 and 0.5.2 fuse Gated DeltaNet only (its method); PR #977's build the twelve."""
    everything = (*known_families(), *fla_only_families())
    for version in ("0.6.0", "0.5.2"):
        assert [f for f in everything if version_row(version).fuses(f)] == ["gated_deltanet"], version
    assert [f for f in everything if version_row("0.5.2+pr977").fuses(f)] == list(everything)
    assert fla_target.REFERENCE_CORE_FAMILIES == ("gated_deltanet",)


def test_0_5_2_is_0_6_0_s_decision_over_the_pr_977_build_s_conv_and_constructors() -> None:
    """Read from the 0.5.2 wheel: ``GatedDeltaNet._use_fused_qkv_conv`` decides, its inline branch calls
    the layer module's ``causal_conv1d`` with the ``conv_bias`` flag's biases, the conv code is
    ``fla.modules.conv``, and its layer constructors assert what the PR #977 build's do."""
    old, new, pr = version_row("0.5.2"), version_row("0.6.0"), version_row("0.5.2+pr977")
    assert (old.decision, old.fused_bias, old.fused_conv) == (new.decision, new.fused_bias, new.fused_conv)
    assert old.conv == pr.conv == CONV_0_5 and old.conv.gluon is None
    assert old.constructors == pr.constructors != new.constructors


def test_versions_are_matched_exactly_and_an_unknown_one_is_refused_by_the_strategies() -> None:
    with pytest.raises(InvalidArgument, match=r"fla 0\.5\.1 .*known versions: 0\.6\.0, 0\.5\.2\+pr977, 0\.5\.2"):
        version_row("0.5.1")
    refused = r"fla_version must be one of .*'0\.5\.2'.*got '0\.5\.1'"
    with pytest.raises(hypothesis.errors.InvalidArgument, match=refused):
        layer_configs(family="gla", fla_version="0.5.1").example()
