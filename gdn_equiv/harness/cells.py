"""The conformance check of one conv call in one cell of the combination grid
(:data:`gdn_equiv.strategies.combinations.CONV_DIMENSIONS`): the final state requested or not, gradients
taken or not, as the cell says. The other checks (:mod:`gdn_equiv.harness.conformance`) always ask for the final
state, so a kernel whose code path without it is wrong passes them."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import note

from gdn_equiv.harness.compare import assert_zero_signs
from gdn_equiv.harness.conformance import (
    NotAConvCall,
    close_to_torch,
    conv_call_of,
    conv_forward,
    state_name,
)
from gdn_equiv.harness.coverage import PROMISED, conv_call_regions, example_regions, label_conv_call
from gdn_equiv.harness.ground_truth import close_to_truth, conv1d_truth
from gdn_equiv.harness.premise import NotApplicable
from gdn_equiv.model.backends import Backend
from gdn_equiv.strategies.combinations import all_cells, cell_call, combination_widths, feasible, layer_cells

if TYPE_CHECKING:
    from gdn_equiv.model.example import Example
    from gdn_equiv.strategies import ConvCall
    from gdn_equiv.strategies.combinations import Cell

__all__ = [
    "GPU_PARTS",
    "PARTS",
    "check_cell",
    "check_cells",
    "check_example_in_every_cell",
    "missed_combinations",
    "missed_layer_combinations",
    "part_share",
    "parts",
]


Combo = tuple[tuple[str, str], ...]


def _sub_combinations(regions: dict[str, tuple[str, ...]], kind: str) -> set[Combo]:
    """Every pair and triple of (dimension, region) over :data:`gdn_equiv.harness.coverage.PROMISED` one call or
    example holds, as the coverage report counts them."""
    import itertools

    dims = [d for d in PROMISED[kind] if d in regions]
    out: set[Combo] = set()
    for n in (2, 3):
        for chosen in itertools.combinations(dims, n):
            out.update(
                tuple(zip(chosen, combo, strict=True)) for combo in itertools.product(*(regions[d] for d in chosen))
            )
    return out


def _names(combos: set[Combo]) -> list[str]:
    return sorted(" & ".join(f"{d}={r}" for d, r in combo) for combo in combos)


def missed_combinations(
    cells: list[tuple[Cell, ConvCall]], *, widths: tuple[int, int], varlen_initial_state: bool = True
) -> list[str]:
    """The promised combinations (:data:`gdn_equiv.harness.coverage.PROMISED`) that some cell feasible with these
    ``widths`` holds but none of the calls reached, read from the calls themselves as the coverage
    report reads them: a strategy that stops reaching one (a cell whose call lost its initial state,
    say) fails the gate's run, not only a later ``coverage --require-all``."""

    promised: set[Combo] = set()
    for cell in all_cells():
        if feasible(cell, widths=widths, varlen_initial_state=varlen_initial_state) is None:
            promised |= _sub_combinations({d: (r,) for d, r in cell.regions().items()}, "conv")
    reached: set[Combo] = set()
    for cell, call in cells:
        reached |= _sub_combinations(conv_call_regions(call, grad=cell.grad, final_state=cell.final_state), "conv")
    return _names(promised - reached)


def missed_layer_combinations(examples: list[Example], *, varlen_initial_state: bool = True) -> list[str]:
    """The promised layer combinations (every cell of
    :data:`gdn_equiv.strategies.combinations.LAYER_DIMENSIONS` the backends can be asked:
    :func:`~gdn_equiv.strategies.combinations.layer_cells`) none of ``examples`` reached."""

    promised: set[Combo] = set()
    for cell in layer_cells(varlen_initial_state=varlen_initial_state):
        promised |= _sub_combinations({d: (r,) for d, r in cell.items()}, "layer")
    reached: set[Combo] = set()
    for example in examples:
        reached |= _sub_combinations(example_regions(example), "layer")
    return _names(promised - reached)


def _run(call: ConvCall, backend: str | Backend, device: str, *, final: bool, grad: bool, unused: int) -> dict:
    t = call.tensors(device, grad=grad)
    y, state = conv_forward(call, t, backend, final=final)
    out = {"y": y, "final_state": state}
    if grad:
        names = [n for n in ("x", "weight", "bias", "initial_state") if t[n] is not None]
        cot = call.cotangents(device, unused_state_slots=unused)
        outputs, cotangents = [y], [cot["dy"]]
        if final:
            outputs.append(state)
            cotangents.append(cot["dfinal"])
        grads = torch.autograd.grad(outputs, [t[n] for n in names], cotangents, allow_unused=True)
        out.update({f"grad.{n}": g for n, g in zip(names, grads, strict=True)})
    return out


