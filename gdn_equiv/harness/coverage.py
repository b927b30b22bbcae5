"""Which regions of the input space a run's examples reached, read from Hypothesis' observability output.

The suite's properties label each example with Hypothesis events (:func:`hypothesis.event`), one per
region it is in, as stable strings ``coverage:<dimension>=<region>``: ``coverage:conv.channels=257-1024``,
``coverage:conv.length=T=W-1``, ``coverage:layer.cache=populated``. Events are Hypothesis' own API for
this: ``pytest --hypothesis-show-statistics`` prints their share per test, and with observability on
(``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1``; Hypothesis 6.170 writes one JSON line per test case to
``.hypothesis/observed/<date>_testcases.jsonl``) they are the ``features`` of every test-case line.
``gdn-equiv coverage`` reads those lines (:func:`read_observed`), counts examples per region and per
test (:func:`tally`) and prints a table per dimension with every region the strategies are meant to
reach, ``NOT REACHED`` where no example was in it (:func:`format_report`): a narrowed strategy shows
there instead of passing quietly.

Two kinds of example carry labels, each from one place: a single conv-backend call
(:func:`label_conv_call`, from the conformance and ground-truth properties) and a whole layer example
(:func:`label_example`, from the P2-P5 properties). Labelling outside a Hypothesis test does nothing,
so the ``check_*`` functions stay callable from plain tests.

Regions also meet: a kernel wrong only for ``T < W`` with an initial state under gradients reaches
every one-dimensional table and can still go unexercised. So each labelled call or example also
carries one *joint* label (``coverage:conv.call=`` / ``coverage:layer.example=`` followed by its
regions, :func:`joint_label`), and the report counts the combinations of regions that one call or
example held together: every pair over :data:`PAIR_DIMENSIONS` and every triple over
:data:`TRIPLE_DIMENSIONS` (:func:`combinations`), unreached ones listed first.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.families import known_families

if TYPE_CHECKING:
    from gdn_equiv.model.example import Example
    from gdn_equiv.strategies.convs import ConvCall

__all__ = [
    "PAIR_DIMENSIONS",
    "PREFIX",
    "PROMISED",
    "TRIPLE_DIMENSIONS",
    "Combination",
    "Dimension",
    "Tally",
    "combinations",
    "conv_call_regions",
    "dimensions",
    "example_regions",
    "format_report",
    "joint_label",
    "label_conv_call",
    "label_example",
    "labels",
    "not_reached",
    "read_observed",
    "report_json",
    "tally",
    "unreached_combinations",
    "unreached_promised",
]

#: every coverage event starts with this, so other events (and Hypothesis' own) are left alone
PREFIX = "coverage:"
#: the event every labelled example carries with its run's id (``GDN_EQUIV_RUN_ID``, set by the gate's plugin
#: for the whole run, xdist workers included), so ``coverage`` judges one run, not whatever the folder holds
RUN_EVENT = "gdn-equiv:run"
RUN_ID_ENV = "GDN_EQUIV_RUN_ID"
#: channel-count buckets: one block or warp (16), a few (64), the per-slot sizes of real layers (256),
#: their fused sums on a CPU run (1,024), and past it (the fused q|k|v widths a GPU run reaches)
CHANNEL_BUCKETS = ((16, "1-16"), (64, "17-64"), (256, "65-256"), (1024, "257-1024"))
#: time tiles kernels use (16..128 in fla and causal-conv1d; 256 on a GPU run)
TILES = (16, 32, 64, 128, 256)
#: the time tiles a GPU's kernels use (fla's conv chunk 64, this project's 64/128-row chunks), and the
#: regions of the longest sequence of a call against them (:func:`_reach`)
TIME_TILES = (64, 128, 256)
REACH_REGIONS = ("T<=64", "64<T<=128", "128<T<=256", "T>256")
#: the value kinds of a conv call (gdn_equiv.strategies.values.VALUE_KINDS, restated: harness code does not
#: import the strategies)
VALUE_KINDS = ("randn", "huge", "subnormal", "negative-zero", "cancel", "constant")
#: the joint label's dimension, per kind
JOINT = {"conv": "conv.call", "layer": "layer.example"}
#: per kind, the dimensions whose pairs of regions the report counts
PAIR_DIMENSIONS = {
    "conv": (
        "conv.length",
        "conv.initial_state",
        "conv.final_state",
        "conv.varlen",
        "conv.grad",
        "conv.channels",
        "conv.dtype",
        "conv.layout",
    ),
    "layer": (
        "layer.family",
        "layer.dtype",
        "layer.length",
        "layer.cache",
        "layer.use_cache",
        "layer.varlen",
        "layer.grad",
    ),
}
#: per kind, the dimensions whose triples of regions the report counts (where kernels branch together)
TRIPLE_DIMENSIONS = {
    "conv": ("conv.length", "conv.initial_state", "conv.final_state", "conv.varlen", "conv.grad"),
    "layer": ("layer.length", "layer.cache", "layer.use_cache", "layer.varlen", "layer.grad"),
}
#: per kind, the dimensions whose every pair and triple of regions a ``ci`` run promises to reach
#: (``--require-all`` fails on one unreached): the combination tests' grids, which reach them by
#: construction (:mod:`gdn_equiv.strategies.combinations`). The other pairs (channels, dtype, layout,
#: family against these) are counted and listed, not promised: they come from random draws, and the
#: grids hold channels to one drawn base call of at most 40 (120 cells per example under the Triton
#: interpreter), so 257+ channels meet packing or states only when a layer's fused width happens to.
PROMISED = TRIPLE_DIMENSIONS


@dataclass(frozen=True)
class Dimension:
    """One axis of the report: its name in the labels, what it measures, and every region on it that
    the suite's strategies are meant to reach (a region outside this list is still counted and shown)."""

    name: str
    title: str
    regions: tuple[str, ...]

    @property
    def kind(self) -> str:
        """``conv`` (a single conv call) or ``layer`` (a whole layer example)."""
        return self.name.split(".", 1)[0]


