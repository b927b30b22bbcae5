"""S0-S7 as records of their own kind (:class:`ServingRecord`), which every driver reads from the registry.

A row's ``backend`` is an engine path (``reference``, ``vllm-interpret``...), its family ``-`` and its dtype
``any``: no layer family, dtype or length applies to a pool's cases. A record's draws are :class:`EngineCase` s
(the engine path, the property and one drawn case) and its check is :func:`run_case`, one module-level function
that runs the case's property on its engine (so an isolated run's worker process finds it). An engine path that
cannot run here is ``n/a`` with :meth:`ServingRecord.not_applicable`'s reason; a failure's reproducer is
:meth:`EngineCase.reproducer`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from hypothesis import strategies as st

from gdn_equiv._source import load_plugin
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.premise import Draw
from gdn_equiv.serving import properties as S
from gdn_equiv.serving.adapters import EngineAdapter
from gdn_equiv.serving.engines import engine_adapters
from gdn_equiv.serving.planted import PLANTED
from gdn_equiv.serving.routing import unavailable as routing_unavailable
from gdn_equiv.serving.routing_apc import apc_unavailable
from gdn_equiv.serving.surface import declared
from gdn_equiv.strategies import pools

__all__ = [
    "ENGINE_NAMES",
    "ENTRY_POINTS",
    "SERVING",
    "EngineCase",
    "ServingRecord",
    "adapter",
    "engine_paths",
    "not_applicable",
    "run_case",
]


@dataclass(frozen=True)
class EngineCase:
    engine: str
    case: Any
    #: the property of :mod:`gdn_equiv.serving.properties` it is drawn for (what :func:`run_case` runs)
    prop: str = ""

    def short(self) -> str:
        return f"{self.engine}: {self.case.short()}"

    def to_json(self) -> str:
        """The engine path and the case as its ``repr`` (plain dataclasses of numbers, evaluated back by
        :meth:`reproducer`'s script)."""
        return json.dumps({"kind": "serving", "engine": self.engine, "property": self.prop, "case": repr(self.case)})

    def reproducer(self, function: str, failure: str) -> str:
        """A standalone script running ``function`` (a property of :mod:`gdn_equiv.serving.properties`) on
        this case and this engine path: exit 1 while it fails."""
        return REPRO_TEMPLATE.format(
            engine=self.engine,
            version=adapter(self.engine).version,
            function=function,
            failure=failure.replace('"""', "'''"),
            case=repr(self.case),
        )


REPRO_TEMPLATE = '''#!/usr/bin/env python
"""Standalone reproducer written by gdn-equiv: {function} on serving engine path {engine!r} ({version}).
An engine's ops come from its installed wheel (or PYTHONPATH=.engines, `gdn-equiv engines fetch`).

{failure}
"""
import os
import sys

if {engine!r}.endswith("-interpret"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.serving.cases import *  # noqa: F403 (the case's classes, for its repr)
from gdn_equiv.serving.properties import {function}
from gdn_equiv.serving.records import adapter
from gdn_equiv.serving.routing import RoutingCase, SchedRow  # noqa: F401 (the routing cases' classes, for their repr)
from gdn_equiv.serving.surface import Row, SurfaceCase  # noqa: F401 (the surface cases' classes, for their repr)

CASE = {case}

if __name__ == "__main__":
    engine = adapter({engine!r})
    reason = engine.unavailable()
    if reason is not None:
        sys.exit(f"cannot run here: {{reason}}")
    try:
        {function}(engine, CASE)
    except Mismatch as exc:
        print(exc)
        sys.exit(1)
    print("no failure: the defect is gone")
'''


#: what ``--serving-engine`` (and the gate's ``--gdn-serving-engine``) names: the in-house reference, an engine
#: (every path its table lists) or one path
ENGINE_NAMES = ("reference", "vllm", "sglang")


#: the entry-point group through which an installed package offers its serving engines (name -> ``module:attr``)
ENTRY_POINTS = "gdn_equiv.serving_engines"


def _entry_points() -> dict[str, str]:
    """Read afresh each time (an engine package installed while the process runs is seen; the lookups are few)."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINTS)}


def plugin(spec: str) -> EngineAdapter:
    """A serving engine from outside the suite: ``module:attr`` naming an adapter (an instance, or a class or
    factory that makes one). KeyError names what is wrong (module, attribute, or the protocol it does not meet)."""
    try:
        obj: Any = load_plugin(spec, kind="serving engine")
    except InvalidArgument as exc:  # the loader's words, as the KeyError every engine lookup raises
        raise KeyError(str(exc)) from None
    made = obj
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, EngineAdapter)):
        try:
            inspect.signature(obj).bind()
        except (TypeError, ValueError):
            raise KeyError(
                f"serving engine plug-in {spec!r} is not an engine adapter, nor makes one without arguments"
            ) from None
        made = obj()
    if not isinstance(made, EngineAdapter):
        missing = sorted(m for m in EngineAdapter.__protocol_attrs__ if not hasattr(made, m))  # type: ignore[attr-defined]
        raise KeyError(f"serving engine plug-in {spec!r} is not an engine adapter: it lacks {', '.join(missing)}")
    return made


def adapter(name: str) -> EngineAdapter:
    """An engine path, a planted engine, an entry point of :data:`ENTRY_POINTS` or a plug-in ``module:attr``, by
    name (made afresh: it reads the installed version now)."""
    if name in PLANTED:
        return PLANTED[name][0]()
    if ":" in name:
        return plugin(name)
    points = _entry_points()
    if name in points:
        return plugin(points[name])
    for a in engine_adapters():
        if a.name == name:
            return a
    raise KeyError(f"no serving engine {name!r}; known: {', '.join(a.name for a in engine_adapters())}")


def engine_paths(name: str) -> list[str]:
    """The engine paths ``name`` stands for: an engine's every path (every release), the path itself, or a
    plug-in (``module:attr`` or an entry point's name; checked against the protocol here). KeyError names the
    known ones."""
    if ":" in name or name in _entry_points():
        adapter(name)
        return [name]
    paths = [a.name for a in engine_adapters()]
    if name in paths:
        return [name]
    found = [p for p in paths if p.startswith(f"{name}-")]
    if not found:
        known = [*ENGINE_NAMES[1:], *paths, *_entry_points()]
        raise KeyError(f"no serving engine {name!r}; known: {', '.join(known)} (or a plug-in module:attr)")
    return found


def not_applicable(engine: str) -> str | None:
    try:
        return adapter(engine).unavailable()
    except KeyError as exc:
        return str(exc)


def run_case(example: EngineCase, device: str = "cpu", **_: Any) -> None:
    """The check of every serving record: the case's property on the case's engine path (``device`` and the
    layer drivers' keywords do not apply: an engine path says where it runs)."""
    getattr(S, example.prop)(adapter(example.engine), example.case)


@dataclass(frozen=True)
class ServingRecord:
    """One of S0-S7 (SPEC §11), a record of its own kind: ``cases`` draws an engine's cases, ``prop`` (a function
    of :mod:`gdn_equiv.serving.properties`) checks one on an engine, ``teeth`` are the planted engines it must
    catch. Its rows are per engine path; the fields a layer record varies are fixed here."""

    name: str
    summary: str
    cases: Callable[[EngineAdapter], st.SearchStrategy[Any]]
    prop: Callable[[EngineAdapter, Any], None]
    teeth: tuple[str, ...] = ()

    serving: ClassVar[bool] = True
    per_dtype: ClassVar[bool] = False
    condition: ClassVar[None] = None
    gate_test: ClassVar[None] = None  # the gate's one test parametrised over these records (suite.test_serving)
    gate_module: ClassVar[str] = "test_serving"
    needs_fusion: ClassVar[bool] = False

    @property
    def function(self) -> str:
        """The property function a reproducer calls."""
        return self.prop.__name__

    @property
    def check(self) -> Callable[..., None]:
        return run_case

    def not_applicable(self, engine: str) -> str | None:
        """Why this record's row on ``engine`` cannot run here: the path cannot, or (S4) its step takes no
        accepted count."""
        why = not_applicable(engine)
        a = adapter(engine) if why is None else None
        if a is not None and self.function == "check_s4_speculation" and not getattr(a, "speculative", True):
            why = f"{engine}: {getattr(a, 'not_speculative', 'its step takes no accepted count')}"
        if a is not None and self.function in ("check_s0_surface", "check_s0_outside"):
            surfaces = declared(a)
            if not surfaces:
                why = f"{engine}: no op surface declared for this path (its ops are the default path's)"
            elif self.function == "check_s0_outside" and not any(s.outside for s in surfaces):
                why = f"{engine}: its ops declare nothing outside their surface"
            elif self.function == "check_s0_outside" and not pools.outside_draws(surfaces):
                kinds = sorted({k for s in surfaces for k in s.outside})
                why = (
                    f"{engine}: nothing its ops declare outside ({', '.join(kinds)}) applies to how they address states"
                )
        if a is not None and self.function == "check_s6_routing":
            why = routing_unavailable(a)
        if a is not None and self.function == "check_s6_routing_all":
            why = apc_unavailable(a)
        return why

    def strategy(self, engine: str) -> st.SearchStrategy[Draw]:
        """The draws of this record on the engine path ``engine``."""
        return _draws(self, engine)


@functools.cache
def _draws(record: ServingRecord, engine: str) -> st.SearchStrategy[Draw]:
    prop = record.function
    return record.cases(adapter(engine)).map(lambda c: Draw(EngineCase(engine, c, prop), False))


def _min_accepted(a: EngineAdapter) -> int:
    return int(getattr(a, "min_accepted", 0))


def _uniform_or_free(a: EngineAdapter) -> st.SearchStrategy[Any]:
    uniform = st.integers(1, 3).flatmap(lambda n: pools.batches(min_len=n, max_len=n, fresh=False))
    return st.one_of(uniform, pools.batches())


def _teeth(prop: str) -> tuple[str, ...]:
    return tuple(name for name, (_, props) in PLANTED.items() if prop in props)


SERVING: list[ServingRecord] = [
    ServingRecord(f"S{n}-{slug}", summary, cases, getattr(S, prop), _teeth(prop))
    for n, slug, summary, prop, cases in [
        (0, "reference", "the engine = the in-house pool reference: outputs within §6, every state bitwise",
         "check_s0_reference", lambda a: pools.spec_cases(min_accepted=_min_accepted(a))),
        (1, "pool-alone", "a batch over a pool = each sequence alone from its own state, bitwise",
         "check_s1_pool_equals_alone", lambda a: pools.batches()),
        (2, "untouched", "unnamed, pad and reserved slots bitwise unchanged; inputs unchanged",
         "check_s2_untouched", lambda a: pools.spec_cases(min_accepted=_min_accepted(a), min_extra_slots=1)),
        (3, "handoff", "prefill then decode steps = one prefill (states bitwise, outputs within §6 across kernels)",
         "check_s3_handoff", lambda a: pools.handoff_cases()),
        (4, "speculation", "a k-token verify accepting j leaves exactly the state of feeding those j",
         "check_s4_speculation", lambda a: pools.spec_cases(min_accepted=_min_accepted(a))),
        (5, "prefix-cache", "a snapshot at a block boundary = the state after that many tokens",
         "check_s5_prefix_cache", lambda a: pools.prefix_cases()),
        (6, "dispatch", "the engine's fast path = its general path where its guard admits, bitwise",
         "check_s6_dispatch", _uniform_or_free),
        (7, "packed-qkv", "one call over q|k|v channels = the three convs, biases included, bitwise",
         "check_s7_packed_qkv", lambda a: pools.packed_cases()),
        (0, "surface", "every op on its version's whole declared surface = the reference; every location it "
         "does not write bitwise unchanged", "check_s0_surface", lambda a: pools.surface_calls(declared(a))),
        (0, "outside", "every op called outside its declared surface raises with a message or answers right",
         "check_s0_outside", lambda a: pools.surface_calls(declared(a), outside=True)),
        (6, "routing", "the engine's own metadata builder routes mixed prefill/decode/verify batches (counts, "
         "pads, several steps) as the pool's contract says", "check_s6_routing",
         lambda a: pools.routing_cases(pads_between=getattr(a, "engine", None) is None)),
        (6, "routing-all", "vLLM's Mamba 'all' prefix-caching mode as the engine's builder and mixers route it "
         "(chunks, prefix hits, decodes, verify rows; 2-D block tables) = a block-keyed pool's contract",
         "check_s6_routing_all", lambda a: pools.apc_cases(max_spec=3)),
    ]
]  # fmt: skip
