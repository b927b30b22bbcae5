"""Simple GLA (fla ``SimpleGatedLinearAttention``): GLA's grouped k/v convs with one decay per head
(``gk_proj: Linear(hidden, num_heads)`` with a bias), the ``attention_mask`` kept dense (multiplied
into the conv input, then into ``v``), and the output always gated.

Parameters and names are fla's: ``q_proj [K], k_proj [K/g], v_proj [V/g], g_proj [V]``,
``{q,k,v}_conv1d``, ``gk_proj``, ``g_norm_swish_gate`` (swish gate fused into the norm) or ``g_norm``,
``o_proj``. Where fla writes the mask into ``v`` in place (which breaks autograd, an upstream defect),
the reference multiplies out of place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gdn_equiv.model.choices import Choices
from gdn_equiv.model.config import GATE_ACTIVATIONS
from gdn_equiv.model.core import gated_delta_rule
from gdn_equiv.model.families.base import (
    KEY_DIM_INTEGRAL,
    KEY_DIM_PER_HEAD,
    KV_GROUPS,
    VALUE_DIM_INTEGRAL,
    VALUE_DIM_PER_HEAD,
    Family,
    fla_mode,
    modes,
)
from gdn_equiv.model.families.gated_deltanet import compute_dtype
from gdn_equiv.model.families.gla import GLAConfig, gated_norm, gla_dims, grouped
from gdn_equiv.model.fla_versions import QKV_HELPER
from gdn_equiv.model.reference import LayerCall, Projections, RMSNorm, ShortConvLayer, repad

Tensor = torch.Tensor


@dataclass(frozen=True)
class SimpleGLAConfig(GLAConfig):
    """fla's ``SimpleGatedLinearAttention`` arguments: GLA's heads and gate activation; the output gate
    is always on and there is no low-rank gate (``use_output_gate``/``gate_low_rank_dim`` are unused)."""

    expand_k: float = 1.0


class SimpleGatedLinearAttention(ShortConvLayer):
    """Reference Simple GLA layer."""

    config_cls = SimpleGLAConfig
    MASK = "dense"
    NO_CONV_ACTIVATION = None

    def _build(self, c: SimpleGLAConfig, factory: dict[str, Any]) -> None:
        self.num_heads, self.groups = c.num_heads, c.groups
        self.head_k_dim, self.head_v_dim = c.head_k_dim, c.head_v_dim
        self.gate_logit_normalizer, self.gate_fn = c.gate_logit_normalizer, c.gate_fn
        self.q_proj = nn.Linear(c.hidden_size, c.key_dim, bias=False, **factory)
        self.k_proj = nn.Linear(c.hidden_size, c.conv_channels("k"), bias=False, **factory)
        self.v_proj = nn.Linear(c.hidden_size, c.conv_channels("v"), bias=False, **factory)
        self.g_proj = nn.Linear(c.hidden_size, c.value_dim, bias=False, **factory)
        self._add_convs(factory)
        self.gk_proj = nn.Linear(c.hidden_size, c.num_heads, bias=True, **factory)
        self.fuse_norm_and_gate = c.gate_fn == "swish"  # fla: swish only, by name
        if self.fuse_norm_and_gate:
            self.g_norm_swish_gate = RMSNorm(self.head_v_dim, c.norm_eps, "swish", **factory)
        else:
            self.g_norm = RMSNorm(self.head_v_dim, c.norm_eps, None, device=factory["device"], dtype=torch.float32)
        self.o_proj = nn.Linear(c.value_dim, c.hidden_size, bias=False, **factory)

    def _input_linears(self) -> list[tuple[str, Any]]:
        # gk_proj's bias is added after the shared matmul
        return [("q", self.q_proj), ("k", self.k_proj), ("v", self.v_proj), ("g", self.g_proj), ("gk", self.gk_proj)]

    def recurrent_state_shape(self, num_seqs: int) -> tuple[int, ...]:
        return (num_seqs, self.num_heads, self.head_v_dim, self.head_k_dim)

    def _recurrence(self, xs: tuple[Tensor, ...], proj: Projections, call: LayerCall) -> tuple[Tensor, dict[str, Any]]:
        q, k, v = xs
        if call.conv_mask is not None:
            v = v * call.conv_mask[..., None]
        q = q.unflatten(-1, (self.num_heads, self.head_k_dim))
        k, v = grouped(k, self.head_k_dim, self.groups), grouped(v, self.head_v_dim, self.groups)
        cdt = compute_dtype(q)
        gk = F.logsigmoid((proj["gk"] + self.gk_proj.bias).to(cdt)) / self.gate_logit_normalizer  # [B, T, H]
        initial = None if call.last_state is None else call.last_state.get("recurrent_state")
        o, state = gated_delta_rule(
            q,
            k,
            v,
            gk,
            None,
            scale=self.head_k_dim**-0.5,
            initial_state=initial,
            cu_seqlens=call.cu_seqlens,
            mode=self.mode,
        )
        return o.to(q.dtype), {"recurrent_state": state}

    def _epilogue(self, o: Tensor, proj: Projections, call: LayerCall) -> Tensor:
        return repad(self.o_proj(gated_norm(self, o, proj["g"]).flatten(-2)), call)


def simple_gla_dims(
    pick: Choices, *, max_heads: int = 2, hidden_sizes: tuple[int, ...] = (8, 16), channel_multiple: int = 1
) -> dict[str, Any]:
    """GLA's grouped heads (:func:`gdn_equiv.model.families.gla.gla_dims`) without its low-rank and optional
    output gates; the gate activation drawn."""
    dims = gla_dims(pick, max_heads=max_heads, hidden_sizes=hidden_sizes, channel_multiple=channel_multiple)
    keep = ("hidden_size", "expand_k", "expand_v", "num_heads", "num_kv_heads", "gate_logit_normalizer")
    return {k: dims[k] for k in keep} | {"gate_fn": pick.one(GATE_ACTIVATIONS)}


_MODES = modes("chunk", "fused_recurrent")


def _fla_kwargs(c: SimpleGLAConfig) -> dict[str, Any]:
    keys = ("hidden_size", "expand_k", "expand_v", "num_heads", "num_kv_heads", "use_short_conv", "conv_size")
    more = ("conv_bias", "gate_fn", "norm_eps", "gate_logit_normalizer", "layer_idx")
    return {k: getattr(c, k) for k in (*keys, *more)} | {"mode": fla_mode(c)}


FAMILY = Family(
    name="simple_gla",
    layer_cls=SimpleGatedLinearAttention,
    dims=simple_gla_dims,
    description="gated linear update, one decay per head, grouped k/v, dense mask",
    fla_class="fla.layers.simple_gla.SimpleGatedLinearAttention",
    fla_kwargs=_fla_kwargs,
    bench={"hidden_size": 2048, "expand_k": 1.0, "expand_v": 1.0, "num_heads": 4},
    small={"hidden_size": 16, "expand_k": 0.5, "expand_v": 1.0, "num_heads": 4, "num_kv_heads": 2},
    fuses_from=(QKV_HELPER,),
    fla_rules={
        "0.6.0": (KV_GROUPS, KEY_DIM_INTEGRAL, VALUE_DIM_INTEGRAL, _MODES, KEY_DIM_PER_HEAD, VALUE_DIM_PER_HEAD),
        "0.5.2": (_MODES, KEY_DIM_PER_HEAD, VALUE_DIM_PER_HEAD),
    },
)