def dimensions() -> tuple[Dimension, ...]:
    """The report's dimensions, conv calls first; ``layer.family`` lists the families known now
    (plug-ins register theirs at import)."""
    return (
        Dimension("conv.channels", "channel count D", (*(name for _, name in CHANNEL_BUCKETS), "1025+")),
        Dimension("conv.block_edge", "D or D-1 a power of two >= 8 (a kernel block edge)", ("at-edge", "off-edge")),
        Dimension(
            "conv.length",
            "tokens per sequence T against the kernel width W",
            ("T<W-1", "T=W-1", "T=W", "W<T<=2W", "T>2W"),
        ),
        Dimension(
            "conv.tile_edge", f"T within 1 of a time tile ({', '.join(map(str, TILES))})", ("at-tile", "off-tile")
        ),
        Dimension(
            "conv.reach",
            f"longest sequence against the time tiles ({', '.join(map(str, TIME_TILES))}; issue #49)",
            REACH_REGIONS,
        ),
        Dimension("conv.values", "values the call's tensors carry (issue #52)", VALUE_KINDS),
        Dimension("conv.initial_state", "initial state passed", ("on", "off")),
        Dimension("conv.final_state", "final state requested", ("requested", "not-requested")),
        Dimension("conv.varlen", "packed sequences (cu_seqlens)", ("dense", "cu_seqlens", "cu_seqlens+empty")),
        Dimension("conv.dtype", "dtype of x", ("float32", "float16", "bfloat16")),
        Dimension("conv.param_dtype", "weight/bias dtype against x's", ("same", "mixed")),
        Dimension("conv.grad", "gradients taken", ("on", "off")),
        Dimension(
            "conv.grad_with",
            "state and varlen options with gradients on",
            ("initial_state", "final_state", "cu_seqlens", "cu_seqlens+empty"),
        ),
        # the layouts of gdn_equiv.strategies.convs.LAYOUTS ("contiguous": every tensor of the call)
        Dimension(
            "conv.layout",
            "memory layouts of the call's tensors",
            ("contiguous", "sliced", "strided", "transposed", "expanded"),
        ),
        Dimension("layer.family", "layer family", tuple(known_families())),
        Dimension("layer.dtype", "dtype of the layer and x", ("float32", "float16", "bfloat16")),
        Dimension("layer.param_dtype", "conv parameter dtype against the layer's (short convs on)", ("same", "mixed")),
        Dimension("layer.length", "tokens per sequence T against the q conv's width W", ("T<W-1", "T>=W-1")),
        Dimension("layer.cache", "cache state", ("none", "empty", "populated")),
        Dimension("layer.use_cache", "cache written (use_cache)", ("on", "off")),
        Dimension("layer.varlen", "variable lengths", ("none", "cu_seqlens", "mask")),
        Dimension("layer.grad", "gradients taken", ("on", "off")),
        Dimension(
            "layer.grad_with",
            "state and varlen options with gradients on",
            ("cache=empty", "cache=populated", "use_cache", "cu_seqlens", "mask"),
        ),
        Dimension(
            "layer.step",
            "one token per sequence: the step kernel (no grad) or the sequence kernel (grad)",
            ("step", "one-token-grad", "multi-token"),
        ),
    )


