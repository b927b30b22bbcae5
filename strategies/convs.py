"""Single conv-backend calls (SPEC §3) as plain data, for backend conformance tests."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from gdn_equiv.model.conv_ops import activation_names
from gdn_equiv.model.example import DTYPES
from gdn_equiv.model.sampling import sampled

#: How a tensor of a call is laid out in memory (:func:`apply_layout`); the first is the default and
#: where shrinking goes.
LAYOUTS = ("contiguous", "sliced", "strided", "transposed", "expanded")
#: The tensors of a call that take a layout: the inputs, and the cotangents of y and of the final state.
LAYOUT_TENSORS = ("x", "weight", "bias", "initial_state", "dy", "dfinal")


def apply_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t`` (contiguous) in ``layout``; differentiable, so gradients flow back to ``t``.

    - ``contiguous``: ``t`` itself.
    - ``sliced``: a view into a larger buffer, offset by one element in every dimension, the last
      dimension 3 wider (a channel slice of q|k|v, a column of a wider state): last stride 1, the
      others not the contiguous ones, storage offset not 0.
    - ``strided``: every other element of a buffer twice as large in every dimension (last stride 2).
    - ``transposed``: the last two dimensions stored in swapped order: channel-last for ``[N, D, W]``
      states (causal-conv1d's layout), time-fastest for ``[B, T, D]``; a 1-D tensor stays as it is.
    - ``expanded``: the first row broadcast along dimension 0 (stride 0): the values change (every
      batch row, sequence state or channel weight equals the first), both backends see the same.

    Buffer elements outside the view are NaN, so a kernel that reads storage with the wrong strides
    reads NaN (or another element) and the comparison shows it.
    """
    if layout == "contiguous" or t.dim() == 0:
        return t
    if layout == "transposed":
        return t if t.dim() < 2 else t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "expanded":
        return t.narrow(0, 0, min(1, t.shape[0])).expand(t.shape)
    if layout == "sliced":
        shape = [n + 1 for n in t.shape[:-1]] + [t.shape[-1] + 3]
        index = tuple([slice(1, None)] * (t.dim() - 1) + [slice(1, 1 + t.shape[-1])])
    elif layout == "strided":
        shape = [2 * n for n in t.shape]
        index = tuple([slice(None, None, 2)] * t.dim())
    else:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    buffer = torch.full(shape, float("nan"), dtype=t.dtype, device=t.device)
    buffer[index] = t  # differentiable: the view below carries t's gradient
    return buffer[index]


