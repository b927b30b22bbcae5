"""What the installed distributions declare (entry points, read once per process), and the one loader of the
`module:attr` plug-ins they and the command line name."""

from __future__ import annotations

import functools
import importlib

from gdn_equiv.errors import InvalidArgument


@functools.cache
def entry_point_specs(group: str) -> dict[str, str]:
    """``{name: "module:attr"}`` of the installed entry points in ``group``, read once per process.

    ``importlib.metadata.entry_points`` reads every installed distribution's metadata on each call:
    on the H200's environment that was 78% of the layer properties' time (47.5 of 61 s, 1,592 calls
    from the example strategy's family lookup). A package installed after the first lookup is seen by
    the next process, as with any plug-in system that scans at start-up. Do not mutate the result.
    """
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=group)}


def load_plugin(spec: str, *, kind: str) -> object:
    """The object ``module:attr`` names (``attr`` may be dotted: ``pkg.mod:Class.factory``): the one loader of
    every plug-in a run names by code (a conv backend, a layer family, a target, a serving engine) or an entry
    point declares.

    Raises :class:`~gdn_equiv.errors.InvalidArgument` in one shape, naming ``kind`` (what the plug-in was to be)
    and the spec: ``<kind> plug-in must be module:attr, got '...'`` or ``<kind> plug-in '...' does not import:
    <error type>: <error>``. Whether the object is a backend, a family... is the caller's check."""
    module_name, _, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not module_name or not attr:
        raise InvalidArgument(f"{kind} plug-in must be module:attr, got {spec!r}")
    try:
        obj: object = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"{kind} plug-in {spec!r} does not import: {type(exc).__name__}: {exc}") from exc
    return obj