# ---- labels of one example ---------------------------------------------------------------------


def _channels(n: int) -> str:
    for top, name in CHANNEL_BUCKETS:
        if n <= top:
            return name
    return "1025+"


def _power_of_two(n: int) -> bool:
    return n >= 8 and n & (n - 1) == 0


def _length(T: int, W: int) -> str:
    if T < W - 1:
        return "T<W-1"
    if T == W - 1:
        return "T=W-1"
    if T == W:
        return "T=W"
    return "W<T<=2W" if T <= 2 * W else "T>2W"


def _reach(T: int) -> str:
    for tile, region in zip(TIME_TILES, REACH_REGIONS, strict=False):
        if tile >= T:
            return region
    return REACH_REGIONS[-1]


def conv_call_regions(call: ConvCall, *, grad: bool, final_state: bool) -> dict[str, tuple[str, ...]]:
    """The regions of one conv call, by dimension name; a dimension can hold several (one per sequence
    of a packed call for ``conv.length``, one per layout drawn). ``grad``: the property differentiates
    through the call; ``final_state``: it asks for the final state."""
    lengths = call.seq_lens if call.seq_lens else (call.T,)
    varlen = "dense" if not call.seq_lens else "cu_seqlens+empty" if 0 in call.seq_lens else "cu_seqlens"
    # the tensors this call passes (cotangents only where a gradient is taken)
    tensors = ["x", "weight", *(["bias"] if call.bias else []), *(["initial_state"] if call.initial_state else [])]
    if grad:
        tensors += ["dy", *(["dfinal"] if final_state else [])]
    layouts = tuple(dict.fromkeys(call.layout(t) for t in tensors if call.layout(t) != "contiguous"))
    regions: dict[str, tuple[str, ...]] = {
        "conv.channels": (_channels(call.D),),
        "conv.block_edge": ("at-edge" if _power_of_two(call.D) or _power_of_two(call.D - 1) else "off-edge",),
        "conv.length": tuple(dict.fromkeys(_length(T, call.W) for T in lengths)),
        "conv.tile_edge": ("at-tile" if any(abs(T - t) <= 1 for T in lengths for t in TILES) else "off-tile",),
        "conv.reach": (_reach(max(lengths)),),
        "conv.values": (getattr(call, "values", "randn"),),
        "conv.initial_state": ("on" if call.initial_state else "off",),
        "conv.final_state": ("requested" if final_state else "not-requested",),
        "conv.varlen": (varlen,),
        "conv.dtype": (call.dtype,),
        "conv.param_dtype": ("same" if call.param_dtype in (None, call.dtype) else "mixed",),
        "conv.grad": ("on" if grad else "off",),
        "conv.layout": layouts or ("contiguous",),
    }
    if grad:
        options = [
            *(["initial_state"] if call.initial_state else []),
            *(["final_state"] if final_state else []),
            *([varlen] if call.seq_lens else []),
        ]
        if options:
            regions["conv.grad_with"] = tuple(options)
    return regions


