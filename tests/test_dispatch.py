"""The backend registry and dispatcher (``gdn_equiv/model/backends/__init__.py``): registration, loading what a
plug-in names, the step fallback for a backend without a step kernel, and the checks of what a backend
returns. Each test here was written for a mutant that survived both the installed gate and the preset's
tree tests (docs/mutation.md, "dispatch"): a gate run names one correct backend, so none of this is
reached there."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gdn_equiv.errors import BackendUnavailable, InvalidArgument
from gdn_equiv.harness.testing import randn
from gdn_equiv.model.backends import (
    Backend,
    Capabilities,
    as_backend,
    available_backends,
    causal_conv1d,
    causal_conv1d_update,
    count_launches,
    get_backend,
    register_backend,
    registered,
    supported_widths,
)
from gdn_equiv.model.backends import torch_backend as tb

TORCH = get_backend("torch")


def _named(name: str, **changes: object) -> Backend:
    return dataclasses.replace(TORCH, name=name, **changes)


def test_a_taken_name_needs_replace_and_registered_puts_the_registry_back():
    first, second = _named("dispatch-test-a"), _named("dispatch-test-a")
    with registered(first):
        assert get_backend("dispatch-test-a") is first
        with pytest.raises(InvalidArgument, match="'dispatch-test-a' is already registered"):
            register_backend(second)
        assert register_backend(first) is first  # the same object again is fine
        with registered(second):
            assert get_backend("dispatch-test-a") is second
        assert get_backend("dispatch-test-a") is first  # restored
    with pytest.raises(InvalidArgument, match=r"unknown conv backend 'dispatch-test-a'; known backends: .*torch"):
        get_backend("dispatch-test-a")  # removed: it was not registered before


def test_get_backend_takes_a_backend_and_refuses_what_is_not_a_name():
    assert get_backend(TORCH) is TORCH
    with pytest.raises(InvalidArgument, match="backend must be a name, got 123"):
        get_backend(123)  # type: ignore[arg-type]


class _Kernel:
    """A plug-in object: forward, update, unavailable, a state convention."""

    forward = staticmethod(tb.forward)
    update = staticmethod(tb.update)
    unused_state_slots = 1

    @staticmethod
    def unavailable() -> str | None:
        return "needs a unicorn"


class _Bare:
    forward = staticmethod(tb.forward)


def test_as_backend_reads_what_a_plug_in_object_declares():
    renamed = as_backend(TORCH, "torch-under-another-name")
    assert renamed.name == "torch-under-another-name" and renamed.forward is TORCH.forward
    assert as_backend(TORCH, "torch") is TORCH
    declared = as_backend(_Kernel(), "declared")
    assert declared.unavailable() == "needs a unicorn" and declared.unused_state_slots == 1
    assert declared.update is _Kernel.update
    bare = as_backend(_Bare(), "bare")
    assert bare.unavailable() is None and bare.unused_state_slots == 0 and bare.update is None
    assert as_backend(tb.forward, "function").forward is tb.forward
    with pytest.raises(InvalidArgument, match="'a-class' is a type"):
        as_backend(_Kernel, "a-class")  # the class, not an instance


def test_supported_widths_is_the_intersection():
    with registered(
        _named("w-2-4", capabilities=Capabilities(widths=(2, 4))),
        _named("w-3-8", capabilities=Capabilities(widths=(3, 8))),
    ):
        assert supported_widths(["w-2-4", "w-3-8", "torch"]) == (3, 4)
        assert supported_widths(["torch"]) == (1, 64)


def test_a_backend_without_a_step_kernel_steps_through_its_sequence_kernel_bitwise():
    x, state, weight, bias = randn(0, 3, 5), randn(1, 3, 5, 4), randn(2, 5, 4), randn(3, 5)
    expected = tb.update(x, state, weight, bias, "silu")
    with registered(_named("no-step", update=None)), count_launches() as launches:
        y, new_state = causal_conv1d_update(x, state, weight, bias, "silu", backend="no-step")
    torch.testing.assert_close(y, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(new_state, expected[1], rtol=0, atol=0)
    assert launches.total("update", "no-step") == 1 and launches.total("forward") == 0
    assert "('no-step', 'update'): 1" in repr(launches)


def _forward_returning(make):
    def forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
        y, final = tb.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
        return make(y, final)

    return forward


def _update_returning(make):
    def update(x, state, weight, bias, activation):
        return make(x, state, *tb.update(x, state, weight, bias, activation))

    return update


def _in_place(x, state, y, new_state):
    state.add_(0)  # a write, even of the same values, breaks SPEC §3's "leaves state as it was"
    return y, new_state


@pytest.mark.parametrize(
    ("forward", "update", "kwargs", "message"),
    [
        (_forward_returning(lambda y, f: (y[:, :-1], f)), None, {}, r"forward returned y \(1, 5, 3\)"),
        (_forward_returning(lambda y, f: (y, torch.zeros(1, 3, 4))), None, {}, "with output_final_state=False"),
        (
            _forward_returning(lambda y, f: (y, None if f is None else f.to(torch.float16))),
            None,
            {"output_final_state": True, "initial_state": randn(4, 1, 3, 4, dtype=torch.float64)},
            r"final_state \(1, 3, 4\) torch.float16 .*in initial_state's dtype",
        ),
        (None, _update_returning(lambda x, s, y, n: (y, n[..., :-1])), {}, r"update returned new_state \(2, 3, 3\)"),
        (None, _update_returning(_in_place), {}, "update modified the state it was given in place"),
        (_forward_returning(lambda y, f: (y.tolist(), f)), None, {}, "forward returned y a list, expected"),
        (None, _update_returning(lambda x, s, y, n: (y[:, :-1], n)), {}, r"update returned y \(2, 2\) torch"),
    ],
    ids=["y-shape", "final-state-unasked", "final-state-dtype", "update-state-shape", "update-in-place", "y-a-list",
         "update-y-shape"],
)  # fmt: skip
def test_what_a_backend_returns_is_checked(forward, update, kwargs, message):
    broken = _named("broken-returns", forward=forward or tb.forward, update=update or tb.update)
    with registered(broken), pytest.raises(InvalidArgument, match=message):
        if update is None:
            causal_conv1d(randn(0, 1, 6, 3, dtype=torch.float64), randn(1, 3, 4, dtype=torch.float64),
                          backend="broken-returns", **kwargs)  # fmt: skip
        else:
            causal_conv1d_update(randn(0, 2, 3), randn(1, 2, 3, 4), randn(2, 3, 4), None, "silu",
                                 backend="broken-returns")  # fmt: skip


# ---- the whole set against the tree (2026-12-04): what was left -----------------------------------


def test_only_a_backend_object_is_registered():
    with pytest.raises(
        InvalidArgument, match=r"register_backend needs a gdn_equiv\.model\.backends\.Backend, got function"
    ):
        register_backend(tb.forward)  # type: ignore[arg-type]


def test_an_unavailable_backend_is_listed_nowhere_it_could_run_and_refused_naming_why():
    unicorn = as_backend(_Kernel(), "dispatch-unicorn")
    with registered(unicorn):
        assert "torch" in available_backends() and "dispatch-unicorn" not in available_backends()
        with pytest.raises(BackendUnavailable, match="'dispatch-unicorn' cannot run here: needs a unicorn"):
            causal_conv1d(randn(0, 1, 4, 3), randn(1, 3, 4), backend="dispatch-unicorn")


def test_an_activation_the_backend_does_not_run_is_refused_not_passed_on():
    """relu is registered for torch and triton only: a plug-in that does not declare it must not get it
    (fla's conv treats an activation it does not know as none, silently)."""
    x, state, weight = randn(0, 1, 4, 3), randn(1, 1, 3, 4), randn(2, 3, 4)
    with registered(_named("dispatch-no-relu")):
        with pytest.raises(InvalidArgument, match="'dispatch-no-relu' does not run activation 'relu'; it runs"):
            causal_conv1d(x, weight, activation="relu", backend="dispatch-no-relu")
        with pytest.raises(InvalidArgument, match="'dispatch-no-relu' does not run activation 'relu'"):
            causal_conv1d_update(x[:, 0], state, weight, None, "relu", backend="dispatch-no-relu")
    causal_conv1d(x, weight, activation="relu", backend="torch")  # the torch backend runs it


def test_the_triton_interpreter_without_numpy_is_unavailable_naming_numpy(monkeypatch):
    """Triton's interpreter imports numpy, which triton does not require: without it every launch raised
    ModuleNotFoundError, and the G5 necessity search (torch vs triton) read 300 raising states as "no
    counterexample" (a tox env with only the triton extra). Now the backend says why it cannot run."""
    import importlib.util

    from gdn_equiv.model.backends import triton_backend

    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    real = importlib.util.find_spec
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert triton_backend.unavailable() is None  # numpy is here (the triton extra names it)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else real(name, *a))
    reason = triton_backend.unavailable()
    assert reason is not None and "numpy" in reason and "TRITON_INTERPRET=1" in reason, reason
    assert "triton" not in available_backends()
