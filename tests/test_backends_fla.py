"""fla's own conv kernels as backends (``fla-triton``, ``fla-cuda``, ``fla-gluon``), and the state
convention a backend declares (``Backend.unused_state_slots``), which fla's needs.

Without a GPU fla's Triton conv runs in the interpreter (``TRITON_INTERPRET=1``, set here before
anything compiles a kernel): shapes stay tiny. The state-convention teeth use torch-based planted
backends, fast anywhere.
"""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import find

from gdn_equiv.errors import BackendUnavailable, InvalidArgument
from gdn_equiv.harness import conformance as C
from gdn_equiv.harness import ground_truth as G
from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.testing import first_hit
from gdn_equiv.model import fla_versions
from gdn_equiv.model.backends import (
    Backend,
    causal_conv1d,
    causal_conv1d_update,
    get_backend,
    register_backend,
    registered,
)
from gdn_equiv.model.backends import fla_backend as fb
from gdn_equiv.model.backends import torch_backend as tb
from gdn_equiv.strategies import ConvCall
from gdn_equiv.strategies.conformance import conformance_calls
from gdn_equiv.suite import test_conformance as conformance
from gdn_equiv.suite import test_ground_truth as ground_truth

SEARCH = first_hit()
FLA_TRITON_REASON = fb.TRITON.unavailable()
needs_fla_triton = pytest.mark.skipif(FLA_TRITON_REASON is not None, reason=f"fla-triton: {FLA_TRITON_REASON}")


# ---- registration, versions, availability -----------------------------------------------------------


def test_fla_backends_are_registered_by_name_and_declare_fla_state_convention():
    for name in ("fla-triton", "fla-cuda", "fla-gluon"):
        backend = get_backend(name)
        assert backend.name == name and backend.unused_state_slots == 1
        assert backend.state_slots(4) == slice(1, 4)
    caps = get_backend("fla-cuda").capabilities
    assert caps.widths == (2, 4) and not caps.varlen_initial_state and caps.channel_multiple == 8


def test_each_fla_version_row_names_its_conv_and_the_state_convention_the_backends_declare():
    """The backends read their modules from the fla version table's rows; every row keeps the state
    convention the backends declare when they register (before any fla is imported)."""
    assert fb.conv_row("0.6.0").conv == "fla.modules.causal_conv1d"
    assert fb.conv_row("0.5.2").conv == fb.conv_row("0.5.2+pr977").conv == "fla.modules.conv"
    for row in fla_versions.VERSIONS.values():
        assert row.conv.unused_state_slots == fb.TRITON.unused_state_slots, row.version


def test_an_unknown_fla_version_is_refused_naming_it_and_the_known_ones(monkeypatch):
    with pytest.raises(
        InvalidArgument, match=r"fla 0\.7\.1 is not a version .* known versions: 0\.6\.0, 0\.5\.2\+pr977"
    ):
        fb.conv_row("0.7.1")
    monkeypatch.setattr(fla_versions, "fla_version", lambda: "0.7.1")
    monkeypatch.setattr(fb.importlib.util, "find_spec", lambda name: object())
    for backend in (fb.TRITON, fb.CUDA, fb.GLUON):
        reason = backend.unavailable()
        assert reason is not None and "fla 0.7.1 is not a version" in reason, reason
    x, w = torch.zeros(1, 2, 3), torch.zeros(3, 2)
    with pytest.raises(BackendUnavailable, match=r"fla 0\.7\.1"):
        causal_conv1d(x, w, backend="fla-triton")


def test_without_fla_each_backend_says_so(monkeypatch):
    real = fb.importlib.util.find_spec
    monkeypatch.setattr(fb.importlib.util, "find_spec", lambda name: None if name == "fla" else real(name))
    for backend in (fb.TRITON, fb.CUDA, fb.GLUON):
        assert backend.unavailable() == "flash-linear-attention is not installed (pip install gdn-equiv[fla])"


def test_gpu_only_fla_backends_say_why_they_cannot_run_here():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert "needs" in (fb.GLUON.unavailable() or "") or "no gluon" in (fb.GLUON.unavailable() or "")
    assert fb.CUDA.unavailable() is not None


