"""The conv-backend protocol (SPEC §3) and the argument checks every backend gets for free."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.backends.capabilities import Capabilities
from gdn_equiv.model.config import CONV_ACTIVATIONS

Tensor = torch.Tensor


class ForwardFn(Protocol):
    def __call__(
        self,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        initial_state: Tensor | None,
        output_final_state: bool,
        cu_seqlens: Tensor | None,
    ) -> tuple[Tensor, Tensor | None]: ...


class UpdateFn(Protocol):
    def __call__(
        self, x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None
    ) -> tuple[Tensor, Tensor]: ...


class ConvBackend(Protocol):
    """What ``--gdn-backend module:attr`` (or a ``gdn_equiv.backends`` entry point) may name.

    Either a bare forward function (the :class:`ForwardFn` signature below), a :class:`Backend`,
    or any object with these attributes (a module, a class instance)::

        forward(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)
            -> (y, final_state)                             # required
        update(x, state, weight, bias, activation) -> (y, new_state)   # optional
        unavailable() -> str | None                         # optional: why it cannot run here
        unused_state_slots: int                             # optional: leading state slots it leaves
                                                            # meaningless (0; fla: 1, see Backend)
        capabilities: Capabilities                          # optional: what it runs (default: everything)

    Arguments are passed positionally, in the order of SPEC §3. Parameter names are free, but a
    SPEC name at another position is refused at load time (it would receive the wrong argument;
    causal-conv1d's ``causal_conv1d_fn(x, weight, bias, seq_idx, initial_states, ...)`` is one such).
    Outputs are checked on every call: ``y`` has ``x``'s shape, dtype and device; ``final_state``
    is ``[N, D, W]`` in ``initial_state``'s dtype (``x``'s without one) on ``x``'s device, or
    ``None`` when not asked for; ``update`` returns ``y [N, D]`` like ``x`` and ``new_state`` like
    ``state``, leaving ``state`` as it was. Without ``update``, the step path runs ``forward`` on a
    one-token window.
    """

    forward: ForwardFn


FORWARD_PARAMS = ("x", "weight", "bias", "activation", "initial_state", "output_final_state", "cu_seqlens")
UPDATE_PARAMS = ("x", "state", "weight", "bias", "activation")


def check_signature(fn: Callable[..., object], params: tuple[str, ...], what: str) -> None:
    """Refuse ``fn`` at load time unless SPEC §3's call ``fn(*params)`` binds each argument where it belongs.

    Callables without an introspectable signature (some C extensions) pass; their outputs are
    still checked on every call.
    """
    if not callable(fn):
        raise InvalidArgument(f"{what} must be callable, got {type(fn).__name__}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    expected = f"({', '.join(params)})"
    try:
        sig.bind(*params)
    except TypeError as exc:
        raise InvalidArgument(
            f"{what} has signature {sig}, but the backend protocol calls it with {len(params)} positional arguments "
            f"{expected}: {exc}"
        ) from None
    positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, p in enumerate(positional):
        if p.name in params and params.index(p.name) != i:
            raise InvalidArgument(
                f"{what} has signature {sig}: parameter {p.name!r} is at position {i}, but the backend protocol passes "
                f"{p.name} at position {params.index(p.name)} {expected}"
            )


@dataclass(frozen=True)
class Backend:
    """A depthwise causal conv implementation.

    ``forward(x [B,T,D], weight [D,W], bias [D]|None, activation, initial_state [N,D,W]|None,
    output_final_state, cu_seqlens [N+1]|None) -> (y [B,T,D], final_state [N,D,W]|None)`` and
    ``update(x [N,D], state [N,D,W], weight, bias, activation) -> (y [N,D], new_state)``; ``update``
    must leave ``state`` as it was. ``x`` may be a channel slice of a wider tensor (last stride 1):
    that is how the fused prologue hands q|k|v over without a copy. Output dtype is ``x.dtype``.

    ``unavailable()`` returns ``None`` when the backend can run here, else the reason it cannot
    (shown in pytest skip messages).
    """

    name: str
    forward: ForwardFn
    update: UpdateFn | None = None
    unavailable: Callable[[], str | None] = lambda: None
    description: str = ""
    #: What it runs (:class:`~gdn_equiv.model.backends.capabilities.Capabilities`): dtypes, kernel widths,
    #: activations, channel and stride multiples, bias layout, per-sequence states with ``cu_seqlens``,
    #: devices. Strategies draw inside it; a call outside must be refused, never answered wrongly.
    #: The default claims everything.
    capabilities: Capabilities = Capabilities()  # noqa: RUF009 - frozen, one shared value
    #: The backend's state convention: how many leading slots of a ``[N, D, W]`` state carry no meaning
    #: for it. ``0``: all ``W`` slots are the last ``W`` inputs, forward and backward. ``1``: only the last
    #: ``W - 1`` are, all a width-``W`` conv ever reads back (fla: its backward drops the gradient of a
    #: final state's slot 0). Conformance compares the final state, the gradient through it and the
    #: step's new state on the meaningful slots only; the continuation properties (a final state fed back
    #: as the next call's initial state, or to the step kernel) catch a declaration that hides a slot
    #: the conv needs.
    unused_state_slots: int = 0

    def check(self) -> Backend:
        """Refuse a forward/update whose signature cannot take SPEC §3's arguments; returns ``self``."""
        check_signature(self.forward, FORWARD_PARAMS, f"conv backend {self.name!r}: forward")
        if self.update is not None:
            check_signature(self.update, UPDATE_PARAMS, f"conv backend {self.name!r}: update")
        if not isinstance(self.capabilities, Capabilities):
            raise InvalidArgument(
                f"conv backend {self.name!r}: capabilities must be a gdn_equiv.model.backends.Capabilities, "
                f"got {type(self.capabilities).__name__}"
            )
        if not isinstance(self.unused_state_slots, int) or self.unused_state_slots < 0:
            raise InvalidArgument(
                f"conv backend {self.name!r}: unused_state_slots must be a non-negative int, "
                f"got {self.unused_state_slots!r}"
            )
        return self

    def state_slots(self, W: int) -> slice:
        """The meaningful slots of a width-``W`` state (last axis of ``[N, D, W]``), per the declaration."""
        return slice(min(self.unused_state_slots, W), W)