@dataclass(frozen=True)
class ConvCall:
    """One ``causal_conv1d`` call: shapes, options and a seed for the tensors (see :meth:`tensors`).

    ``seq_lens`` set means varlen: ``B == 1``, ``T == sum(seq_lens)``, ``cu_seqlens`` from them.
    """

    B: int
    T: int
    D: int
    W: int
    dtype: str = "float32"
    bias: bool = False
    activation: str | None = None
    initial_state: bool = False
    seq_lens: tuple[int, ...] = ()
    seed: int = 0
    #: ``(tensor, layout)`` pairs (:data:`LAYOUT_TENSORS`, :data:`LAYOUTS`); a tensor not named is contiguous
    layouts: tuple[tuple[str, str], ...] = ()
    #: the weight's and bias's dtype when it is not x's (fp32 convs under bf16 activations: mixed
    #: precision); the initial state keeps x's dtype
    param_dtype: str | None = None

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens) if self.seq_lens else self.B

    def layout(self, name: str) -> str:
        """The layout of tensor ``name`` in this call (``contiguous`` unless :attr:`layouts` says otherwise)."""
        return dict(self.layouts).get(name, "contiguous")

    def tensors(self, device: str = "cpu", *, grad: bool = False) -> dict[str, Any]:  # Any: x never None, bias may be
        """``x [B,T,D]``, ``weight [D,W]``, ``bias [D]|None``, ``initial_state [N,D,W]|None``, ``cu_seqlens``,
        each in its :meth:`layout`. With ``grad``, each input is made from a contiguous leaf that
        requires grad (also returned, under ``"leaf." + name``), so the laid-out tensor carries a
        gradient too: differentiate with respect to either."""
        gen = torch.Generator().manual_seed(self.seed)
        dtype = DTYPES[self.dtype]

        def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype).to(device)

        x = randn(self.B, self.T, self.D)
        weight = randn(self.D, self.W, scale=0.5)
        bias = randn(self.D) if self.bias else None
        if self.param_dtype is not None:  # drawn like the others, then held in the parameters' dtype
            params = DTYPES[self.param_dtype]
            weight = weight.to(params)
            bias = None if bias is None else bias.to(params)
        state = randn(self.num_seqs, self.D, self.W) if self.initial_state else None
        cu = None
        if self.seq_lens:
            cu = torch.tensor([0, *self.seq_lens], dtype=torch.int64).cumsum(0).to(torch.int32).to(device)
        out: dict[str, torch.Tensor | None] = {"cu_seqlens": cu}
        for name, t in (("x", x), ("weight", weight), ("bias", bias), ("initial_state", state)):
            if t is not None and grad:
                t = t.requires_grad_()
                out[f"leaf.{name}"] = t
            out[name] = None if t is None else apply_layout(t, self.layout(name))
        return out

    def cotangents(self, device: str = "cpu", *, unused_state_slots: int = 0) -> dict[str, torch.Tensor]:
        """``dy [B,T,D]`` and ``dfinal [N,D,W]`` (seeded from :attr:`seed`), each in its :meth:`layout`;
        ``dfinal`` is zero in the first ``unused_state_slots`` slots (a backend's state convention)."""
        gen = torch.Generator().manual_seed(self.seed + 7)
        dtype = DTYPES[self.dtype]
        dy = torch.randn(self.B, self.T, self.D, generator=gen).to(dtype).to(device)
        dfinal = torch.randn(self.num_seqs, self.D, self.W, generator=gen).to(dtype).to(device)
        dfinal[..., : min(unused_state_slots, self.W)] = 0
        return {"dy": apply_layout(dy, self.layout("dy")), "dfinal": apply_layout(dfinal, self.layout("dfinal"))}


#: channel counts where kernels change code path: block and warp multiples (the fused call carries
#: all three slots' channels: 6,144 at the PR's shape)
_CHANNEL_EDGES = tuple(
    sorted({e + d for e in (32, 64, 128, 256, 512, 1024, 2048, 4096, 6144, 8192) for d in (-1, 0, 1)})
)
#: sequence lengths at tile edges (kernels tile time by 16..128)
_LENGTH_EDGES = tuple(sorted({e + d for e in (16, 32, 64, 128, 256) for d in (-1, 0, 1)}))


def _channels(draw: st.DrawFn, lo: int, hi: int, wide: int | None) -> int:
    """Mostly ``lo..hi``; with ``wide``, one draw in five is a channel count at a kernel edge up to it."""
    edges = [d for d in _CHANNEL_EDGES if max(lo, hi + 1) <= d <= (wide or 0)]
    if edges and draw(st.integers(0, 4)) == 0:
        return draw(sampled(edges))
    return draw(st.integers(lo, hi))


def _length(draw: st.DrawFn, W: int, max_len: int, long: int | None) -> int:
    """Mostly ``1..max_len``; one draw in five around the kernel width (``W-2..W``: fla #1140 was a
    backward wrong only for ``T < W-1``), and with ``long`` one in five at a tile edge up to it."""
    band = draw(st.integers(0, 4))
    if band == 0:
        return draw(st.integers(max(1, W - 2), max(1, W)))
    edges = [t for t in _LENGTH_EDGES if max_len < t <= (long or 0)]
    if band == 1 and edges:
        return draw(sampled(edges))
    return draw(st.integers(1, max_len))


