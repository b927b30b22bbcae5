"""Running from a source checkout (``PYTHONPATH=$PWD``, as on the GPU machine) as if installed."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path


def alias_strategies() -> None:
    """Make ``gdn_equiv.strategies`` importable from a source checkout.

    Installed, the package-dir mapping in pyproject does this; from the tree, ``strategies/`` is a
    top-level folder, so register it under its installed name (relative imports inside it then
    resolve to ``gdn_equiv.strategies.*``).
    """
    if "gdn_equiv.strategies" in sys.modules:
        return
    try:
        if importlib.util.find_spec("gdn_equiv.strategies") is not None:
            return
    except ImportError:
        pass
    import gdn_equiv

    init = Path(gdn_equiv.__file__).resolve().parent.parent / "strategies" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "gdn_equiv.strategies", init, submodule_search_locations=[str(init.parent)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gdn_equiv.strategies"] = module
    spec.loader.exec_module(module)
    gdn_equiv.strategies = module  # type: ignore[attr-defined,unused-ignore]  # mypy errs only where installed non-editable


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
