"""The pytest gate's verdicts (SPEC §10): a run never passes by mistake.

- ``--gdn-target fla`` really runs the layer properties on fla's layers. (The configure-time promises,
  names checked and status 3 for what cannot run here, are the gate's own tests:
  ``tests/test_plugin_promises.py``.)
- A property test none of whose examples met its premise fails "not exercised".
- P5: only the same ``InvalidArgument`` on both paths is agreement; a crash on both is a finding.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import ledger
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.registry import Draw
from gdn_equiv.model.backends import as_backend, get_backend, registered
from gdn_equiv.model.backends.fla_backend import AUTOTUNE_ENV
from gdn_equiv.model.config import ConvSpec
from gdn_equiv.model.example import Example
from gdn_equiv.model.families.gated_deltanet import GDNConfig
from gdn_equiv.plugin import options as plugin_options
from gdn_equiv.strategies import examples
from gdn_equiv.suite import test_properties as suite
from gdn_equiv.targets import get_target

ROOT = Path(__file__).resolve().parents[1]
TORCH = get_backend("torch")

# ---- --gdn-target fla runs the layer properties on fla's layers (CPU: Triton's interpreter) --------

FLA_REASON = get_target("fla").unavailable()
needs_fla = pytest.mark.skipif(FLA_REASON is not None, reason=f"fla target unavailable: {FLA_REASON}")


def _gdn_example(**conv: ConvSpec) -> Example:
    """The smallest Gated DeltaNet call (fp32, B=1, T=2), the layer's convs as given (no bias by default)."""
    config = GDNConfig(hidden_size=8, head_dim=2, num_heads=1, conv_size=2, conv_bias=False, **conv)  # type: ignore[arg-type]
    return Example(config=config, family="gated_deltanet", dtype="float32", batch=1, seq_len=2, seed=3, grad=True)


@pytest.fixture
def fla_here(monkeypatch: pytest.MonkeyPatch):
    """fla's target with our core, this process ready for fla's kernels as the plugin makes it for
    ``--gdn-target fla`` (on a CPU: Triton's interpreter, each autotuned kernel pinned to one config)."""
    if not torch.cuda.is_available():
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("fla's Triton kernels need a GPU or TRITON_INTERPRET=1")
        monkeypatch.setenv(AUTOTUNE_ENV, "first")
        plugin_options.fla_interpreter_ready()
    return get_target("fla", core="reference")


def _suite_test(monkeypatch: pytest.MonkeyPatch, name: str, drawn: st.SearchStrategy, **fixtures):
    """The suite's test ``name`` run here on the examples of ``drawn`` (its strategy replaced: the plant)."""
    monkeypatch.setattr(
        suite, "premise", lambda *a, **k: drawn.map(lambda d: Draw(*d) if isinstance(d, tuple) else Draw(d, True))
    )
    if name in ("test_fused_forward_is_bitwise_equal", "test_fused_gradients_match"):
        fixtures.setdefault("fusing_families", ("gated_deltanet",))
    else:
        fixtures.setdefault("gdn_families", ("gated_deltanet",))
    fixtures.setdefault("allow_missed_fusion", False)
    return getattr(suite, name)(gdn_backend="torch", device="cpu", **fixtures)


@needs_fla
@pytest.mark.slow
def test_the_gates_layer_properties_run_on_flas_layers(fla_here, monkeypatch) -> None:
    """P2-P5 of the gate with ``--gdn-target fla``: on a call fla fuses correctly (P2, P3, P4) and one it
    refuses (P5), each passes on fla's layer; and P3 fails where fla's own guard fuses what its fused path
    gets wrong: one conv with a bias while the layer's ``conv_bias`` is off (fla 0.6.0 drops that bias,
    PR #977 concatenates the missing ones and raises), which our target's guard refuses (P3 not applicable
    there: the same test then is "not exercised")."""
    clean = _gdn_example()
    varlen = dataclasses.replace(clean, varlen="cu_seqlens", seq_lens=(1, 1))
    on_fla, ours = {"layer_target": fla_here}, {"layer_target": "gdn_equiv"}
    _suite_test(monkeypatch, "test_auto_launches_one_conv_iff_guard_fuses", st.just(clean), **on_fla)
    _suite_test(monkeypatch, "test_fused_forward_is_bitwise_equal", st.just((clean, True)), **on_fla)
    _suite_test(monkeypatch, "test_fused_gradients_match", st.just((clean, True)), **on_fla)
    _suite_test(monkeypatch, "test_fallback_is_the_reference", st.just(varlen), **on_fla)

    bias_on_q = _gdn_example(q_conv=ConvSpec(bias=True))
    with pytest.raises(Mismatch, match="fused"):
        _suite_test(monkeypatch, "test_fused_forward_is_bitwise_equal", st.just((bias_on_q, False)), **on_fla)
    with pytest.raises(AssertionError, match=r"not exercised: none of the \d+ examples met the premise"):
        _suite_test(monkeypatch, "test_fused_forward_is_bitwise_equal", st.just((bias_on_q, False)), **ours)


