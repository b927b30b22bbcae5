"""The faithfulness property's examples (:mod:`gdn_equiv.harness.faithful`): tiny plain calls of one family,
drawn for the gate (``gdn_equiv.suite.test_faithful``), its teeth and ``gdn-equiv faithful``."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

from gdn_equiv.model.example import Example
from gdn_equiv.model.families import get_family


def faithful_budget() -> int:
    """Examples per faithfulness test in the current profile: fla's Triton convs and norms run in the
    interpreter on a CPU, so a fifteenth of the profile's, at least 2."""
    return max(2, settings().max_examples // 15)


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