def example_regions(example: Example) -> dict[str, tuple[str, ...]]:
    """The regions of one layer example, by dimension name. ``layer.param_dtype`` only with short convs
    (without them there are no conv parameters); ``layer.step`` follows SPEC §2: the step kernel runs
    when autograd is off and every sequence has one new token (a masked call counts by its ``T``)."""
    config = example.config
    regions: dict[str, tuple[str, ...]] = {
        "layer.family": (example.family,),
        "layer.dtype": (example.dtype,),
        "layer.cache": (example.cache,),
        "layer.use_cache": ("on" if example.use_cache else "off",),
        "layer.varlen": (example.varlen,),
        "layer.grad": ("on" if example.grad else "off",),
    }
    if config.use_short_conv:
        params = {config.conv_spec(slot).dtype or example.dtype for slot in config.SLOTS}
        regions["layer.param_dtype"] = ("same" if params == {example.dtype} else "mixed",)
        W = config.slot_kernel_size(config.SLOTS[0])
        lengths = example.seq_lens if example.varlen == "cu_seqlens" else (example.seq_len,)
        # T < W-1: the window reaches past the newest state slot (fla #1140's region)
        regions["layer.length"] = tuple(dict.fromkeys("T<W-1" if T < W - 1 else "T>=W-1" for T in lengths))
    if example.varlen == "cu_seqlens":
        one_token = bool(example.seq_lens) and all(n == 1 for n in example.seq_lens)
    else:
        one_token = example.seq_len == 1
    regions["layer.step"] = ("multi-token" if not one_token else "one-token-grad" if example.grad else "step",)
    if example.grad:
        options = [
            *([f"cache={example.cache}"] if example.cache != "none" else []),
            *(["use_cache"] if example.use_cache else []),
            *([example.varlen] if example.varlen != "none" else []),
        ]
        if options:
            regions["layer.grad_with"] = tuple(options)
    return regions


def labels(regions: Mapping[str, Iterable[str]]) -> list[str]:
    """``{"conv.channels": ("1-16",)}`` -> ``["coverage:conv.channels=1-16"]``."""
    return [f"{PREFIX}{dimension}={region}" for dimension, values in regions.items() for region in values]


def joint_label(kind: str, regions: Mapping[str, Iterable[str]]) -> str:
    """The one label holding every region of one call (``kind="conv"``) or example (``"layer"``):
    ``coverage:conv.call=conv.length:T<W-1,T=W;conv.grad:on;...`` (:func:`parse_joint` reads it)."""
    body = ";".join(f"{d}:{','.join(v)}" for d, v in sorted(regions.items()) if d in PAIR_DIMENSIONS[kind])
    return f"{PREFIX}{JOINT[kind]}={body}"


def parse_joint(label: str) -> tuple[str, dict[str, tuple[str, ...]]] | None:
    """``(kind, regions)`` of a :func:`joint_label`, ``None`` for any other label."""
    for kind, name in JOINT.items():
        head = f"{PREFIX}{name}="
        if label.startswith(head):
            body = label[len(head) :]
            parts = (p.split(":", 1) for p in body.split(";") if ":" in p)
            return kind, {d: tuple(v.split(",")) for d, v in parts}
    return None


def _emit(regions: Mapping[str, Iterable[str]], kind: str) -> None:
    from hypothesis import event
    from hypothesis.control import currently_in_test_context

    if not currently_in_test_context():  # a check function called from a plain test
        return
    for label in labels(regions):
        event(label)
    event(joint_label(kind, regions))
    run = os.environ.get(RUN_ID_ENV)
    if run:
        event(RUN_EVENT, run)


def label_conv_call(call: ConvCall, *, grad: bool, final_state: bool) -> None:
    """Record the regions of a conv call as Hypothesis events of the running example (see
    :func:`conv_call_regions`); does nothing outside a Hypothesis test."""
    _emit(conv_call_regions(call, grad=grad, final_state=final_state), "conv")


def label_example(example: Example) -> None:
    """Record the regions of a layer example as Hypothesis events of the running example (see
    :func:`example_regions`); does nothing outside a Hypothesis test."""
    _emit(example_regions(example), "layer")


# ---- reading a run's observations ----------------------------------------------------------------


