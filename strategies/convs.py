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
) -> ConvCall:
    """A conv call; ``None`` arguments are drawn, the kernel width from the inclusive range ``widths``
    (give a backend's :func:`gdn_equiv.backends.supported_widths`). Shrinks towards fp32, one channel,
    the smallest width, one short sequence, no bias, no activation, no initial state, no varlen. Up to
    40 channels so that a defect in a second 8- or 16-channel block is reachable. Without
    ``varlen_initial_state`` (a backend that refuses per-sequence states, e.g. causal-conv1d), varlen
    calls carry no initial state."""
    use_varlen = draw(st.booleans()) if varlen is None else varlen
    if use_varlen:
        lens = tuple(draw(st.lists(st.integers(0, max_seq_len), min_size=1, max_size=4).filter(sum)))
        B, T = 1, sum(lens)
    else:
        lens, B, T = (), draw(st.integers(1, 2)), draw(st.integers(1, max_seq_len))
    return ConvCall(
        B=B,
        T=T,
        D=draw(st.integers(min_channels, max_channels)),
        W=draw(st.integers(*widths)),
        dtype=draw(st.sampled_from(list(dtypes))),
        bias=draw(st.booleans()),
        activation=draw(st.sampled_from([None, "silu", "swish"])),
        initial_state=(draw(st.booleans()) if initial_state is None else initial_state)
        and (varlen_initial_state or not use_varlen),
        seq_lens=lens,
        seed=draw(st.integers(0, 2**16)),
    )
