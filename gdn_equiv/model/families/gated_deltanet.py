"""Gated DeltaNet (fla ``GatedDeltaNet``): the family PR #972 fused first.

Parameters and their names are fla 0.6.0's: ``q_proj, k_proj, v_proj, a_proj, b_proj, A_log,
dt_bias, {q,k,v}_conv1d, g_proj`` (with ``use_gate``), ``o_norm, o_proj``. The core is the gated
delta rule with one decay per value head (SPEC §2).
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
from gdn_equiv.model.core import gated_delta_rule, l2norm
from gdn_equiv.model.families.base import DELTA_RULES, Family, fla_mode
from gdn_equiv.model.fla_versions import GDN_METHOD, QKV_HELPER, FlaRule
from gdn_equiv.model.fused import fused_variant
from gdn_equiv.model.reference import LayerCall, Projections, RMSNorm, ShortConvLayer, repad

Tensor = torch.Tensor


@dataclass(frozen=True)
class ValueHeadsConfig(LayerConfig):
    """Heads of the delta-rule families (GDN, KDA): ``num_heads`` q/k heads of ``head_dim``,
    ``num_v_heads`` value heads of ``head_dim * expand_v`` (GVA when more than ``num_heads``)."""

    POSITIVE_INTS: ClassVar[tuple[str, ...]] = ("hidden_size", "conv_size", "head_dim", "num_heads")
    BOOLS: ClassVar[tuple[str, ...]] = ("use_short_conv", "conv_bias", "allow_neg_eigval")

    expand_v: float = 2
    head_dim: int = 256
    num_heads: int = 6
    num_v_heads: int | None = None
    allow_neg_eigval: bool = False

    @property
    def n_v_heads(self) -> int:
        return self.num_heads if self.num_v_heads is None else self.num_v_heads

    @property
    def head_k_dim(self) -> int:
        return self.head_dim

    @property
    def head_v_dim(self) -> int:
        return int(self.head_dim * self.expand_v)

    @property
    def key_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def value_dim(self) -> int:
        return int(self.n_v_heads * self.head_v_dim)

    def conv_channels(self, name: str) -> int:
        return self.value_dim if name == "v" else self.key_dim

    def validate(self) -> None:
        super().validate()
        validate_value_heads(self)


@dataclass(frozen=True)
class GDNConfig(ValueHeadsConfig):
    """Constructor arguments of a Gated DeltaNet layer; names and defaults follow fla 0.6.0."""

    BOOLS: ClassVar[tuple[str, ...]] = ("use_short_conv", "conv_bias", "allow_neg_eigval", "use_gate")

    use_gate: bool = True
    output_gate_activation: str = "swish"

    def validate(self) -> None:
        super().validate()
        if self.output_gate_activation not in GATE_ACTIVATIONS:
            raise InvalidArgument(
                f"output_gate_activation must be one of {GATE_ACTIVATIONS}, got {self.output_gate_activation!r}"
            )


def validate_value_heads(c: Any) -> None:
    """fla's checks of ``expand_v`` and ``num_v_heads`` (GDN and KDA), as errors instead of a
    wrong-sized ``nn.Linear``."""
    owner = type(c).__name__
    if c.num_v_heads is not None:
        check_positive_int(owner, "num_v_heads", c.num_v_heads)
    check_positive_finite(owner, "expand_v", c.expand_v)
    exact_value_dim = c.n_v_heads * c.head_dim * c.expand_v
    if not math.isclose(exact_value_dim, c.value_dim, rel_tol=1e-5) or c.value_dim < 1:
        raise InvalidArgument(
            f"expand_v={c.expand_v} gives a non-integer value_dim: num_v_heads*head_dim*expand_v = "
            f"{exact_value_dim}, which must be a positive integer"
        )
    if not math.isclose(c.head_dim * c.expand_v, c.head_v_dim, rel_tol=1e-5):
        raise InvalidArgument(
            f"expand_v={c.expand_v} gives a non-integer head_v_dim: head_dim*expand_v = "
            f"{c.head_dim * c.expand_v}, which must be an integer"
        )
    if c.n_v_heads % c.num_heads != 0:
        raise InvalidArgument(
            f"num_v_heads={c.n_v_heads} must be a multiple of num_heads={c.num_heads} (GVA repeats q/k heads)"
        )


def decay_parameters(layer: nn.Module, heads: int, n: int, A_range: tuple[float, float], device: Any) -> None:
    """fla's ``A_log [heads]`` and ``dt_bias [n]`` initialisation; always fp32 like fla."""
    A = torch.empty(heads, dtype=torch.float32, device=device)
    layer.A_log = nn.Parameter(torch.log(A.uniform_(*A_range)))
    dt = torch.exp(torch.rand(n, device=device) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
    dt = dt.clamp_min(1e-4)
    layer.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))


