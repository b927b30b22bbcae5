"""Our in-house reference layers = fla's layers, on the run's device (:mod:`gdn_equiv.harness.faithful`).

For every in-house family (each has a naive-core adapter) and the installed fla version: output and
gradients of fla's layer (its projections, convs and norms as fla wrote them, its core fla's own
pure-torch naive recurrence) against ours on the same state_dict, by the project's whole-layer
accuracy bar; once with fla's convs built from our per-conv facts, once with fla's own conv defaults.
Skipped with the reason where fla is not installed or the family has no adapter.
"""

from __future__ import annotations

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness.faithful import FAITHFUL_FAMILIES, check_faithful, unfaithful_reason
from gdn_equiv.harness.testing import count_example
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import get_family

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]

#: fla's Triton convs and norms run in the interpreter here: tiny layers, few examples
MAX_EXAMPLES = max(2, settings().max_examples // 15)


@st.composite
def faithful_examples(draw: st.DrawFn, family: str) -> Example:
    """A tiny layer of ``family`` (its ``small`` dims) on a plain call, with or without gradients: one
    in four the family's defaults (every other argument as a user gets it without passing one), the
    rest with grouped heads, gates, conv size and bias and the core's mode drawn."""
    fam = get_family(family)
    small = dict(fam.small)
    known = fam.config_cls.__dataclass_fields__
    if draw(st.integers(0, 3)) == 0:
        config = fam.config_cls(**small)
    else:
        heads = small.get("num_heads", 2)
        fields = {
            "num_v_heads": draw(st.sampled_from([heads, small.get("num_v_heads", 4)])),
            "num_kv_heads": draw(st.sampled_from([None, small.get("num_kv_heads", heads)])),
            "use_gate": draw(st.booleans()),
            "use_output_gate": draw(st.booleans()),
            "conv_size": draw(st.integers(2, 4)),
            "conv_bias": draw(st.booleans()),
            "allow_neg_eigval": draw(st.booleans()),
            "mode": draw(st.sampled_from(["chunk", "recurrent"])),
        }
        config = fam.config_cls(**{**small, **{k: v for k, v in fields.items() if k in known}})
    return Example(
        config=config,
        family=family,
        dtype="float32",
        batch=draw(st.integers(1, 2)),
        seq_len=draw(st.integers(1, 6)),
        seed=draw(st.integers(0, 2**16)),
        grad=draw(st.booleans()),
    )


FAMILIES = [
    pytest.param(f, marks=pytest.mark.skipif(unfaithful_reason(f) is not None, reason=str(unfaithful_reason(f))))
    for f in ("gated_deltanet", "gla", "kda", "lightnet", "simple_gla")
]


@pytest.mark.parametrize("defaults", [False, True], ids=["our-conv-facts", "fla-defaults"])
@pytest.mark.parametrize("family", FAMILIES)
@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(data=st.data())
def test_reference_layer_matches_fla_layer(data, family: str, defaults: bool, device: str) -> None:
    """Output (and dx, parameter gradients) of fla's layer within the accuracy bar of ours, on the run's device."""
    assert family in FAITHFUL_FAMILIES
    example = data.draw(faithful_examples(family), label="example")
    count_example()
    note(example.short())
    check_faithful(example, defaults=defaults, device=device)
