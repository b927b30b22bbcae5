"""The properties as records (SPEC §5; STYLE: "a property is a record, like a family").

``gdn-equiv check`` and ``fuzz``, the pytest gate (:mod:`gdn_equiv.suite`), the example-count tests and
the README's table read these records, so the drivers cannot disagree on what a property draws, where it
applies, how many examples a profile gives it or how a necessity search is budgeted. A record holds:

- ``check``: the property function of one :class:`~gdn_equiv.model.example.Example` in
  :mod:`gdn_equiv.harness.properties` (``None`` for a P6 necessity search, whose predicate is
  :func:`gdn_equiv.harness.properties.forced_fusion_error`);
- ``premise``: the strategy of :class:`Draw` s it runs on; a draw built to meet the premise (``must_apply``)
  that the property calls not applicable is a failure (a guard that refuses what the spec fuses would
  otherwise leave P3/P4 nothing to compare);
- ``per_dtype``: whether its rows split by dtype (the P6 searches draw every dtype in one row);
- ``not_applicable``: why a row of it cannot be asked on this machine (``n/a`` with that reason), or ``None``;
- ``teeth``: the planted defects (:mod:`gdn_equiv.harness.planted`) it must catch;
S0-S7 (SPEC §11) are records of their own kind (:class:`gdn_equiv.serving.records.ServingRecord`): their rows
are per engine path (``reference``, ``vllm-cpu-torch``...), not per family x conv backend, and their teeth are
planted engines (:data:`gdn_equiv.serving.planted.PLANTED`). P1 is the record ``P1-guard-vs-spec`` for every target
(drawn states; the gate also walks the decision tables, ``table_test``); P1's gap search against an upstream target
is a :class:`GapSearchRecord`.

Adding a property is its function, its record here and its teeth; every driver then runs it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hypothesis import strategies as st

from gdn_equiv import strategies  # read per draw (strategies.examples), so that a replaced strategy is used
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.premise import Draw
from gdn_equiv.harness.testing import MISS_BOUND, PROFILES
from gdn_equiv.model.backends import BUILTIN_BACKENDS, capabilities
from gdn_equiv.model.guard import Condition
from gdn_equiv.serving.records import SERVING, ServingRecord
from gdn_equiv.strategies.premises import any_examples, either_side, no_short_conv, other_builtins, refused, violating

__all__ = [
    "DTYPES",
    "GAP_SEARCH",
    "NECESSITY",
    "PLUGIN_NECESSITY_STATES",
    "Draw",
    "GapSearchRecord",
    "PropertyRecord",
    "Row",
    "asked_rows",
    "examples_per_row",
    "gap_search",
    "get_record",
    "necessity_budget",
    "necessity_name",
    "necessity_records",
    "property_records",
    "records",
    "serving_records",
    "vacuous_against_torch",
]

#: the dtypes a per-dtype property's rows are drawn in (conv weights may still carry another, G9)
DTYPES = ("float32", "float16", "bfloat16")
NECESSITY = "P6-necessity"
#: states a necessity search on a plug-in kernel may draw before it says "none found": there a miss is a
#: possible answer (a condition stricter than that kernel needs), and its cost is the whole budget
PLUGIN_NECESSITY_STATES = 300
#: the longest sequence a layer property draws: several chunks of the chunked core (64), so a defect
#: at a chunk boundary is in reach of every driver
MAX_SEQ_LEN = 140


@dataclass(frozen=True)
class Row:
    """One row of the ledger: what a run was asked to check (SPEC §10)."""

    name: str  # the property's
    family: str
    backend: str
    dtype: str = "any"
    target: str = "gdn_equiv"


def _no_reason(backend: str) -> str | None:
    return None


def _other_backend(backend: str) -> str | None:
    if backend == "torch":
        return "same backend: compares the backend with torch, and it is torch (the fp64 ground-truth row checks torch)"
    return None


def _second_backend(backend: str) -> str | None:
    if not other_builtins(backend):
        return f"G5 needs a second available built-in conv backend besides {backend!r} (none here)"
    return None


def _precision_reason(backend: str) -> str | None:
    """G9's counterexamples change a conv's arithmetic through its parameters' dtype: fp64 parameters make the
    sum fp64 (SPEC §3), and fused, the others' too. A backend that takes no fp64 computes every dtype it
    takes in fp32 from exactly upcast values, so parameters of another dtype change nothing there. A backend
    that takes one dtype has no other for a conv's parameters: no state breaking G9 can run on it."""
    one = strategies.layers.unbreakable_conditions([backend]).get("G9")
    if one is not None:
        return one
    dtypes = capabilities([backend]).dtypes
    if dtypes is not None and "float64" not in dtypes:
        return (
            f"G9 is broken by parameters of another arithmetic precision (fp64); {backend!r} takes "
            f"{', '.join(dtypes)} only, all computed in fp32"
        )
    return None


