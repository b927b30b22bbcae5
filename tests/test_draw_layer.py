"""The draw layer (``strategies/``, docs/draws.md): the model declares its choices and imports no Hypothesis;
the strategies answer them, and a plug-in written against the older API (a family whose ``dims`` is a strategy
function, a fact that draws strategies itself) is still drawn."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from hypothesis import find, settings
from hypothesis import strategies as st

from gdn_equiv.model.conv_ops import conv_facts
from gdn_equiv.model.families import get_family
from gdn_equiv.strategies.layers import family_dims
from gdn_equiv.strategies.sampling import DrawnChoices

QUIET = settings(database=None, max_examples=200)


def test_the_model_imports_no_hypothesis() -> None:
    """Every family record, the conv registry, the guard, the reference layers: loaded with Hypothesis absent
    from ``sys.modules`` (a fresh interpreter, so the test process's own imports do not count)."""
    code = (
        "import sys\n"
        "from gdn_equiv.model import families as F, conv_ops, guard, reference, example\n"
        "[F.get_family(n) for n in F.known_families() + F.fla_only_families()]\n"
        "conv_ops.conv_facts()\n"
        "loaded = {m.split('.')[0] for m in sys.modules} & {'hypothesis'}\n"
        "print(sorted(loaded | {m for m in sys.modules if m.startswith('gdn_equiv.strategies')}))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", run.stdout


def test_a_family_declares_its_dims_and_the_strategies_draw_them() -> None:
    """``gated_deltanet``'s value heads: with two heads allowed, a GVA layout (num_v_heads = 2 * num_heads) is
    drawn; its minimal draw is one head of dim 2, expand_v 1, no gate (the shrink targets the family states)."""
    gdn = get_family("gated_deltanet")
    smallest = find(family_dims(gdn, max_heads=2), lambda d: True, settings=QUIET)
    assert smallest == {
        "hidden_size": 8, "expand_v": 1, "head_dim": 2, "num_heads": 1, "num_v_heads": None,
        "use_gate": False, "allow_neg_eigval": False, "output_gate_activation": "swish",
    }  # fmt: skip
    gva = find(family_dims(gdn, max_heads=2), lambda d: d["num_v_heads"] is not None, settings=QUIET)
    assert gva["num_v_heads"] == 2 * gva["num_heads"]


def test_a_plug_in_family_whose_dims_is_a_strategy_function_is_drawn_as_it_is() -> None:
    @st.composite
    def old_dims(draw, *, max_heads: int = 2, hidden_sizes: tuple[int, ...] = (8, 16)):
        return {"hidden_size": draw(st.sampled_from(hidden_sizes)), "num_heads": draw(st.integers(1, max_heads))}

    plug_in = dataclasses.replace(get_family("gla"), name="old-style", dims=old_dims)
    drawn = find(family_dims(plug_in, max_heads=3, hidden_sizes=(16,)), lambda d: d["num_heads"] == 3, settings=QUIET)
    assert drawn == {"hidden_size": 16, "num_heads": 3}


def test_a_plug_in_fact_that_draws_strategies_itself_still_draws() -> None:
    """A conv fact's ``draw`` gets the strategies' :class:`DrawnChoices`; one written before it, which calls its
    argument on a strategy, is answered too."""
    norm = next(f for f in conv_facts() if f.name == "norm")

    def old_draw(draw, channels):
        return {"norm": "l2" if draw(st.booleans()) else None, "head_dim": channels[0], "norm_eps": 1e-5}

    @st.composite
    def values(draw, fact):
        return fact.draw(DrawnChoices(draw), [4, 4, 4])

    old = dataclasses.replace(norm, draw=old_draw)
    assert find(values(old), lambda v: v["norm"] == "l2", settings=QUIET) == {
        "norm": "l2",
        "head_dim": 4,
        "norm_eps": 1e-5,
    }
    # the built-in fact's own draw, through the choices: on, its head_dim divides the channels
    assert find(values(norm), lambda v: v["norm"] == "l2", settings=QUIET)["head_dim"] in (1, 2, 4)
