"""P1's oracle: the spec's decision table, written from SPEC §1/§5 without calling the guard.

One oracle for every driver: ``tests/test_guard.py`` (the in-house guard, by facts), the installed gate's
P1 tests (:mod:`gdn_equiv.suite.test_guard`: the guard of the target under test, ours, fla's in each
version, a plug-in target's) and the P1 property (:func:`gdn_equiv.harness.properties.check_guard_matches_spec`).
Nothing here imports :mod:`gdn_equiv.model.guard`: a guard edited wrongly cannot take its oracle with it.

- :data:`SPEC`: condition id -> the rule that must hold for fusion, a predicate over the facts;
  :func:`oracle` lists the failed ones in G-order (fusion iff none). A per-conv fact registered by a
  plug-in beyond G10 is judged by its own declared key (the spec of a plug-in fact is its declaration).
- :data:`TABLES`: the exhaustive decision tables (per-conv fact values, every q/k/v triple of them, both
  layer flags, every call), :func:`table_states` walks one.
- :func:`difference`: how a guard's answer differs from the spec's, in both directions: ``unsafe`` (it fuses
  where the spec refuses: a wrong result or a crash waits), ``missed`` (it refuses where fusion is exact: a
  missed fusion, costs speed only), ``reasons`` (both refuse, for other conditions).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from gdn_equiv.model.config import CallFacts, ConvFacts, LayerFacts
from gdn_equiv.model.conv_ops import conv_facts as registered_conv_facts

__all__ = [
    "ACTIVATION_FUNCTION",
    "SPEC",
    "TABLES",
    "Difference",
    "base_conv",
    "calls",
    "difference",
    "oracle",
    "smallest",
    "table_layers",
    "table_size",
    "table_states",
]

# silu and swish are one function (x * sigmoid(x)); None is the identity.
ACTIVATION_FUNCTION: dict[str | None, str] = {
    "silu": "x*sigmoid(x)",
    "swish": "x*sigmoid(x)",
    None: "identity",
    "relu": "max(x,0)",  # branch conv-relu
    "relu2": "max(x,0)^2",
}


def _function(activation: str | None) -> str:
    """What an activation computes; a name the table does not know is only equal to itself."""
    return ACTIVATION_FUNCTION.get(activation, f"unknown:{activation}")


def _conv_norm(c: ConvFacts) -> tuple[object, ...]:
    """Branch fuse-conv-l2's norm as the spec states it: off, or l2 over heads of head_dim with norm_eps
    (head_dim and eps mean nothing while the norm is off)."""
    e = dict(c.extras)
    if e.get("norm") is None:
        return ("off",)
    return ("l2", e.get("head_dim"), float(e.get("norm_eps", 1e-5)))


def _convs(layer: LayerFacts) -> tuple[ConvFacts, ...]:
    return layer.convs if layer.use_short_conv and layer.convs is not None else ()


def _differ(values: Sequence[object]) -> bool:
    return len(set(values)) > 1


# id -> (rule that must hold for fusion, as a predicate over the facts). A conv-level rule holds
# vacuously when there are no convs to fuse (G1 already forbids fusion then).
SPEC: dict[str, Callable[[LayerFacts, CallFacts], bool]] = {
    "G1": lambda layer, call: layer.use_short_conv and layer.convs is not None,
    "G2": lambda layer, call: not call.has_cached_state,
    "G3": lambda layer, call: not call.use_cache,
    "G4": lambda layer, call: not call.varlen,
    "G5": lambda layer, call: not _differ([c.backend for c in _convs(layer)]),
    "G6": lambda layer, call: not _differ([_function(c.activation) for c in _convs(layer)]),
    "G7": lambda layer, call: not _differ([c.kernel_size for c in _convs(layer)]),
    "G8": lambda layer, call: all(c.has_bias == layer.conv_bias for c in _convs(layer)),
    "G9": lambda layer, call: (
        not (
            _differ([c.weight_dtype for c in _convs(layer)])
            or _differ([c.device for c in _convs(layer)])
            or _differ([c.bias_dtype for c in _convs(layer) if c.has_bias])
        )
    ),
    "G10": lambda layer, call: not _differ([_conv_norm(c) for c in _convs(layer)]),
}


def _plugin_fact_failures(layer: LayerFacts) -> list[str]:
    """Registered per-conv facts beyond the spec's own (a plug-in's): the convs must agree on the fact's key."""
    failed = []
    for fact in registered_conv_facts():
        if fact.condition_id in SPEC:
            continue
        keys = [fact.key(fact.values(c.extras)) for c in _convs(layer)]
        if _differ([repr(k) for k in keys]):
            failed.append(fact.condition_id)
    return failed