def _one_activation(backend: str) -> str | None:
    """G6 is broken by convs of two activations; a backend that declares one runs no such layer."""
    return strategies.layers.unbreakable_conditions([backend]).get("G6")


def _one_width(backend: str) -> str | None:
    """G7 is broken by convs of two kernel widths; a backend that declares one runs no such layer."""
    return strategies.layers.unbreakable_conditions([backend]).get("G7")


@dataclass(frozen=True)
class PropertyRecord:
    name: str
    summary: str
    premise: Callable[..., st.SearchStrategy[Draw]]
    check: Callable[..., Any] | None = None
    per_dtype: bool = True
    condition: Condition | None = None
    not_applicable: Callable[[str], str | None] = _no_reason
    teeth: tuple[str, ...] = field(default=())
    #: the pytest gate's test of this record, generated in ``gdn_equiv.suite.<gate_module>`` (None: the gate
    #: generates it otherwise: P6 in ``test_necessity`` and S0-S7 in ``test_serving``, each one test
    #: parametrized over its records). P7's records have theirs too (on the layer's own conv call); the
    #: conformance and ground-truth modules check conv calls drawn directly, wider than a layer's
    gate_test: str | None = None
    gate_module: str = "test_properties"
    #: drawn from the families the target fuses at all (P3/P4 on an fla version that fuses few)
    needs_fusion: bool = False
    #: what one example costs in ordinary ones (P7-combinations checks ~120 cells an example): its gate test gets
    #: the profile's examples divided by it (at least 2), as the hand-written grid test always did
    gate_cost: int = 1
    #: the gate's test runs as this many parts (``gdn_equiv.harness.cells.parts``), each over its share of the
    #: example's cells with the same examples budget: one test of minutes on a GPU spread over the workers
    gate_parts: str | None = None
    #: the gate's deterministic test of this record over the spec's exhaustive decision tables, one per family,
    #: generated in ``gdn_equiv.suite.test_guard`` (P1 only)
    table_test: str | None = None
    #: keyword arguments the gate passes to ``check`` on an upstream target (P1: ``tolerate_known=True``, the
    #: version table's known gaps, which the table test reports as strict xfails, do not fail the drawn test)
    upstream_gate_kwargs: tuple[tuple[str, Any], ...] = ()
    #: whether ``check`` takes ``allow_missed`` (P1), which the gate sets from ``--gdn-allow-missed-fusion``
    allows_missed_fusion: bool = False
    #: S0-S7 are records of their own kind (:class:`gdn_equiv.serving.records.ServingRecord`)
    serving: ClassVar[bool] = False

    @property
    def function(self) -> str:
        """The name of the function of :mod:`gdn_equiv.harness.properties` a reproducer calls."""
        return (self.check or P.forced_fusion_error).__name__

    def strategy(
        self, backend: str, family: str | tuple[str, ...], dtype: str | None = None, max_seq_len: int = MAX_SEQ_LEN
    ) -> st.SearchStrategy[Draw]:
        """The draws of this property for one backend and family (or families), of ``dtype`` (default any)."""
        return self.premise(backend, _families(family), dtype, max_seq_len)


