"""Frozen, hashable descriptions of a layer, of its three convs and of one call.

The guard sees only these facts, never a module, so a decision can be recomputed, printed and
compared with the spec oracle from plain data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gdn_equiv.errors import InvalidArgument

CONV_ACTIVATIONS = ("silu", "swish", None)
GATE_ACTIVATIONS = ("swish", "silu", "sigmoid")
CORE_MODES = ("chunk", "recurrent")
CONV_NAMES = ("q", "k", "v")


def canonical_activation(activation: str | None) -> str | None:
    """``silu`` and ``swish`` are one function; the guard and the backends compare this form."""
    if activation not in CONV_ACTIVATIONS:
        raise InvalidArgument(f"conv activation must be one of {CONV_ACTIVATIONS}, got {activation!r}")
    return "silu" if activation == "swish" else activation


@dataclass(frozen=True)
class ConvSpec:
    """How one of the q/k/v convs deviates from the layer's defaults (``None`` = the layer's value).

    ``bias`` may disagree with the layer's ``conv_bias`` flag: that is exactly the state upstream's
    guard mishandles (SPEC §1).
    """

    backend: str | None = None
    activation: str | None = "silu"
    kernel_size: int | None = None
    bias: bool | None = None
    dtype: str | None = None


@dataclass(frozen=True)
class GDNConfig:
    """Constructor arguments of a Gated DeltaNet layer; names and defaults follow fla 0.6.0."""

    hidden_size: int = 2048
    expand_v: float = 2
    head_dim: int = 256
    num_heads: int = 6
    num_v_heads: int | None = None
    use_gate: bool = True
    use_short_conv: bool = True
    allow_neg_eigval: bool = False
    conv_size: int = 4
    conv_bias: bool = False
    layer_idx: int | None = 0
    norm_eps: float = 1e-5
    output_gate_activation: str = "swish"
    mode: str = "chunk"
    conv_backend: str = "torch"
    q_conv: ConvSpec = field(default_factory=ConvSpec)
    k_conv: ConvSpec = field(default_factory=ConvSpec)
    v_conv: ConvSpec = field(default_factory=ConvSpec)

    def __post_init__(self) -> None:
        self.validate()

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

    def conv_spec(self, name: str) -> ConvSpec:
        return {"q": self.q_conv, "k": self.k_conv, "v": self.v_conv}[name]

    def conv_channels(self, name: str) -> int:
        return self.value_dim if name == "v" else self.key_dim

    def validate(self) -> None:
        for name in ("hidden_size", "head_dim", "num_heads", "conv_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgument(f"{name} must be a positive integer, got {value!r}")
        if self.num_v_heads is not None and (not isinstance(self.num_v_heads, int) or self.num_v_heads < 1):
            raise InvalidArgument(f"num_v_heads must be a positive integer or None, got {self.num_v_heads!r}")
        if not (isinstance(self.expand_v, (int, float)) and self.expand_v > 0):
            raise InvalidArgument(f"expand_v must be a positive number, got {self.expand_v!r}")
        # fla's two checks, as errors instead of a wrong-sized nn.Linear.
        exact_value_dim = self.n_v_heads * self.head_dim * self.expand_v
        if not math.isclose(exact_value_dim, self.value_dim, rel_tol=1e-5) or self.value_dim < 1:
            raise InvalidArgument(
                f"expand_v={self.expand_v} gives a non-integer value_dim: num_v_heads*head_dim*expand_v = "
                f"{exact_value_dim}, which must be a positive integer"
            )
        if not math.isclose(self.head_dim * self.expand_v, self.head_v_dim, rel_tol=1e-5):
            raise InvalidArgument(
                f"expand_v={self.expand_v} gives a non-integer head_v_dim: head_dim*expand_v = "
                f"{self.head_dim * self.expand_v}, which must be an integer"
            )
        if self.n_v_heads % self.num_heads != 0:
            raise InvalidArgument(
                f"num_v_heads={self.n_v_heads} must be a multiple of num_heads={self.num_heads} (GVA repeats q/k heads)"
            )
        if self.output_gate_activation not in GATE_ACTIVATIONS:
            raise InvalidArgument(
                f"output_gate_activation must be one of {GATE_ACTIVATIONS}, got {self.output_gate_activation!r}"
            )
        if self.mode not in CORE_MODES:
            raise InvalidArgument(f"mode must be one of {CORE_MODES}, got {self.mode!r}")
        if not (isinstance(self.norm_eps, (int, float)) and self.norm_eps > 0):
            raise InvalidArgument(f"norm_eps must be a positive number, got {self.norm_eps!r}")
        for name in CONV_NAMES:
            spec = self.conv_spec(name)
            canonical_activation(spec.activation)
            if spec.kernel_size is not None and (not isinstance(spec.kernel_size, int) or spec.kernel_size < 1):
                raise InvalidArgument(f"{name}_conv.kernel_size must be a positive integer, got {spec.kernel_size!r}")

    def replace(self, **changes: Any) -> GDNConfig:
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Plain-data form, for reports and reproducer scripts."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.__dict__.copy() if isinstance(value, ConvSpec) else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GDNConfig:
        data = dict(data)
        for name in CONV_NAMES:
            key = f"{name}_conv"
            if isinstance(data.get(key), dict):
                data[key] = ConvSpec(**data[key])
        return cls(**data)


@dataclass(frozen=True)
class ConvFacts:
    """What the guard may know about one depthwise conv module."""

    backend: str
    activation: str | None
    kernel_size: int
    has_bias: bool
    weight_dtype: str
    bias_dtype: str | None
    device: str


@dataclass(frozen=True)
class LayerFacts:
    """Layer-level facts: the short-conv switch, the bias flag, and the three convs (q, k, v)."""

    use_short_conv: bool
    conv_bias: bool
    convs: tuple[ConvFacts, ConvFacts, ConvFacts] | None = None


@dataclass(frozen=True)
class CallFacts:
    """Facts of one forward call, after an ``attention_mask`` was unpadded into ``cu_seqlens``."""

    has_cached_state: bool
    use_cache: bool
    varlen: bool
