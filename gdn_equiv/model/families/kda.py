"""Kimi Delta Attention (fla ``KimiDeltaAttention``): the gated delta rule with one decay per key
channel (``g = -exp(A_log) * softplus(f_proj(x) + dt_bias)``, ``[.., Hv, Dk]``).

Parameters and names are fla's: ``q_proj, k_proj, v_proj, {q,k,v}_conv1d, f_proj`` (low rank),
``b_proj, A_log [Hv], dt_bias [Hv*Dk], g_proj`` (low rank, bias on the second factor),
``o_norm`` (sigmoid-gated RMSNorm), ``o_proj``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gdn_equiv.model.choices import Choices
from gdn_equiv.model.families.base import DELTA_RULES, Family, fla_mode
from gdn_equiv.model.families.gated_deltanet import (
    ValueHeadsConfig,
    compute_dtype,
    decay_parameters,
    delta_rule,
    heads,
    value_head_dims,
)
from gdn_equiv.model.fla_versions import QKV_HELPER
from gdn_equiv.model.reference import LayerCall, Projections, RMSNorm, ShortConvLayer, repad

Tensor = torch.Tensor


@dataclass(frozen=True)
class KDAConfig(ValueHeadsConfig):
    """Constructor arguments of fla's ``KimiDeltaAttention`` (``safe_gate``/``lower_bound`` left at
    fla's defaults)."""

    expand_v: float = 1
    head_dim: int = 128
    num_heads: int = 16


class KimiDeltaAttention(ShortConvLayer):
    """Reference KDA layer."""

    config_cls = KDAConfig
    A_log: nn.Parameter
    dt_bias: nn.Parameter
    f_proj: nn.Sequential

    def _build(self, c: KDAConfig, factory: dict[str, Any]) -> None:
        self.num_heads, self.num_v_heads = c.num_heads, c.n_v_heads
        self.head_k_dim, self.head_v_dim = c.head_k_dim, c.head_v_dim
        self.key_dim, self.value_dim = c.key_dim, c.value_dim
        self.allow_neg_eigval = c.allow_neg_eigval
        self.gate_dim = self.num_v_heads * self.head_k_dim
        self.q_proj = nn.Linear(c.hidden_size, self.key_dim, bias=False, **factory)
        self.k_proj = nn.Linear(c.hidden_size, self.key_dim, bias=False, **factory)
        self.v_proj = nn.Linear(c.hidden_size, self.value_dim, bias=False, **factory)
        self._add_convs(factory)
        self.f_proj = nn.Sequential(
            nn.Linear(c.hidden_size, self.head_v_dim, bias=False, **factory),
            nn.Linear(self.head_v_dim, self.gate_dim, bias=False, **factory),
        )
        self.b_proj = nn.Linear(c.hidden_size, self.num_v_heads, bias=False, **factory)
        decay_parameters(self, self.num_v_heads, self.gate_dim, (1, 16), factory["device"])
        self.g_proj = nn.Sequential(
            nn.Linear(c.hidden_size, self.head_v_dim, bias=False, **factory),
            nn.Linear(self.head_v_dim, self.value_dim, bias=True, **factory),
        )
        self.o_norm = RMSNorm(self.head_v_dim, c.norm_eps, "sigmoid", **factory)
        self.o_proj = nn.Linear(self.value_dim, c.hidden_size, bias=False, **factory)

    def _input_linears(self) -> list[tuple[str, Any]]:
        return [
            ("q", self.q_proj),
            ("k", self.k_proj),
            ("v", self.v_proj),
            ("f", self.f_proj[0]),
            ("b", self.b_proj),
            ("g", self.g_proj[0]),
        ]

    def recurrent_state_shape(self, num_seqs: int) -> tuple[int, ...]:
        return (num_seqs, self.num_v_heads, self.head_v_dim, self.head_k_dim)

    def _recurrence(self, xs: tuple[Tensor, ...], proj: Projections, call: LayerCall) -> tuple[Tensor, dict[str, Any]]:
        q, k, v = heads(self, *xs)
        cdt = compute_dtype(q)
        f = self.f_proj[1](proj["f"]).unflatten(-1, (self.num_v_heads, self.head_k_dim))  # [B, T, Hv, Dk]
        A = torch.exp(self.A_log.to(cdt))[:, None]  # [Hv, 1]: one rate per head, per channel below
        g = -A * F.softplus(f.to(cdt) + self.dt_bias.to(cdt).view(self.num_v_heads, self.head_k_dim))
        return delta_rule(self, q, k, v, g, proj["b"], call)

    def _epilogue(self, o: Tensor, proj: Projections, call: LayerCall) -> Tensor:
        gate = self.g_proj[1](proj["g"]).unflatten(-1, (self.num_v_heads, self.head_v_dim))
        return repad(self.o_proj(self.o_norm(o, gate).flatten(-2)), call)


def kda_dims(
    pick: Choices, *, max_heads: int = 2, hidden_sizes: tuple[int, ...] = (8, 12, 16), channel_multiple: int = 1
) -> dict[str, Any]:
    """:func:`gdn_equiv.model.families.gated_deltanet.value_head_dims` and negative eigenvalues."""
    return value_head_dims(pick, max_heads, hidden_sizes, channel_multiple) | {"allow_neg_eigval": pick.flag()}


def _fla_kwargs(c: KDAConfig) -> dict[str, Any]:
    keys = ("hidden_size", "expand_v", "head_dim", "num_heads", "num_v_heads", "use_short_conv", "allow_neg_eigval")
    return {k: getattr(c, k) for k in (*keys, "conv_size", "conv_bias", "layer_idx", "norm_eps")} | {
        "mode": fla_mode(c)
    }


FAMILY = Family(
    name="kda",
    layer_cls=KimiDeltaAttention,
    dims=kda_dims,
    description="gated delta rule, one decay per key channel",
    fla_class="fla.layers.KimiDeltaAttention",
    fla_kwargs=_fla_kwargs,
    bench={"hidden_size": 2048, "head_dim": 128, "num_heads": 16, "expand_v": 1},
    small={"hidden_size": 16, "head_dim": 4, "num_heads": 2, "num_v_heads": 4, "expand_v": 0.5},
    fuses_from=(QKV_HELPER,),
    fla_rules={"0.6.0": DELTA_RULES, "0.5.2": DELTA_RULES},
)
