"""What fla's constructors refuse, per family and version (SPEC §10: strategies learn to draw what each
upstream class accepts), on CPU: construction only, with the installed fla (0.6.0, or PR #977's build in
its own environment, or 0.5.2 in its own); skipped with the reason where no fla the target knows is installed.

- Each rule a family record lists for the installed version is one fla enforces: arguments that break
  it alone are refused by fla's class (a rule cannot be invented), and the family's small config
  breaks none and builds.
- Every example the gap search draws for a family builds in fla: zero refusals (a rule missed shows up
  here as fla's own message, with the config).
"""

from __future__ import annotations

import inspect
import warnings
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gdn_equiv.harness import properties as P
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import fla_only_families, get_family, known_families
from gdn_equiv.model.fla_versions import VERSIONS, fla_version, version_row
from gdn_equiv.strategies import examples, layer_configs
from gdn_equiv.targets import UpstreamRefused, get_target
from gdn_equiv.targets.fla_target import build_fla_layer, fla_class_of

FLA = get_target("fla")
_REASON = FLA.unavailable()
VERSION = fla_version()
pytestmark = [
    pytest.mark.fla,
    pytest.mark.skipif(_REASON is not None, reason=f"fla target unavailable: {_REASON}"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
FAMILIES = (*known_families(), *fla_only_families())
SLOW = [HealthCheck.too_slow]


def _rules(family: str) -> tuple:
    return version_row(VERSION).rules(family)


def _accepted(cls: type, kwargs: dict) -> dict:
    params = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in kwargs.items() if k in params}


def _small_kwargs(family: str) -> dict:
    fam = get_family(family)
    return fam.fla_kwargs(fam.config_cls(**fam.small))


def test_every_family_lists_its_rules_for_every_constructor_generation_of_the_table() -> None:
    """A row whose constructors no family record lists would let the strategies draw what that version
    refuses; a key no row names is dead."""
    for family in FAMILIES:
        assert set(get_family(family).fla_rules) == {row.constructors for row in VERSIONS.values()}, family


@pytest.mark.parametrize(
    ("family", "rule"),
    [pytest.param(f, r, id=f"{f}-{r.rule}") for f in FAMILIES if _REASON is None for r in _rules(f)],
)
def test_each_rule_is_one_fla_enforces(family: str, rule) -> None:
    cls = fla_class_of(family)
    kwargs = _small_kwargs(family) | dict(rule.breaking)
    assert set(rule.breaking) <= set(_accepted(cls, kwargs)), f"{cls.__name__} takes no {sorted(rule.breaking)}"
    assert not rule.holds(kwargs), f"{rule.breaking} do not break {rule.rule!r}"
    others = [r.rule for r in _rules(family) if r is not rule and not r.holds(kwargs)]
    assert others == [], f"{rule.breaking} break {others} too: the test would not show this rule is fla's"
    with warnings.catch_warnings(), pytest.raises(Exception) as refused:  # fla asserts or raises ValueError
        warnings.simplefilter("ignore")
        cls(**_accepted(cls, kwargs))
    assert not isinstance(refused.value, TypeError), f"not a refusal by rule but a bad argument: {refused.value}"


@pytest.mark.parametrize("family", FAMILIES)
def test_the_small_config_breaks_no_rule_and_builds(family: str) -> None:
    fam = get_family(family)
    config = fam.config_cls(**fam.small)
    assert fam.fla_refusal(config, VERSION) is None
    build_fla_layer(config, "cpu", family=family, pinnable=False)


def _search_strategy(family: str) -> st.SearchStrategy[Example]:
    """What :func:`gdn_equiv.run.runner.search_gaps` draws for ``family`` on the fla target."""
    pins = P.upstream_example_pins("fla")
    return st.one_of(
        examples(fusable=True, family=family, **pins),
        examples(fusable=False, max_reasons=1, family=family, **pins),
        examples(fusable=False, family=family, **pins),
    )


def test_the_fla_target_pins_its_installed_version() -> None:
    assert P.upstream_example_pins("fla") == {"fla_version": VERSION}
    assert P.upstream_example_pins("gdn_equiv") == {} and P.upstream_example_pins("stand-in") == {}


@pytest.mark.parametrize("family", FAMILIES)
def test_drawn_examples_build_in_fla_with_no_refusal(family: str) -> None:
    """80 of the gap search's examples per family and version, each built as fla's class: none refused
    (before the rules, fla 0.6.0 refused about one ABC or MultiScaleRetention example in five: GLA's
    examples draw an odd head_k_dim, and their RotaryEmbedding asserts an even one)."""
    refusals: Counter[str] = Counter()

    @settings(max_examples=80, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=SLOW)
    @given(_search_strategy(family))
    def build(example: Example) -> None:
        assert example.family == family
        try:
            build_fla_layer(example.config, "cpu", family=family, pinnable=False)
        except UpstreamRefused as exc:
            refusals[f"{exc.kind}; e.g. {example.config}"] += 1

    build()
    assert not refusals, f"fla {VERSION} refused drawn {family} configs: {dict(refusals)}"


@pytest.mark.parametrize("family", ["abc", "multiscale_retention"])
def test_without_the_version_an_fla_only_family_keeps_every_versions_rules(family: str) -> None:
    """An fla-only family exists only as fla: even unpinned, its configs keep an even rotary dim (0.6.0's
    rule), so a test that forgets the version cannot draw what one known version refuses."""

    @settings(max_examples=60, deadline=None, database=None, phases=[Phase.generate])
    @given(layer_configs(family=family))
    def draw(config) -> None:
        assert all(get_family(family).fla_refusal(config, v) is None for v in VERSIONS)

    draw()


def test_an_unknown_fla_version_is_refused_by_the_strategies() -> None:
    from hypothesis.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match=r"fla_version must be one of .*0\.6\.0.*got '9\.9'"):
        layer_configs(family="abc", fla_version="9.9").example()