def _truth(call: ConvCall, device: str, *, final: bool, grad: bool, unused: int) -> dict:
    """The cell's outputs (and gradients, from the same cotangents) from the independent fp64 ``F.conv1d``
    (:func:`gdn_equiv.harness.ground_truth.conv1d_truth`) of the call's values, each rounded to the dtype
    it is compared in by :func:`check_cell`."""
    t = call.tensors(device)
    names = [n for n in ("x", "weight", "bias", "initial_state") if t[n] is not None]
    d = {n: t[n].detach().to(torch.float64).requires_grad_(grad) for n in names}
    y, state = conv1d_truth(
        d["x"], d["weight"], d.get("bias"), call.activation, d.get("initial_state"), t["cu_seqlens"]
    )
    out = {"y": y, "final_state": state if final else None}
    if grad:
        cot = call.cotangents(device, unused_state_slots=unused)
        outputs, cotangents = [y], [cot["dy"].double()]
        if final:
            outputs.append(state)
            cotangents.append(cot["dfinal"].double())
        grads = torch.autograd.grad(outputs, [d[n] for n in names], cotangents, allow_unused=True)
        out.update({f"grad.{n}": torch.zeros_like(d[n]) if g is None else g for n, g in zip(names, grads, strict=True)})
    return out


def check_cell(call: ConvCall, cell: Cell, impl: Backend, device: str) -> None:
    """y, the final state's declared slots (when the cell requests it; ``None`` when it does not) and,
    under gradients, every input's gradient from ``dy`` (and ``d final_state``) == the torch backend's,
    within §6. The torch backend itself is compared with the fp64 truth instead: torch against torch
    compares nothing (the ledger's vacuous row), and would label its cell reached for nothing. ``impl``: the
    backend's object, resolved once by the caller that checks many cells."""
    label_conv_call(call, grad=cell.grad, final_state=cell.final_state)
    backend = impl.name  # the words name it
    unused = impl.unused_state_slots
    got = _run(call, impl, device, final=cell.final_state, grad=cell.grad, unused=unused)
    context = f"{call}, {cell}"
    ref: dict[str, Any]
    if backend == "torch":
        truth = _truth(call, device, final=cell.final_state, grad=cell.grad, unused=unused)
        ref = {k: None if v is None or got[k] is None else v.detach().to(got[k].dtype) for k, v in truth.items()}

        def close(actual, expected, name: str, backend: str, context: str) -> None:
            # as the conv-level ground truth judges (extreme values: atol widened at their scale; a gradient as a
            # sum over the tokens)
            summed = name.startswith("grad.")
            close_to_truth(actual, expected, name, backend, call, summed=summed, context=context)
    else:
        ref = _run(call, "torch", device, final=cell.final_state, grad=cell.grad, unused=unused)
        # the fp64 truth, run only where a gradient differs from torch's past the table (as at the conv:
        # :func:`~gdn_equiv.harness.conformance.check_gradients`)
        fp64 = functools.cache(lambda: _truth(call, device, final=cell.final_state, grad=cell.grad, unused=unused))

        def close(actual, expected, name: str, backend: str, context: str) -> None:
            # ``of=call``: the call's values (an extreme kind widens the table's atol at their scale); the
            # context is a string and carries none. Without it a kernel more accurate than torch failed an
            # extreme-value cell (H100 lane, 2026-12-07: grad.x of a subnormal call, 1 ulp of 1.6e36 apart)
            leaf = (lambda: fp64()[name]) if name.startswith("grad.") else None
            close_to_torch(actual, expected, name, backend, context, leaf, of=call)

    if not cell.final_state and got["final_state"] is not None:
        raise AssertionError(f"backend {backend!r} returned a final state that was not asked for\nExample: {context}")
    s = impl.state_slots(call.W)
    for name, value in got.items():
        if name == "final_state":
            if cell.final_state:
                slots = state_name(s, call.W, name)
                close(value[..., s], ref[name][..., s], slots, backend, context)
                # a state copies inputs: a copied ``-0.0`` stays ``-0.0`` (past what a tolerance sees)
                paths = (backend, "fp64 conv1d" if backend == "torch" else "torch")
                assert_zero_signs(value[..., s], ref[name][..., s], name=slots, paths=paths, context=context)
            continue
        close(value, ref[name], name, backend, context)