@needs_fla
def test_p3_p4_draw_only_families_the_fla_version_fuses_and_are_na_for_the_others() -> None:
    """fla 0.6.0 fuses Gated DeltaNet only: P3/P4 on fla draw from the asked families it fuses, and are
    "n/a" with the reason for a list of families it fuses none of (rather than "not exercised")."""
    from gdn_equiv.targets.fla_target import version_row

    row, fla = version_row(), get_target("fla", core="reference")
    asked = ("gated_deltanet", "gla")
    assert P.families_with_fusion(fla, asked) == (tuple(f for f in asked if row.fuses(f)), None)
    assert P.families_with_fusion("gdn_equiv", ("gla",)) == (("gla",), None)
    if not row.fuses("gla"):
        assert P.families_with_fusion(fla, ("gla",)) == ((), f"fla {row.version} has no fused prologue for gla")


# ---- "not exercised" ------------------------------------------------------------------------------


def test_a_property_test_whose_every_example_is_inapplicable_fails_not_exercised(monkeypatch) -> None:
    """P3 drawn only from states the guard refuses (the plant: the suite's strategy replaced) compares
    nothing: it used to pass; it fails, saying how many examples it drew and why the last did not apply."""
    refused = examples(fusable=False, reasons=("G3",), max_seq_len=2).map(lambda e: Draw(e, False))
    ours = {
        "gdn_backend": "torch",
        "fusing_families": ("gated_deltanet",),
        "device": "cpu",
        "layer_target": "gdn_equiv",
        "allow_missed_fusion": False,
    }
    monkeypatch.setattr(suite, "premise", lambda *a, **k: refused)
    not_exercised = r"not exercised: none of the \d+ examples met the premise; the last reason: guard does not fuse: G3"
    with pytest.raises(AssertionError, match=not_exercised):
        suite.test_fused_forward_is_bitwise_equal(**ours)
    monkeypatch.undo()  # the suite's own strategy: exercised, and it passes
    suite.test_fused_forward_is_bitwise_equal(**ours)


# ---- P5: no crash counts as agreement --------------------------------------------------------------


def _refusing(error: type[Exception], numbered: bool = False):
    """A kernel that raises ``error`` on every packed-sequence (``cu_seqlens``) call, the message numbered
    per call when ``numbered`` (two paths then refuse differently)."""
    calls = []

    def forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
        if cu_seqlens is not None:
            calls.append(1)
            raise error(f"packed sequences are not supported (call {len(calls)})" if numbered else "no packing")
        return TORCH.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)

    return forward


def _packed(backend: str) -> Example:
    """A packed call (``cu_seqlens``: the guard refuses it) on ``backend``."""
    config = GDNConfig(hidden_size=8, head_dim=2, num_heads=1, conv_size=2, conv_bias=False, conv_backend=backend)
    return Example(config=config, family="gated_deltanet", dtype="float32", batch=1, seq_len=3, seed=1,
                   varlen="cu_seqlens", seq_lens=(1, 2), grad=True)  # fmt: skip


@pytest.mark.parametrize(
    ("error", "numbered", "verdict"),
    [
        (RuntimeError, False, "auto path raised RuntimeError: no packing\nreference path raised RuntimeError"),
        (InvalidArgument, True, "auto path raised InvalidArgument: packed sequences are not supported \\(call 1\\)"),
        (InvalidArgument, False, None),
    ],
    ids=["crash-on-both", "different-refusals", "same-refusal"],
)
def test_fallback_agrees_on_a_refusal_only_when_both_paths_raise_the_same_invalid_argument(error, numbered, verdict):
    """A kernel that crashes on every packed call made P5 pass ("both paths refuse alike", 3 x pass under
    ``gdn-equiv check``): a crash on both paths is a finding, and so are two different refusals; the same
    ``InvalidArgument`` on both is the input refused alike, which compares nothing: not applicable (a failure
    where the example was built to meet P5, as the gate's and check's are)."""
    kernel = as_backend(_refusing(error, numbered), "gate-refuses-packed")
    with registered(kernel):
        example = _packed("gate-refuses-packed")
        if verdict is None:  # agreement, and nothing compared: not applicable, never a pass (issue #49)
            with pytest.raises(P.NotApplicable, match="refuse the input alike, nothing compared"):
                P.check_fallback_exact(example)
            return
        with pytest.raises(Mismatch, match=verdict):
            P.check_fallback_exact(example)


def test_an_example_counts_once_it_compared_something() -> None:
    """``count_example`` (the run's "counted by properties") and the coverage labels follow the premise: an
    example that met it counts, passing or failing; one that did not counts for nothing."""
    from gdn_equiv.harness.testing import counts

    example = Example(GDNConfig(hidden_size=8, head_dim=2, num_heads=1), dtype="float32", seq_len=2)

    def not_applicable(example, **_):
        raise P.NotApplicable("the premise does not hold")

    def failing(example, **_):
        raise AssertionError("y differs")

    seen: list[int] = []

    @settings(max_examples=1, database=None, derandomize=True)
    @given(st.none())
    def inside_a_test(_: None) -> None:  # note() and event() need a running Hypothesis test
        before = counts()["properties"]
        assert suite.run_example(not_applicable, example, "cpu", may_not_apply=True) is ledger.MISSED
        seen.append(counts()["properties"] - before)
        assert suite.run_example(lambda example, **_: "compared", example, "cpu") == "compared"
        with pytest.raises(AssertionError, match="y differs"):
            suite.run_example(failing, example, "cpu")
        seen.append(counts()["properties"] - before)

    inside_a_test()
    assert seen == [0, 2]
