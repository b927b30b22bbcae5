"""Single conv-backend calls (SPEC §3) as plain data, for backend conformance tests."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from gdn_equiv.model.backends.capabilities import DTYPE_NAMES, Capabilities
from gdn_equiv.model.conv_ops import activation_names
from gdn_equiv.model.example import DTYPES
from gdn_equiv.strategies.sampling import sampled

from . import values as _values

#: How a tensor of a call is laid out in memory (:func:`apply_layout`); the first is the default and
#: where shrinking goes.
LAYOUTS = ("contiguous", "sliced", "strided", "transposed", "expanded")
#: The tensors of a call that take a layout: the inputs, and the cotangents of y and of the final state.
LAYOUT_TENSORS = ("x", "weight", "bias", "initial_state", "dy", "dfinal")


def apply_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t`` (contiguous) in ``layout``; differentiable, so gradients flow back to ``t``.

    - ``contiguous``: ``t`` itself.
    - ``sliced``: a view into a larger buffer, offset by one element in every dimension, the last
      dimension 3 wider (a channel slice of q|k|v, a column of a wider state): last stride 1, the
      others not the contiguous ones, storage offset not 0.
    - ``strided``: every other element of a buffer twice as large in every dimension (last stride 2).
    - ``transposed``: the last two dimensions stored in swapped order: channel-last for ``[N, D, W]``
      states (causal-conv1d's layout), time-fastest for ``[B, T, D]``; a 1-D tensor stays as it is.
    - ``expanded``: the first row broadcast along dimension 0 (stride 0): the values change (every
      batch row, sequence state or channel weight equals the first), both backends see the same.

    Buffer elements outside the view are NaN, so a kernel that reads storage with the wrong strides
    reads NaN (or another element) and the comparison shows it.
    """
    if layout == "contiguous" or t.dim() == 0:
        return t
    if layout == "transposed":
        return t if t.dim() < 2 else t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "expanded":
        return t.narrow(0, 0, min(1, t.shape[0])).expand(t.shape)
    if layout == "sliced":
        shape = [n + 1 for n in t.shape[:-1]] + [t.shape[-1] + 3]
        index = tuple([slice(1, None)] * (t.dim() - 1) + [slice(1, 1 + t.shape[-1])])
    elif layout == "strided":
        shape = [2 * n for n in t.shape]
        index = tuple([slice(None, None, 2)] * t.dim())
    else:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    buffer = torch.full(shape, float("nan"), dtype=t.dtype, device=t.device)
    buffer[index] = t  # differentiable: the view below carries t's gradient
    return buffer[index]


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
    #: ``(tensor, layout)`` pairs (:data:`LAYOUT_TENSORS`, :data:`LAYOUTS`); a tensor not named is contiguous
    layouts: tuple[tuple[str, str], ...] = ()
    #: the weight's and bias's dtype when it is not x's (fp32 convs under bf16 activations: mixed
    #: precision); the initial state keeps x's dtype
    param_dtype: str | None = None
    #: the values the tensors carry (:data:`gdn_equiv.strategies.values.VALUE_KINDS`): randn, or extremes
    values: str = "randn"

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens) if self.seq_lens else self.B

    def layout(self, name: str) -> str:
        """The layout of tensor ``name`` in this call (``contiguous`` unless :attr:`layouts` says otherwise)."""
        return dict(self.layouts).get(name, "contiguous")

    def tensors(self, device: str = "cpu", *, grad: bool = False) -> dict[str, Any]:  # Any: x never None, bias may be
        """``x [B,T,D]``, ``weight [D,W]``, ``bias [D]|None``, ``initial_state [N,D,W]|None``, ``cu_seqlens``,
        each in its :meth:`layout`. With ``grad``, each input is made from a contiguous leaf that
        requires grad (also returned, under ``"leaf." + name``), so the laid-out tensor carries a
        gradient too: differentiate with respect to either."""
        gen = torch.Generator().manual_seed(self.seed)
        dtype = DTYPES[self.dtype]

        def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:  # made on the CPU: the same values on any device
            return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)

        x = randn(self.B, self.T, self.D)
        weight = randn(self.D, self.W, scale=0.5)
        bias = randn(self.D) if self.bias else None
        if self.param_dtype is not None:  # drawn like the others, then held in the parameters' dtype
            params = DTYPES[self.param_dtype]
            weight = weight.to(params)
            bias = None if bias is None else bias.to(params)
        state = randn(self.num_seqs, self.D, self.W) if self.initial_state else None
        x, weight, bias, state = _values.extreme_values(
            self.values, x, weight, bias, state, seed=self.seed, activation=self.activation
        )
        x, weight = x.to(device), weight.to(device)
        bias = None if bias is None else bias.to(device)
        state = None if state is None else state.to(device)
        cu = None
        if self.seq_lens:
            cu = torch.tensor([0, *self.seq_lens], dtype=torch.int64).cumsum(0).to(torch.int32).to(device)
        out: dict[str, torch.Tensor | None] = {"cu_seqlens": cu}
        for name, t in (("x", x), ("weight", weight), ("bias", bias), ("initial_state", state)):
            if t is not None and grad:
                t = t.requires_grad_()
                out[f"leaf.{name}"] = t
            out[name] = None if t is None else apply_layout(t, self.layout(name))
        return out

    def refusal(self, capabilities: Capabilities) -> str | None:
        """The limit of ``capabilities`` this call breaks (its tensors' dtypes, widths, layouts...), or ``None``;
        devices aside (the call's tensors are built on whichever device a test runs)."""
        t = self.tensors()
        caps = dataclasses.replace(capabilities, devices=None)
        return caps.refusal(t["x"], t["weight"], t["bias"], self.activation, t["initial_state"], t["cu_seqlens"])

    def cotangents(self, device: str = "cpu", *, unused_state_slots: int = 0) -> dict[str, torch.Tensor]:
        """``dy [B,T,D]`` and ``dfinal [N,D,W]`` (seeded from :attr:`seed`), each in its :meth:`layout`;
        ``dfinal`` is zero in the first ``unused_state_slots`` slots (a backend's state convention)."""
        gen = torch.Generator().manual_seed(self.seed + 7)
        dtype = DTYPES[self.dtype]
        dy = torch.randn(self.B, self.T, self.D, generator=gen).to(dtype).to(device)
        dfinal = torch.randn(self.num_seqs, self.D, self.W, generator=gen).to(dtype).to(device)
        dfinal[..., : min(unused_state_slots, self.W)] = 0
        scale = _values.cotangent_scale(self.values, self.B, self.T)
        if scale != 1.0:
            dy, dfinal = dy * scale, dfinal * scale
        return {"dy": apply_layout(dy, self.layout("dy")), "dfinal": apply_layout(dfinal, self.layout("dfinal"))}


