"""Gated Linear Attention (fla ``GatedLinearAttention``): grouped k/v convs (``K / K/g / V/g``
channels with ``g = num_heads / num_kv_heads``) and the plain gated update with one decay per key
channel, ``S <- S diag(exp(gk)) + v k^T``, ``gk = logsigmoid(gk_proj(x)) / gate_logit_normalizer``.

Parameters and names are fla's: ``q_proj [K], k_proj [K/g], v_proj [V/g], g_proj [V]`` (with the
output gate), ``{q,k,v}_conv1d``, ``gk_proj`` (low rank, bias on the second factor), ``o_proj``,
and ``g_norm_swish_gate`` (swish gate fused into the norm, fla's default) or ``g_norm``.
``feature_map``, ``clamp_min``, ``elementwise_affine`` and ``fuse_norm`` stay at fla's defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.choices import Choices
from gdn_equiv.model.config import GATE_ACTIVATIONS, LayerConfig, check_positive_finite, check_positive_int
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
from gdn_equiv.model.fla_versions import QKV_HELPER
from gdn_equiv.model.reference import LayerCall, Projections, RMSNorm, ShortConvLayer, repad

Tensor = torch.Tensor


@dataclass(frozen=True)
class GLAConfig(LayerConfig):
    """Constructor arguments of fla's ``GatedLinearAttention`` (short conv on by default here: the
    prologue is what this suite tests)."""

    POSITIVE_INTS: ClassVar[tuple[str, ...]] = (
        "hidden_size",
        "conv_size",
        "num_heads",
        "gate_logit_normalizer",
        "gate_low_rank_dim",
    )
    BOOLS: ClassVar[tuple[str, ...]] = ("use_short_conv", "conv_bias", "use_output_gate")

    hidden_size: int = 1024
    expand_k: float = 0.5
    expand_v: float = 1.0
    num_heads: int = 4
    num_kv_heads: int | None = None
    use_output_gate: bool = True
    gate_fn: str = "swish"
    gate_logit_normalizer: int = 16
    gate_low_rank_dim: int = 16

    @property
    def n_kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def groups(self) -> int:
        return self.num_heads // self.n_kv_heads

    @property
    def key_dim(self) -> int:
        return int(self.hidden_size * self.expand_k)

    @property
    def value_dim(self) -> int:
        return int(self.hidden_size * self.expand_v)

    @property
    def head_k_dim(self) -> int:
        return self.key_dim // self.num_heads

    @property
    def head_v_dim(self) -> int:
        return self.value_dim // self.num_heads

    def conv_channels(self, name: str) -> int:
        return {"q": self.key_dim, "k": self.key_dim // self.groups, "v": self.value_dim // self.groups}[name]

    def validate(self) -> None:
        super().validate()
        owner = type(self).__name__
        for name in ("expand_k", "expand_v"):
            check_positive_finite(owner, name, getattr(self, name))
            exact = self.hidden_size * getattr(self, name)
            if not math.isclose(exact, int(exact), rel_tol=1e-9) or int(exact) < 1:
                raise InvalidArgument(
                    f"hidden_size*{name} = {exact} must be a positive integer ({name}={getattr(self, name)})"
                )
        if self.num_kv_heads is not None:
            check_positive_int(owner, "num_kv_heads", self.num_kv_heads)
        if self.num_heads % self.n_kv_heads:
            raise InvalidArgument(f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.n_kv_heads}")
        for name, dim in (("key_dim", self.key_dim), ("value_dim", self.value_dim)):
            if dim % self.num_heads:
                raise InvalidArgument(f"{name}={dim} must be divisible by num_heads={self.num_heads}")
        if self.gate_fn not in GATE_ACTIVATIONS:
            raise InvalidArgument(f"gate_fn must be one of {GATE_ACTIVATIONS}, got {self.gate_fn!r}")


class GatedLinearAttention(ShortConvLayer):
    """Reference GLA layer."""

    config_cls = GLAConfig
    NO_CONV_ACTIVATION = None

    def _build(self, c: GLAConfig, factory: dict[str, Any]) -> None:
        self.num_heads, self.groups = c.num_heads, c.groups
        self.head_k_dim, self.head_v_dim = c.head_k_dim, c.head_v_dim
        self.use_output_gate, self.gate_logit_normalizer = c.use_output_gate, c.gate_logit_normalizer
        self.q_proj = nn.Linear(c.hidden_size, c.key_dim, bias=False, **factory)
        self.k_proj = nn.Linear(c.hidden_size, c.conv_channels("k"), bias=False, **factory)
        self.v_proj = nn.Linear(c.hidden_size, c.conv_channels("v"), bias=False, **factory)
        if c.use_output_gate:
            self.g_proj = nn.Linear(c.hidden_size, c.value_dim, bias=False, **factory)
        self._add_convs(factory)
        self.gk_proj = nn.Sequential(
            nn.Linear(c.hidden_size, c.gate_low_rank_dim, bias=False, **factory),
            nn.Linear(c.gate_low_rank_dim, c.conv_channels("k"), bias=True, **factory),
        )
        self.o_proj = nn.Linear(c.value_dim, c.hidden_size, bias=False, **factory)
        # fla: the swish gate fused into the norm when there is one, else a plain fp32 norm
        self.fuse_norm_and_gate = c.gate_fn == "swish" and c.use_output_gate  # fla: swish only, by name
        if self.fuse_norm_and_gate:
            self.g_norm_swish_gate = RMSNorm(self.head_v_dim, c.norm_eps, "swish", **factory)
        else:
            self.g_norm = RMSNorm(self.head_v_dim, c.norm_eps, None, device=factory["device"], dtype=torch.float32)
        self.gate_fn = c.gate_fn

    def _input_linears(self) -> list[tuple[str, Any]]:
        linears = [("q", self.q_proj), ("k", self.k_proj), ("v", self.v_proj), ("gk", self.gk_proj[0])]
        return [*linears, ("g", self.g_proj)] if self.use_output_gate else linears

    def recurrent_state_shape(self, num_seqs: int) -> tuple[int, ...]:
        return (num_seqs, self.num_heads, self.head_v_dim, self.head_k_dim)

    def _grouped(self, t: Tensor, d: int) -> Tensor:
        return grouped(t, d, self.groups)

    def _recurrence(self, xs: tuple[Tensor, ...], proj: Projections, call: LayerCall) -> tuple[Tensor, dict[str, Any]]:
        q, k, v = xs
        q = q.unflatten(-1, (self.num_heads, self.head_k_dim))
        k, v = self._grouped(k, self.head_k_dim), self._grouped(v, self.head_v_dim)
        gk = self._grouped(self.gk_proj[1](proj["gk"]), self.head_k_dim)
        cdt = compute_dtype(q)
        gk = F.logsigmoid(gk.to(cdt)) / self.gate_logit_normalizer
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
        o = gated_norm(self, o, proj["g"] if self.use_output_gate else None)
        return repad(self.o_proj(o.flatten(-2)), call)


def grouped(t: Tensor, d: int, groups: int) -> Tensor:
    """``[.., Hkv*d] -> [.., Hkv*g, d]``: each kv head repeated for its ``g`` query heads (fla's
    ``repeat(x, '... (h d) -> ... (h g) d')``)."""
    return t.unflatten(-1, (-1, d)).repeat_interleave(groups, dim=-2)


def gated_norm(layer: Any, o: Tensor, g: Tensor | None) -> Tensor:
    """GLA's output: with a gate, the swish gate fused into the norm (fla's default for ``swish``) or a
    plain fp32 norm times ``gate_fn(g)``; without one, the norm alone. ``o [.., H, Dv]``."""
    if g is None:
        return layer.g_norm(o)
    g = g.unflatten(-1, (layer.num_heads, layer.head_v_dim))
    if layer.fuse_norm_and_gate:
        return layer.g_norm_swish_gate(o, g)
    return layer.g_norm(o) * (torch.sigmoid(g) if layer.gate_fn == "sigmoid" else F.silu(g))


def _valid_dims(
    hiddens: tuple[int, ...] = (8, 16), channel_multiple: int = 1
) -> list[tuple[int, float, float, int, int]]:
    """(hidden, expand_k, expand_v, num_heads, num_kv_heads) where every dim is an exact integer (and every
    conv's channel count a multiple of ``channel_multiple``)."""
    out = []
    for hidden in hiddens:
        for ek in (0.25, 0.5, 1.0):
            for ev in (0.5, 1.0):
                for kv in (1, 2):
                    for g in (1, 2):
                        h = kv * g
                        if (hidden * ek) % h == 0 and (hidden * ev) % h == 0:
                            channels = (hidden * ek, hidden * ek * kv / h, hidden * ev * kv / h)
                            if all(c % channel_multiple == 0 for c in channels):
                                out.append((hidden, ek, ev, h, kv))
    return out


_DIMS = _valid_dims()


def gla_dims(
    pick: Choices, *, max_heads: int = 2, hidden_sizes: tuple[int, ...] = (8, 16), channel_multiple: int = 1
) -> dict[str, Any]:
    """Hidden 8 or 16, ``expand_k`` in (0.25, 0.5, 1), ``expand_v`` in (0.5, 1), 1-2 kv heads with 1-2
    query heads each (grouped k/v convs), output gate on/off with its activation. Shrinks towards
    the first valid combination (hidden 8, one head). With a ``channel_multiple`` (a conv backend's),
    hidden sizes up to 64 where every conv's channel count is a multiple of it."""
    table = _DIMS if channel_multiple == 1 else _valid_dims((8, 16, 32, 64), channel_multiple)
    choices = [d for d in table if d[3] <= max(max_heads, 2) and d[0] in hidden_sizes] or table
    hidden, ek, ev, h, kv = pick.one(choices)
    return {
        "hidden_size": hidden,
        "expand_k": ek,
        "expand_v": ev,
        "num_heads": h,
        "num_kv_heads": None if kv == h else kv,
        "use_output_gate": pick.flag(),
        "gate_fn": pick.one(GATE_ACTIVATIONS),
        "gate_logit_normalizer": pick.one((16, 1)),
        "gate_low_rank_dim": pick.integer(1, 4),
    }


GLA_MODES = modes("chunk", "fused_recurrent", "fused_chunk")


def _fla_kwargs(c: GLAConfig) -> dict[str, Any]:
    keys = ("hidden_size", "expand_k", "expand_v", "num_heads", "num_kv_heads", "use_short_conv", "conv_size")
    more = ("conv_bias", "use_output_gate", "gate_fn", "norm_eps", "gate_logit_normalizer", "gate_low_rank_dim")
    return {k: getattr(c, k) for k in (*keys, *more)} | {
        "layer_idx": c.layer_idx,
        "mode": fla_mode(c),
    }


FAMILY = Family(
    name="gla",
    layer_cls=GatedLinearAttention,
    dims=gla_dims,
    description="gated linear update, grouped k/v convs",
    fla_class="fla.layers.GatedLinearAttention",
    fla_kwargs=_fla_kwargs,
    bench={"hidden_size": 2048, "expand_k": 0.5, "expand_v": 1.0, "num_heads": 4},
    small={"hidden_size": 16, "expand_k": 0.5, "expand_v": 1.0, "num_heads": 4, "num_kv_heads": 2},
    fuses_from=(QKV_HELPER,),
    fla_rules={
        "0.6.0": (KV_GROUPS, KEY_DIM_INTEGRAL, VALUE_DIM_INTEGRAL, GLA_MODES, KEY_DIM_PER_HEAD, VALUE_DIM_PER_HEAD),
        "0.5.2": (GLA_MODES, KEY_DIM_PER_HEAD, VALUE_DIM_PER_HEAD),
    },
)
