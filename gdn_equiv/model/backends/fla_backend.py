"""fla's own conv kernels behind SPEC §3: ``fla-triton``, ``fla-cuda``, ``fla-gluon``.

flash-linear-attention is an optional extra (``gdn-equiv[fla]``), imported on first use: importing
this module, or asking a backend's ``unavailable()``, never imports fla. Where the conv code lives
moves between fla versions, so the adapter follows the fla version table (each row's ``conv``,
:class:`gdn_equiv.model.fla_versions.FlaConv`, matched exactly); another version is refused, naming
it and the known ones.

What fla's conv is, read from its source (the same in every version of the table):

- ``causal_conv1d(x, weight, bias, residual, initial_state, output_final_state, activation, backend,
  cu_seqlens)``: ``x [B, T, D]`` (fla's layout is ours), ``weight [D, W]``, states ``[N, D, W]`` (the
  last ``W`` inputs, ours too), ``cu_seqlens`` with per-sequence initial states. ``x`` is read
  through its strides; every other tensor (weights, states, ``d final_state``) is copied contiguous
  first (``input_guard``). Arithmetic in fp32, fp64 included; the final state comes back in ``x``'s
  dtype, cast here to ``initial_state``'s (SPEC §3 keeps the state's dtype).
- The backward never reads slot 0 of a final state's gradient (it gives ``d final[..., w]`` to token
  ``T - W + w`` for ``w >= 1`` only), so ``dx[T - W]`` misses it: fla's state convention is the last
  ``W - 1`` inputs, which is all a width-``W`` conv ever reads back. The backends declare it
  (``Backend.unused_state_slots = 1``); the conformance properties then compare slots ``1..W-1``
  and the continuation properties check that nothing else is needed.
- ``causal_conv1d_update(x, cache, residual, weight, bias, activation) -> (y, cache)`` shifts
  ``cache`` in place: the adapter hands it a copy (SPEC §3: ``update`` leaves ``state`` alone). With
  autograd on, fla's layer never takes the step kernel; the adapter then runs the sequence kernel
  over the one token, as fla's layer does.
- ``backend='cuda'`` (causal-conv1d) computes ``y`` *without* the initial state (it passes
  ``initial_states=None`` to the package) and its final state (fla's Triton ``causal_conv1d_update_states``)
  has no gradient; ``cu_seqlens`` with an initial state is an ``AssertionError`` in fla, refused here
  with :class:`InvalidArgument` before the call. fla's layer sidesteps the first two by switching
  itself to Triton when it has a cache; called as a backend, the conformance properties judge it.
- gluon (0.6.0 only) is no ``backend=`` value: it replaces ``causal_conv1d_fwd``/``_bwd`` through
  fla's dispatch when ``FLA_CONV_GLUON=1`` on an NVIDIA GPU, falling back to Triton for calls its
  verifiers refuse (states, widths other than 2-4). ``fla-gluon`` sets that variable around its
  forward and its backward only (:func:`_scoped`), so ``fla-triton`` in the same run stays Triton.

On a CPU, fla's Triton conv runs under ``TRITON_INTERPRET=1`` once each autotuned kernel is pinned to
one config (the interpreter has no benchmarker) and int32 masks are accepted (:func:`interpreter_ready`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from gdn_equiv.errors import BackendUnavailable, InvalidArgument
from gdn_equiv.model import fla_versions  # fla_versions.fla_version read per call (tests plant a version)
from gdn_equiv.model.backends.base import Backend
from gdn_equiv.model.backends.capabilities import CAUSAL_CONV1D, Capabilities

if TYPE_CHECKING:
    from gdn_equiv.model.fla_versions import FlaConv

Tensor = torch.Tensor


#: fla's ``backend=`` value for each of our backends (gluon is chosen by dispatch, over ``triton``)
_FLA_NAME = {"fla-triton": "triton", "fla-cuda": "cuda", "fla-gluon": "triton"}
_GLUON_ENV = "FLA_CONV_GLUON"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def conv_row(version: str | None = None) -> FlaConv:
    """The conv of ``version``'s row (default: the installed fla); :class:`InvalidArgument` naming the
    version and the known ones otherwise."""
    return fla_versions.version_row(version).conv


def _version() -> str | None:
    return fla_versions.fla_version()


def _module(path: str) -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(path)


# ---- fla's Triton kernels under the interpreter ----------------------------------------------------


def _autotuner(kernel: object) -> Any | None:
    """The ``triton.runtime.Autotuner`` inside a ``@heuristics``/``@autotune`` stack, if there is one."""
    from triton.runtime.autotuner import Autotuner

    seen = 0
    while kernel is not None and seen < 8:
        if isinstance(kernel, Autotuner):
            return kernel
        kernel = getattr(kernel, "fn", None)
        seen += 1
    return None


def pin_autotuned(module: ModuleType) -> list[str]:
    """Pin every autotuned Triton kernel defined in ``module`` to its first config; returns their names.

    Triton's ``Autotuner`` benchmarks only when it has more than one config; with one it launches that
    config directly, which is the only way the interpreter (no benchmarker: "0 active drivers") runs
    an autotuned kernel. Process-wide and idempotent: meant for ``TRITON_INTERPRET=1`` runs, where no
    tuning can happen anyway. fla lists its smallest channel block first (``BD`` 16, or 8 for the step
    kernel), so tiny CPU examples still cross channel-block edges.
    """
    pinned = []
    for name, obj in sorted(vars(module).items()):
        tuner = _autotuner(obj)
        if tuner is None:
            continue
        if len(tuner.configs) > 1:
            tuner.configs = tuner.configs[:1]
            tuner.cache.clear()
        pinned.append(name)
    return pinned


_MASK_SHIM = False


def accept_int_masks() -> None:
    """Let Triton's interpreter take integer masks as booleans (nonzero = on), process-wide.

    Triton 3.9's interpreter hands some masks over as int32 where the GPU compiler makes them i1
    (fla's ``compute_dh0_kernel``: ``(t < seq_len) & m_d`` with a Python ``t``), and its load/store then
    raise "mask has unsupported dtype". Casting nonzero to true is what the compiled kernel does.
    """
    global _MASK_SHIM
    if _MASK_SHIM:
        return
    import numpy as np
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    load, store = builder.create_masked_load, builder.create_masked_store

    def as_bool(mask: Any) -> Any:
        if mask.data.dtype == np.bool_:
            return mask
        return interp.TensorHandle(mask.data.astype(np.bool_), interp.tl.int1)

    # the trailing cache/eviction arguments differ between Triton versions (3.8: five, 3.9: four)
    def create_masked_load(self, ptrs, mask, *rest):
        return load(self, ptrs, as_bool(mask), *rest)

    def create_masked_store(self, ptrs, value, mask, *rest):
        return store(self, ptrs, value, as_bool(mask), *rest)

    builder.create_masked_load = create_masked_load
    builder.create_masked_store = create_masked_store
    _MASK_SHIM = True


#: ``GDN_EQUIV_FLA_AUTOTUNE=first`` pins fla's autotuned conv kernels to their first config on a GPU too
#: (``full``, the default, lets fla autotune as it always does). fla tunes per channel count and width
#: (key ``D, W, NB``, 16 configs per kernel), so a property run that draws many channel counts spends its
#: time compiling: on the H200 the gating suite over ``fla-triton`` had not finished a third of its tests
#: in 470 s. Pinned, each shape runs one config, the one fla lists first, not the one it would pick.
AUTOTUNE_ENV = "GDN_EQUIV_FLA_AUTOTUNE"


def autotune_mode() -> str:
    """``full`` or ``first`` from :data:`AUTOTUNE_ENV`; anything else is refused, naming the value."""
    mode = os.environ.get(AUTOTUNE_ENV, "full")
    if mode not in ("full", "first"):
        raise InvalidArgument(f"{AUTOTUNE_ENV} must be 'full' or 'first', got {mode!r}")
    return mode


def pin_loaded_fla() -> list[str]:
    """With ``GDN_EQUIV_FLA_AUTOTUNE=first``: every autotuned kernel of every loaded ``fla`` module
    (layer cores, norms, gates, not only the conv) pinned to its first config; returns
    ``module.kernel`` names. fla's layers autotune each core kernel per shape, so on the H200 a
    PR #977 layer's first call took 200-320 s and a fuzz run with fla's own cores spent most of its
    budget there. A no-op (``[]``) in ``full`` mode. Process-wide, idempotent; call it after the
    layer's module is imported (fla imports its ops at module level). The fla target calls it for
    every layer it builds, so a module is scanned once: a later call pins (and names) only what
    fla has imported since."""
    if autotune_mode() != "first":
        return []
    pinned = []
    for name, module in sorted(sys.modules.items()):
        if name in _PINNED_MODULES or not (name == "fla" or name.startswith("fla.")):
            continue
        if isinstance(module, ModuleType):
            pinned += [f"{name}.{kernel}" for kernel in pin_autotuned(module)]
            _PINNED_MODULES.add(name)
    return pinned


_PINNED_MODULES: set[str] = set()


def interpreter_ready(row: FlaConv) -> None:
    """Under ``TRITON_INTERPRET=1``: fla's conv kernels pinned (:func:`pin_autotuned`) and int masks
    accepted (:func:`accept_int_masks`). A no-op on a GPU, where fla autotunes as it always does."""
    if not _interpreting():
        return
    pin_autotuned(_module(row.kernels))
    accept_int_masks()


# ---- availability ----------------------------------------------------------------------------------


def _fla_reason() -> tuple[FlaConv | None, str | None]:
    if importlib.util.find_spec("fla") is None:
        return None, "flash-linear-attention is not installed (pip install gdn-equiv[fla])"
    try:
        row = conv_row()
    except InvalidArgument as exc:
        return None, str(exc)
    except Exception as exc:  # fla's own import fails, e.g. the PR #977 build under triton>=3.9
        return None, f"fla is installed but does not import: {type(exc).__name__}: {exc}"
    try:
        _module(row.conv)
    except Exception as exc:
        return None, f"fla {_version()}'s conv ({row.conv}) does not import: {type(exc).__name__}: {exc}"
    return row, None


def _triton_unavailable() -> str | None:
    _, reason = _fla_reason()
    if reason is not None:
        return reason
    if not (_interpreting() or torch.cuda.is_available()):
        return "fla's Triton conv needs a CUDA device, or TRITON_INTERPRET=1 to run its interpreter on CPU"
    return None


def _cuda_unavailable() -> str | None:
    row, reason = _fla_reason()
    if reason is not None:
        return reason
    if importlib.util.find_spec("causal_conv1d") is None:
        return "fla's cuda conv backend is causal-conv1d, which is not installed (pip install causal-conv1d)"
    if not torch.cuda.is_available():
        return "fla's cuda conv backend (causal-conv1d) needs a CUDA device and none is available"
    assert row is not None
    if getattr(_module(row.cuda_update), "causal_conv1d_update_cuda", None) is None:
        return f"causal-conv1d is installed but fla {_version()} did not load it ({row.cuda_update})"
    return None


def _gluon_unavailable() -> str | None:
    row, reason = _fla_reason()
    if reason is not None:
        return reason
    assert row is not None
    if row.gluon is None:
        return f"fla {_version()} has no gluon conv (0.6.0 has one)"
    if not torch.cuda.is_available():
        return "fla's gluon conv needs an NVIDIA GPU (no interpreter for gluon) and none is available"
    from fla.backends import GluonBackend

    if not GluonBackend.is_available():
        return "fla's gluon conv needs an NVIDIA GPU and triton.experimental.gluon; fla says it is not available"
    return None


_UNAVAILABLE: dict[str, Callable[[], str | None]] = {
    "fla-triton": _triton_unavailable,
    "fla-cuda": _cuda_unavailable,
    "fla-gluon": _gluon_unavailable,
}


def _ready(name: str) -> FlaConv:
    reason = _UNAVAILABLE[name]()
    if reason is not None:
        raise BackendUnavailable(f"conv backend {name!r} cannot run here: {reason}")
    row = conv_row()
    if autotune_mode() == "first":
        pin_autotuned(_module(row.kernels))
    interpreter_ready(row)
    if name == "fla-gluon":
        assert row.gluon is not None
        _module(row.gluon)
    return row


# ---- the gluon scope: fla's dispatch reads FLA_CONV_GLUON at each call, forward and backward --------


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


class _Scoped(torch.autograd.Function):
    """Runs ``fn(*inputs)`` with an environment variable set, forward *and* backward (autograd calls
    the backward later, outside any ``with`` around the forward). The forward builds fla's own graph on
    detached copies of the inputs; the backward differentiates that graph under the same variable."""

    @staticmethod
    def forward(ctx: Any, env: tuple[str, str], fn: Callable[..., tuple[Tensor, Tensor | None]], *inputs: Any) -> Any:
        leaves = [t.detach().requires_grad_(t.requires_grad) if isinstance(t, Tensor) else t for t in inputs]
        with _env(*env), torch.enable_grad():
            y, final = fn(*leaves)
        ctx.env, ctx.leaves, ctx.outputs = env, leaves, (y, final)
        ctx.set_materialize_grads(False)
        return y.detach(), (final.detach() if final is not None else None)

    @staticmethod
    def backward(ctx: Any, dy: Tensor | None, dfinal: Tensor | None) -> Any:
        wanted = [i for i, t in enumerate(ctx.leaves) if isinstance(t, Tensor) and t.requires_grad]
        pairs = [(o, g) for o, g in zip(ctx.outputs, (dy, dfinal), strict=True) if g is not None and o is not None]
        pairs = [(o, g) for o, g in pairs if o.requires_grad]
        grads: list[Tensor | None] = [None] * len(ctx.leaves)
        if wanted and pairs:
            with _env(*ctx.env):
                found = torch.autograd.grad(
                    [o for o, _ in pairs], [ctx.leaves[i] for i in wanted], [g for _, g in pairs], allow_unused=True
                )
            for i, g in zip(wanted, found, strict=True):
                grads[i] = g
        return (None, None, *grads)


def _scoped(env: tuple[str, str], fn: Callable[..., tuple[Tensor, Tensor | None]], *inputs: Any) -> Any:
    if torch.is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in inputs):
        return _Scoped.apply(env, fn, *inputs)
    with _env(*env):
        return fn(*inputs)


# ---- the protocol ----------------------------------------------------------------------------------


def _fla_conv(
    name: str,
    row: FlaConv,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    output_final_state: bool,
    cu_seqlens: Tensor | None,
) -> tuple[Tensor, Tensor | None]:
    y, final = _module(row.conv).causal_conv1d(
        x=x,
        weight=weight,
        bias=bias,
        residual=None,
        initial_state=initial_state,
        output_final_state=output_final_state,
        activation=activation,
        backend=_FLA_NAME[name],
        cu_seqlens=cu_seqlens,
    )
    if final is not None and initial_state is not None and final.dtype != initial_state.dtype:
        final = final.to(initial_state.dtype)  # fla keeps the final state in x's dtype
    return y, final


def _check_cuda_call(x: Tensor, weight: Tensor, initial_state: Tensor | None, cu_seqlens: Tensor | None) -> None:
    if x.device.type != "cuda":
        raise InvalidArgument(f"fla's cuda conv backend (causal-conv1d) needs CUDA tensors, got x on {x.device}")
    W = weight.shape[1]
    if not 2 <= W <= 4:
        raise InvalidArgument(f"fla's cuda conv backend (causal-conv1d) supports kernel widths W in 2..4, got W={W}")
    if cu_seqlens is not None and initial_state is not None:
        raise InvalidArgument(
            "fla's cuda conv backend takes no initial_state with cu_seqlens (fla asserts it); use fla-triton"
        )


def _forward_fn(name: str) -> Callable[..., tuple[Tensor, Tensor | None]]:
    def forward(
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        initial_state: Tensor | None,
        output_final_state: bool,
        cu_seqlens: Tensor | None,
    ) -> tuple[Tensor, Tensor | None]:
        row = _ready(name)
        if name == "fla-cuda":
            _check_cuda_call(x, weight, initial_state, cu_seqlens)
        args = (x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
        if name == "fla-gluon":
            return _scoped(
                (_GLUON_ENV, "1"),
                lambda x, w, b, h0: _fla_conv(name, row, x, w, b, activation, h0, output_final_state, cu_seqlens),
                x,
                weight,
                bias,
                initial_state,
            )
        return _fla_conv(name, row, *args)

    forward.__name__ = f"{name.replace('-', '_')}_forward"
    return forward


def _update_fn(name: str) -> Callable[..., tuple[Tensor, Tensor]]:
    forward = _forward_fn(name)

    def update(
        x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None
    ) -> tuple[Tensor, Tensor]:
        row = _ready(name)
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, state, weight, bias)):
            # fla's layer takes its step kernel only without autograd; otherwise the sequence kernel
            y, new_state = forward(x.unsqueeze(1), weight, bias, activation, state, True, None)
            assert new_state is not None
            return y[:, 0], new_state
        cache = state.detach().clone(memory_format=torch.contiguous_format)  # fla shifts it in place
        if name == "fla-cuda":
            _check_cuda_call(x, weight, None, None)
            step = _module(row.cuda_update).causal_conv1d_update_cuda
            y = step(x=x, conv_state=cache, weight=weight, bias=bias, activation=activation)
            return y, cache
        y, cache = _module(row.update).causal_conv1d_update(
            x=x, cache=cache, residual=None, weight=weight, bias=bias, activation=activation
        )
        return y, cache

    update.__name__ = f"{name.replace('-', '_')}_update"
    return update


def _backend(name: str, description: str, **scope: Any) -> Backend:
    return Backend(
        name=name,
        forward=_forward_fn(name),
        update=_update_fn(name),
        unavailable=_UNAVAILABLE[name],
        description=description,
        unused_state_slots=1,  # every row's FlaConv.unused_state_slots (tests/test_backends_fla.py checks)
        **scope,
    )


TRITON = _backend(
    "fla-triton",
    "fla's Triton causal conv (the installed fla version's; CUDA, or TRITON_INTERPRET=1 with pinned configs)",
)
CUDA = _backend(
    "fla-cuda",
    "fla's cuda conv backend (causal-conv1d forward, fla's Triton final state); CUDA only, widths 2-4",
    # fla hands x to the package's channel-last kernel as it is (its input_guard makes the other tensors
    # contiguous): the package's own limits, on a GPU
    capabilities=CAUSAL_CONV1D.intersect(Capabilities(devices=("cuda",))),
)
GLUON = _backend(
    "fla-gluon",
    "fla 0.6.0's gluon conv (FLA_CONV_GLUON=1 through fla's dispatch, Triton where it declines); NVIDIA only",
)