def heads(layer: Any, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``[.., Hk*Dk] -> [.., Hv, Dk]`` (GVA repeats q/k heads), ``v -> [.., Hv, Dv]``."""
    q = q.unflatten(-1, (layer.num_heads, layer.head_k_dim))
    k = k.unflatten(-1, (layer.num_heads, layer.head_k_dim))
    v = v.unflatten(-1, (layer.num_v_heads, layer.head_v_dim))
    if layer.num_v_heads > layer.num_heads:
        group = layer.num_v_heads // layer.num_heads
        q, k = q.repeat_interleave(group, dim=-2), k.repeat_interleave(group, dim=-2)
    return q, k, v


def compute_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def delta_rule(
    layer: Any, q: Tensor, k: Tensor, v: Tensor, g: Tensor, b: Tensor, call: LayerCall
) -> tuple[Tensor, dict]:
    """The delta-rule families' core call (GDN, KDA): ``beta = sigmoid(b)`` (x2 with negative
    eigenvalues), q/k L2-normalised in the compute dtype, the cached recurrent state continued."""
    cdt = compute_dtype(q)
    beta = torch.sigmoid(b.to(cdt))
    if layer.allow_neg_eigval:
        beta = beta * 2
    initial = None if call.last_state is None else call.last_state.get("recurrent_state")
    o, state = gated_delta_rule(
        l2norm(q.to(cdt)),
        l2norm(k.to(cdt)),
        v,
        g,
        beta,
        scale=layer.head_k_dim**-0.5,
        initial_state=initial,
        cu_seqlens=call.cu_seqlens,
        mode=layer.mode,
    )
    return o.to(q.dtype), {"recurrent_state": state}


def value_head_dims(
    pick: Choices, max_heads: int, hidden_sizes: tuple[int, ...], channel_multiple: int = 1
) -> dict[str, Any]:
    """The delta-rule families' heads: 1..``max_heads`` q/k heads of dim 2..8, GVA ratio 1-2, ``expand_v``
    in (1, 2, 0.5) where ``head_dim * expand_v`` is an integer; shrinks to one head of dim 2. With a
    ``channel_multiple`` (a conv backend's), head dims of 1-2 times it and value head dims that stay
    multiples of it, so every conv's channel count is one."""
    num_heads = pick.integer(1, max_heads)
    m = channel_multiple
    wide = m >= 256  # the smallest multiples only: a state holds head_dim^2 elements a head (4096: 16 M)
    ratio = 1 if wide else pick.integer(1, 2)
    head_dim = pick.integer(2, 8) if m == 1 else m if wide else m * pick.integer(1, 2)
    return {
        "hidden_size": pick.one(hidden_sizes),
        "expand_v": pick.one(e for e in (1, 2, 0.5) if float(head_dim * e).is_integer() and head_dim * e % m == 0),
        "head_dim": head_dim,
        "num_heads": num_heads,
        "num_v_heads": None if ratio == 1 else num_heads * ratio,
    }


class GatedDeltaNet(ShortConvLayer):
    """Reference GDN layer; ``forward`` returns ``(o, None, past_key_values)`` like fla's."""

    config_cls = GDNConfig
    A_log: nn.Parameter
    dt_bias: nn.Parameter

    def _build(self, c: GDNConfig, factory: dict[str, Any]) -> None:
        self.expand_v, self.head_dim = c.expand_v, c.head_dim
        self.num_heads, self.num_v_heads = c.num_heads, c.n_v_heads
        self.head_k_dim, self.head_v_dim = c.head_k_dim, c.head_v_dim
        self.key_dim, self.value_dim = c.key_dim, c.value_dim
        self.use_gate, self.allow_neg_eigval = c.use_gate, c.allow_neg_eigval
        self.q_proj = nn.Linear(c.hidden_size, self.key_dim, bias=False, **factory)
        self.k_proj = nn.Linear(c.hidden_size, self.key_dim, bias=False, **factory)
        self.v_proj = nn.Linear(c.hidden_size, self.value_dim, bias=False, **factory)
        self.a_proj = nn.Linear(c.hidden_size, self.num_v_heads, bias=False, **factory)
        self.b_proj = nn.Linear(c.hidden_size, self.num_v_heads, bias=False, **factory)
        decay_parameters(self, self.num_v_heads, self.num_v_heads, (1e-3, 16), factory["device"])
        self._add_convs(factory)
        if c.use_gate:
            self.g_proj = nn.Linear(c.hidden_size, self.value_dim, bias=False, **factory)
            self.o_norm = RMSNorm(self.head_v_dim, c.norm_eps, c.output_gate_activation, **factory)
        else:
            self.o_norm = RMSNorm(self.head_v_dim, c.norm_eps, None, device=factory["device"], dtype=torch.float32)
        self.o_proj = nn.Linear(self.value_dim, c.hidden_size, bias=False, **factory)

    def _input_linears(self) -> list[tuple[str, Any]]:
        linears = [("q", self.q_proj), ("k", self.k_proj), ("v", self.v_proj), ("a", self.a_proj), ("b", self.b_proj)]
        return [*linears, ("g", self.g_proj)] if self.use_gate else linears

    def recurrent_state_shape(self, num_seqs: int) -> tuple[int, ...]:
        return (num_seqs, self.num_v_heads, self.head_v_dim, self.head_k_dim)

    def _recurrence(self, xs: tuple[Tensor, ...], proj: Projections, call: LayerCall) -> tuple[Tensor, dict[str, Any]]:
        """Heads, gates and the gated delta rule; returns ``o [B, T, Hv, Dv]`` in the input dtype."""
        q, k, v = heads(self, *xs)
        cdt = compute_dtype(q)
        g = -torch.exp(self.A_log.to(cdt)) * F.softplus(proj["a"].to(cdt) + self.dt_bias.to(cdt))
        return delta_rule(self, q, k, v, g, proj["b"], call)

    def _epilogue(self, o: Tensor, proj: Projections, call: LayerCall) -> Tensor:
        """Gated RMSNorm, output projection, re-pad to ``[B, T, H]``."""
        if self.use_gate:
            o = self.o_norm(o, proj["g"].unflatten(-1, (self.num_v_heads, self.head_v_dim)))
        else:
            o = self.o_norm(o)
        return repad(self.o_proj(o.flatten(-2)), call)  # [B, T, Hv, Dv] -> [B, T, value_dim] -> [B, T, H]


FusedGatedDeltaNet = fused_variant(GatedDeltaNet)


def gdn_dims(
    pick: Choices, *, max_heads: int = 2, hidden_sizes: tuple[int, ...] = (8, 12, 16), channel_multiple: int = 1
) -> dict[str, Any]:
    """:func:`value_head_dims`, the output gate on/off with its activation, negative eigenvalues.
    Shrinks towards one head of dim 2, ``expand_v=1``, no gate."""
    return value_head_dims(pick, max_heads, hidden_sizes, channel_multiple) | {
        "use_gate": pick.flag(),
        "allow_neg_eigval": pick.flag(),
        "output_gate_activation": pick.one(GATE_ACTIVATIONS),
    }


OUTPUT_GATE_ACTIVATION = FlaRule(
    "output_gate_activation in ('swish', 'silu', 'sigmoid')",
    lambda a: a.get("output_gate_activation", "swish") in ("swish", "silu", "sigmoid"),
    {"output_gate_activation": "relu"},
)


def _fla_kwargs(c: GDNConfig) -> dict[str, Any]:
    keys = ("hidden_size", "expand_v", "head_dim", "num_heads", "num_v_heads", "use_gate", "use_short_conv")
    more = ("allow_neg_eigval", "conv_size", "conv_bias", "layer_idx", "norm_eps", "output_gate_activation")
    return {k: getattr(c, k) for k in (*keys, *more)} | {"mode": fla_mode(c)}


FAMILY = Family(
    name="gated_deltanet",
    layer_cls=GatedDeltaNet,
    dims=gdn_dims,
    description="gated delta rule, one decay per head",
    fla_class="fla.layers.GatedDeltaNet",
    fla_kwargs=_fla_kwargs,
    bench={"hidden_size": 2048, "head_dim": 256, "num_heads": 6, "expand_v": 2},
    small={"hidden_size": 16, "head_dim": 4, "num_heads": 2, "num_v_heads": 4, "expand_v": 2},
    fuses_from=(GDN_METHOD, QKV_HELPER),
    reference_core="fla.layers.gated_deltanet",
    # PR #977's class has no output_gate_activation (the target drops the argument)
    fla_rules={"0.6.0": (*DELTA_RULES, OUTPUT_GATE_ACTIVATION), "0.5.2": DELTA_RULES},
)
