"""The ``cuda`` backend: an adapter over Dao-AILab's ``causal-conv1d`` package (SPEC §3).

The package is imported on first use, so importing this module (and asking :func:`unavailable`)
never needs it. Its API and the rules this adapter handles, so that callers see SPEC §3's
signature unchanged:

- Layout. ``causal_conv1d_fn`` takes ``x [B, D, T]``. Our ``x [B, T, D]`` transposed is its
  *channel-last* layout (``stride(1) == 1``), the only one with ``initial_states``,
  ``final_states`` and ``seq_idx``. That kernel needs ``D % 8 == 0``, ``x.stride(0)`` and the time
  stride multiples of 8 (and 16-byte aligned rows for its vector loads). Inputs that break this are
  copied into a zero-padded ``[B, T, D8]`` buffer first: a depthwise conv per channel, so padding
  channels changes no channel's result. The adapter always uses the channel-last kernel, so one
  channel's numbers never depend on which kernel a shape happened to pick.
- Widths 2-4 only; fp32/fp16/bf16 only (fp64 is refused: the package has no fp64 kernels).
- Bias dtype must equal weight dtype: a mismatched pair is promoted to the wider dtype here
  (lossless; the kernel reads both into fp32 anyway, so the result is the one the caller meant).
- State. The package's state is ``[N, D, W-1]`` (the last ``W-1`` inputs), ours is ``[N, D, W]``
  (the last ``W``). In: only ``initial_state[..., 1:]`` can influence an output. Out: the
  package's final state gives columns ``1..W-1``; column 0, the input ``W`` steps back, is
  gathered here from ``x`` (or the initial state when ``T < W``): a copy, no arithmetic.
  ``initial_state`` must have ``x``'s dtype (the package keeps states in the input dtype).
- Varlen. ``cu_seqlens`` becomes the package's per-token ``seq_idx``. The package returns no final
  state with ``seq_idx``: the adapter gathers each sequence's last ``W`` inputs itself (a copy).
  It has no per-sequence initial states: ``cu_seqlens`` with ``initial_state`` raises
  :class:`InvalidArgument`. Nothing here silently runs another backend.
- ``update``: ``causal_conv1d_update`` accepts a ``[N, D, state_len >= W-1]`` state and shifts it in
  place, so our ``[N, D, W]`` state works as is, on a copy (the caller's state is left alone).
  With autograd on, the step goes through the sequence kernel over one token (the package's update
  has no backward).

Arithmetic: the package computes in fp32 internally (weights, bias and inputs read into fp32,
FMA-contracted tap sum, SiLU as ``x / (1 + expf(-x))``), then rounds to the input dtype. That is the
fp32 contract of SPEC §3 but not the torch backend's summation order or rounding, so
``cuda`` = ``torch`` holds within the §6 tolerance table, not bitwise. Its weight/bias gradients
are reduced with atomics across time tiles, so they are not even bitwise reproducible run to run.
"""

from __future__ import annotations

import importlib.util
import itertools
from types import ModuleType
from typing import Any, overload

import torch
import torch.nn.functional as F

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.backends.base import Backend, token_sequence_ids
from gdn_equiv.model.backends.capabilities import Capabilities

Tensor = torch.Tensor

_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_MIN_W, _MAX_W = 2, 4
_PACKAGE: ModuleType | None = None


def unavailable() -> str | None:
    """``None`` when ``causal_conv1d`` is importable and a CUDA device is present, else why not."""
    if importlib.util.find_spec("causal_conv1d") is None:
        return "the causal-conv1d package is not installed (pip install causal-conv1d)"
    if not torch.cuda.is_available():
        return "causal-conv1d needs a CUDA device and none is available"
    try:
        _package()
    except Exception as exc:  # a wheel built for another torch/CUDA fails here, not at find_spec
        return f"causal-conv1d is installed but does not load: {type(exc).__name__}: {exc}"
    return None


def _package() -> ModuleType:
    global _PACKAGE
    if _PACKAGE is None:
        import causal_conv1d

        _PACKAGE = causal_conv1d
    return _PACKAGE


def _check(x: Tensor, weight: Tensor, bias: Tensor | None, state: Tensor | None, state_name: str) -> None:
    if x.device.type != "cuda":
        raise InvalidArgument(f"the cuda backend (causal-conv1d) needs CUDA tensors, got x on {x.device}")
    W = weight.shape[1]
    if not _MIN_W <= W <= _MAX_W:
        raise InvalidArgument(f"the cuda backend (causal-conv1d) supports kernel widths W in 2..4, got W={W}")
    for name, t in (("x", x), ("weight", weight), ("bias", bias), (state_name, state)):
        if t is not None and t.dtype not in _SUPPORTED_DTYPES:
            raise InvalidArgument(
                f"the cuda backend (causal-conv1d) supports float32/float16/bfloat16, got {name} as {t.dtype}"
            )
    if state is not None and state.dtype != x.dtype:
        raise InvalidArgument(
            f"the cuda backend (causal-conv1d) keeps {state_name} in the input dtype: {state_name} is "
            f"{state.dtype} but x is {x.dtype}"
        )