def _families(family: str | tuple[str, ...]) -> tuple[str, ...]:
    return (family,) if isinstance(family, str) else tuple(family)


#: P1's planted guards (:mod:`gdn_equiv.harness.planted_guards`) that its drawn states catch on the torch backend;
#: the decision tables catch every one of them (tests/test_guard_gate.py), in both directions
P1_TEETH = ("guard-ignores-G8", "guard-ignores-G3", "guard-strict-G8", "guard-strict-G7", "guard-never-fuses")


def _example_records() -> list[PropertyRecord]:
    return [
        PropertyRecord(
            "P1-guard-vs-spec",
            "the target's guard decides as the spec's decision table, both ways: no unsafe fusion, no missed fusion",
            any_examples,
            P.check_guard_matches_spec,
            teeth=P1_TEETH,
            gate_test="test_guard_matches_spec_on_drawn_states",
            table_test="test_guard_matches_spec_on_the_decision_tables",
            upstream_gate_kwargs=(("tolerate_known", True),),
            allows_missed_fusion=True,
        ),
        PropertyRecord(
            "P2-path-taken",
            "prologue='auto' takes the fused path exactly when the guard fuses (one conv launch vs one per slot)",
            any_examples,
            P.check_path_taken,
            teeth=("auto-ignores-decision",),
            gate_test="test_auto_launches_one_conv_iff_guard_fuses",
        ),
        PropertyRecord(
            "P2-no-short-conv",
            "a layer without short convs describes none, holds none and launches none",
            no_short_conv,
            P.check_path_taken,
            gate_test="test_a_layer_without_short_convs_runs_and_describes_none",
        ),
        PropertyRecord(
            "P3-forward-exact",
            "guard true => fused and separate outputs bitwise equal",
            either_side(grad=False),
            P.check_forward_exact,
            teeth=("guard-ignores-cu-seqlens", "fused-drops-v-bias", "backend:planted-wide-rounding"),
            gate_test="test_fused_forward_is_bitwise_equal",
            needs_fusion=True,
        ),
        PropertyRecord(
            "P4-gradients",
            "dx and non-conv gradients bitwise; conv weight/bias gradients within the tolerance table",
            either_side(grad=True),
            P.check_gradients,
            teeth=("fused-detaches-weights",),
            gate_test="test_fused_gradients_match",
            needs_fusion=True,
        ),
        PropertyRecord(
            "P5-fallback-exact",
            "guard false => output, gradients and cache bitwise the reference layer's",
            refused,
            P.check_fallback_exact,
            teeth=("fallback-forgets-conv-cache",),
            gate_test="test_fallback_is_the_reference",
        ),
        PropertyRecord(
            "P7-backend-vs-torch",
            "the layer on the backend = the layer on torch, within the tolerance table",
            any_examples,
            P.check_backend_matches_torch,
            not_applicable=_other_backend,
            teeth=("backend:planted-scaled",),
            gate_test="test_the_layer_on_the_backend_matches_the_layer_on_torch",
        ),
        PropertyRecord(
            "P7-conv-conformance",
            "the backend's conv call = torch's: forward, final state, gradients, step, continuation, slices",
            any_examples,
            P.check_conv_conformance,
            not_applicable=_other_backend,
            teeth=("backend:planted-scaled", "backend:planted-wide-rounding"),
            gate_test="test_the_layers_conv_call_conforms_to_torch",
        ),
        PropertyRecord(
            "P7-combinations",
            "the backend's conv call = torch's in every cell of T vs W x initial state x final state x packing x grad",
            any_examples,
            P.check_conv_combinations,
            not_applicable=_other_backend,
            teeth=("backend:planted-short-state-grad", "backend:planted-short-state-grad-no-final"),
            # the gate also runs it on grids of conv calls drawn directly, wider (gdn_equiv.suite.test_combinations)
            gate_test="test_the_layers_conv_call_matches_torch_in_every_cell",
            gate_cost=6,
            gate_parts="layer-cells",
        ),
        PropertyRecord(
            "P7-ground-truth",
            "the backend's conv call (torch included) = an independent fp64 F.conv1d, within the tolerance table",
            any_examples,
            P.check_conv_ground_truth,
            teeth=("backend:planted-scaled",),
            gate_test="test_the_layers_conv_call_matches_the_fp64_ground_truth",
        ),
    ]


