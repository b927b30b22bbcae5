"""LightNet (fla ``LightNetAttention``): convs without an activation (``silu`` on q after the conv),
the ``attention_mask`` kept dense and multiplied into the conv input, and a gated linear update
whose key is normalised by a running log-sum-exp: ``z_t = logaddexp(z_{t-1}, k_t)``,
``k_t <- exp(k_t - z_t)``, decay ``z_{t-1} - z_t`` per key channel. The cache keeps ``z`` of the
last token as ``ffn_state``.

Parameters and names are fla's: ``q_proj [K], k_proj [K], v_proj [hidden]``, ``{q,k,v}_conv1d``,
``g_proj`` (low rank), ``g_norm`` (swish-gated RMSNorm over the whole hidden size), ``o_proj``.
Where fla continues ``z`` from the cache only for one-token steps, the reference continues it for
any length (a prefill in pieces equals one prefill), and it runs ``cu_seqlens`` per sequence
(fla raises ``NotImplementedError`` there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.choices import Choices
from gdn_equiv.model.config import ConvSpec, LayerConfig
from gdn_equiv.model.core import gated_delta_rule
from gdn_equiv.model.families.base import Family, modes
from gdn_equiv.model.families.gated_deltanet import compute_dtype
from gdn_equiv.model.fla_versions import QKV_HELPER, FlaRule
from gdn_equiv.model.reference import LayerCall, Projections, RMSNorm, ShortConvLayer, repad

Tensor = torch.Tensor


#: the eps of fla's ``rms_norm_swish_gate_linear``, which LightNetAttention.forward calls without one
FLA_OUTPUT_NORM_EPS = 1e-6


@dataclass(frozen=True)
class LightNetConfig(LayerConfig):
    """Constructor arguments of fla's ``LightNetAttention`` (``num_heads`` and ``expand_ratio`` both
    given; short conv on by default here)."""

    POSITIVE_INTS: ClassVar[tuple[str, ...]] = (
        "hidden_size",
        "conv_size",
        "num_heads",
        "expand_ratio",
        "gate_low_rank_dim",
    )

    hidden_size: int = 1024
    num_heads: int = 8
    expand_ratio: int = 128
    gate_low_rank_dim: int = 128
    # fla builds these convs without an activation (silu follows on q); a spec may still set one
    q_conv: ConvSpec = field(default_factory=lambda: ConvSpec(activation=None))
    k_conv: ConvSpec = field(default_factory=lambda: ConvSpec(activation=None))
    v_conv: ConvSpec = field(default_factory=lambda: ConvSpec(activation=None))

    @property
    def key_dim(self) -> int:
        return self.num_heads * self.expand_ratio

    @property
    def value_dim(self) -> int:
        return self.hidden_size

    def conv_channels(self, name: str) -> int:
        return self.value_dim if name == "v" else self.key_dim

    def validate(self) -> None:
        super().validate()
        if self.hidden_size % self.num_heads:
            raise InvalidArgument(f"hidden_size={self.hidden_size} must be divisible by num_heads={self.num_heads}")


class LightNetAttention(ShortConvLayer):
    """Reference LightNet layer."""

    config_cls = LightNetConfig
    MASK = "dense"
    NO_CONV_ACTIVATION = None

    def _build(self, c: LightNetConfig, factory: dict[str, Any]) -> None:
        self.num_heads, self.head_f_dim, self.head_i_dim = c.num_heads, c.expand_ratio, c.hidden_size // c.num_heads
        self.key_dim = c.key_dim
        self.q_proj = nn.Linear(c.hidden_size, c.key_dim, bias=False, **factory)
        self.k_proj = nn.Linear(c.hidden_size, c.key_dim, bias=False, **factory)
        self.v_proj = nn.Linear(c.hidden_size, c.value_dim, bias=False, **factory)
        self._add_convs(factory)
        self.g_proj = nn.Sequential(
            nn.Linear(c.hidden_size, c.gate_low_rank_dim, bias=False, **factory),
            nn.Linear(c.gate_low_rank_dim, c.hidden_size, bias=False, **factory),
        )
        # fla builds its g_norm with norm_eps, but its forward calls rms_norm_swish_gate_linear without
        # an eps, so the norm runs at that function's default (0.5.2, #977 and 0.6.0 alike): what fla
        # computes, found by gdn_equiv.harness.faithful (gradients 1e-4 apart at T = 1)
        self.g_norm = RMSNorm(c.hidden_size, FLA_OUTPUT_NORM_EPS, "swish", **factory)
        self.o_proj = nn.Linear(c.value_dim, c.hidden_size, bias=False, **factory)

    def _input_linears(self) -> list[tuple[str, Any]]:
        return [("q", self.q_proj), ("k", self.k_proj), ("v", self.v_proj), ("g", self.g_proj[0])]

    def recurrent_state_shape(self, num_seqs: int) -> tuple[int, ...]:
        return (num_seqs, self.num_heads, self.head_i_dim, self.head_f_dim)

    def _check_state(self, state: Any, num_seqs: int, x: Tensor) -> None:
        super()._check_state(state, num_seqs, x)
        z = state.get("ffn_state")
        shape = (num_seqs, 1, self.num_heads, self.head_f_dim)
        if z is not None and (not isinstance(z, torch.Tensor) or tuple(z.shape) != shape or z.device != x.device):
            raise InvalidArgument(
                f"cached ffn_state must have shape {shape} on {x.device}, got {tuple(getattr(z, 'shape', ()))}"
            )

    def _normalise_keys(self, k: Tensor, mask: Tensor | None, last_z: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """One sequence batch ``k [B, T, H, Df]`` (fp32): ``(k / exp(z), log decay, z of the last token)``."""
        k_for_z = k if mask is None else k.masked_fill(mask[..., None, None] == 0, float("-inf"))
        z = k_for_z.logcumsumexp(1)
        if last_z is not None:
            z = torch.logaddexp(last_z, z)
        start = last_z if last_z is not None else z[:, :1]
        g = torch.cat((start, z[:, :-1]), 1) - z
        k_new = torch.nan_to_num(torch.exp(k - z), nan=0.0, posinf=0.0)
        return k_new, torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0), z[:, -1:]

    def _recurrence(self, xs: tuple[Tensor, ...], proj: Projections, call: LayerCall) -> tuple[Tensor, dict[str, Any]]:
        q, k, v = xs
        if call.conv_mask is not None:
            v = v * call.conv_mask[..., None]
        q = torch.nn.functional.silu(q).unflatten(-1, (self.num_heads, self.head_f_dim))
        k = k.unflatten(-1, (self.num_heads, self.head_f_dim))
        v = v.unflatten(-1, (self.num_heads, self.head_i_dim))
        cdt = compute_dtype(q)
        last = call.last_state or {}
        last_z = last.get("ffn_state")
        kf = k.to(cdt)
        if call.cu_seqlens is None:
            k_n, g, z_end = self._normalise_keys(kf, call.conv_mask, None if last_z is None else last_z.to(cdt))
        else:  # per sequence: the running sum restarts at every boundary
            bounds = call.cu_seqlens.tolist()
            parts, gs, ends = [], [], []
            for s in range(len(bounds) - 1):
                sl = slice(bounds[s], bounds[s + 1])
                lz = None if last_z is None else last_z[s : s + 1].to(cdt)
                k_s, g_s, z_s = self._normalise_keys(kf[:, sl], None, lz)
                if bounds[s + 1] == bounds[s]:  # an empty sequence keeps its state
                    z_s = lz if lz is not None else kf.new_full((1, 1, *kf.shape[2:]), float("-inf"))
                parts.append(k_s)
                gs.append(g_s)
                ends.append(z_s)
            k_n, g, z_end = torch.cat(parts, 1), torch.cat(gs, 1), torch.cat(ends, 0)
        o, state = gated_delta_rule(
            q,
            k_n.to(k.dtype),
            v,
            g.to(k.dtype),
            None,
            scale=self.head_f_dim**-0.5,
            initial_state=last.get("recurrent_state"),
            cu_seqlens=call.cu_seqlens,
            mode=self.mode,
        )
        return o.to(q.dtype), {"recurrent_state": state, "ffn_state": z_end}

    def _epilogue(self, o: Tensor, proj: Projections, call: LayerCall) -> Tensor:
        o = self.g_norm(o.flatten(-2), self.g_proj[1](proj["g"]))  # [B, T, H, Di] -> [B, T, hidden]
        return repad(self.o_proj(o), call)


def lightnet_dims(
    pick: Choices, *, max_heads: int = 2, hidden_sizes: tuple[int, ...] = (8, 12, 16), channel_multiple: int = 1
) -> dict[str, Any]:
    """Heads 1..``max_heads`` dividing the hidden size, ``expand_ratio`` (key dim per head) 2..6, a
    low-rank gate of 1..4. Shrinks towards one head, ``expand_ratio=2``. With a ``channel_multiple`` (a
    conv backend's): hidden sizes and key dims per head that are multiples of it."""
    num_heads = pick.integer(1, max_heads)
    m = channel_multiple
    fits = [h for h in hidden_sizes if h % num_heads == 0 and h % m == 0]
    hidden = pick.one(fits or [8 * m * num_heads])
    return {
        "hidden_size": hidden,
        "num_heads": num_heads,
        "expand_ratio": pick.integer(2, 6) if m == 1 else m * pick.integer(1, 2),
        "gate_low_rank_dim": pick.integer(1, 4),
    }


_HIDDEN_PER_HEAD = FlaRule(
    "value_dim (hidden_size) divisible by num_heads", lambda a: a["hidden_size"] % a["num_heads"] == 0, {"num_heads": 3}
)


def _fla_kwargs(c: LightNetConfig) -> dict[str, Any]:
    keys = ("hidden_size", "num_heads", "expand_ratio", "use_short_conv", "conv_size", "conv_bias")
    return {k: getattr(c, k) for k in (*keys, "gate_low_rank_dim", "norm_eps", "layer_idx")} | {
        "mode": "chunk"
    }  # fla's LightNet has no recurrent mode (it runs fused_recurrent for T <= 64 itself)


FAMILY = Family(
    name="lightnet",
    layer_cls=LightNetAttention,
    dims=lightnet_dims,
    description="convs without activation, dense mask, log-sum-exp keys",
    fla_class="fla.layers.LightNetAttention",
    fla_kwargs=_fla_kwargs,
    bench={"hidden_size": 2048, "num_heads": 16, "expand_ratio": 128},
    small={"hidden_size": 16, "num_heads": 2, "expand_ratio": 4, "gate_low_rank_dim": 3},
    fuses_from=(QKV_HELPER,),
    # the key dim is num_heads * expand_ratio, divisible by construction; the value dim is hidden_size
    fla_rules={
        "0.6.0": (modes("chunk", "fused_recurrent"), _HIDDEN_PER_HEAD),
        "0.5.2": (modes("chunk", "fused_chunk"), _HIDDEN_PER_HEAD),
    },
)
