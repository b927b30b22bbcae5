"""S1-S7 in the shape the drivers' property records take (:class:`gdn_equiv.harness.registry.PropertyRecord`).

A row's ``backend`` is an engine path (``reference``, ``vllm-interpret``...); its draws are
:class:`EngineCase` s (the engine's name with one drawn case), and its check runs the property on that
engine. :data:`SERVING` lists ``(name, summary, premise, check, teeth)``; the registry builds its records
from them. An engine path that cannot run here is ``n/a`` with :func:`not_applicable`'s reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from hypothesis import strategies as st

from gdn_equiv.harness.registry import Draw
from gdn_equiv.serving import properties as S
from gdn_equiv.serving.adapters import EngineAdapter
from gdn_equiv.serving.engines import engine_adapters
from gdn_equiv.serving.planted import PLANTED
from gdn_equiv.strategies import pools

__all__ = ["SERVING", "EngineCase", "adapter", "not_applicable"]


@dataclass(frozen=True)
class EngineCase:
    engine: str
    case: Any

    def short(self) -> str:
        return f"{self.engine}: {self.case.short()}"


class Ran(NamedTuple):
    """What a check returns to the runner (it counts ``reason_id`` s, as it counts a guard's reasons)."""

    reason_id: str = "ran"


def adapter(name: str) -> EngineAdapter:
    """An engine path or a planted engine by name."""
    if name in PLANTED:
        return PLANTED[name][0]()
    for a in engine_adapters():
        if a.name == name:
            return a
    raise KeyError(f"no serving engine {name!r}; known: {', '.join(a.name for a in engine_adapters())}")


def not_applicable(engine: str) -> str | None:
    try:
        return adapter(engine).unavailable()
    except KeyError as exc:
        return str(exc)


def _check(prop: Callable[[EngineAdapter, Any], None]) -> Callable[..., Ran]:
    def check(example: EngineCase, device: str = "cpu", **_: Any) -> Ran:
        prop(adapter(example.engine), example.case)
        return Ran()

    check.__name__ = prop.__name__
    return check


def _premise(cases: Callable[[EngineAdapter], st.SearchStrategy[Any]]) -> Callable[..., st.SearchStrategy[Any]]:
    @functools.cache
    def premise(backend: str, families: tuple[str, ...], dtype: str | None, max_seq_len: int) -> Any:
        return cases(adapter(backend)).map(lambda c: Draw(EngineCase(backend, c), False))  # type: ignore[arg-type]

    return premise


def _min_accepted(a: EngineAdapter) -> int:
    return int(getattr(a, "min_accepted", 0))


def _uniform_or_free(a: EngineAdapter) -> st.SearchStrategy[Any]:
    uniform = st.integers(1, 3).flatmap(lambda n: pools.batches(min_len=n, max_len=n, fresh=False))
    return st.one_of(uniform, pools.batches())


def _teeth(prop: str) -> tuple[str, ...]:
    return tuple(name for name, (_, p) in PLANTED.items() if p == prop)


#: (name, summary, premise, check, planted engines it must catch)
SERVING: list[tuple[str, str, Callable[..., Any], Callable[..., Ran], tuple[str, ...]]] = [
    (
        f"S{n}-{slug}",
        summary,
        _premise(cases),
        _check(getattr(S, prop)),
        _teeth(prop),
    )
    for n, slug, summary, prop, cases in [
        (1, "pool-alone", "a batch over a pool = each sequence alone from its own state, bitwise",
         "check_s1_pool_equals_alone", lambda a: pools.batches()),
        (2, "untouched", "unnamed, pad and reserved slots bitwise unchanged; inputs unchanged",
         "check_s2_untouched", lambda a: pools.spec_cases(min_accepted=_min_accepted(a))),
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
    ]
]  # fmt: skip