def _serving_records() -> list[ServingRecord]:
    """S1-S7 (SPEC §11), records of their own kind; the pytest gate runs them in ``gdn_equiv.suite.test_serving``,
    parametrised over them and its engine paths."""
    return list(SERVING)


def _necessity_records() -> list[PropertyRecord]:
    return [
        PropertyRecord(
            necessity_name(c),
            f"a state breaking {c.id} alone ({c.short}) where forcing the fused path is wrong",
            violating(c),
            None,
            per_dtype=False,
            condition=c,
            not_applicable={
                Condition.G5: _second_backend,
                Condition.G6: _one_activation,
                Condition.G7: _one_width,
                Condition.G9: _precision_reason,
            }.get(c, _no_reason),
        )
        for c in Condition
    ]


@dataclass(frozen=True)
class GapSearchRecord:
    """P1 against an upstream target, a record of its own kind: its rows are one per family (backend ``-``) and
    its driver searches the target's guard for gaps against the spec, one gap kind at a time
    (:func:`gdn_equiv.run.runner.search_gaps`): each gap found is a row of its own (``P1-<target>-gap-<kind>``),
    each distinct constructor refusal too (``P1-<target>-upstream-refused``), and the search's own row says
    whether it ran."""

    summary: str
    #: the function of :mod:`gdn_equiv.harness.properties` a gap's reproducer calls
    function: str = P.check_target_guard.__name__

    def name(self, target: str) -> str:
        return f"P1-{target}-guard-vs-spec"

    def gap_name(self, target: str, kind: str) -> str:
        return f"P1-{target}-gap-{kind}"

    def refused_name(self, target: str, n: int) -> str:
        return f"P1-{target}-upstream-refused" + (f"#{n}" if n > 1 else "")

    def rows(self, target: str, families: Sequence[str]) -> list[Row]:
        """The asked rows: one search per family."""
        return [Row(self.name(target), family, "-", "any", target) for family in families]


#: P1's gap search against an upstream target (``gdn-equiv check --target fla``); P1 on drawn states and the decision
#: tables is the record ``P1-guard-vs-spec`` for every target
GAP_SEARCH = GapSearchRecord(
    "the upstream guard decides as the spec's decision table; each disagreement is a gap kind, shrunk and shown"
)


def gap_search(target: str) -> GapSearchRecord | None:
    """The gap search asked of ``target``: P1 for an upstream layer, none for ours (its properties are asked)."""
    return None if target == "gdn_equiv" else GAP_SEARCH


def necessity_name(condition: Condition) -> str:
    return f"{NECESSITY}-{condition.id}"


def property_records() -> list[PropertyRecord]:
    """The example properties of layers (P2-P5, P7), in the order the drivers run them."""
    return [r for r in records().values() if isinstance(r, PropertyRecord) and r.condition is None]


def serving_records() -> list[ServingRecord]:
    """S1-S7 (SPEC §11), asked per serving engine path; the drivers run them after the layer properties."""
    return [r for r in records().values() if isinstance(r, ServingRecord)]


def necessity_records() -> list[PropertyRecord]:
    """One P6 search per guard condition, registered facts' conditions (G10) included."""
    return [r for r in records().values() if isinstance(r, PropertyRecord) and r.condition is not None]


