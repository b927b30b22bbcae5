"""Frozen, hashable descriptions of a layer, of its named conv slots and of one call.

The guard sees only these facts, never a module, so a decision can be recomputed, printed and
compared with the spec oracle from plain data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.conv_ops import ActivationNames, fact_params, normalize_extras, validate_extras
from gdn_equiv.model.conv_ops import canonical_activation as _canonical

#: The registered conv activations (a live view of :mod:`gdn_equiv.model.conv_ops`; ``silu, swish, None``
#: first, then ``relu``, ``relu2`` and whatever plug-ins register).
CONV_ACTIVATIONS = ActivationNames()
GATE_ACTIVATIONS = ("swish", "silu", "sigmoid")
CORE_MODES = ("chunk", "recurrent")
CONV_NAMES = ("q", "k", "v")
PARAM_DTYPES = ("float32", "float16", "bfloat16", "float64")


def canonical_activation(activation: str | None) -> str | None:
    """``silu`` and ``swish`` are one function; the guard and the backends compare this form (a
    registered alias maps to its target the same way)."""
    return _canonical(activation)


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
    #: registered per-conv facts (:func:`gdn_equiv.model.conv_ops.register_conv_fact`) as sorted
    #: ``(parameter, value)`` pairs, defaults left out: ``(("head_dim", 4), ("norm", "l2"))``
    extras: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "extras", normalize_extras(self.extras, "ConvSpec"))

    def extra(self, name: str) -> Any:
        """A registered fact parameter's value (its default where not set)."""
        return dict(self.extras).get(name, fact_params()[name])


def check_positive_int(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgument(f"{owner}.{name} must be a positive integer, got {value!r}")


def _check_bool(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{owner}.{name} must be a bool, got {value!r}")


def check_positive_finite(owner: str, name: str, value: Any) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok:
        raise InvalidArgument(f"{owner}.{name} must be a positive finite number, got {value!r}")


@dataclass(frozen=True)
class LayerConfig:
    """What every family's config has: the hidden size, the short-conv settings and the named conv slots.

    A family subclasses it with its own fields (names and defaults follow its fla class) and says how
    many channels each slot has (:meth:`conv_channels`). ``SLOTS`` names the convs in the order their
    inputs sit in the projection output (the fused conv's channel order).
    """

    SLOTS: ClassVar[tuple[str, ...]] = CONV_NAMES
    #: the config fields that must be positive integers / bools / positive finite numbers
    POSITIVE_INTS: ClassVar[tuple[str, ...]] = ("hidden_size", "conv_size")
    BOOLS: ClassVar[tuple[str, ...]] = ("use_short_conv", "conv_bias")
    POSITIVE_NUMBERS: ClassVar[tuple[str, ...]] = ("norm_eps",)

    hidden_size: int = 2048
    use_short_conv: bool = True
    conv_size: int = 4
    conv_bias: bool = False
    layer_idx: int | None = 0
    norm_eps: float = 1e-5
    mode: str = "chunk"
    conv_backend: str = "torch"
    q_conv: ConvSpec = field(default_factory=ConvSpec)
    k_conv: ConvSpec = field(default_factory=ConvSpec)
    v_conv: ConvSpec = field(default_factory=ConvSpec)

    def __post_init__(self) -> None:
        self.validate()

    def conv_spec(self, name: str) -> ConvSpec:
        if name not in self.SLOTS:
            raise InvalidArgument(f"conv slot must be one of {self.SLOTS}, got {name!r}")
        return getattr(self, f"{name}_conv")

    # a slot's values where its ConvSpec defers to the layer's (None)
    def slot_backend(self, name: str) -> str:
        spec = self.conv_spec(name)
        return self.conv_backend if spec.backend is None else spec.backend

    def slot_kernel_size(self, name: str) -> int:
        spec = self.conv_spec(name)
        return self.conv_size if spec.kernel_size is None else spec.kernel_size

    def slot_bias(self, name: str) -> bool:
        """Whether slot ``name``'s conv has a bias (its own ``bias``, else the layer's ``conv_bias``)."""
        spec = self.conv_spec(name)
        return self.conv_bias if spec.bias is None else spec.bias

    def conv_channels(self, name: str) -> int:
        """Channels of conv slot ``name`` (what its weight's first dim is)."""
        raise NotImplementedError

    def validate(self) -> None:
        owner = type(self).__name__
        for name in self.POSITIVE_INTS:
            check_positive_int(owner, name, getattr(self, name))
        for name in self.BOOLS:
            _check_bool(owner, name, getattr(self, name))
        for name in self.POSITIVE_NUMBERS:
            check_positive_finite(owner, name, getattr(self, name))
        if self.layer_idx is not None and (
            not isinstance(self.layer_idx, int) or isinstance(self.layer_idx, bool) or self.layer_idx < 0
        ):
            raise InvalidArgument(f"{owner}.layer_idx must be None or an integer >= 0, got {self.layer_idx!r}")
        if self.mode not in CORE_MODES:
            raise InvalidArgument(f"mode must be one of {CORE_MODES}, got {self.mode!r}")
        if not isinstance(self.conv_backend, str) or not self.conv_backend:
            raise InvalidArgument(f"{owner}.conv_backend must be a backend name, got {self.conv_backend!r}")
        for name in self.SLOTS:
            spec = self.conv_spec(name)
            if not isinstance(spec, ConvSpec):
                raise InvalidArgument(f"{name}_conv must be a ConvSpec, got {type(spec).__name__}")
            canonical_activation(spec.activation)
            if spec.kernel_size is not None:
                check_positive_int(owner, f"{name}_conv.kernel_size", spec.kernel_size)
            if spec.bias is not None:
                _check_bool(owner, f"{name}_conv.bias", spec.bias)
            if spec.dtype is not None and spec.dtype not in PARAM_DTYPES:
                raise InvalidArgument(f"{name}_conv.dtype must be one of {PARAM_DTYPES}, got {spec.dtype!r}")
            if spec.extras:
                try:
                    channels: int | None = self.conv_channels(name)
                except Exception:
                    channels = None
                validate_extras(spec.extras, channels, f"{name}_conv")

    def replace(self, **changes: Any) -> Any:
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Plain-data form, for reports and reproducer scripts."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.__dict__.copy() if isinstance(value, ConvSpec) else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        data = dict(data)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgument(f"{cls.__name__} has no fields {unknown}; its fields are {sorted(known)}")
        for name in cls.SLOTS:
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
    #: registered per-conv facts as sorted ``(parameter, value)`` pairs, defaults left out
    extras: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "extras", normalize_extras(self.extras, "ConvFacts"))


@dataclass(frozen=True)
class LayerFacts:
    """Layer-level facts: the short-conv switch, the bias flag, and the convs of its named slots
    (``names[i]`` is ``convs[i]``'s slot; q, k, v for every family so far)."""

    use_short_conv: bool
    conv_bias: bool
    convs: tuple[ConvFacts, ...] | None = None
    names: tuple[str, ...] = CONV_NAMES


@dataclass(frozen=True)
class CallFacts:
    """Facts of one forward call, after an ``attention_mask`` was unpadded into ``cu_seqlens``."""

    has_cached_state: bool
    use_cache: bool
    varlen: bool