def read_observed(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every test-case observation in ``directory``'s ``*_testcases.jsonl`` files, with its file.

    :class:`InvalidArgument` for a directory that is missing or holds no such file or no test case,
    and for a line that is not a JSON object (naming the file and line).
    """
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise InvalidArgument(f"observed directory {str(directory)!r} {what}")
    files = sorted(directory.glob("*_testcases.jsonl"))
    if not files:
        raise InvalidArgument(
            f"observed directory {str(directory)!r} holds no *_testcases.jsonl file: run the tests with "
            "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1 first"
        )
    observations: list[tuple[Path, dict[str, Any]]] = []
    for path in files:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidArgument(f"{path}:{number} is not JSON: {exc.msg} (column {exc.colno})") from None
                if not isinstance(data, dict):
                    raise InvalidArgument(f"{path}:{number} must be a JSON object, got {type(data).__name__}")
                if data.get("type") == "test_case":
                    observations.append((path, data))
    if not observations:
        raise InvalidArgument(f"observed directory {str(directory)!r} holds no test-case observation")
    return observations


@dataclass
class Tally:
    """Examples per region label, per test (Hypothesis' ``property``: the pytest node id)."""

    #: test -> examples that ran (passed or failed; a test case that gave up ran no property)
    examples: Counter[str] = field(default_factory=Counter)
    #: test -> examples that carried at least one coverage label
    labelled: Counter[str] = field(default_factory=Counter)
    #: test -> label -> examples carrying it
    labels: dict[str, Counter[str]] = field(default_factory=dict)
    #: test cases that gave up (filtered, overran): not counted above
    gave_up: int = 0
    #: distinct processes (pid, import time) that wrote them: xdist workers, or several runs
    processes: set[tuple[Any, Any]] = field(default_factory=set)
    files: list[Path] = field(default_factory=list)
    #: the run judged (its id), or None where no observation carries one (no line judged)
    run: str | None = None
    #: observations left out: another run's, or none's beside a run's
    left_out: int = 0

    def total(self, label: str | None = None) -> int:
        """Examples in all tests (carrying ``label``, when given)."""
        if label is None:
            return sum(self.examples.values())
        return sum(counts[label] for counts in self.labels.values())

    def tests(self, label: str) -> int:
        """Tests with at least one example carrying ``label``."""
        return sum(1 for counts in self.labels.values() if counts[label])


def runs(observations: Iterable[tuple[Path, dict[str, Any]]]) -> list[str]:
    """The run ids the observations carry (:data:`RUN_EVENT`), oldest first (ids start with their start time)."""
    return sorted({str(r) for _, d in observations if (r := (d.get("features") or {}).get(RUN_EVENT))})


def tally(observations: Iterable[tuple[Path, dict[str, Any]]], run: str | None = None) -> Tally:
    """Count examples per coverage label and per test, from :func:`read_observed`'s observations of one run:
    ``run`` (an id :func:`runs` lists), by default the newest. Lines of other runs, and lines without a run id
    (an unrelated test's, a stale one, a run without the gate's plugin), are left out and counted
    (``left_out``): a folder none of whose lines carries a run id has no run to judge, and every region is
    NOT REACHED (it used to be judged whole, so an unrelated test's lines could pass ``--require-all``)."""
    observations = list(observations)
    known = runs(observations)
    if run is not None and run not in known:
        raise InvalidArgument(f"run {run!r} is not in the observations; runs there: {', '.join(known) or 'none'}")
    out = Tally(run=run or (known[-1] if known else None))
    for path, data in observations:
        if out.run is None or (data.get("features") or {}).get(RUN_EVENT) != out.run:
            out.left_out += 1
            continue
        if path not in out.files:
            out.files.append(path)
        metadata = data.get("metadata") or {}
        out.processes.add((metadata.get("os.getpid()"), metadata.get("imported_at")))
        if data.get("status") not in ("passed", "failed"):
            out.gave_up += 1
            continue
        test = str(data.get("property", "?"))
        out.examples[test] += 1
        found = [k for k in (data.get("features") or {}) if isinstance(k, str) and k.startswith(PREFIX)]
        out.labels.setdefault(test, Counter()).update(found)
        out.labelled[test] += bool(found)
    return out


def _rows(t: Tally) -> list[tuple[Dimension, list[tuple[str, int, int]]]]:
    """Per dimension: ``(region, examples, tests)`` for every expected region, then any other region seen."""
    seen = Counter({label: t.total(label) for counts in t.labels.values() for label in counts})
    out = []
    for dim in dimensions():
        head = f"{PREFIX}{dim.name}="
        extra = sorted(label[len(head) :] for label in seen if label.startswith(head))
        regions = [*dim.regions, *(r for r in extra if r not in dim.regions)]
        out.append((dim, [(r, seen[head + r], t.tests(head + r)) for r in regions]))
    return out


def not_reached(t: Tally) -> list[str]:
    """The labels of expected regions no example reached."""
    return [f"{PREFIX}{dim.name}={region}" for dim, rows in _rows(t) for region, n, _ in rows if n == 0]


@dataclass(frozen=True)
class Combination:
    """Regions of several dimensions held by one call or example together; ``examples``: how many
    (a call counted once per example it ran in)."""

    kind: str
    dimensions: tuple[str, ...]
    regions: tuple[str, ...]
    examples: int

    @property
    def name(self) -> str:
        return " & ".join(f"{d}={r}" for d, r in zip(self.dimensions, self.regions, strict=True))


def _dimension_sets(kind: str) -> list[tuple[str, ...]]:
    pairs = list(itertools.combinations(PAIR_DIMENSIONS[kind], 2))
    return [*pairs, *itertools.combinations(TRIPLE_DIMENSIONS[kind], 3)]


def combinations(t: Tally, kind: str | None = None) -> list[Combination]:
    """Every expected combination (each pair over :data:`PAIR_DIMENSIONS`, each triple over
    :data:`TRIPLE_DIMENSIONS`) with the examples whose joint labels held it, unreached ones first, then
    in dimension order; a region outside a dimension's expected ones is left out."""
    expected = {d.name: d.regions for d in dimensions()}
    joint: Counter[str] = Counter()
    for counts in t.labels.values():
        joint.update({label: n for label, n in counts.items() if parse_joint(label) is not None})
    out = []
    for k in (kind,) if kind is not None else tuple(JOINT):
        seen: Counter[tuple[tuple[str, ...], tuple[str, ...]]] = Counter()
        for label, n in joint.items():
            parsed = parse_joint(label)
            if parsed is None or parsed[0] != k:
                continue
            regions = parsed[1]
            for dims in _dimension_sets(k):
                if all(d in regions for d in dims):
                    for combo in itertools.product(*(regions[d] for d in dims)):
                        seen[dims, combo] += n
        for dims in _dimension_sets(k):
            for combo in itertools.product(*(expected[d] for d in dims)):
                out.append(Combination(k, dims, combo, seen[dims, combo]))
    order = {c: i for i, c in enumerate(out)}
    return sorted(out, key=lambda c: (c.examples > 0, order[c]))


def unreached_combinations(
    t: Tally, kind: str | None = None, *, within: tuple[str, ...] | None = None
) -> list[Combination]:
    """The expected combinations no example reached; ``within``: only those over these dimensions (the
    ones a strategy promises to reach by construction, e.g. ``TRIPLE_DIMENSIONS["conv"]``)."""
    return [
        c for c in combinations(t, kind) if c.examples == 0 and (within is None or set(c.dimensions) <= set(within))
    ]


def unreached_promised(t: Tally) -> list[Combination]:
    """The combinations of :data:`PROMISED` no example reached, conv calls first."""
    return [c for kind in JOINT for c in unreached_combinations(t, kind, within=PROMISED[kind])]


def _promised(c: Combination) -> bool:
    return set(c.dimensions) <= set(PROMISED[c.kind])


def _combination_lines(t: Tally) -> list[str]:
    lines = ["", "## combinations: regions one call or example held together (unreached first)"]
    for kind in JOINT:
        combos = combinations(t, kind)
        if not any(c.examples for c in combos):
            lines += [
                "",
                f"### {kind}",
                "",
                f"NOT REACHED: no {JOINT[kind]} label (none of its {len(combos)} combinations)",
            ]
            continue
        missing = sorted((c for c in combos if not c.examples), key=lambda c: not _promised(c))
        promised = sum(map(_promised, missing))
        lines += [
            "",
            f"### {kind}: {len(missing)} of {len(combos)} combination(s) NOT REACHED, {promised} of them promised",
            "",
        ]
        lines += [f"- NOT REACHED: {c.name}" + ("" if _promised(c) else " (not promised)") for c in missing]
        lines += ["", "| dimensions | combinations | reached | fewest examples |", "| --- | ---: | ---: | ---: |"]
        for dims in _dimension_sets(kind):
            group = [c for c in combos if c.dimensions == dims]
            reached = [c for c in group if c.examples]
            least = min((c.examples for c in group), default=0)
            lines.append(f"| {' x '.join(dims)} | {len(group)} | {len(reached)} | {least} |")
    return lines


def format_report(t: Tally) -> str:
    """The report as markdown: a header line, one table per dimension (every expected region, ``NOT
    REACHED`` where no example was in it), and one row per test."""
    kinds = {"conv": "conv calls", "layer": "layer examples"}
    # a kind no test labelled (the run left out those tests, or they lost their labelling) says so once
    present = {
        kind: any(label.startswith(f"{PREFIX}{kind}.") for c in t.labels.values() for label in c) for kind in kinds
    }
    lines = [
        f"# Coverage: {t.total()} examples in {len(t.examples)} tests",
        "",
        f"From {len(t.files)} file(s) written by {len(t.processes)} process(es) "
        f"({', '.join(p.name for p in t.files)}); {t.gave_up} test case(s) that gave up not counted. "
        "Examples per region (an example can sit in several regions of one dimension).",
        "",
        f"Run judged: {t.run}; {t.left_out} observation(s) of other runs, or of none, left out."
        if t.run is not None
        else f"Run judged: none: no observation carries a run id (the gate's plugin labels every example with "
        f"its run's); {t.left_out} observation(s) left out.",
        *_combination_lines(t),
    ]
    for dim, rows in _rows(t):
        if not present[dim.kind]:
            lines += ["", f"## {dim.name}: {dim.title}", "", f"NOT REACHED: no example labelled its {kinds[dim.kind]}"]
            continue
        lines += [
            "",
            f"## {dim.name}: {dim.title}",
            "",
            "| region | examples | tests | |",
            "| --- | ---: | ---: | --- |",
        ]
        for region, n, tests in rows:
            mark = "NOT REACHED" if n == 0 else "" if region in dim.regions else "(not an expected region)"
            lines.append(f"| {region} | {n} | {tests} | {mark} |")
    lines += ["", "## per test", "", "| test | examples | labelled | regions |", "| --- | ---: | ---: | ---: |"]
    for test in sorted(t.examples):
        regions = sum(1 for label in t.labels.get(test, ()) if parse_joint(label) is None)
        lines.append(f"| {test} | {t.examples[test]} | {t.labelled[test]} | {regions} |")
    missing = not_reached(t)
    unreached = unreached_combinations(t)
    promised = [c.name for c in unreached_promised(t)]
    lines += ["", f"{len(unreached)} expected combination(s) NOT REACHED, {len(promised)} of them promised"]
    lines += ["", f"{len(missing)} expected region(s) NOT REACHED" + (f": {', '.join(missing)}" if missing else "")]
    return "\n".join(lines)


def report_json(t: Tally) -> dict[str, Any]:
    """The report as plain data: per dimension every region's examples and tests, per test its examples
    and label counts, and the labels not reached."""
    return {
        "examples": t.total(),
        "gave_up": t.gave_up,
        "processes": len(t.processes),
        "run": t.run,
        "left_out": t.left_out,
        "files": [str(p) for p in t.files],
        "dimensions": {
            dim.name: {
                "title": dim.title,
                "regions": {r: {"examples": n, "tests": k, "expected": r in dim.regions} for r, n, k in rows},
            }
            for dim, rows in _rows(t)
        },
        "tests": {
            test: {
                "examples": t.examples[test],
                "labelled": t.labelled[test],
                "labels": dict(sorted(t.labels.get(test, Counter()).items())),
            }
            for test in sorted(t.examples)
        },
        "not_reached": not_reached(t),
        "combinations": [
            {"kind": c.kind, "dimensions": list(c.dimensions), "regions": list(c.regions), "examples": c.examples}
            for c in combinations(t)
        ],
        "combinations_not_reached": [c.name for c in unreached_combinations(t)],
        "promised_combinations_not_reached": [c.name for c in unreached_promised(t)],
    }