@functools.cache
def records() -> dict[str, PropertyRecord | ServingRecord]:
    """Every record by name, in run order: the live table (a test may put a record of its own in it)."""
    every: list[PropertyRecord | ServingRecord] = [*_example_records(), *_serving_records(), *_necessity_records()]
    return {r.name: r for r in every}


def get_record(name: str) -> Any:  # a PropertyRecord, or a ServingRecord for S0-S7
    return records()[name]


def vacuous_against_torch(backend: str) -> bool:
    """Whether comparing the layer on ``backend`` with the layer on torch compares nothing (the record's n/a)."""
    return get_record("P7-backend-vs-torch").not_applicable(backend) is not None


def examples_per_row(profile: str) -> int:
    """The one profile table (:data:`gdn_equiv.harness.testing.PROFILES`): examples a property row draws."""
    return int(PROFILES[profile]["max_examples"])


def necessity_budget(backend: str) -> int:
    """States a P6 search may draw before it answers "none found". On a built-in backend every condition
    is known to be necessary, so the search must hit: it may take up to ``MISS_BOUND`` states (it stops
    at its first hit; first hits have a heavy tail) and a miss is a failure. On a plug-in a miss is an
    answer (the condition may be stricter than the kernel needs), so the bound is small."""
    return MISS_BOUND if backend in BUILTIN_BACKENDS else PLUGIN_NECESSITY_STATES


def default_dtypes(backends: Sequence[str], dtypes: Sequence[str]) -> list[str]:
    """The dtypes a run asks where its command names none: ``dtypes`` (fp32, bf16, fp16) each backend declares,
    or, for a backend that declares none of them (fp64 only), what it declares, as the strategies draw."""
    asked: list[str] = []
    for backend in backends:
        caps = capabilities((backend,))
        asked += caps.dtypes_among(dtypes) or list(caps.dtypes or dtypes)
    return list(dict.fromkeys(asked))


def declared_dtypes(backends: Sequence[str]) -> str:
    """Each backend's declared dtypes, for a message: ``name takes a, b; other takes every dtype``."""
    said = []
    for backend in backends:
        declared = capabilities((backend,)).dtypes
        said.append(f"{backend} takes {', '.join(declared) if declared is not None else 'every dtype'}")
    return "; ".join(said)


def _undeclared(backend: str, dtype: str) -> str | None:
    """Why a per-dtype row of ``backend`` has nothing to draw in ``dtype`` (``None``: it has)."""
    declared = capabilities((backend,)).dtypes
    if dtype == "any" or declared is None or dtype in declared:
        return None
    return f"{backend} declares the dtypes {', '.join(declared)}: a {dtype} row has nothing to draw"


def asked_rows(
    records: Sequence[PropertyRecord | ServingRecord],
    *,
    families: Sequence[str],
    backends: Sequence[str],
    dtypes: Sequence[str],
    target: str = "gdn_equiv",
    engines: Sequence[str] = ("reference",),
) -> list[tuple[Row, PropertyRecord | ServingRecord, str | None]]:
    """Every row a run over ``records`` is asked for, in run order, with its record and, where the row
    cannot be asked on this machine, the reason (``n/a``). Serving records are asked once per engine
    path of ``engines`` (family ``-``), after the layer rows."""
    rows = []
    for family in families:
        for backend in backends:
            for record in records:
                if record.serving:
                    continue
                reason = record.not_applicable(backend)
                for dtype in dtypes if record.per_dtype else ("any",):
                    rows.append(
                        (
                            Row(record.name, family, backend, dtype, target),
                            record,
                            reason or _undeclared(backend, dtype),
                        )
                    )
    for engine in engines:
        for record in records:
            if record.serving:
                rows.append((Row(record.name, "-", engine, "any", target), record, record.not_applicable(engine)))
    return rows
