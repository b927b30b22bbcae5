"""Conv calls that reach every combination of the regions where kernels branch, by construction.

A defect can hide where regions meet: a kernel wrong only when ``T < W``, an initial state is passed,
gradients are taken and no ``cu_seqlens`` is given passes every test that reaches each region on its own
(the coverage report's one-dimensional tables, :mod:`gdn_equiv.harness.coverage`). Drawn at random, one of
the 120 cells of :data:`CONV_DIMENSIONS` is missed by a 60-example run more often than not; so here one
drawn base call (channels, width, dtype, bias, activation, layouts, seed) is run in *every* cell
(:func:`conv_cells`), the cell's length drawn inside its region. Reach is then a property of the
construction, measured by the combination tables of ``gdn-equiv coverage``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
from typing import Any, NamedTuple

from hypothesis import strategies as st

from gdn_equiv.model.backends import Backend, capabilities

from .convs import LAYOUTS, ConvCall, conv_calls
from .examples import attention_mask_lens, examples
from .values import LONG_MAX_CHANNELS, TIME_TILES

__all__ = [
    "CONV_DIMENSIONS",
    "LAYER_DIMENSIONS",
    "Cell",
    "cell_call",
    "combination_calls",
    "combination_widths",
    "conv_cells",
    "feasible",
    "layer_cell_examples",
    "layer_cells",
]

#: the dimensions whose every combination a run reaches, with their regions in the coverage report's
#: names (:func:`gdn_equiv.harness.coverage.conv_call_regions`)
CONV_DIMENSIONS: dict[str, tuple[str, ...]] = {
    "conv.length": ("T<W-1", "T=W-1", "T=W", "W<T<=2W", "T>2W"),
    "conv.initial_state": ("on", "off"),
    "conv.final_state": ("requested", "not-requested"),
    "conv.varlen": ("dense", "cu_seqlens", "cu_seqlens+empty"),
    "conv.grad": ("on", "off"),
}


#: the share of ``T>2W`` cells whose sequence runs past the first time tile, up to ``LONG_REACH`` tokens
LONG_SHARE = 0.25
LONG_REACH = 300


class Cell(NamedTuple):
    length: str
    initial_state: bool
    final_state: bool
    varlen: str
    grad: bool

    def regions(self) -> dict[str, str]:
        return {
            "conv.length": self.length,
            "conv.initial_state": "on" if self.initial_state else "off",
            "conv.final_state": "requested" if self.final_state else "not-requested",
            "conv.varlen": self.varlen,
            "conv.grad": "on" if self.grad else "off",
        }


def all_cells() -> list[Cell]:
    d = CONV_DIMENSIONS
    return [
        Cell(length, i == "on", f == "requested", v, g == "on") for length, i, f, v, g in itertools.product(*d.values())
    ]


def feasible(cell: Cell, *, widths: tuple[int, int], varlen_initial_state: bool = True) -> str | None:
    """Why ``cell`` cannot be asked of a backend with these kernel ``widths`` and per-sequence state
    support, or ``None``."""
    if cell.length == "T<W-1" and widths[1] < 3:
        return f"T < W-1 needs a kernel width >= 3 (widths {widths[0]}..{widths[1]})"
    if cell.length == "T=W-1" and widths[1] < 2:
        return f"T = W-1 >= 1 needs a kernel width >= 2 (widths {widths[0]}..{widths[1]})"
    if cell.initial_state and cell.varlen != "dense" and not varlen_initial_state:
        return "the backend takes no initial state with cu_seqlens"
    return None


def _min_width(length: str) -> int:
    return {"T<W-1": 3, "T=W-1": 2}.get(length, 1)


def _length_in(rng: random.Random, region: str, W: int) -> int:
    lo, hi = {
        "T<W-1": (1, W - 2),
        "T=W-1": (W - 1, W - 1),
        "T=W": (W, W),
        "W<T<=2W": (W + 1, 2 * W),
        "T>2W": (2 * W + 1, 2 * W + 6),
    }[region]
    return rng.randint(lo, hi)


def cell_call(
    rng: random.Random, base: ConvCall, cell: Cell, widths: tuple[int, int], *, channel_step: int = 1
) -> ConvCall:
    """``base`` moved into ``cell``: its width raised where the length region needs it, a length drawn in
    the region (packed: one sequence in the region beside a free one, and an empty one for
    ``cu_seqlens+empty``), an initial state as the cell says; a long call's few channels stay a multiple of
    ``channel_step`` (the backend's declared channel counts)."""
    W = max(base.W, _min_width(cell.length))
    if widths[1] < W:
        raise ValueError(f"{cell} is not feasible with widths {widths}")  # callers skip it (feasible())
    T = _length_in(rng, cell.length, W)
    lens: tuple[int, ...] = ()
    B, D = base.B, base.D
    if cell.length == "T>2W" and rng.random() < LONG_SHARE:  # past the time tiles (issue #49): one row, few channels
        T, B = rng.randint(TIME_TILES[0] + 1, LONG_REACH), 1
        D = min(D, LONG_MAX_CHANNELS) // channel_step * channel_step or D
    if cell.varlen != "dense":
        other = rng.randint(1, 2 * W + 2)
        lens = (T, other) if rng.random() < 0.5 else (other, T)
        if cell.varlen == "cu_seqlens+empty":
            at = rng.randint(0, len(lens))
            lens = (*lens[:at], 0, *lens[at:])
        B, T = 1, sum(lens)
    # a layout of a cotangent the cell does not pass is left out (the coverage labels count passed tensors)
    return dataclasses.replace(base, B=B, T=T, D=D, W=W, seq_lens=lens, initial_state=cell.initial_state)


@st.composite
def conv_cells(
    draw: st.DrawFn,
    base: st.SearchStrategy[ConvCall],
    *,
    widths: tuple[int, int],
    varlen_initial_state: bool = True,
    channel_step: int = 1,
) -> list[tuple[Cell, ConvCall]]:
    """One call of ``base`` (dense; its length is replaced) per feasible cell of :data:`CONV_DIMENSIONS`,
    in cell order. The lengths inside each region come from one drawn seed, so a failure prints the base
    call and that seed, not 120 calls (the failing cell and call are in the assertion)."""
    call = draw(base)
    rng = random.Random(draw(st.integers(0, 2**16)))
    out = []
    for cell in all_cells():
        if feasible(cell, widths=widths, varlen_initial_state=varlen_initial_state) is None:
            out.append((cell, cell_call(rng, call, cell, widths, channel_step=channel_step)))
    return out


#: the layer dimensions whose every combination a run reaches (:func:`layer_cells`), in the coverage
#: report's names (:func:`gdn_equiv.harness.coverage.example_regions`)
LAYER_DIMENSIONS: dict[str, tuple[str, ...]] = {
    "layer.length": ("T<W-1", "T>=W-1"),
    "layer.cache": ("none", "empty", "populated"),
    "layer.use_cache": ("on", "off"),
    "layer.varlen": ("none", "cu_seqlens", "mask"),
    "layer.grad": ("on", "off"),
}


def layer_cells(*, varlen_initial_state: bool = True) -> list[dict[str, str]]:
    """Every combination of :data:`LAYER_DIMENSIONS`; without ``varlen_initial_state`` (backends that take no
    cached state with packed sequences, causal-conv1d) not a populated cache with ``cu_seqlens`` or a mask
    (a mask is unpadded into ``cu_seqlens`` by most families)."""
    cells = [dict(zip(LAYER_DIMENSIONS, c, strict=True)) for c in itertools.product(*LAYER_DIMENSIONS.values())]
    if varlen_initial_state:
        return cells
    return [c for c in cells if not (c["layer.cache"] == "populated" and c["layer.varlen"] != "none")]


@st.composite
def layer_cell_examples(draw: st.DrawFn, **kwargs: Any) -> list[tuple[dict[str, str], Any]]:
    """One example per cell of :data:`LAYER_DIMENSIONS` (72): drawn from
    :func:`gdn_equiv.strategies.examples` (``kwargs`` passed on) with short convs, without cache or
    packing, with ``use_cache`` and ``grad`` pinned, then moved into the cell: a length against the q
    conv's width, packed (``cu_seqlens``: a sequence of that length beside another, possibly empty) or
    masked rows, an empty cache or one populated by a prefix."""
    out = []
    backends = (*kwargs.get("backends", ("torch",)), *kwargs.get("within", ()))
    for cell in layer_cells(varlen_initial_state=capabilities(backends).varlen_initial_state):
        pins: dict[str, Any] = {"cache": False, "varlen": False, "use_short_conv": True}
        pins["use_cache"] = cell["layer.use_cache"] == "on"
        pins["grad"] = cell["layer.grad"] == "on"
        example = draw(_cell_strategy(tuple(sorted({**kwargs, **pins}.items()))))
        config = example.config
        W = config.slot_kernel_size(config.SLOTS[0])  # >= 2 (layer_configs)
        changes: dict[str, Any] = {}
        if cell["layer.length"] == "T<W-1" and W < 3:  # every conv 3 wide: T = 1 is then short of W-1
            specs = {f"{s}_conv": dataclasses.replace(config.conv_spec(s), kernel_size=None) for s in config.SLOTS}
            config = dataclasses.replace(config, conv_size=3, **specs)
            changes["config"] = config
            W = 3
        T = draw(st.integers(1, W - 2) if cell["layer.length"] == "T<W-1" else st.integers(W - 1, W + 6))
        changes["seq_len"] = T
        if cell["layer.varlen"] == "cu_seqlens":
            other = draw(st.integers(0, W + 2))
            lens = (T, other) if draw(st.booleans()) else (other, T)
            changes.update(varlen="cu_seqlens", batch=1, seq_len=sum(lens), seq_lens=lens)
        elif cell["layer.varlen"] == "mask":
            lens, side = draw(attention_mask_lens(batch=example.batch, seq_len=T))
            changes.update(varlen="mask", seq_lens=lens, pad_side=side)
        if cell["layer.cache"] == "empty":
            changes.update(cache="empty", prefix_len=0)
        elif cell["layer.cache"] == "populated":
            changes.update(cache="populated", prefix_len=draw(st.integers(1, 6)))
        out.append((cell, dataclasses.replace(example, **changes)))
    return out


@functools.lru_cache(maxsize=256)  # one strategy per arguments: see gdn_equiv.strategies.sampling.sampled
def _cell_strategy(kwargs: tuple[tuple[str, Any], ...]) -> st.SearchStrategy[Any]:
    return examples(fusable=None, **dict(kwargs))


def combination_widths(backend: str | Backend) -> tuple[int, int]:
    """The widths the combination tests draw on ``backend``: its declared ones, up to 4."""
    lo, hi = capabilities([backend]).widths or (1, 4)
    return lo, min(hi, 4)


def combination_calls(backend: str) -> st.SearchStrategy:
    """Base calls inside the capabilities of the backend and torch, one per cell the backend can be asked
    (``gdn_equiv.suite.test_combinations``)."""
    caps = capabilities([backend, "torch"])
    widths = combination_widths(backend)
    base = conv_calls(widths=widths, varlen=False, max_seq_len=1, layouts=LAYOUTS, max_channels=40, capabilities=caps)
    return conv_cells(
        base, widths=widths, varlen_initial_state=caps.varlen_initial_state, channel_step=caps.channel_step
    )
