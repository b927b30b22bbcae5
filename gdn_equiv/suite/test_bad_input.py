"""P8: bad input gets an ``InvalidArgument`` naming the argument and the value, and nothing the caller
holds is modified, for every family and the backend chosen by ``--gdn-backend``.

Each example is a valid call with one thing made wrong (:mod:`gdn_equiv.harness.bad_input`): hidden states,
``attention_mask``, ``cu_seqlens``, ``use_cache``, the cached state, the conv modules, the config.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness import isolation
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.bad_input import KINDS
from gdn_equiv.harness.testing import count_example
from gdn_equiv.strategies import bad_calls

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("kind", list(KINDS))
# one test per kind, each a tenth of the profile's examples; no explain phase: a failing kind would be
# replayed under a tracer for each of its parts (minutes on a CPU), and the kind already says what broke
@settings(
    deadline=None,
    max_examples=max(4, settings().max_examples // 10),
    phases=[p for p in settings().phases if p is not Phase.explain],
)
@given(data=st.data())
def test_bad_input_is_refused_naming_the_value(data, kind, gdn_backend, gdn_families, device):
    """P8, each kind of :data:`gdn_equiv.harness.bad_input.KINDS` on its own (so every run reaches every kind),
    drawn on every family."""
    bad = data.draw(bad_calls(backends=(gdn_backend,), family=gdn_families, kinds=[kind]))
    count_example()
    note(bad.short())
    isolation.call(P.check_refuses_bad_input, bad, device=device)  # in a worker under --gdn-isolate