def oracle(layer: LayerFacts, call: CallFacts) -> list[str]:
    """The failed conditions, in G-order; fusion iff the list is empty."""
    return [cid for cid, holds in SPEC.items() if not holds(layer, call)] + _plugin_fact_failures(layer)


# ---- how a guard's answer differs from the spec's ------------------------------------------


@dataclass(frozen=True)
class Difference:
    """A state where a guard and the spec disagree. ``guard_failed`` is ``None`` for a guard that gives
    no reasons (fla's)."""

    layer: LayerFacts
    call: CallFacts
    spec_failed: tuple[str, ...]
    guard_fuses: bool
    guard_failed: tuple[str, ...] | None

    @property
    def kind(self) -> str:
        """``unsafe`` (fuses where the spec refuses), ``missed`` (refuses where the spec fuses) or ``reasons``."""
        if self.guard_fuses:
            return "unsafe"
        return "missed" if not self.spec_failed else "reasons"

    @property
    def direction(self) -> str:
        """Which way the guard errs: ``unsafe`` (too lax: it fuses here, or would once the other conditions
        hold, since it misses a condition the spec fails) or ``missed`` (too strict: it refuses here, or names
        a condition that holds besides those that fail)."""
        if self.kind == "reasons":
            return "unsafe" if set(self.spec_failed) - set(self.guard_failed or ()) else "missed"
        return self.kind

    @property
    def conditions(self) -> tuple[str, ...]:
        """The conditions that disagree: those the guard let pass (unsafe), those it failed that hold
        (missed; ``()`` when it gives no reasons), or both sets' difference (reasons)."""
        if self.kind == "unsafe":
            return self.spec_failed
        guard = self.guard_failed or ()
        if self.kind == "missed":
            return guard
        return tuple(sorted(set(guard) ^ set(self.spec_failed), key=_order))

    def describe(self) -> str:
        what = {
            "unsafe": "unsafe fusion: the guard fuses where the spec refuses",
            "missed": "missed fusion: the guard falls back where fusion is exact",
            "reasons": f"wrong reasons ({'laxer' if self.direction == 'unsafe' else 'stricter'} than the spec): "
            "guard and spec refuse for different conditions",
        }[self.kind]
        conditions = ", ".join(self.conditions) or "(the guard gives no reason)"
        guard = "" if self.guard_failed is None else f" failed={list(self.guard_failed)}"
        return (
            f"{what} (conditions that disagree: {conditions})\n  layer: {self.layer}\n  call:  {self.call}\n"
            f"  spec:  fuse={not self.spec_failed} failed={list(self.spec_failed)}\n"
            f"  guard: fuse={self.guard_fuses}{guard}"
        )


def _order(cid: str) -> tuple[int, str]:
    return (int(cid[1:]) if cid[1:].isdigit() else 10**6, cid)


def difference(
    layer: LayerFacts, call: CallFacts, guard_fuses: bool, guard_failed: Sequence[str] | None
) -> Difference | None:
    """The guard's answer (``guard_fuses``, and its failed conditions where it gives them) against the spec
    on the same facts; ``None`` when they agree (on the reasons too, where the guard gives them)."""
    spec_failed = tuple(oracle(layer, call))
    failed = None if guard_failed is None else tuple(guard_failed)
    agree = guard_fuses == (not spec_failed) and (failed is None or failed == spec_failed)
    return None if agree else Difference(layer, call, spec_failed, guard_fuses, failed)