#: each combination test runs as this many tests, one per part: every part draws every cell (descriptions
#: only, cheap) and checks the promise on all of them, then runs its share, cells ``part, part + parts, ...``.
#: The checks are the same as one test's; what changes is that xdist can spread one backend's combinations
#: over the parts' workers. On the H100 (2026-12-06) the undivided tests were the gate's longest: 372 s cold for
#: ``test_backend_matches_torch_in_every_combination[triton]``, over 400 s for the layer one, each compiling
#: its calls' kernels one after the other while other workers sat idle; in four parts a triton part still took
#: 62 s warm (2026-12-07). On a GPU the split is finer, so that a part is a few seconds: the conv test's 120
#: cells (torch's scope; 80 for cuda and fla-cuda, whose widths are limited) in 60 parts, the layer test's 72
#: (56 for cuda) in 36; a part left with no cell fails rather than pass having run nothing. In 30 and 18 parts
#: (H100, 2026-12-07, -n 14, kernels cached by the cold run) a conv part took 2.3-7.0 s warm (4 cells), a
#: layer part 5.1-5.7 s (4 cells): two cells a part is 1.2-3.5 s. On a CPU the draws, repeated by every
#: part, cost more than the calls: four parts each.
PARTS = 4
GPU_PARTS = {"conv": 60, "layer": 36, "layer-cells": 12}
#: on a CPU (the interpreter), the layer examples' every-cell test (P7-combinations' gate test) is one test:
#: its parts would each build the example's layer again for a quarter of the cells
CPU_PARTS = {"conv": PARTS, "layer": PARTS, "layer-cells": 1}


def parts(test: str) -> int:
    """How many parts ``test`` (``conv``, ``layer`` or ``layer-cells``) runs as here: finer on a GPU (see
    :data:`GPU_PARTS`)."""
    return GPU_PARTS[test] if torch.cuda.is_available() else CPU_PARTS[test]


def part_share(cells: list, part: int | None, of: int) -> list:
    """The cells of ``part`` (of ``of``): ``cells[part::of]``, never none (a part running nothing would pass)."""
    if part is None:
        return cells
    share = cells[part::of]
    assert share, f"part {part} of {of} has no cell to run: only {len(cells)} cells drawn (fewer parts, please)"
    return share


def check_cells(cells: list, impl: Backend, device: str, *, part: int | None = None, of: int = PARTS) -> None:
    """Every promised combination the backend can run reached by the calls themselves (a strategy that
    lost one fails here, before any kernel runs), then each call checked in its cell (with ``part``, the
    calls of that part only: ``cells[part::of]``)."""
    varlen_state = impl.capabilities.varlen_initial_state
    missed = missed_combinations(cells, widths=combination_widths(impl), varlen_initial_state=varlen_state)
    assert not missed, f"{len(missed)} promised combination(s) not reached by this example's calls: {missed}"
    share = part_share(cells, part, of)
    note(f"{len(share)} of {len(cells)} cells; a failure names its call and cell")
    for cell, call in share:
        check_cell(call, cell, impl, device)


def check_example_in_every_cell(example: Example, *, device: str = "cpu", part: int | None = None, of: int = 1) -> None:
    """The conv call of a layer example (:func:`gdn_equiv.harness.conformance.conv_call_of`, dense) moved into
    every feasible cell of the combination grid on its backend, each checked by :func:`check_cell`:
    the form a registry row (``check``/``fuzz``) can run. Lengths inside each region come from the
    example's seed. :class:`gdn_equiv.harness.properties.NotApplicable` where the layer makes no such call.
    With ``part``, the cells of that part only (:func:`part_share`: every ``of``-th feasible cell); the lengths
    are drawn for every cell still, so a part's calls are the whole grid's."""
    import dataclasses
    import random

    try:
        call, _, impl = conv_call_of(example)
    except NotAConvCall as exc:
        raise NotApplicable(str(exc)) from None
    caps = impl.capabilities
    lo, hi = caps.widths or (1, 4)
    # the grid's widths up to 4, and the layer's own (a conv_size 5 layer on triton: its call is W=5, past the
    # grid, and every cell then asked for a width the grid did not have)
    widths = (lo, max(min(hi, 4), call.W))
    base = dataclasses.replace(call, seq_lens=(), B=max(1, call.B))
    rng = random.Random(example.seed)
    varlen_state = caps.varlen_initial_state
    grid = [
        (cell, cell_call(rng, base, cell, widths, channel_step=caps.channel_step))
        for cell in all_cells()
        if feasible(cell, widths=widths, varlen_initial_state=varlen_state) is None
    ]
    for cell, cell_call_ in part_share(grid, part, of):
        check_cell(cell_call_, cell, impl, device)