def compute_dtype(*tensors: Tensor | None) -> torch.dtype:
    """fp32 arithmetic, or fp64 when any operand is fp64 (fp64 inputs keep their precision)."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def token_sequence_ids(cu_seqlens: Tensor, total: int, device: torch.device) -> Tensor:
    """``[total]`` int32: which sequence each packed token belongs to (empty sequences own none).

    ``searchsorted`` on the device, so varlen kernels need no host sync for it.
    """
    cu = cu_seqlens.to(device=device, dtype=torch.int64)
    tokens = torch.arange(total, device=device, dtype=torch.int64)
    return torch.searchsorted(cu[1:], tokens, right=True).to(torch.int32)


def _check_float(name: str, t: Tensor) -> None:
    if not t.dtype.is_floating_point:
        raise InvalidArgument(f"{name} must be a floating-point tensor, got dtype {t.dtype}")


def check_cu_seqlens(cu_seqlens: Tensor, total: int, batch: int) -> None:
    """The rules of SPEC §2 step 1; the message names the broken rule and the value."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise InvalidArgument(f"cu_seqlens must be a tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise InvalidArgument(f"cu_seqlens must have dtype int32 or int64, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise InvalidArgument(f"cu_seqlens must be 1-D with at least 2 entries, got shape {tuple(cu_seqlens.shape)}")
    if batch != 1:
        raise InvalidArgument(f"cu_seqlens needs a packed batch of size 1 (B == 1), got B={batch}")
    values = cu_seqlens.tolist()
    if values[0] != 0:
        raise InvalidArgument(f"cu_seqlens must start at 0, got {values[0]}")
    for i in range(1, len(values)):
        if values[i] < values[i - 1]:
            raise InvalidArgument(
                f"cu_seqlens must be non-decreasing, got {values[i]} after {values[i - 1]} at index {i}"
            )
    if values[-1] != total:
        raise InvalidArgument(f"cu_seqlens must end at {total} (B*T), got {values[-1]}")


def check_forward_args(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    cu_seqlens: Tensor | None,
) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise InvalidArgument(f"x must be a [B, T, D] tensor, got shape {tuple(getattr(x, 'shape', ()))}")
    _check_float("x", x)
    B, T, D = x.shape
    if weight.dim() != 2 or weight.shape[0] != D:
        raise InvalidArgument(f"weight must have shape [D={D}, W], got {tuple(weight.shape)}")
    _check_float("weight", weight)
    W = weight.shape[1]
    if W < 1:
        raise InvalidArgument(f"kernel width W must be at least 1, got {W}")
    if bias is not None:
        if bias.shape != (D,):
            raise InvalidArgument(f"bias must have shape [D={D}], got {tuple(bias.shape)}")
        _check_float("bias", bias)
    if activation not in CONV_ACTIVATIONS:
        raise InvalidArgument(f"activation must be one of {CONV_ACTIVATIONS}, got {activation!r}")
    for name, t in (("weight", weight), ("bias", bias), ("initial_state", initial_state), ("cu_seqlens", cu_seqlens)):
        if t is not None and t.device != x.device:
            raise InvalidArgument(f"{name} is on {t.device} but x is on {x.device}; all must share one device")
    if cu_seqlens is not None:
        check_cu_seqlens(cu_seqlens, T, B)
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    if initial_state is not None:
        if initial_state.shape != (N, D, W):
            raise InvalidArgument(
                f"initial_state must have shape [N={N}, D={D}, W={W}], got {tuple(initial_state.shape)}"
            )
        _check_float("initial_state", initial_state)


def check_update_args(x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise InvalidArgument(f"update x must be a [N, D] tensor, got shape {tuple(getattr(x, 'shape', ()))}")
    _check_float("x", x)
    N, D = x.shape
    if weight.dim() != 2 or weight.shape[0] != D:
        raise InvalidArgument(f"weight must have shape [D={D}, W], got {tuple(weight.shape)}")
    _check_float("weight", weight)
    W = weight.shape[1]
    if state.shape != (N, D, W):
        raise InvalidArgument(f"state must have shape [N={N}, D={D}, W={W}], got {tuple(state.shape)}")
    _check_float("state", state)
    if bias is not None:
        if bias.shape != (D,):
            raise InvalidArgument(f"bias must have shape [D={D}], got {tuple(bias.shape)}")
        _check_float("bias", bias)
    if activation not in CONV_ACTIVATIONS:
        raise InvalidArgument(f"activation must be one of {CONV_ACTIVATIONS}, got {activation!r}")
    for name, t in (("weight", weight), ("bias", bias), ("state", state)):
        if t is not None and t.device != x.device:
            raise InvalidArgument(f"{name} is on {t.device} but x is on {x.device}; all must share one device")