def _params(weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """Weight and bias in one dtype, promoted losslessly, and the bias contiguous (the package's rules:
    ``Expected bias.stride(-1) == 1``; a bias of stride 2 is a valid SPEC §3 argument)."""
    if bias is None:
        return weight, bias
    if bias.dtype != weight.dtype:
        dtype = torch.promote_types(weight.dtype, bias.dtype)
        weight, bias = weight.to(dtype), bias.to(dtype)
    return weight, bias.contiguous()


def _channel_last_ok(x: Tensor) -> bool:
    """Whether ``x [B, T, D]`` can be handed over in place as the package's channel-last ``[B, D, T]``."""
    D = x.shape[2]
    return x.stride(2) == 1 and D % 8 == 0 and x.stride(1) % 8 == 0 and x.stride(0) % 8 == 0 and x.data_ptr() % 16 == 0


@overload
def _pad_channels(t: Tensor, pad: int, dim: int) -> Tensor: ...
@overload
def _pad_channels(t: None, pad: int, dim: int) -> None: ...
@overload
def _pad_channels(t: Tensor | None, pad: int, dim: int) -> Tensor | None: ...
def _pad_channels(t: Tensor | None, pad: int, dim: int) -> Tensor | None:
    if t is None or pad == 0:
        return t
    spec = [0, 0] * (t.dim() - 1 - dim % t.dim()) + [0, pad]
    return F.pad(t, spec)


def _seq_idx(cu_seqlens: Tensor, T: int, device: torch.device) -> Tensor:
    """``[1, T]`` int32: which sequence each token belongs to (empty sequences own no token)."""
    return token_sequence_ids(cu_seqlens, T, device).unsqueeze(0).contiguous()


def _history_column(x: Tensor, initial_state: Tensor | None, W: int) -> Tensor:
    """The input ``W`` steps before the end, per sequence: ``[B, D]`` (zero before the start)."""
    B, T, D = x.shape
    if T >= W:
        return x[:, T - W]
    if initial_state is not None:
        return initial_state[:, :, T]
    return x.new_zeros(B, D)


def _varlen_final(x: Tensor, cu_seqlens: Tensor, W: int) -> Tensor:
    """Each sequence's last ``W`` inputs, zero-filled on the left: ``[N, D, W]``, a pure gather."""
    bounds = cu_seqlens.tolist()
    D = x.shape[2]
    finals = []
    for start, stop in itertools.pairwise(bounds):
        tail = x[0, max(start, stop - W) : stop]  # [<=W, D]
        finals.append(F.pad(tail.t(), (W - tail.shape[0], 0)))  # [D, W]
    return torch.stack(finals, 0) if finals else x.new_zeros(0, D, W)


def _package_layout(t: Tensor) -> bool:
    """Channel-last ``[B, D, T]`` as the package's kernels read it: channel stride 1, the other two
    strides multiples of 8 (the package raises on misaligned strides for some tensors and silently
    misreads others, see repro/causal_conv1d_dfinal_states.py)."""
    return t.stride(1) == 1 and t.stride(0) % 8 == 0 and t.stride(2) % 8 == 0 and t.data_ptr() % 16 == 0


class _PackageLayoutGrad(torch.autograd.Function):
    """Identity whose backward hands the package a gradient in its layout (:func:`_package_layout`),
    copying only when autograd's is not.

    Autograd passes gradients as they come: the gradient of ``y`` is the caller's ``dy`` (a channel
    slice of a wider tensor when the caller concatenates q|k|v; the package then raises "strides ...
    to be multiples of 8"), and the final state's is a column slice of our ``[N, D, W]`` gradient
    (``stride(1) == W``; the package reads it as if ``stride(1) == 1``, without checking: on the H200
    dx was wrong in channels 32-39 of 40).
    """

    @staticmethod
    def forward(ctx: Any, t: Tensor) -> Tensor:
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad if _package_layout(grad) else _to_package_layout(grad)


def _to_package_layout(t: Tensor) -> Tensor:
    """A copy of ``[B, D, T]`` ``t`` with strides ``(T*D, 1, D)`` spelled out: ``.contiguous()`` keeps
    whatever strides a size-1 dimension had (torch ignores them), and the package does not (on the H200
    a ``dy`` slice with ``B = T = 1`` and ``stride(0) == 9`` came back from ``.contiguous()`` unchanged
    and the package raised)."""
    B, D, T = t.shape
    return t.new_empty(B, T, D).transpose(1, 2).copy_(t)


def forward(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    initial_state: Tensor | None,
    output_final_state: bool,
    cu_seqlens: Tensor | None,
    *,
    final_grad_as_is: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """SPEC §3's forward; ``final_grad_as_is`` hands the package the final state's gradient as autograd
    passes it (the layout guard off: repro/causal_conv1d_as_is.py shows the suite finding why it is on)."""
    _check(x, weight, bias, initial_state, "initial_state")
    if cu_seqlens is not None and initial_state is not None:
        raise InvalidArgument(
            "the cuda backend (causal-conv1d) has no per-sequence initial states: cu_seqlens together with "
            "initial_state is not supported (use the torch or triton backend)"
        )
    B, T, D = x.shape
    W = weight.shape[1]
    if B * T == 0:
        # no token (an all-padding mask unpadded, empty packed sequences): the package launches an empty grid,
        # "CUDA error: invalid argument" (H100, causal-conv1d 1.7.0); each sequence's state is what it was
        N = B if cu_seqlens is None else cu_seqlens.numel() - 1
        final = None
        if output_final_state:
            final = initial_state.clone() if initial_state is not None else x.new_zeros(N, D, W)
        return x.clone(), final
    pkg = _package()
    w, b = _params(weight, bias)
    pad = 0
    if _channel_last_ok(x):
        xk = x  # read in place, e.g. a channel slice of the q|k|v projection
    else:
        pad = -D % 8
        xk = F.pad(x, (0, pad)) if pad else x.clone(memory_format=torch.contiguous_format)  # [B, T, D8]
    w = _pad_channels(w, pad, 0)
    b = _pad_channels(b, pad, 0)
    init = None
    if initial_state is not None:
        # ours [N, D, W] -> the package's [N, D, W-1] with channel stride 1
        init = initial_state[:, :, 1:].transpose(1, 2).contiguous()  # [N, W-1, D]
        init = _pad_channels(init, pad, 2).transpose(1, 2)  # [N, D8, W-1], stride(1) == 1
    seq_idx = None if cu_seqlens is None else _seq_idx(cu_seqlens, T, x.device)
    want_pkg_final = output_final_state and cu_seqlens is None
    out = pkg.causal_conv1d_fn(
        xk.transpose(1, 2),  # [B, T, D8] -> channel-last [B, D8, T]
        w,
        b,
        seq_idx=seq_idx,
        initial_states=init,
        return_final_states=want_pkg_final,
        activation=activation,
    )
    y_t, pkg_final = out if want_pkg_final else (out, None)
    y = _PackageLayoutGrad.apply(y_t).transpose(1, 2)[..., :D]  # [B, D8, T] -> [B, T, D]
    final = None
    if output_final_state:
        if cu_seqlens is not None:
            final = _varlen_final(x, cu_seqlens, W)
        else:
            assert pkg_final is not None
            first = _history_column(x, initial_state, W)  # [B, D]
            if not final_grad_as_is:
                pkg_final = _PackageLayoutGrad.apply(pkg_final)
            final = torch.cat([first.unsqueeze(-1), pkg_final[:, :D]], dim=-1)  # [B, D, W]
    return y, final


def update(
    x: Tensor, state: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None
) -> tuple[Tensor, Tensor]:
    """One step for ``N`` sequences on a copy of ``state`` (the package shifts its state in place)."""
    _check(x, weight, bias, state, "state")
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, state, weight, bias)):
        y, new_state = forward(x.unsqueeze(1), weight, bias, activation, state, True, None)
        assert new_state is not None
        return y[:, 0], new_state
    w, b = _params(weight, bias)
    new_state = state.detach().clone(memory_format=torch.contiguous_format)  # [N, D, W], state_len = W
    y = _package().causal_conv1d_update(x.contiguous(), new_state, w, b, activation=activation)
    return y, new_state


BACKEND = Backend(
    name="cuda",
    forward=forward,
    update=update,
    unavailable=unavailable,
    description="Dao-AILab causal-conv1d (channel-last kernel, widths 2-4, fp32 arithmetic inside); CUDA only",
    # what the adapter cannot hand over: the package's other limits (channel multiples, strides, bias layout
    # and dtype) it meets itself, by a padded copy or a promotion
    capabilities=Capabilities(
        dtypes=("float32", "float16", "bfloat16"),
        widths=(_MIN_W, _MAX_W),
        activations=(None, "silu", "swish"),
        state_dtype_of_x=True,
        varlen_initial_state=False,
        devices=("cuda",),
    ),
)
