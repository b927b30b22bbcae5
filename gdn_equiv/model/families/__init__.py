"""Layer families (SPEC §8): each one a record, registered like conv backends.

Built-ins load lazily; a third-party family registers under the ``gdn_equiv.families`` entry-point
group (``name = "pkg.module:FAMILY"``) and is then selectable by name everywhere a family is.

:func:`known_families` are the in-house families (a reference layer each): what every property,
planted defect and ``--gdn-family all`` iterates. The fla-only families
(:mod:`gdn_equiv.model.families.fla_only`: PR #977's other seven, fla targets only) are known to
:func:`get_family` by name and listed by :func:`fla_only_families`; :func:`parse_families` takes them
with ``fla_only=True`` (``--family`` under ``--target fla``, where ``all`` means all twelve).
"""

from __future__ import annotations

from typing import Any

from gdn_equiv._source import entry_point_specs, load_plugin
from gdn_equiv.errors import InvalidArgument

DEFAULT_FAMILY = "gated_deltanet"

BUILTIN_FAMILIES = {
    "gated_deltanet": "gdn_equiv.model.families.gated_deltanet:FAMILY",
    "kda": "gdn_equiv.model.families.kda:FAMILY",
    "gla": "gdn_equiv.model.families.gla:FAMILY",
    "lightnet": "gdn_equiv.model.families.lightnet:FAMILY",
    "simple_gla": "gdn_equiv.model.families.simple_gla:FAMILY",
}
#: the fla-only records (one module for all of them); loaded by name like the built-ins: those records look
#: the in-house family they borrow from up through :func:`get_family`
_FLA_ONLY = "gdn_equiv.model.families.fla_only:FAMILIES"
_LOADED: dict[str, Any] = {}


def _load(spec: str) -> Any:
    return load_plugin(spec, kind="layer family")


def _entry_point_specs() -> dict[str, str]:
    return entry_point_specs("gdn_equiv.families")


def known_families() -> list[str]:
    """Every family name: the built-ins, then the entry points (in name order)."""
    return [*BUILTIN_FAMILIES, *sorted(set(_entry_point_specs()) - set(BUILTIN_FAMILIES))]


def fla_only_families() -> list[str]:
    """The families that exist as fla classes only (:mod:`gdn_equiv.model.families.fla_only`)."""
    return list(_load(_FLA_ONLY))


def is_fla_only(family: Any) -> bool:
    """Whether ``family`` (a record or a name) is an fla-only family."""
    record = get_family(family) if isinstance(family, str) else family
    return bool(getattr(record, "fla_only", False))


def example_family(name: str) -> str:
    """The family whose example strategy ``name`` draws from: itself, or for an fla-only family the
    in-house family it borrows examples from (the examples then carry ``name``)."""
    family = get_family(name)
    return family.like if is_fla_only(family) else name


def get_family(name: str) -> Any:
    """The family record called ``name`` (in-house or fla-only); :class:`InvalidArgument` naming the
    known ones otherwise."""
    if name in _LOADED:
        return _LOADED[name]
    spec = BUILTIN_FAMILIES.get(name) or _entry_point_specs().get(name)
    if spec is None:
        fla_only = _load(_FLA_ONLY)
        if name in fla_only:
            return fla_only[name]
        known = ", ".join(known_families())
        raise InvalidArgument(
            f"unknown family {name!r}; known families: {known} (fla targets only: {', '.join(fla_only)})"
        )
    family = _load(spec)
    _LOADED[name] = family
    return family


def parse_families(spec: str, *, fla_only: bool = False) -> list[str]:
    """``"all"`` or a comma-separated list of family names, each checked; the order is kept.

    ``fla_only=True`` (an fla target) also takes the fla-only families, and ``"all"`` is then the
    in-house families followed by them; otherwise they are refused, naming what they are."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgument(f"a family list must be 'all' or comma-separated names, got {spec!r}")
    known = known_families() + (fla_only_families() if fla_only else [])
    if spec.strip() == "all":
        return known
    names = [n.strip() for n in spec.split(",")]
    for name in names:
        if name in fla_only_families() and not fla_only:
            raise InvalidArgument(
                f"family {name!r} is fla-only (no in-house reference layer): it runs with --target fla only; "
                f"known families here: {', '.join(known)}"
            )
        if name not in known:
            raise InvalidArgument(f"unknown family {name!r}; known families: {', '.join(known)}")
    return list(dict.fromkeys(names))
