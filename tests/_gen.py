"""Small local Hypothesis strategies and helpers for the reference, backend and bad-input tests.

Kept tiny on purpose (hidden 8-16, 1-2 heads, head_dim 2-8, mostly T <= 20) so every example is
cheap; the shared ``gdn_equiv.strategies`` package covers the wide space. Everything shrinks
towards the smallest layer, fp32, no bias, short sequences.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from hypothesis import strategies as st

from gdn_equiv.harness.ground_truth import gated_deltanet_truth
from gdn_equiv.harness.testing import cu_from_lens as cu_from_lens  # re-exported: the tests import both from here
from gdn_equiv.harness.testing import randn as randn
from gdn_equiv.model.example import Example, build_layer
from gdn_equiv.model.families.gated_deltanet import GatedDeltaNet, GDNConfig

try:  # the colleague's per-example counter; a no-op until it lands
    from gdn_equiv.harness.testing import count_example as _count_example
except ImportError:  # pragma: no cover - depends on the tree's state

    def _count_example(*args: Any, **kwargs: Any) -> None:
        return None


def count_example() -> None:
    _count_example()


@st.composite
def configs(
    draw: st.DrawFn,
    *,
    use_short_conv: bool | None = None,
    use_gate: bool | None = None,
    allow_neg_eigval: bool | None = None,
    gva: bool | None = None,
    mode: str | None = None,
) -> GDNConfig:
    """A tiny, valid layer config; ``None`` arguments are drawn. Shrinks to 1 head of dim 2, fp32 defaults."""
    num_heads = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2])) if gva is None else (2 if gva else 1)
    head_dim = draw(st.sampled_from([2, 4, 8]))
    expand_v = draw(st.sampled_from([1, 2, 0.5]))
    return GDNConfig(
        hidden_size=draw(st.sampled_from([8, 12, 16])),
        expand_v=expand_v,
        head_dim=head_dim,
        num_heads=num_heads,
        num_v_heads=None if group == 1 and draw(st.booleans()) else num_heads * group,
        use_gate=draw(st.booleans()) if use_gate is None else use_gate,
        use_short_conv=draw(st.booleans()) if use_short_conv is None else use_short_conv,
        allow_neg_eigval=draw(st.booleans()) if allow_neg_eigval is None else allow_neg_eigval,
        conv_size=draw(st.integers(2, 4)),
        conv_bias=draw(st.booleans()),
        output_gate_activation=draw(st.sampled_from(["swish", "silu", "sigmoid"])),
        mode=draw(st.sampled_from(["chunk", "recurrent"])) if mode is None else mode,
    )


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**16)


def seq_lens(*, min_n: int = 1, max_n: int = 4, max_len: int = 12) -> st.SearchStrategy[list[int]]:
    """Per-sequence lengths, empty and length-1 sequences included; at least one token in total."""
    return st.lists(st.integers(0, max_len), min_size=min_n, max_size=max_n).filter(lambda xs: sum(xs) > 0)


def make_layer(config: GDNConfig, seed: int, dtype: torch.dtype = torch.float32, cls: type = GatedDeltaNet) -> Any:
    """The layer for ``config`` with tame random parameters (uniform [-1, 1], as the suite's examples)."""
    name = str(dtype).removeprefix("torch.")
    return build_layer(Example(config=config, dtype=name, seed=seed), cls=cls)


#: SPEC §2 written out token by token (moved to :mod:`gdn_equiv.harness.ground_truth`, which the gate uses too)
spec_layer = gated_deltanet_truth


def load_script(name: str) -> ModuleType:
    """``tools/<name>.py`` imported as a module (the tools are not a package), registered under
    ``gdn_script_<name>`` in ``sys.modules`` (dataclasses look their module up while a class is made)."""
    path = Path(__file__).resolve().parents[1] / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"gdn_script_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def gate_verdict(run: Any, limit: int = 400) -> str:
    """One example of a gate test, ``run()`` (its Hypothesis body on a drawn ``data``), as the declaration
    meta-tests judge it: ``pass``; ``n/a: <reason>`` (its skip, or every example it counted not applicable); or
    ``FAIL: <message>`` (the gate is red on it). The gate's own ``assume()`` rejecting the draw propagates: the
    gate discards such an example, so the meta-test's example is discarded too."""
    from _pytest.outcomes import Skipped
    from hypothesis.errors import UnsatisfiedAssumption

    from gdn_equiv.harness import ledger

    tally = ledger.Tally()
    ledger._RUNNING.append(tally)
    try:
        run()
    except Skipped as exc:
        return f"n/a: {exc.msg}"
    except UnsatisfiedAssumption:
        raise
    except Exception as exc:
        return f"FAIL: {type(exc).__name__}: {str(exc)[:limit]}"
    finally:
        ledger._RUNNING.remove(tally)
    if tally.drawn and tally.not_applicable == tally.drawn:
        return f"n/a: {tally.last}"
    return "pass"
