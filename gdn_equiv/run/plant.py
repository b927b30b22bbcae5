"""Plant one of the registry's teeth into a fresh process, for ``gdn-equiv bench verdict``.

The property records name their teeth (:mod:`gdn_equiv.harness.registry`): planted conv backends
(:data:`gdn_equiv.harness.planted.BACKENDS`), layer defects mixed in front of a family's fused layer
(:data:`gdn_equiv.harness.planted.LAYER_DEFECTS`) and planted serving engines
(:data:`gdn_equiv.serving.planted.PLANTED`). A backend reaches every driver by name
(``--backend gdn_equiv.harness.planted:scaled``), as a user's kernel does. A layer defect or a planted
engine has no option of its own: it is planted here, in the process that runs the driver, so the
driver runs it as it would run the code it replaces:

- a layer defect: the ``gdn_equiv`` target becomes the target configured with that defect (what
  ``get_target("gdn_equiv", defect=...)`` returns, read by every property at each call);
- a planted engine: it takes the reference engine path's name, ``reference``, so S1-S7 run on it.

Nothing else changes: the guard, the strategies and the properties are the ones a green run uses.

Used two ways, each in the fresh process of one benchmark run:

- ``python -m gdn_equiv.run.plant NAME check|fuzz ...``: plants ``NAME``, then runs ``gdn-equiv``;
- ``pytest -p gdn_equiv.run.plant`` with ``GDN_EQUIV_PLANT=NAME`` in the environment: a pytest plugin
  that plants at configure time, in the controller and in every xdist worker (workers load the same
  ``-p`` plugins and inherit the environment).
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

from gdn_equiv.harness import planted, registry
from gdn_equiv.serving import planted as planted_engines
from gdn_equiv.serving import records
from gdn_equiv.targets import gdn_equiv_target

__all__ = ["ENV", "kind", "plant", "teeth"]

#: the environment variable the pytest plugin reads
ENV = "GDN_EQUIV_PLANT"
_BACKEND_PREFIX = "backend:"


def teeth() -> list[str]:
    """Every tooth the registry's records name, in record order, each once (backends as ``backend:NAME``)."""
    names = [t for r in registry.property_records() for t in r.teeth]
    names += [t for r in registry.serving_records() for t in r.teeth]
    return list(dict.fromkeys(names))


def kind(name: str) -> str:
    """``backend``, ``layer`` or ``engine``; KeyError for a name that is none of them."""
    if name.startswith(_BACKEND_PREFIX) and name.removeprefix(_BACKEND_PREFIX) in planted.BACKENDS:
        return "backend"
    if name in planted.LAYER_DEFECTS:
        return "layer"
    if name in planted_engines.PLANTED:
        return "engine"
    raise KeyError(name)


def backend_spec(name: str) -> str:
    """The ``module:attr`` a driver's ``--backend`` loads a planted backend by (a fresh process, an xdist
    worker and an isolation worker all load it by that name)."""
    backend = planted.BACKENDS[name.removeprefix(_BACKEND_PREFIX)]
    for attr, value in vars(planted).items():
        if value is backend and not attr.startswith("_") and attr not in ("BACKENDS", "COMBINATION_BACKENDS"):
            return f"{planted.__name__}:{attr}"
    raise KeyError(f"planted backend {name!r} has no module-level name to load it by")


def plant(name: str) -> None:
    """Plant the layer defect or engine ``name`` into this process (a backend needs no planting)."""
    what = kind(name)
    if what == "layer":
        gdn_equiv_target.TARGET = gdn_equiv_target.TARGET.configured(defect=planted.LAYER_DEFECTS[name])
    elif what == "engine":
        cls = planted_engines.PLANTED[name][0]
        as_reference = type(cls.__name__, (cls,), {"name": "reference"})
        original = records.engine_adapters

        def engine_adapters() -> list[Any]:
            return [as_reference() if a.name == "reference" else a for a in original()]

        records.engine_adapters = engine_adapters


def pytest_configure(config: Any) -> None:
    name = os.environ.get(ENV)
    if name:
        plant(name)


def main(argv: list[str]) -> None:
    """``NAME COMMAND [ARGS...]``: plant ``NAME``, then run ``gdn-equiv COMMAND ARGS`` in this process (as
    ``python -m gdn_equiv`` would; it exits with the command's status)."""
    if not argv:
        sys.exit("usage: python -m gdn_equiv.run.plant NAME COMMAND [ARGS...]")
    plant(argv[0])
    sys.argv = ["gdn-equiv", *argv[1:]]
    runpy.run_module("gdn_equiv", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
