"""The backend registry: name -> :class:`Backend`, with launch counting (SPEC P2).

Every conv the layers run goes through :func:`causal_conv1d` or :func:`causal_conv1d_update`
here, so a test can tell the fused prologue (one launch) from the separate one (three) by
counting, without touching the guard::

    with count_launches() as launches:
        layer(x, prologue="auto")
    assert launches.total("forward") == 1

Backends register themselves under the ``gdn_equiv.backends`` entry-point group; the built-ins
are registered the same way, and :func:`register_backend` adds one at run time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections import Counter
from collections.abc import Iterator, Sequence

import torch

from gdn_equiv._source import entry_point_specs, load_plugin
from gdn_equiv.errors import BackendUnavailable, InvalidArgument
from gdn_equiv.model.backends.base import (
    Backend,
    ConvBackend,
    check_cu_seqlens,
    check_forward_args,
    check_update_args,
    compute_dtype,
)
from gdn_equiv.model.backends.capabilities import CAUSAL_CONV1D, Capabilities, joint
from gdn_equiv.model.conv_ops import CORE_ACTIVATIONS, Activation, activation_names, get_activation

__all__ = [
    "BUILTIN_BACKENDS",
    "CAUSAL_CONV1D",
    "Backend",
    "Capabilities",
    "ConvBackend",
    "LaunchCounter",
    "as_backend",
    "available_backends",
    "capabilities",
    "causal_conv1d",
    "causal_conv1d_update",
    "check_cu_seqlens",
    "compute_dtype",
    "count_launches",
    "get_backend",
    "known_backends",
    "register_backend",
    "registered",
    "supported_widths",
]

Tensor = torch.Tensor

#: The conv kernels this project ships (fla's are loaded by name too, but are an upstream's kernels):
#: every guard condition is known to be necessary on them.
BUILTIN_BACKENDS = ("torch", "triton", "cuda")

# Built-ins load lazily so that importing the registry never imports triton, causal_conv1d or fla.
_BUILTIN = {
    "torch": "gdn_equiv.model.backends.torch_backend:BACKEND",
    "triton": "gdn_equiv.model.backends.triton_backend:BACKEND",
    "cuda": "gdn_equiv.model.backends.cuda_backend:BACKEND",
    "fla-triton": "gdn_equiv.model.backends.fla_backend:TRITON",
    "fla-cuda": "gdn_equiv.model.backends.fla_backend:CUDA",
    "fla-gluon": "gdn_equiv.model.backends.fla_backend:GLUON",
}
_REGISTRY: dict[str, Backend] = {}


def _entry_point_specs() -> dict[str, str]:
    return entry_point_specs("gdn_equiv.backends")


def known_backends() -> list[str]:
    """Every name that :func:`get_backend` accepts (it may still be unavailable here)."""
    return sorted(set(_REGISTRY) | set(_BUILTIN) | set(_entry_point_specs()))


def register_backend(backend: Backend, *, replace: bool = False) -> Backend:
    """Add ``backend`` under ``backend.name``; re-registering a name needs ``replace=True``."""
    if not isinstance(backend, Backend):
        raise InvalidArgument(
            f"register_backend needs a gdn_equiv.model.backends.Backend, got {type(backend).__name__}"
        )
    backend.check()
    if backend.name in _REGISTRY and not replace and _REGISTRY[backend.name] is not backend:
        raise InvalidArgument(f"backend {backend.name!r} is already registered; pass replace=True to override it")
    _REGISTRY[backend.name] = backend
    return backend


@contextlib.contextmanager
def registered(*backends: Backend) -> Iterator[tuple[Backend, ...]]:
    """Register ``backends`` (replacing same-named ones) for the ``with`` block, then put the registry
    back as it was: a name that was not registered before is removed, a replaced one restored. For
    planted kernels in tests, so no registration leaks into the rest of the process."""
    previous = {b.name: _REGISTRY.get(b.name) for b in backends}
    for backend in backends:
        register_backend(backend, replace=True)
    try:
        yield backends
    finally:
        for name, old in previous.items():
            if old is None:
                _REGISTRY.pop(name, None)
            else:
                _REGISTRY[name] = old


def get_backend(name: str | Backend) -> Backend:
    """The backend called ``name``; ``module:attr`` loads one from code (see :func:`as_backend`); a
    :class:`Backend` is itself.

    Raises :class:`InvalidArgument` when the name is unknown, the code cannot be imported, or its
    forward/update signature cannot take SPEC §3's arguments.
    """
    if isinstance(name, Backend):
        return name
    if not isinstance(name, str):
        raise InvalidArgument(f"backend must be a name, got {name!r}")
    if name in _REGISTRY:
        return _REGISTRY[name]
    spec = _BUILTIN.get(name) or _entry_point_specs().get(name) or (name if ":" in name else None)
    if spec is None:
        raise InvalidArgument(f"unknown conv backend {name!r}; known backends: {', '.join(known_backends())}")
    try:
        obj = load_plugin(spec, kind="conv backend")
    except InvalidArgument as exc:  # the loader's words; a registered name says which name it loaded for
        raise InvalidArgument(str(exc) if spec == name else f"conv backend {name!r}: {exc}") from exc
    backend = as_backend(obj, name, spec)
    _REGISTRY[name] = backend
    return backend


def as_backend(obj: object, name: str, origin: str = "") -> Backend:
    """A checked :class:`Backend` from what a plug-in names: a Backend, a bare forward function, or an
    object with ``forward`` (and optionally ``update``, ``unavailable``): see :class:`ConvBackend`."""
    where = f" ({origin})" if origin else ""
    if isinstance(obj, Backend):
        backend = obj if obj.name == name else dataclasses.replace(obj, name=name)
    elif not inspect.isroutine(obj) and not inspect.isclass(obj) and callable(getattr(obj, "forward", None)):
        unavailable = getattr(obj, "unavailable", None)
        backend = Backend(
            name=name,
            forward=obj.forward,  # type: ignore[attr-defined]
            update=getattr(obj, "update", None),
            unavailable=unavailable if callable(unavailable) else (lambda: None),
            description=(getattr(obj, "__doc__", None) or "").strip().split("\n")[0],
            unused_state_slots=getattr(obj, "unused_state_slots", 0),
            capabilities=getattr(obj, "capabilities", Capabilities()),
        )
    elif callable(obj) and not inspect.isclass(obj):
        backend = Backend(name=name, forward=obj)
    else:
        raise InvalidArgument(
            f"conv backend {name!r}{where} is a {type(obj).__name__}: expected a gdn_equiv Backend, a forward "
            "function or an object with a forward method (see gdn_equiv.model.backends.ConvBackend)"
        )
    return backend.check()


def capabilities(names: Sequence[str | Backend]) -> Capabilities:
    """What every backend of ``names`` (names, or backends a caller already holds) runs
    (:func:`~gdn_equiv.model.backends.capabilities.joint`); a name that does not load counts as claiming
    everything (the run refuses it elsewhere, naming why)."""
    declared = []
    for name in names:
        try:
            declared.append(get_backend(name).capabilities)
        except InvalidArgument:
            continue
    return joint(declared)


def supported_widths(names: Sequence[str]) -> tuple[int, int]:
    """The kernel widths every backend in ``names`` supports, as an inclusive ``(min, max)`` (1..64 undeclared)."""
    return capabilities(names).widths or (1, 64)


def available_backends(names: Sequence[str] | None = None) -> list[str]:
    """Known backends (of ``names``, default all) that can run on this machine. Asking each known backend
    loads every one, fla's included (seconds of CPU): a caller that wants a few names passes them."""
    out = []
    for name in known_backends() if names is None else names:
        try:
            if get_backend(name).unavailable() is None:
                out.append(name)
        except InvalidArgument:
            continue
    return out