# ---- fla-triton runs (the interpreter on a CPU) ----------------------------------------------------


@needs_fla_triton
def test_fla_triton_matches_torch_on_one_call_of_each_kind():
    """Forward with an initial state, varlen with per-sequence states (an empty sequence included),
    gradients of every input (d initial_state goes through fla's kernel with int32 masks in the
    interpreter), the step: all within §6 of torch."""
    forward = ConvCall(B=2, T=5, D=20, W=4, bias=True, activation="silu", initial_state=True, seed=3)
    varlen = ConvCall(B=1, T=6, D=9, W=3, bias=True, activation=None, initial_state=True, seq_lens=(2, 0, 4), seed=4)
    for call in (forward, varlen):
        C.check_forward(call, get_backend("fla-triton"), "cpu")
    C.check_gradients(forward, get_backend("fla-triton"), "cpu")
    C.check_update(dataclasses.replace(forward, T=1), get_backend("fla-triton"), "cpu")


@needs_fla_triton
def test_fla_triton_kernels_are_pinned_to_one_config_under_the_interpreter():
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("on a GPU fla autotunes as usual")
    causal_conv1d(torch.zeros(1, 2, 3), torch.zeros(3, 2), backend="fla-triton")
    module = fb._module(fb.conv_row().kernels)
    pinned = fb.pin_autotuned(module)
    assert {"causal_conv1d_fwd_kernel", "causal_conv1d_bwd_kernel", "causal_conv1d_update_kernel"} <= set(pinned)
    assert all(len(fb._autotuner(getattr(module, name)).configs) == 1 for name in pinned)


@needs_fla_triton
def test_autotune_mode_is_checked_before_a_call(monkeypatch):
    """``GDN_EQUIV_FLA_AUTOTUNE`` (``first`` pins fla's kernels on a GPU, for a bounded run) is read per
    call and a value other than ``full``/``first`` is refused naming it, not silently taken as ``full``."""
    monkeypatch.setenv(fb.AUTOTUNE_ENV, "fist")
    with pytest.raises(InvalidArgument, match="GDN_EQUIV_FLA_AUTOTUNE must be 'full' or 'first', got 'fist'"):
        causal_conv1d(torch.zeros(1, 2, 3), torch.zeros(3, 2), backend="fla-triton")
    monkeypatch.setenv(fb.AUTOTUNE_ENV, "first")
    causal_conv1d(torch.zeros(1, 2, 3), torch.zeros(3, 2), backend="fla-triton")
    module = fb._module(fb.conv_row().kernels)
    assert all(len(fb._autotuner(getattr(module, n)).configs) == 1 for n in fb.pin_autotuned(module))


_PIN_PROBE = """
import os, sys
from gdn_equiv.model.backends import fla_backend as fb
from gdn_equiv.targets import fla_target
for family in ("gated_deltanet", "gla"):
    fla_target.fla_class_of(family)

def left():
    return sum(1 for m, mod in list(sys.modules.items()) if m.startswith("fla.")
               for k in vars(mod).values() if (t := fb._autotuner(k)) is not None and len(t.configs) > 1)

for mode in ("full", "first"):
    os.environ[fb.AUTOTUNE_ENV] = mode
    pinned = fb.pin_loaded_fla()
    print(mode, len(pinned), left(), any(".ops." in p for p in pinned))
"""