def _size(d: Difference) -> tuple[int, ...]:
    """How far a state is from the plain one: shrinking by hand on a table (fewest deviations first)."""
    base = base_conv()
    convs = _convs(d.layer) if d.layer.convs is not None else ()
    deviations = sum(getattr(c, f.name) != getattr(base, f.name) for c in convs for f in dataclasses.fields(ConvFacts))
    flags = (not d.layer.use_short_conv) + d.layer.conv_bias + sum(dataclasses.astuple(d.call))
    return (len(d.spec_failed), deviations + flags, deviations)


def smallest(
    differences: Sequence[Difference], kind: Callable[[Difference], str] = lambda d: d.kind
) -> dict[tuple[str, tuple[str, ...]], Difference]:
    """One smallest state per (kind, disagreeing conditions): a table's shrunk examples. ``kind`` names a
    difference (default its direction; an upstream target's gap kind)."""
    found: dict[tuple[str, tuple[str, ...]], Difference] = {}
    for d in differences:
        key = (kind(d), d.conditions)
        if key not in found or _size(d) < _size(found[key]):
            found[key] = d
    return found


# ---- the exhaustive tables -----------------------------------------------------------------


def base_conv(**changes: object) -> ConvFacts:
    base = ConvFacts(
        backend="torch",
        activation="silu",
        kernel_size=4,
        has_bias=False,
        weight_dtype="float32",
        bias_dtype=None,
        device="cpu",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def calls() -> Iterator[CallFacts]:
    for flags in itertools.product((False, True), repeat=3):
        yield CallFacts(*flags)


def table_layers(per_conv: Sequence[ConvFacts]) -> Iterator[LayerFacts]:
    """Every q/k/v triple of ``per_conv`` under both layer flags, then the layers without short convs."""
    for q, k, v in itertools.product(per_conv, repeat=3):
        for use_short_conv, conv_bias in itertools.product((False, True), repeat=2):
            yield LayerFacts(use_short_conv=use_short_conv, conv_bias=conv_bias, convs=(q, k, v))
    for conv_bias in (False, True):  # what a layer without short convs really reports
        yield LayerFacts(use_short_conv=False, conv_bias=conv_bias, convs=None)


def table_states(per_conv: Sequence[ConvFacts]) -> Iterator[tuple[LayerFacts, CallFacts]]:
    for layer in table_layers(per_conv):
        for call in calls():
            yield layer, call


def table_size(per_conv: Sequence[ConvFacts]) -> int:
    return (len(per_conv) ** 3 * 4 + 2) * 8


#: name -> the per-conv values the table crosses (each conv of q/k/v takes each, independently)
TABLES: dict[str, list[ConvFacts]] = {
    "bias x activation": [
        base_conv(has_bias=b, bias_dtype="float32" if b else None, activation=a)
        for b in (False, True)
        for a in ("silu", "swish", None)
    ],
    "kernel x backend x dtype": [
        base_conv(kernel_size=w, backend=backend, weight_dtype=dt)
        for w in (3, 4)
        for backend in ("torch", "triton")
        for dt in ("float32", "bfloat16")
    ],
    "bias dtype x device": [
        base_conv(has_bias=b, bias_dtype=bdt if b else None, device=dev)
        for b in (False, True)
        for bdt in (("float32", "float16") if b else (None,))
        for dev in ("cpu", "cuda:0")
    ],
    "conv norm x relu activations": [
        base_conv(activation=a, extras=e)
        for a in ("relu", "relu2")
        for e in (
            (),
            (("norm", "l2"), ("head_dim", 4)),
            (("norm", "l2"), ("head_dim", 2)),
            (("norm_eps", 1e-3),),
            (("norm", "l2"), ("head_dim", 4), ("norm_eps", 1e-3)),
        )
    ],
}