#: channel counts where kernels change code path: block and warp multiples (the fused call carries
#: all three slots' channels: 6,144 at the PR's shape)
_CHANNEL_EDGES = tuple(
    sorted({e + d for e in (32, 64, 128, 256, 512, 1024, 2048, 4096, 6144, 8192) for d in (-1, 0, 1)})
)
#: sequence lengths at tile edges (kernels tile time by 16..128)
_LENGTH_EDGES = tuple(sorted({e + d for e in (16, 32, 64, 128, 256) for d in (-1, 0, 1)}))


def _channels(draw: st.DrawFn, lo: int, hi: int, wide: int | None, multiple: int = 1) -> int:
    """Mostly ``lo..hi``; with ``wide``, one draw in five is a channel count at a kernel edge up to it.
    Every count a multiple of ``multiple`` (a backend's channel multiple: the least one at or above ``lo``
    when ``hi`` leaves none)."""
    edges = [d for d in _CHANNEL_EDGES if max(lo, hi + 1) <= d <= (wide or 0) and d % multiple == 0]
    if edges and draw(st.integers(0, 4)) == 0:
        return draw(sampled(edges))
    k_lo = -(-lo // multiple)
    return multiple * draw(st.integers(k_lo, max(k_lo, hi // multiple)))


def _length(draw: st.DrawFn, W: int, max_len: int, long: int | None) -> int:
    """Mostly ``1..max_len``; one draw in five around the kernel width (``W-2..W``: fla #1140 was a
    backward wrong only for ``T < W-1``), and with ``long`` one in five at a tile edge up to it."""
    band = draw(st.integers(0, 4))
    if band == 0:
        return draw(st.integers(max(1, W - 2), max(1, W)))
    edges = [t for t in _LENGTH_EDGES if max_len < t <= (long or 0)]
    if band == 1 and edges:
        return draw(sampled(edges))
    return draw(st.integers(1, max_len))


#: the activations a conv call draws where neither the caller nor a declaration names them (fla's conv
#: activations); a declaration that names others (``("relu",)``) is drawn in those
DEFAULT_ACTIVATIONS: tuple[str | None, ...] = (None, "silu", "swish")


def conv_calls(
    *,
    dtypes: Sequence[str] | None = None,
    min_channels: int = 1,
    max_channels: int = 40,
    widths: tuple[int, int] = (1, 4),
    max_seq_len: int = 16,
    varlen: bool | None = None,
    initial_state: bool | None = None,
    varlen_initial_state: bool = True,
    wide_channels: int | None = None,
    long_seq_len: int | None = None,
    layouts: Sequence[str] = ("contiguous",),
    activations: Sequence[str | None] | None = None,
    mixed_precision: bool = True,
    capabilities: Capabilities | None = None,
    values: Sequence[str] = ("randn",),
) -> st.SearchStrategy[ConvCall]:
    """A conv call; ``None`` arguments are drawn, the kernel width from the inclusive range ``widths``.
    Shrinks towards fp32, one channel,
    the smallest width, one short sequence, no bias, no activation, no initial state, no varlen. Up to
    40 channels so that a defect in a second 8- or 16-channel block is reachable; ``wide_channels``
    adds channel counts at block edges up to it (where real kernels change code path), ``long_seq_len``
    lengths at tile edges up to it; lengths around the kernel width are always drawn. Without
    ``varlen_initial_state``, varlen calls carry no initial state. ``layouts`` are the memory layouts
    (:data:`LAYOUTS`) each tensor of :data:`LAYOUT_TENSORS` may be drawn in, independently (inputs and
    cotangents); they shrink to contiguous, and one draw in three keeps every tensor contiguous.
    ``activations`` are drawn from; they shrink to the first. With ``mixed_precision``, one call in four
    holds its weight and bias in another of ``dtypes`` than x (:attr:`ConvCall.param_dtype`; shrinks to none).
    ``long_seq_len`` past 64 also draws, one call in :data:`~gdn_equiv.strategies.values.LONG_ODDS`, a
    sequence past the time tiles (:func:`~gdn_equiv.strategies.values.long_length`; one row and at most
    :data:`~gdn_equiv.strategies.values.LONG_MAX_CHANNELS` channels, packed beside short ones when varlen).
    ``values``: the value kinds (:data:`~gdn_equiv.strategies.values.VALUE_KINDS`) a call's tensors may
    carry; randn two calls in three when it is among them (:func:`~gdn_equiv.strategies.values.value_kinds`).

    ``capabilities``: only calls inside them (the joint capabilities of the backends a property runs,
    :func:`gdn_equiv.model.backends.capabilities`): their dtypes, widths, activations, channel multiple,
    the layouts their stride and bias rules allow, per-sequence states only where they take them. Built
    so by construction; a final filter on :meth:`ConvCall.refusal` keeps any rule the construction missed
    from reaching a kernel (a strategy that needed it often fails Hypothesis' health check, loudly)."""
    caps = capabilities or Capabilities()
    # by default every dtype the capabilities declare (fp64 among them), or fp32/fp16/bf16 where they claim all
    dtypes = caps.dtypes_among(dtypes if dtypes is not None else caps.dtypes or ("float32", "float16", "bfloat16"))
    if not dtypes:
        raise InvalidArgument(f"none of the dtypes is in the capabilities' {caps.dtypes}")
    if caps.widths is not None:
        widths = (max(widths[0], caps.widths[0]), min(widths[1], caps.widths[1]))
        if widths[0] > widths[1]:
            raise InvalidArgument(f"no kernel width in range is in the capabilities' {caps.widths}")
    if activations is None:  # none, silu and swish; a declaration of others: every registered one it declares
        activations = DEFAULT_ACTIVATIONS if caps.activations is None else activation_names()
    if caps.activations is not None:
        activations = [a for a in activations if a in caps.activations]
    kinds = {name: _allowed_layouts(caps, name, layouts) for name in LAYOUT_TENSORS}
    drawn = _conv_calls(
        dtypes=tuple(dtypes),
        min_channels=min_channels,
        max_channels=max_channels,
        widths=widths,
        max_seq_len=max_seq_len,
        varlen=varlen,
        initial_state=initial_state,
        varlen_initial_state=varlen_initial_state and caps.varlen_initial_state,
        wide_channels=wide_channels,
        long_seq_len=long_seq_len,
        layouts=tuple((name, tuple(k)) for name, k in kinds.items()),
        activations=tuple(_nonempty_activations(activations)),
        mixed_precision=mixed_precision,  # weight and bias share param_dtype: one dtype, as bias_dtype_of_weight asks
        channel_multiple=caps.channel_step,  # a contiguous x has time stride D: a multiple of the stride one too
        values=tuple(values),
    )
    return drawn.filter(lambda call: call.refusal(caps) is None) if caps.declared else drawn


def _allowed_layouts(caps: Capabilities, name: str, layouts: Sequence[str]) -> list[str]:
    """The layouts of ``layouts`` tensor ``name`` may take under ``caps``: x (and its cotangent dy, read the
    same way by a backward) keeps channel stride 1 and its strides' multiples only contiguous or broadcast
    along the batch; a bias that must be contiguous keeps stride 1 only contiguous or as a slice."""
    unknown = [k for k in layouts if k not in LAYOUTS]
    if unknown:
        raise InvalidArgument(f"unknown layouts {unknown}; known: {', '.join(LAYOUTS)}")
    if name in ("x", "dy") and caps.stride_multiple > 1:
        return [k for k in layouts if k in ("contiguous", "expanded")]
    if name == "bias" and caps.contiguous_bias:
        return [k for k in layouts if k in ("contiguous", "sliced")]
    return list(layouts)


@st.composite
def _conv_calls(
    draw: st.DrawFn,
    *,
    dtypes: tuple[str, ...],
    min_channels: int,
    max_channels: int,
    widths: tuple[int, int],
    max_seq_len: int,
    varlen: bool | None,
    initial_state: bool | None,
    varlen_initial_state: bool,
    wide_channels: int | None,
    long_seq_len: int | None,
    layouts: tuple[tuple[str, tuple[str, ...]], ...],
    activations: tuple[str | None, ...],
    mixed_precision: bool,
    channel_multiple: int,
    values: tuple[str, ...],
) -> ConvCall:
    W = draw(st.integers(*widths))
    use_varlen = draw(st.booleans()) if varlen is None else varlen
    # tile edges up to the first time tile at any shape; past it, a long call (one row, few channels)
    edge_len = None if long_seq_len is None else min(long_seq_len, _values.TIME_TILES[0] + 1)
    reach = long_seq_len if long_seq_len is not None and max_seq_len > 1 else 0
    long = reach > _values.TIME_TILES[0] and draw(st.integers(0, _values.LONG_ODDS - 1)) == 0
    if use_varlen:
        lens = tuple(draw(_packed_lens(max_seq_len)))
        if long:  # one long sequence packed among the short ones
            at = draw(st.integers(0, len(lens)))
            lens = (*lens[:at], _values.long_length(draw, reach), *lens[at:])
        B, T = 1, sum(lens)
    elif long:
        lens, B, T = (), 1, _values.long_length(draw, reach)
    else:
        lens, B, T = (), draw(st.integers(1, 2)), _length(draw, W, max_seq_len, edge_len)
    dtype = draw(sampled(dtypes))
    others = [d for d in dtypes if d != dtype]
    param_dtype = draw(sampled(others)) if mixed_precision and others and draw(st.integers(0, 3)) == 3 else None
    D = _channels(draw, min_channels, max_channels, wide_channels, channel_multiple)
    if long and D > _values.LONG_MAX_CHANNELS:  # its cost is in T
        D = max(channel_multiple, _values.LONG_MAX_CHANNELS // channel_multiple * channel_multiple, min_channels)
    return ConvCall(
        B=B,
        T=T,
        D=D,
        W=W,
        dtype=dtype,
        param_dtype=param_dtype,
        bias=draw(st.booleans()),
        activation=draw(sampled(activations)),
        initial_state=(draw(st.booleans()) if initial_state is None else initial_state)
        and (varlen_initial_state or not use_varlen),
        seq_lens=lens,
        seed=draw(st.integers(0, 2**16)),
        layouts=_layouts(draw, layouts),
        values=draw(_values.value_kinds(values)),
    )


@functools.lru_cache(maxsize=256)  # one strategy per bound: see gdn_equiv.strategies.sampling.sampled
def _packed_lens(max_seq_len: int) -> st.SearchStrategy[list[int]]:
    """1 to 4 packed sequences of up to ``max_seq_len`` tokens, at least one token in all."""
    return st.lists(st.integers(0, max_seq_len), min_size=1, max_size=4).filter(sum)


def _nonempty_activations(activations: Sequence[str | None]) -> Sequence[str | None]:
    if not activations:
        raise InvalidArgument("activations must not be empty")
    unknown = [a for a in activations if a not in activation_names()]
    if unknown:
        raise InvalidArgument(f"activations {unknown} are not registered; known: {list(activation_names())}")
    return activations


def _layouts(draw: st.DrawFn, kinds: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[tuple[str, str], ...]:
    """Each tensor's layout from its own allowed ``kinds`` (contiguous first, where shrinking goes)."""
    per_tensor = {name: ("contiguous", *(k for k in allowed if k != "contiguous")) for name, allowed in kinds}
    if all(len(k) == 1 for k in per_tensor.values()) or draw(st.integers(0, 2)) == 0:
        return ()
    chosen = ((name, draw(sampled(per_tensor[name]))) for name in LAYOUT_TENSORS)
    return tuple((name, kind) for name, kind in chosen if kind != "contiguous")


#: the declared limits a call can be taken outside of on any machine, one at a time (devices aside)
OUTSIDE_LIMITS = (
    "dtypes",
    "widths",
    "activations",
    "channel_multiple",
    "stride_multiple",
    "contiguous_bias",
    "bias_dtype_of_weight",
    "state_dtype_of_x",
    "varlen_initial_state",
)


@dataclass(frozen=True)
class OutsideCall:
    """A call inside ``capabilities`` but for one declared ``limit`` (:data:`OUTSIDE_LIMITS`), broken as
    ``means`` says: the refusal property's input. :attr:`inside` is the same call before the break (inside
    every limit), so a wrong answer outside can be told from one wrong inside too (the finding is then the
    kernel's, not the limit's).

    ``means``: ``dtype:<name>`` (every tensor of the call in that dtype), ``params:<name>`` (weight and bias),
    ``bias:<name>`` / ``state:<name>`` (that tensor alone), ``x:<layout>`` / ``bias:<layout>`` (that tensor
    in a layout of :data:`LAYOUTS`); empty where the call itself breaks the limit (its width, activation,
    channel count, packing)."""

    call: ConvCall
    limit: str
    means: str = ""
    inside: ConvCall | None = None

    def tensors(self, device: str = "cpu") -> dict[str, Any]:
        """The call's tensors with :attr:`limit` broken by :attr:`means`."""
        t = self.call.tensors(device)
        name, _, how = self.means.partition(":")
        if how in LAYOUTS:
            t[name] = apply_layout(t[name], how)
        elif name in ("bias", "state"):
            key = "initial_state" if name == "state" else name
            t[key] = t[key].to(DTYPES[how])
        return t


def _other_dtypes(caps: Capabilities, than: str) -> list[str]:
    """The declared dtypes (every one where none is declared) besides ``than``."""
    return [d for d in (caps.dtypes or DTYPE_NAMES) if d != than]


def breakable_limits(capabilities: Capabilities) -> tuple[str, ...]:
    """The declared limits of ``capabilities`` a call here can break while keeping the others (a limit it declares
    nothing for, or one every value meets, cannot be; nor a dtype rule between two tensors where one dtype is
    declared; nor devices, on one machine)."""
    caps, out = capabilities, []
    if caps.dtypes is not None and set(DTYPE_NAMES) - set(caps.dtypes):
        out.append("dtypes")
    if caps.widths is not None and (caps.widths[0] > 1 or caps.widths[1] < MAX_WIDTH):
        out.append("widths")
    if caps.activations is not None and set(activation_names()) - set(caps.activations):
        out.append("activations")
    if caps.channel_multiple > 1:
        out.append("channel_multiple")
    if caps.stride_multiple > 1:
        out.append("stride_multiple")
    if caps.contiguous_bias:
        out.append("contiguous_bias")
    several = caps.dtypes is None or len(caps.dtypes) > 1
    for flag in ("bias_dtype_of_weight", "state_dtype_of_x"):
        if getattr(caps, flag) and several:
            out.append(flag)
    if not caps.varlen_initial_state:
        out.append("varlen_initial_state")
    return tuple(out)


#: the widest kernel a width limit is broken with (a declared ``(lo, hi)`` with ``hi`` below it is broken at hi + 1)
MAX_WIDTH = 64


@st.composite
def outside_calls(draw: st.DrawFn, capabilities: Capabilities, *, max_channels: int = 24) -> OutsideCall:
    """A call that breaks one declared limit of ``capabilities`` (:func:`breakable_limits`) by one of every means
    (each undeclared dtype, of the whole call or of the parameters; each width just outside the range; each
    undeclared activation; each channel count between two multiples; each layout of ``x`` or the bias that
    breaks its rule; each other declared dtype of a bias or state) and keeps the others; shrinks towards the
    first limit on a small fp32 call. Every drawn call is checked to break its limit (:meth:`Capabilities.refusal`
    on its tensors names one), so a means that happens to meet the rule is never asked as a break."""
    caps = capabilities
    limits = breakable_limits(caps)
    if not limits:
        raise InvalidArgument("the capabilities declare no limit a call can break here")
    limit = draw(sampled(limits))
    inside = draw(conv_calls(capabilities=caps, max_channels=max_channels, mixed_precision=False, varlen=False))
    call, means = inside, ""
    lo, hi = caps.widths or (1, MAX_WIDTH)
    if limit == "dtypes":
        undeclared = [d for d in DTYPE_NAMES if d not in (caps.dtypes or DTYPE_NAMES)]
        dtype = draw(sampled(undeclared))
        if draw(st.booleans()):
            call, means = dataclasses.replace(call, dtype=dtype), f"dtype:{dtype}"
        else:  # x (and a state) declared, the weight and bias not: breaks dtypes, not the rules between them
            call, means = dataclasses.replace(call, param_dtype=dtype), f"params:{dtype}"
    elif limit == "widths":
        call = dataclasses.replace(call, W=draw(sampled([w for w in (lo - 1, hi + 1) if 1 <= w <= MAX_WIDTH])))
    elif limit == "activations":
        assert caps.activations is not None
        others = [a for a in activation_names() if a not in caps.activations]
        call = dataclasses.replace(call, activation=draw(sampled(others)))
    elif limit == "channel_multiple":
        call = dataclasses.replace(call, D=call.D + draw(st.integers(1, caps.channel_multiple - 1)))
    elif limit == "stride_multiple":
        means = f"x:{draw(sampled(('sliced', 'strided', 'transposed')))}"
    elif limit == "contiguous_bias":
        call = inside = dataclasses.replace(call, bias=True)
        means = f"bias:{draw(sampled(('strided', 'expanded')))}"
    elif limit == "bias_dtype_of_weight":
        call = inside = dataclasses.replace(call, bias=True)
        means = f"bias:{draw(sampled(_other_dtypes(caps, call.dtype)))}"
    elif limit == "state_dtype_of_x":
        call = inside = dataclasses.replace(call, initial_state=True)
        means = f"state:{draw(sampled(_other_dtypes(caps, call.dtype)))}"
    elif limit == "varlen_initial_state":
        lens = tuple(draw(_packed_lens(8)))
        call = dataclasses.replace(call, B=1, T=sum(lens), seq_lens=lens, initial_state=True)
    outside = OutsideCall(call, limit, means, inside)
    t = outside.tensors()
    reason = dataclasses.replace(caps, devices=None).refusal(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], t["cu_seqlens"]
    )
    assume(reason is not None)  # a means that meets the rule on this call (a transposed x of one token)
    return outside