@pytest.mark.slow
@pytest.mark.skipif(fb._fla_reason()[1] is not None, reason=f"fla: {fb._fla_reason()[1]}")
def test_autotune_first_pins_every_loaded_fla_kernel_and_full_none():
    """``GDN_EQUIV_FLA_AUTOTUNE=first`` reaches fla's layer cores (the fla target's runs on a GPU spent
    their budget autotuning them), not only the conv; ``full`` leaves fla's tuning alone. In a child
    process (pinning is process-wide): ``full`` first, then ``first``."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PIN_PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    full, first = (line.split() for line in done.stdout.splitlines())
    assert full[1] == "0" and int(full[2]) > 0, full  # nothing pinned, tuners keep their configs
    assert int(first[1]) > 0 and first[2] == "0" and first[3] == "True", first  # the cores too


@needs_fla_triton
def test_fla_drops_the_gradient_of_a_final_state_slot_0_which_the_declaration_covers():
    """The fact behind fla's declaration: for ``T >= W`` fla's dx misses ``d final[..., 0]`` (token ``T-W``);
    declared as all-slots it fails the gradient property, as declared it passes that same call."""
    call = ConvCall(B=1, T=4, D=3, W=2, seed=5)
    honest = get_backend("fla-triton")
    with registered(dataclasses.replace(honest, name="fla-triton-all-slots", unused_state_slots=0)):
        with pytest.raises(Mismatch, match=r"grad\.x") as caught:
            C.check_gradients(call, get_backend("fla-triton-all-slots"), "cpu")
        assert "index (0, 2, " in str(caught.value)  # token T - W = 2
    C.check_gradients(call, honest, "cpu")
    C.check_continuation(call, 2, honest, "cpu")


@needs_fla_triton
def test_fla_triton_update_leaves_the_state_alone_and_continues_a_prefill():
    """fla's step kernel shifts its cache in place: the adapter's copy keeps the caller's state."""
    call = ConvCall(B=2, T=5, D=6, W=4, bias=True, activation="silu", initial_state=True, seed=6)
    t = call.tensors()
    state = t["initial_state"]
    before = state.clone()
    with torch.no_grad():
        causal_conv1d_update(t["x"][:, 0], state, t["weight"], t["bias"], "silu", backend="fla-triton")
    torch.testing.assert_close(state, before, rtol=0, atol=0)
    C.check_decode_continuation(call, 2, get_backend("fla-triton"), "cpu")


# ---- the gluon scope: an environment variable set for forward and backward alike --------------------


class _RecordsEnv(torch.autograd.Function):
    seen: ClassVar[list[tuple[str, str | None]]] = []

    @staticmethod
    def forward(ctx, x):
        _RecordsEnv.seen.append(("forward", os.environ.get("GDN_TEST_SCOPE")))
        return x * 2

    @staticmethod
    def backward(ctx, g):
        _RecordsEnv.seen.append(("backward", os.environ.get("GDN_TEST_SCOPE")))
        return g * 2


def test_scoped_sets_the_variable_for_forward_and_backward_only():
    _RecordsEnv.seen = []
    x = torch.randn(3, requires_grad=True)
    h = torch.randn(3, requires_grad=True)

    def fn(x, w, b, h0):
        return _RecordsEnv.apply(x) * w, h0 * 3

    y, final = fb._scoped(("GDN_TEST_SCOPE", "1"), fn, x, torch.full((3,), 5.0), None, h)
    assert os.environ.get("GDN_TEST_SCOPE") is None
    gx, gh = torch.autograd.grad((y, final), [x, h], (torch.ones(3), torch.ones(3)))
    assert os.environ.get("GDN_TEST_SCOPE") is None
    assert _RecordsEnv.seen == [("forward", "1"), ("backward", "1")]
    torch.testing.assert_close(gx, torch.full((3,), 10.0))
    torch.testing.assert_close(gh, torch.full((3,), 3.0))


# ---- a backend's state convention: declared slots are honoured, and the declaration is checked ------


