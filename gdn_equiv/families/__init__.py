"""Layer families (SPEC §8): each one a record, registered like conv backends.

Built-ins load lazily; a third-party family registers under the ``gdn_equiv.families`` entry-point
group (``name = "pkg.module:FAMILY"``) and is then selectable by name everywhere a family is.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from gdn_equiv.errors import InvalidArgument

DEFAULT_FAMILY = "gated_deltanet"

_BUILTIN = {
    "gated_deltanet": "gdn_equiv.families.gated_deltanet:FAMILY",
    "kda": "gdn_equiv.families.kda:FAMILY",
    "gla": "gdn_equiv.families.gla:FAMILY",
    "lightnet": "gdn_equiv.families.lightnet:FAMILY",
    "simple_gla": "gdn_equiv.families.simple_gla:FAMILY",
}
_LOADED: dict[str, Any] = {}


def _entry_point_specs() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group="gdn_equiv.families")}


def known_families() -> list[str]:
    """Every family name: the built-ins, then the entry points (in name order)."""
    return [*_BUILTIN, *sorted(set(_entry_point_specs()) - set(_BUILTIN))]


def get_family(name: str) -> Any:
    """The family record called ``name``; :class:`InvalidArgument` naming the known ones otherwise."""
    if name in _LOADED:
        return _LOADED[name]
    spec = _BUILTIN.get(name) or _entry_point_specs().get(name)
    if spec is None:
        raise InvalidArgument(f"unknown family {name!r}; known families: {', '.join(known_families())}")
    module_name, _, attr = spec.partition(":")
    family = getattr(importlib.import_module(module_name), attr)
    _LOADED[name] = family
    return family


def parse_families(spec: str) -> list[str]:
    """``"all"`` or a comma-separated list of family names, each checked; the order is kept."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgument(f"a family list must be 'all' or comma-separated names, got {spec!r}")
    if spec.strip() == "all":
        return known_families()
    names = [n.strip() for n in spec.split(",")]
    for name in names:
        if name not in known_families():
            raise InvalidArgument(f"unknown family {name!r}; known families: {', '.join(known_families())}")
    return list(dict.fromkeys(names))
