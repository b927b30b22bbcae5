"""What a conv backend runs, declared as data (SPEC §3 "Capabilities"; PyTorch's OpInfo ``dtypes``/``supports_*``).

A backend's :class:`Capabilities` say which calls it takes: dtypes, kernel widths, activations, channel-count
and stride multiples of ``x``, the bias' layout and dtype, per-sequence initial states with ``cu_seqlens``,
devices. Strategies draw every call that compares results inside the capabilities of all the backends it
runs (:func:`joint`); a call outside them must be refused with a clear error, never answered with a wrong
result (the refusal property, :func:`gdn_equiv.harness.conformance.check_outside_capabilities`). A backend
that declares nothing claims everything (``Capabilities()``).

:func:`Capabilities.refusal` is the one reading of a declaration against real tensors: ``None`` when the call
is inside, else the rule it breaks, naming the value and the limit. The strict planted backend
(:data:`gdn_equiv.harness.planted.STRICT_CAUSAL_CONV1D`) raises with it on every call outside causal-conv1d's
limits, so a strategy that draws outside them fails the gate on a CPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from math import lcm

import torch

from gdn_equiv.errors import InvalidArgument

Tensor = torch.Tensor

#: the floating dtypes a call can carry, by the names strategies use
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Capabilities:
    """The calls a backend takes. Every field's default claims everything.

    - ``dtypes``: dtypes of ``x``, weight, bias and state (names, e.g. ``("float32", "float16")``); ``None``: any.
    - ``widths``: kernel widths ``(min, max)``, inclusive; ``None``: any.
    - ``activations``: the conv activations it runs; ``None``: what the activation registry lists it for
      (:func:`gdn_equiv.model.conv_ops.register_activation`'s ``backends``).
    - ``channel_multiple``: ``D`` must be a multiple of it (causal-conv1d's channel-last kernel: 8).
    - ``stride_multiple``: ``x.stride(0)`` and ``x.stride(1)`` (batch and time strides of ``[B, T, D]``) must be
      multiples of it, and ``x.stride(2) == 1`` (causal-conv1d's channel-last layout: 8).
    - ``contiguous_bias``: the bias must have ``stride(-1) == 1``.
    - ``bias_dtype_of_weight``: the bias must have the weight's dtype.
    - ``state_dtype_of_x``: an initial state must have ``x``'s dtype.
    - ``varlen_initial_state``: per-sequence initial states together with ``cu_seqlens``.
    - ``devices``: device types (``"cpu"``, ``"cuda"``); ``None``: any.
    """

    dtypes: tuple[str, ...] | None = None
    widths: tuple[int, int] | None = None
    activations: tuple[str | None, ...] | None = None
    channel_multiple: int = 1
    stride_multiple: int = 1
    contiguous_bias: bool = False
    bias_dtype_of_weight: bool = False
    state_dtype_of_x: bool = False
    varlen_initial_state: bool = True
    devices: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.dtypes is not None:
            unknown = [d for d in self.dtypes if d not in DTYPE_NAMES]
            if unknown or not self.dtypes:
                raise InvalidArgument(
                    f"Capabilities.dtypes must be a non-empty subset of {DTYPE_NAMES}, got {self.dtypes}"
                )
        if self.widths is not None and not (
            len(self.widths) == 2
            and 1 <= self.widths[0] <= self.widths[1]
            and all(isinstance(w, int) for w in self.widths)
        ):
            raise InvalidArgument(f"Capabilities.widths must be (min, max) with 1 <= min <= max, got {self.widths}")
        for name in ("channel_multiple", "stride_multiple"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"Capabilities.{name} must be an int >= 1, got {value!r}")

    @property
    def declared(self) -> bool:
        """Whether it limits anything at all (``Capabilities()`` claims everything)."""
        return self != Capabilities()

    @property
    def channel_step(self) -> int:
        """The channel counts a call inside can carry in a contiguous ``x``: multiples of the channel multiple
        and of the stride multiple (a contiguous ``[B, T, D]`` has time stride ``D``)."""
        return lcm(self.channel_multiple, self.stride_multiple)

    def limits(self) -> list[str]:
        """The declared limits, one phrase each (for reports and ``gdn-equiv backends``)."""
        out = []
        for f in fields(self):
            value, default = getattr(self, f.name), f.default
            if value != default:
                out.append(f"{f.name}={value}")
        return out

    def refusal(
        self,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        activation: str | None = None,
        initial_state: Tensor | None = None,
        cu_seqlens: Tensor | None = None,
        *,
        step: bool = False,
    ) -> str | None:
        """The first declared limit the call breaks, naming the value and the limit; ``None``: inside.

        ``step``: an ``update`` call (``x [N, D]``, ``initial_state`` the step's state): the layout rules of
        ``x`` (channel and stride multiples, a sequence kernel's) do not apply."""
        if self.devices is not None and x.device.type not in self.devices:
            return f"x is on {x.device.type}; it runs on {', '.join(self.devices)}"
        if self.dtypes is not None:
            for name, t in (("x", x), ("weight", weight), ("bias", bias), ("state", initial_state)):
                if t is not None and _dtype_name(t.dtype) not in self.dtypes:
                    return f"{name} is {_dtype_name(t.dtype)}; it takes {', '.join(self.dtypes)}"
        W = weight.shape[-1]
        if self.widths is not None and not self.widths[0] <= W <= self.widths[1]:
            return f"kernel width W={W}; it takes W in {self.widths[0]}..{self.widths[1]}"
        if self.activations is not None and activation not in self.activations:
            return f"activation {activation!r}; it runs {', '.join(map(str, self.activations))}"
        if self.bias_dtype_of_weight and bias is not None and bias.dtype != weight.dtype:
            return f"bias is {_dtype_name(bias.dtype)} but weight is {_dtype_name(weight.dtype)}; it needs one dtype"
        if self.contiguous_bias and bias is not None and bias.stride(-1) != 1:
            return f"bias has stride {bias.stride(-1)}; it needs a contiguous bias (stride 1)"
        if self.state_dtype_of_x and initial_state is not None and initial_state.dtype != x.dtype:
            return (
                f"state is {_dtype_name(initial_state.dtype)} but x is {_dtype_name(x.dtype)}; "
                "it keeps states in x's dtype"
            )
        if not self.varlen_initial_state and initial_state is not None and cu_seqlens is not None:
            return "initial_state with cu_seqlens; it takes no per-sequence initial states of packed sequences"
        if step:
            return None
        D = x.shape[-1]
        if D % self.channel_multiple:
            return f"D={D} channels; it needs a multiple of {self.channel_multiple}"
        if self.stride_multiple > 1:
            strides = x.stride()
            if strides[2] != 1 or strides[0] % self.stride_multiple or strides[1] % self.stride_multiple:
                return (
                    f"x has strides {tuple(strides)}; it needs channel stride 1 and batch and time strides that are "
                    f"multiples of {self.stride_multiple}"
                )
        return None

    def intersect(self, other: Capabilities) -> Capabilities:
        """What both run."""
        return Capabilities(
            dtypes=_meet(self.dtypes, other.dtypes),
            widths=_meet_widths(self.widths, other.widths),
            activations=_meet(self.activations, other.activations),
            channel_multiple=lcm(self.channel_multiple, other.channel_multiple),
            stride_multiple=lcm(self.stride_multiple, other.stride_multiple),
            contiguous_bias=self.contiguous_bias or other.contiguous_bias,
            bias_dtype_of_weight=self.bias_dtype_of_weight or other.bias_dtype_of_weight,
            state_dtype_of_x=self.state_dtype_of_x or other.state_dtype_of_x,
            varlen_initial_state=self.varlen_initial_state and other.varlen_initial_state,
            devices=_meet(self.devices, other.devices),
        )

    def dtypes_among(self, names: Iterable[str]) -> tuple[str, ...]:
        """``names`` that it takes, in their order."""
        return tuple(n for n in names if self.dtypes is None or n in self.dtypes)


def _meet(a: tuple | None, b: tuple | None) -> tuple | None:
    if a is None:
        return b
    if b is None:
        return a
    return tuple(x for x in a if x in b)


def _meet_widths(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    if a is None:
        return b
    if b is None:
        return a
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if lo > hi:
        raise InvalidArgument(f"no kernel width is run by both: widths {a[0]}..{a[1]} and {b[0]}..{b[1]}")
    return lo, hi


def joint(capabilities: Sequence[Capabilities]) -> Capabilities:
    """What every one of ``capabilities`` runs."""
    out = Capabilities()
    for caps in capabilities:
        out = out.intersect(caps)
    return out


#: Dao-AILab causal-conv1d 1.7.0's own limits as measured on an H100 (the package's channel-last kernel, the
#: one with states and ``seq_idx``): fla's ``cuda`` conv backend hands calls to it as they are, and the
#: strict planted backend raises outside them on any machine.
CAUSAL_CONV1D = Capabilities(
    dtypes=("float32", "float16", "bfloat16"),
    widths=(2, 4),
    activations=(None, "silu", "swish"),
    channel_multiple=8,
    stride_multiple=8,
    contiguous_bias=True,
    bias_dtype_of_weight=True,
    state_dtype_of_x=True,
    varlen_initial_state=False,
)