class _DropSlot0Grad(torch.autograd.Function):
    """Identity on a final state whose backward drops the gradient of slot 0 (what fla does)."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        g[..., 0] = 0
        return g


def _drops_slot0_grad(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return y, (None if final is None else _DropSlot0Grad.apply(final))


def _spoil_slot(state: torch.Tensor | None, slot: int) -> torch.Tensor | None:
    """Slot ``slot`` of a state replaced by a large constant (out of place, differentiably)."""
    if state is None or state.shape[-1] <= slot:
        return state
    mask = torch.zeros(state.shape[-1], dtype=torch.bool, device=state.device)
    mask[slot] = True
    return torch.where(mask, torch.full_like(state, 100.0), state)


def _spoils_slot1(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return y, _spoil_slot(final, 1)


def _update_spoils_slot1(x, state, weight, bias, activation):
    y, new_state = tb.update(x, state, weight, bias, activation)
    return y, _spoil_slot(new_state, 1)


def _spoils_slot0(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
    y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    return y, _spoil_slot(final, 0)


CONVENTIONS = {
    # drops slot 0's gradient, claims all W slots: dishonest
    "state-slot0-all": Backend("state-slot0-all", forward=_drops_slot0_grad),
    # the same kernel, declaring slot 0 unused: honest (fla's case)
    "state-slot0-declared": Backend("state-slot0-declared", forward=_drops_slot0_grad, unused_state_slots=1),
    # garbage in slot 0, declared unused: honest, slot 0 is never read back
    "state-garbage0-declared": Backend("state-garbage0-declared", forward=_spoils_slot0, unused_state_slots=1),
    # garbage in slot 1, declared unused, but a width-W conv reads slots 1..W-1 back: dishonest
    "state-slot1-declared": Backend(
        "state-slot1-declared", forward=_spoils_slot1, update=_update_spoils_slot1, unused_state_slots=2
    ),
}


@pytest.fixture(scope="module")
def conventions():
    with registered(*CONVENTIONS.values()):
        yield


def _caught(check, backend: str, *, split: int | None = None, **options) -> ConvCall:
    def fails(call: ConvCall) -> bool:
        if split is not None and call.T < 2:
            return False
        try:
            if split is None:
                check(call, get_backend(backend), "cpu")
            else:
                check(call, min(split, call.T - 1), get_backend(backend), "cpu")
        except Mismatch:
            return True
        return False

    call = find(conformance_calls(backend, **options), fails, settings=SEARCH)
    print(f"{backend}: caught by {check.__name__}: {call}")
    return call


def test_undeclared_dropped_slot_gradient_is_caught(conventions):
    call = _caught(C.check_gradients, "state-slot0-all")
    assert call.T >= call.W  # only then does final slot 0 hold an input of this call


@pytest.mark.parametrize("name", ["state-slot0-declared", "state-garbage0-declared"])
def test_a_declared_unused_slot_is_not_a_false_alarm(conventions, name):
    """Every conformance property passes a kernel whose only departure is in the slot it declares unused."""
    for prop in (
        conformance.test_backend_forward_matches_torch,
        conformance.test_backend_varlen_matches_torch,
        conformance.test_backend_gradients_match_torch,
        conformance.test_backend_final_state_continues_the_sequence,
        conformance.test_backend_decode_continues_the_prefill,
        ground_truth.test_backend_forward_matches_fp64_ground_truth,
        ground_truth.test_backend_varlen_matches_fp64_ground_truth,
        ground_truth.test_backend_gradients_match_fp64_ground_truth,
        ground_truth.test_backend_update_matches_fp64_ground_truth,
    ):
        prop(gdn_backend=name, device="cpu")


def test_the_ground_truth_catches_an_undeclared_dropped_slot_gradient(conventions):
    """The fp64 ground truth honours the declaration (fla-triton on the H200 failed it at W=1, T=1, where
    slot 0 is the only slot) and still catches the kernel that drops slot 0 without declaring it."""
    call = _caught(G.check_gradients, "state-slot0-all")
    assert call.T >= call.W


def test_a_needed_slot_declared_unused_is_caught_by_state_passing(conventions):
    """Slot 1 spoiled and declared unused: the single-call comparisons skip it, but a final state fed
    back as the next initial state (or to the step kernel) is read from slot 1 on."""
    honest_call = ConvCall(B=1, T=3, D=2, W=3, initial_state=True, seed=1)
    C.check_forward(honest_call, get_backend("state-slot1-declared"), "cpu")  # the declaration hides it here
    call = _caught(C.check_continuation, "state-slot1-declared", split=1, varlen=False)
    assert call.W >= 2
    call = _caught(C.check_decode_continuation, "state-slot1-declared", split=1, varlen=False)
    assert call.W >= 2


def test_a_negative_declaration_is_refused():
    with pytest.raises(InvalidArgument, match="unused_state_slots must be a non-negative int, got -1"):
        register_backend(Backend("state-negative", forward=tb.forward, unused_state_slots=-1))
