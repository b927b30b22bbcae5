"""Every combination of T against W, initial state, final state, packing and gradients, in every run.

A kernel wrong only where regions meet (``T < W`` with an initial state, under gradients, without
``cu_seqlens``) passes properties that reach each region on its own. Here each example draws one base
call of the backend's scope (channels, width, dtype, bias, activation, layouts) and runs it in every
feasible cell of :data:`gdn_equiv.strategies.combinations.CONV_DIMENSIONS` (120 on the torch backend),
so a ``ci`` run reaches them all by construction. Each example first checks that its calls themselves
reach every promised pair and triple (:data:`gdn_equiv.harness.coverage.PROMISED`; a strategy that lost one fails
here), and ``gdn-equiv coverage --require-all`` fails a run that leaves one unreached.
"""

from __future__ import annotations

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness import properties as P
from gdn_equiv.harness import registry
from gdn_equiv.harness.cells import check_cell, missed_combinations, missed_layer_combinations
from gdn_equiv.harness.coverage import label_example
from gdn_equiv.harness.testing import count_example
from gdn_equiv.model.backends import capabilities
from gdn_equiv.strategies import conv_calls
from gdn_equiv.strategies.combinations import conv_cells, layer_cell_examples
from gdn_equiv.strategies.convs import LAYOUTS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _widths(backend: str) -> tuple[int, int]:
    lo, hi = capabilities([backend]).widths or (1, 4)
    return lo, min(hi, 4)


def combination_calls(backend: str) -> st.SearchStrategy:
    """Base calls inside the capabilities of the backend and torch, one per cell the backend can be asked."""
    caps = capabilities([backend, "torch"])
    widths = _widths(backend)
    base = conv_calls(widths=widths, varlen=False, max_seq_len=1, layouts=LAYOUTS, max_channels=40, capabilities=caps)
    return conv_cells(
        base, widths=widths, varlen_initial_state=caps.varlen_initial_state, channel_step=caps.channel_step
    )


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
GPU_PARTS = {"conv": 60, "layer": 36}


def parts(test: str) -> int:
    """How many parts ``test`` (``conv`` or ``layer``) runs as here: finer on a GPU (see :data:`GPU_PARTS`)."""
    import torch

    return GPU_PARTS[test] if torch.cuda.is_available() else PARTS


# first: every cell of the conv call in a few examples, cheap on a CPU: every worker starts on it (time to red).
# each example runs every cell (120 calls), so a sixth of the profile's examples keeps the test's cost
# near the other conformance tests' while the base calls (channels, dtype, layouts) still vary
@pytest.mark.first(2)
@pytest.mark.parametrize("part", range(parts("conv")))
@settings(deadline=None, max_examples=max(2, settings().max_examples // 6))
@given(data=st.data())
def test_backend_matches_torch_in_every_combination(data, gdn_backend, device, part):
    """One base call in every cell: y, the final state when requested, gradients when taken, within §6."""
    cells = data.draw(combination_calls(gdn_backend), label="cells")
    count_example()
    check_cells(cells, gdn_backend, device, part=part, of=parts("conv"))


def _share(cells: list, part: int | None, of: int) -> list:
    """The cells of ``part`` (of ``of``): ``cells[part::of]``, never none (a part running nothing would pass)."""
    if part is None:
        return cells
    share = cells[part::of]
    assert share, f"part {part} of {of} has no cell to run: only {len(cells)} cells drawn (fewer parts, please)"
    return share


def check_cells(cells: list, backend: str, device: str, *, part: int | None = None, of: int = PARTS) -> None:
    """Every promised combination the backend can run reached by the calls themselves (a strategy that
    lost one fails here, before any kernel runs), then each call checked in its cell (with ``part``, the
    calls of that part only: ``cells[part::of]``)."""
    varlen_state = capabilities([backend]).varlen_initial_state
    missed = missed_combinations(cells, widths=_widths(backend), varlen_initial_state=varlen_state)
    assert not missed, f"{len(missed)} promised combination(s) not reached by this example's calls: {missed}"
    share = _share(cells, part, of)
    note(f"{len(share)} of {len(cells)} cells; a failure names its call and cell")
    for cell, call in share:
        check_cell(call, cell, backend, device)


def vacuous(backend: str) -> bool:
    """Whether comparing the layer on ``backend`` with the layer on torch compares nothing (the record's n/a)."""
    return registry.get_record("P7-backend-vs-torch").not_applicable(backend) is not None


#: the layer checks each cell runs: the path taken, whichever of P3/P4/P5 the cell's state meets, and
#: the layer on the backend against the layer on torch (P7: a kernel wrong at a combination is wrong on
#: both paths alike, which P3-P5 compare with each other)
LAYER_CHECKS = (
    "check_path_taken",
    "check_forward_exact",
    "check_gradients",
    "check_fallback_exact",
    "check_backend_matches_torch",
)


@pytest.mark.slow
@pytest.mark.parametrize("part", range(parts("layer")))
# 36 layer examples per example: a twentieth of the profile's examples
@settings(deadline=None, max_examples=max(2, settings().max_examples // 20))
@given(data=st.data())
def test_layer_properties_in_every_combination(data, gdn_backend, gdn_families, device, part):
    """One example per cell of cache x use_cache x varlen x grad: P2's path, and P3/P4/P5 where they apply."""

    cells = data.draw(
        layer_cell_examples(backends=(gdn_backend,), family=gdn_families, max_seq_len=8), label="layer cells"
    )
    count_example()
    states = capabilities([gdn_backend]).varlen_initial_state
    missed = missed_layer_combinations([example for _, example in cells], varlen_initial_state=states)
    assert not missed, f"{len(missed)} promised layer combination(s) not reached by this example's cells: {missed}"
    # the layer on the backend against the layer on torch compares nothing on torch: that check is n/a there
    checks = [n for n in LAYER_CHECKS if n != "check_backend_matches_torch" or not vacuous(gdn_backend)]
    for cell, example in _share(cells, part, parts("layer")):
        label_example(example)
        applied = 0
        for name in checks:
            try:
                getattr(P, name)(example, device=device)
                applied += 1
            except P.NotApplicable:
                continue
        assert applied >= 2, f"only {applied} layer check applied in {cell}: {example.short()}"
