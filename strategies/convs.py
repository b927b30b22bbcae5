"""Single conv-backend calls (SPEC §3) as plain data, for backend conformance tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from gdn_equiv.example import DTYPES


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

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens) if self.seq_lens else self.B

    def tensors(self, device: str = "cpu") -> dict[str, torch.Tensor | None]:
        """``x [B,T,D]``, ``weight [D,W]``, ``bias [D]|None``, ``initial_state [N,D,W]|None``, ``cu_seqlens``."""
        gen = torch.Generator().manual_seed(self.seed)
        dtype = DTYPES[self.dtype]

        def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype).to(device)

        x = randn(self.B, self.T, self.D)
        weight = randn(self.D, self.W, scale=0.5)
        bias = randn(self.D) if self.bias else None
        state = randn(self.num_seqs, self.D, self.W) if self.initial_state else None
        cu = None
        if self.seq_lens:
            cu = torch.tensor([0, *self.seq_lens], dtype=torch.int64).cumsum(0).to(torch.int32).to(device)
        return {"x": x, "weight": weight, "bias": bias, "initial_state": state, "cu_seqlens": cu}


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
        return draw(st.sampled_from(edges))
    return draw(st.integers(lo, hi))


def _length(draw: st.DrawFn, W: int, max_len: int, long: int | None) -> int:
    """Mostly ``1..max_len``; one draw in five around the kernel width (``W-2..W``: fla #1140 was a
    backward wrong only for ``T < W-1``), and with ``long`` one in five at a tile edge up to it."""
    band = draw(st.integers(0, 4))
    if band == 0:
        return draw(st.integers(max(1, W - 2), max(1, W)))
    edges = [t for t in _LENGTH_EDGES if max_len < t <= (long or 0)]
    if band == 1 and edges:
        return draw(st.sampled_from(edges))
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
) -> ConvCall:
    """A conv call; ``None`` arguments are drawn, the kernel width from the inclusive range ``widths``
    (give a backend's :func:`gdn_equiv.backends.supported_widths`). Shrinks towards fp32, one channel,
    the smallest width, one short sequence, no bias, no activation, no initial state, no varlen. Up to
    40 channels so that a defect in a second 8- or 16-channel block is reachable; ``wide_channels``
    adds channel counts at block edges up to it (where real kernels change code path), ``long_seq_len``
    lengths at tile edges up to it; lengths around the kernel width are always drawn. Without
    ``varlen_initial_state`` (a backend that refuses per-sequence states, e.g. causal-conv1d), varlen
    calls carry no initial state."""
    W = draw(st.integers(*widths))
    use_varlen = draw(st.booleans()) if varlen is None else varlen
    if use_varlen:
        lens = tuple(draw(st.lists(st.integers(0, max_seq_len), min_size=1, max_size=4).filter(sum)))
        B, T = 1, sum(lens)
    else:
        lens, B, T = (), draw(st.integers(1, 2)), _length(draw, W, max_seq_len, long_seq_len)
    return ConvCall(
        B=B,
        T=T,
        D=_channels(draw, min_channels, max_channels, wide_channels),
        W=W,
        dtype=draw(st.sampled_from(list(dtypes))),
        bias=draw(st.booleans()),
        activation=draw(st.sampled_from([None, "silu", "swish"])),
        initial_state=(draw(st.booleans()) if initial_state is None else initial_state)
        and (varlen_initial_state or not use_varlen),
        seq_lens=lens,
        seed=draw(st.integers(0, 2**16)),
    )