@st.composite
def conv_calls(
    draw: st.DrawFn,
    *,
    dtypes: Sequence[str] = ("float32", "float16", "bfloat16"),
    min_channels: int = 1,
    max_channels: int = 40,
    widths: tuple[int, int] = (1, 4),
    max_seq_len: int = 16,
    varlen: bool | None = None,
    initial_state: bool | None = None,
    varlen_initial_state: bool = True,
    wide_channels: int | None = None,
    long_seq_len: int | None = None,
    layouts: Sequence[str] = ("contiguous",),
    activations: Sequence[str | None] = (None, "silu", "swish"),
    mixed_precision: bool = True,
) -> ConvCall:
    """A conv call; ``None`` arguments are drawn, the kernel width from the inclusive range ``widths``
    (give a backend's :func:`gdn_equiv.model.backends.supported_widths`). Shrinks towards fp32, one channel,
    the smallest width, one short sequence, no bias, no activation, no initial state, no varlen. Up to
    40 channels so that a defect in a second 8- or 16-channel block is reachable; ``wide_channels``
    adds channel counts at block edges up to it (where real kernels change code path), ``long_seq_len``
    lengths at tile edges up to it; lengths around the kernel width are always drawn. Without
    ``varlen_initial_state`` (a backend that refuses per-sequence states, e.g. causal-conv1d), varlen
    calls carry no initial state. ``layouts`` are the memory layouts (:data:`LAYOUTS`) each tensor of
    :data:`LAYOUT_TENSORS` may be drawn in, independently (inputs and cotangents); they shrink to
    contiguous, and one draw in three keeps every tensor contiguous. ``activations`` are drawn from
    (give :func:`gdn_equiv.model.backends.supported_activations` of the backends compared: registered ones
    such as ``relu`` only where every one runs them); they shrink to the first. With
    ``mixed_precision``, one call in four holds its weight and bias in another of ``dtypes`` than x
    (:attr:`ConvCall.param_dtype`; shrinks to none)."""
    W = draw(st.integers(*widths))
    use_varlen = draw(st.booleans()) if varlen is None else varlen
    if use_varlen:
        lens = tuple(draw(_packed_lens(max_seq_len)))
        B, T = 1, sum(lens)
    else:
        lens, B, T = (), draw(st.integers(1, 2)), _length(draw, W, max_seq_len, long_seq_len)
    dtype = draw(sampled(dtypes))
    others = [d for d in dtypes if d != dtype]
    param_dtype = draw(sampled(others)) if mixed_precision and others and draw(st.integers(0, 3)) == 3 else None
    return ConvCall(
        B=B,
        T=T,
        D=_channels(draw, min_channels, max_channels, wide_channels),
        W=W,
        dtype=dtype,
        param_dtype=param_dtype,
        bias=draw(st.booleans()),
        activation=draw(sampled(_nonempty_activations(activations))),
        initial_state=(draw(st.booleans()) if initial_state is None else initial_state)
        and (varlen_initial_state or not use_varlen),
        seq_lens=lens,
        seed=draw(st.integers(0, 2**16)),
        layouts=_layouts(draw, layouts),
    )


@functools.lru_cache(maxsize=256)  # one strategy per bound: see gdn_equiv.model.sampling.sampled
def _packed_lens(max_seq_len: int) -> st.SearchStrategy[list[int]]:
    """1 to 4 packed sequences of up to ``max_seq_len`` tokens, at least one token in all."""
    return st.lists(st.integers(0, max_seq_len), min_size=1, max_size=4).filter(sum)


def _nonempty_activations(activations: Sequence[str | None]) -> Sequence[str | None]:
    if not activations:
        raise InvalidArgument("activations must not be empty")
    unknown = [a for a in activations if a not in activation_names()]
    if unknown:
        raise InvalidArgument(f"activations {unknown} are not registered; known: {list(activation_names())}")
    return activations


def _layouts(draw: st.DrawFn, kinds: Sequence[str]) -> tuple[tuple[str, str], ...]:
    unknown = [k for k in kinds if k not in LAYOUTS]
    if unknown:
        raise InvalidArgument(f"unknown layouts {unknown}; known: {', '.join(LAYOUTS)}")
    kinds = ["contiguous", *(k for k in kinds if k != "contiguous")]
    if len(kinds) == 1 or draw(st.integers(0, 2)) == 0:
        return ()
    chosen = ((name, draw(sampled(kinds))) for name in LAYOUT_TENSORS)
    return tuple((name, kind) for name, kind in chosen if kind != "contiguous")
