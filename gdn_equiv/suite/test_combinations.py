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
from hypothesis import given, settings
from hypothesis import strategies as st

from gdn_equiv.harness import properties as P
from gdn_equiv.harness import registry
from gdn_equiv.harness.cells import check_cells, missed_layer_combinations, part_share, parts
from gdn_equiv.harness.coverage import label_example
from gdn_equiv.harness.testing import count_example
from gdn_equiv.model.backends import capabilities, get_backend
from gdn_equiv.strategies.combinations import combination_calls, layer_cell_examples

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


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
    check_cells(cells, get_backend(gdn_backend), device, part=part, of=parts("conv"))


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
    vacuous = registry.vacuous_against_torch(gdn_backend)
    checks = [n for n in LAYER_CHECKS if n != "check_backend_matches_torch" or not vacuous]
    for cell, example in part_share(cells, part, parts("layer")):
        label_example(example)
        applied = 0
        for name in checks:
            try:
                getattr(P, name)(example, device=device)
                applied += 1
            except P.NotApplicable:
                continue
        assert applied >= 2, f"only {applied} layer check applied in {cell}: {example.short()}"
