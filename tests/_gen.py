"""Small local Hypothesis strategies and helpers for the reference, backend and bad-input tests.

Kept tiny on purpose (hidden 8-16, 1-2 heads, head_dim 2-8, mostly T <= 20) so every example is
cheap; the shared ``gdn_equiv.strategies`` package covers the wide space. Everything shrinks
towards the smallest layer, fp32, no bias, short sequences.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from gdn_equiv.example import Example, build_layer
from gdn_equiv.families.gated_deltanet import GatedDeltaNet, GDNConfig
from gdn_equiv.testing import cu_from_lens as cu_from_lens  # re-exported: the tests import both from here
from gdn_equiv.testing import randn as randn

try:  # the colleague's per-example counter; a no-op until it lands
    from gdn_equiv.testing import count_example as _count_example
except ImportError:  # pragma: no cover - depends on the tree's state

    def _count_example(*args: Any, **kwargs: Any) -> None:
        return None


def count_example() -> None:
    _count_example()


@st.composite
def configs(
    draw: st.DrawFn,
    *,
    use_short_conv: bool | None = None,
    use_gate: bool | None = None,
    allow_neg_eigval: bool | None = None,
    gva: bool | None = None,
    mode: str | None = None,
) -> GDNConfig:
    """A tiny, valid layer config; ``None`` arguments are drawn. Shrinks to 1 head of dim 2, fp32 defaults."""
    num_heads = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2])) if gva is None else (2 if gva else 1)
    head_dim = draw(st.sampled_from([2, 4, 8]))
    expand_v = draw(st.sampled_from([1, 2, 0.5]))
    return GDNConfig(
        hidden_size=draw(st.sampled_from([8, 12, 16])),
        expand_v=expand_v,
        head_dim=head_dim,
        num_heads=num_heads,
        num_v_heads=None if group == 1 and draw(st.booleans()) else num_heads * group,
        use_gate=draw(st.booleans()) if use_gate is None else use_gate,
        use_short_conv=draw(st.booleans()) if use_short_conv is None else use_short_conv,
        allow_neg_eigval=draw(st.booleans()) if allow_neg_eigval is None else allow_neg_eigval,
        conv_size=draw(st.integers(2, 4)),
        conv_bias=draw(st.booleans()),
        output_gate_activation=draw(st.sampled_from(["swish", "silu", "sigmoid"])),
        mode=draw(st.sampled_from(["chunk", "recurrent"])) if mode is None else mode,
    )


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**16)


def seq_lens(*, min_n: int = 1, max_n: int = 4, max_len: int = 12) -> st.SearchStrategy[list[int]]:
    """Per-sequence lengths, empty and length-1 sequences included; at least one token in total."""
    return st.lists(st.integers(0, max_len), min_size=min_n, max_size=max_n).filter(lambda xs: sum(xs) > 0)


def make_layer(config: GDNConfig, seed: int, dtype: torch.dtype = torch.float32, cls: type = GatedDeltaNet) -> Any:
    """The layer for ``config`` with tame random parameters (uniform [-1, 1], as the suite's examples)."""
    name = str(dtype).removeprefix("torch.")
    return build_layer(Example(config=config, dtype=name, seed=seed), cls=cls)


def spec_layer(layer: GatedDeltaNet, x: torch.Tensor, *, beta_scale: float | None = None) -> torch.Tensor:
    """SPEC §2 written out independently, token by token in fp64, from ``layer``'s parameters only.

    Uses ``F.conv1d`` (groups = channels, left padding) for the short convs and an explicit per-token
    loop for the recurrence; shares no code with ``gdn_equiv.reference`` or ``gdn_equiv.core``.
    ``x [B, T, H]``; returns ``[B, T, H]`` in fp64.
    """
    d = torch.float64
    x = x.to(d)
    B, T, _ = x.shape
    Hk, Hv, Dk, Dv = layer.num_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim

    def lin(mod: torch.nn.Module, inp: torch.Tensor) -> torch.Tensor:
        return inp @ mod.weight.to(d).T

    q, k, v = lin(layer.q_proj, x), lin(layer.k_proj, x), lin(layer.v_proj, x)
    if layer.use_short_conv:
        outs = []
        for conv, inp in zip((layer.q_conv1d, layer.k_conv1d, layer.v_conv1d), (q, k, v), strict=True):
            W = conv.weight.shape[-1]
            bias = None if conv.bias is None else conv.bias.to(d)
            y = F.conv1d(F.pad(inp.transpose(1, 2), (W - 1, 0)), conv.weight.to(d), bias, groups=inp.shape[-1])
            y = y.transpose(1, 2)
            outs.append(y if conv.activation is None else y * torch.sigmoid(y))
        q, k, v = outs
    else:
        q, k, v = (t * torch.sigmoid(t) for t in (q, k, v))
    q, k, v = q.reshape(B, T, Hk, Dk), k.reshape(B, T, Hk, Dk), v.reshape(B, T, Hv, Dv)
    q = q / torch.sqrt((q**2).sum(-1, keepdim=True) + 1e-6)
    k = k / torch.sqrt((k**2).sum(-1, keepdim=True) + 1e-6)
    a, b = lin(layer.a_proj, x), lin(layer.b_proj, x)  # [B, T, Hv]
    g = -torch.exp(layer.A_log.to(d)) * F.softplus(a + layer.dt_bias.to(d))
    beta = torch.sigmoid(b) * (beta_scale if beta_scale is not None else (2.0 if layer.allow_neg_eigval else 1.0))
    o = torch.zeros(B, T, Hv, Dv, dtype=d)
    group = Hv // Hk
    for bi in range(B):
        for h in range(Hv):
            S = torch.zeros(Dv, Dk, dtype=d)
            for t in range(T):
                kt, qt = k[bi, t, h // group], q[bi, t, h // group]
                S = torch.exp(g[bi, t, h]) * S
                u = beta[bi, t, h] * (v[bi, t, h] - S @ kt)
                S = S + torch.outer(u, kt)
                o[bi, t, h] = S @ (qt * Dk**-0.5)
    y = o * torch.rsqrt((o**2).mean(-1, keepdim=True) + layer.o_norm.eps) * layer.o_norm.weight.to(d)
    if layer.use_gate:
        gate = lin(layer.g_proj, x).reshape(B, T, Hv, Dv)
        act = layer.config.output_gate_activation
        y = y * gate * torch.sigmoid(gate) if act in ("swish", "silu") else y * torch.sigmoid(gate)
    return y.reshape(B, T, Hv * Dv) @ layer.o_proj.weight.to(d).T