class LaunchCounter:
    """Counts conv launches by ``(backend, kind)``, kind being ``"forward"`` (the sequence path) or
    ``"update"`` (the step path, whether the backend runs it with a step kernel or its sequence kernel)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def record(self, backend: str, kind: str) -> None:
        self.counts[(backend, kind)] += 1

    def total(self, kind: str | None = None, backend: str | None = None) -> int:
        return sum(
            n for (b, k), n in self.counts.items() if (kind is None or k == kind) and (backend is None or b == backend)
        )

    def __repr__(self) -> str:
        return f"LaunchCounter({dict(self.counts)})"


_ACTIVE_COUNTERS: list[LaunchCounter] = []


@contextlib.contextmanager
def count_launches() -> Iterator[LaunchCounter]:
    """Count every conv launch made through the registry inside the ``with`` block."""
    counter = LaunchCounter()
    _ACTIVE_COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _ACTIVE_COUNTERS.remove(counter)


def off_device(backend: Backend, device: str) -> str | None:
    """Why ``backend`` cannot run a run on ``device`` (``"cpu"``, ``"cuda"``) by its own declaration, or ``None``: a
    backend that declares other devices only is not run here, where every call would be outside it (a gate that
    ran it anyway checked the kernel on a device it does not claim, or failed a kernel that cannot run here)."""
    devices = backend.capabilities.devices
    if devices is None or device.split(":")[0] in devices:
        return None
    return f"it declares the devices {', '.join(devices)}; this run is on {device}"


def _record(backend: str, kind: str) -> None:
    for counter in _ACTIVE_COUNTERS:
        counter.record(backend, kind)


def _runnable(backend: str | Backend) -> Backend:
    impl = get_backend(backend)  # a name is looked up; a Backend (one a caller already holds) is itself
    reason = impl.unavailable()
    if reason is not None:
        raise BackendUnavailable(f"conv backend {impl.name!r} cannot run here: {reason}")
    return impl


def causal_conv1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: Tensor | None = None,
    *,
    backend: str | Backend = "torch",
) -> tuple[Tensor, Tensor | None]:
    """Depthwise causal conv through ``backend`` (a name, or the :class:`Backend` a caller already resolved;
    one counted launch); arguments are checked first."""
    check_forward_args(x, weight, bias, activation, initial_state, cu_seqlens)
    impl = _runnable(backend)
    return _sequence_kernel(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens, impl, "forward")


def _sequence_kernel(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    output_final_state: bool,
    cu_seqlens: Tensor | None,
    impl: Backend,
    kind: str,
) -> tuple[Tensor, Tensor | None]:
    """``impl``'s sequence kernel (runnable here, its arguments checked), counted as a launch of ``kind``
    (``update``: a step call of a backend that has no step kernel, so P2 can still tell the step path from
    the sequence path)."""
    _check_runs_activation(impl, activation)
    x, bias = _fit_layout(impl.capabilities, x, bias)
    _record(impl.name, kind)
    y, final = impl.forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
    _check_outputs(impl.name, x, y, final, output_final_state, weight.shape[1], cu_seqlens, initial_state)
    return y, final


def causal_conv1d_update(
    x: Tensor,
    state: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    *,
    backend: str | Backend = "torch",
) -> tuple[Tensor, Tensor]:
    """One decode step for ``N`` sequences through ``backend`` (as for :func:`causal_conv1d`); ``state`` is left
    as it was (checked, not trusted)."""
    check_update_args(x, state, weight, bias, activation)
    impl = _runnable(backend)
    _check_runs_activation(impl, activation)
    if impl.update is None:
        # A plug-in without a step kernel: the full kernel over a one-token window is the same maths.
        check_forward_args(x.unsqueeze(1), weight, bias, activation, state, None)
        y, new_state = _sequence_kernel(x.unsqueeze(1), weight, bias, activation, state, True, None, impl, "update")
        assert new_state is not None
        return y[:, 0], new_state
    _, bias = _fit_layout(impl.capabilities, x, bias)  # a step's x [N, D] has no layout rule
    _record(impl.name, "update")
    version = state._version
    y, new_state = impl.update(x, state, weight, bias, activation)
    _check_update_outputs(impl.name, x, state, version, y, new_state)
    return y, new_state


def _fit_layout(caps: Capabilities, x: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """``x`` and ``bias`` in a layout the backend declares it takes: a contiguous copy (same values, same
    shape; differentiable) of an ``x`` whose strides break its stride rule (the layers hand q, k and v over
    as channel slices of one projection, and causal-conv1d's channel-last kernel needs strides in 8s) and
    of a bias it needs contiguous. Only layouts: a call outside its other capabilities reaches it as it
    is, and is its to refuse (the refusal property calls it that way)."""
    if caps.stride_multiple > 1 and x.dim() == 3:
        m, strides = caps.stride_multiple, x.stride()
        if strides[-1] != 1 or any(s % m for s in strides[:-1]):
            # clone, not contiguous(): a [1, 1, D] slice counts as contiguous whatever its strides
            x = x.clone(memory_format=torch.contiguous_format)
    if bias is not None and caps.contiguous_bias and bias.stride(-1) != 1:
        bias = bias.contiguous()
    return x, bias


def supported_activations(backends: Sequence[str | Backend]) -> tuple[str | None, ...]:
    """The activations every one of ``backends`` (names, or backends a caller already holds) runs: those a
    backend's capabilities declare, else the core ones and each registered one whose ``backends`` include it."""
    return tuple(
        act.name for act in (get_activation(n) for n in activation_names()) if all(_runs(b, act) for b in backends)
    )


def _runs(backend: str | Backend, act: Activation) -> bool:
    try:
        declared = get_backend(backend).capabilities.activations
    except InvalidArgument:  # an unknown name declares nothing
        declared = None
    if declared is not None:  # the backend's own declaration decides
        return act.name in declared
    name = backend if isinstance(backend, str) else backend.name
    return act.name in CORE_ACTIVATIONS or act.backends is None or name in act.backends


def _check_runs_activation(impl: Backend, activation: str | None) -> None:
    """A registered activation the backend is not known to run is refused, not passed on: fla's conv
    treats an activation it does not know as none at all, silently (relu would come back unactivated)."""
    runs = supported_activations([impl])
    if activation not in runs:
        raise InvalidArgument(
            f"conv backend {impl.name!r} does not run activation {activation!r}; it runs {', '.join(map(str, runs))}"
        )


def _describe(t: object) -> str:
    if not isinstance(t, torch.Tensor):
        return f"a {type(t).__name__}"
    return f"{tuple(t.shape)} {t.dtype} on {t.device}"


def _check_outputs(
    name: str,
    x: Tensor,
    y: Tensor,
    final: Tensor | None,
    output_final_state: bool,
    W: int,
    cu_seqlens: Tensor | None,
    initial_state: Tensor | None = None,
) -> None:
    """A plug-in's outputs must have the documented shape/dtype/device (SPEC §3); say which rule broke."""
    if not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype != x.dtype or y.device != x.device:
        raise InvalidArgument(
            f"backend {name!r} forward returned y {_describe(y)}, expected {_describe(x)} (x's shape, dtype, device)"
        )
    if not output_final_state:
        if final is not None:
            raise InvalidArgument(
                f"backend {name!r} forward returned a final_state ({_describe(final)}) with output_final_state=False"
            )
        return
    N = x.shape[0] if cu_seqlens is None else cu_seqlens.numel() - 1
    dtype = x.dtype if initial_state is None else initial_state.dtype
    expected = f"({N}, {x.shape[2]}, {W}) {dtype} on {x.device}"
    if (
        not isinstance(final, torch.Tensor)
        or tuple(final.shape) != (N, x.shape[2], W)
        or final.dtype != dtype
        or final.device != x.device
    ):
        raise InvalidArgument(
            f"backend {name!r} forward returned final_state {'None' if final is None else _describe(final)}, "
            f"expected {expected} ([N, D, W] in {'initial_state' if initial_state is not None else 'x'}'s dtype)"
        )


def _check_update_outputs(name: str, x: Tensor, state: Tensor, version: int, y: Tensor, new_state: Tensor) -> None:
    """``update`` returns y like x and a new state like ``state``, and leaves ``state`` as it was."""
    if not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype != x.dtype or y.device != x.device:
        raise InvalidArgument(
            f"backend {name!r} update returned y {_describe(y)}, expected {_describe(x)} (x's shape, dtype, device)"
        )
    if (
        not isinstance(new_state, torch.Tensor)
        or new_state.shape != state.shape
        or new_state.dtype != state.dtype
        or new_state.device != state.device
    ):
        raise InvalidArgument(
            f"backend {name!r} update returned new_state {_describe(new_state)}, expected {_describe(state)} "
            "(state's shape, dtype, device)"
        )
    if state._version != version or new_state is state:
        raise InvalidArgument(
            f"backend {name!r} update modified the state it was given in place; SPEC §3: update leaves state "
            "as it was and returns a new one"
        )
