"""The reference layer of every family: separate convs, nothing clever (SPEC §2, §8).

:class:`ShortConvLayer` holds what all families share: the call's checks and unpadding (or the
dense mask), one matmul for the input projections, the separate short-conv prologue over the
family's named conv slots, the per-layer cache, and the facts the guard reads. A family subclass
adds its parameters (fla's names and shapes, so a state_dict moves with ``strict=True``), its
core (:meth:`_recurrence`) and its output (:meth:`_epilogue`).

Deliberate differences from fla: no caller tensor is mutated, a conv's backend is never changed
behind the user's back, and bad input raises :class:`InvalidArgument`.

``past_key_values`` is our :class:`~gdn_equiv.model.cache.Cache` or the cache a Hugging Face style caller
hands over, fla's ``fla.models.utils.Cache`` (:func:`gdn_equiv.model.cache.layer_cache` says which objects and
refuses the rest, a transformers ``DynamicCache`` among them). Either is updated in place and returned,
as fla's layers do, with new state tensors (fla's one-token step also overwrites the cached conv-state
tensors themselves); it is written only with ``use_cache=True`` (fla 0.6.0's layers also write a cache
they are handed with ``use_cache=False``: its token count advances and every conv slot becomes ``None``).

All input projections run as one matmul over their concatenated weights (low-rank projections
contribute their first, bias-free factor). That is the same function as separate ``nn.Linear``
calls, and it gives ``dx`` from a single matmul backward instead of an autograd-order-dependent
sum, which is what lets the fused and separate prologues give bitwise-equal ``dx`` (SPEC P4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.backends import causal_conv1d, causal_conv1d_update, check_cu_seqlens, get_backend
from gdn_equiv.model.cache import Cache, check_layer_state, layer_cache
from gdn_equiv.model.config import CONV_ACTIVATIONS, CallFacts, ConvFacts, LayerConfig, LayerFacts
from gdn_equiv.model.conv_ops import apply_conv_facts, fact_params, normalize_extras, validate_extras

Tensor = torch.Tensor
ConvStates = tuple[Tensor | None, ...]
MASK_KINDS = ("unpad", "dense")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _shape_or_type(value: Any) -> str:
    """A tensor's shape, or what the value is when it is not a tensor (for refusals)."""
    return str(tuple(value.shape)) if isinstance(value, Tensor) else f"a {type(value).__name__}"


class ShortConv(nn.Module):
    """A depthwise causal conv: ``weight [D, 1, W]``, optional ``bias [D]`` (fla's names).

    ``backend`` and ``activation`` are plain attributes and may be reassigned; the kernel size is
    the weight's last dim, and the bias may be set to ``None`` or to a new ``nn.Parameter``.
    Registered per-conv facts (:mod:`gdn_equiv.model.conv_ops`) are plain attributes too, under their
    parameter names (fla's: ``norm``, ``head_dim``, ``norm_eps``), given as keyword arguments; their
    maths runs on the conv's output, after the activation, on both the sequence and the step path.
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int,
        *,
        bias: bool = False,
        activation: str | None = "silu",
        backend: str = "torch",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **extras: Any,
    ) -> None:
        super().__init__()
        params = fact_params()
        unknown = sorted(set(extras) - set(params))
        if unknown:
            raise InvalidArgument(
                f"ShortConv got unknown arguments {unknown}; registered conv facts take {sorted(params)}"
            )
        for name, default in params.items():
            setattr(self, name, extras.get(name, default))
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel_size, device=device, dtype=dtype))
        self.bias: nn.Parameter | None
        if bias:
            self.bias = nn.Parameter(torch.empty(channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.activation = activation
        self.backend = backend
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Conv1d's default for a depthwise conv: fan_in = kernel size.
        bound = 1.0 / math.sqrt(self.kernel_size)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    @property
    def channels(self) -> int:
        return self.weight.shape[0]

    @property
    def kernel_size(self) -> int:
        return self.weight.shape[-1]

    def depthwise_weight(self) -> Tensor:
        """``weight [D, 1, W] -> [D, W]``; any other weight shape is refused (a ``[D, 2, W]`` weight
        would otherwise silently lose its second channel)."""
        w = self.weight
        if w.dim() != 3 or w.shape[1] != 1:
            raise InvalidArgument(f"a depthwise conv weight must have shape [D, 1, W], got {tuple(w.shape)}")
        return w[:, 0]

    def extras(self) -> tuple[tuple[str, Any], ...]:
        """The registered per-conv facts' current values, checked (defaults left out)."""
        extras = normalize_extras({p: getattr(self, p, d) for p, d in fact_params().items()}, "ShortConv")
        validate_extras(extras, self.channels, "ShortConv")
        return extras

    def facts(self) -> ConvFacts:
        if self.activation not in CONV_ACTIVATIONS:
            raise InvalidArgument(f"conv activation must be one of {CONV_ACTIVATIONS}, got {self.activation!r}")
        get_backend(self.backend)  # an unknown name is refused here, whichever path the call takes
        return ConvFacts(
            extras=self.extras(),
            backend=str(self.backend),
            activation=self.activation,
            kernel_size=self.kernel_size,
            has_bias=self.bias is not None,
            weight_dtype=_dtype_name(self.weight.dtype),
            bias_dtype=None if self.bias is None else _dtype_name(self.bias.dtype),
            device=str(self.weight.device),
        )

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        cache: Tensor | None = None,
        output_final_state: bool = False,
        cu_seqlens: Tensor | None = None,
        step: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``x [B, T, D]``; ``mask [B, T]`` (the dense path) is multiplied into the input, out of place;
        ``step`` runs the single-token update (one token per sequence)."""
        weight = self.depthwise_weight()
        extras = self.extras()
        if mask is not None:
            x = x * mask.unsqueeze(-1)
        if not step:
            y, final = causal_conv1d(
                x, weight, self.bias, self.activation, cache, output_final_state, cu_seqlens, backend=self.backend
            )
            return apply_conv_facts(y, extras), final
        B, T, D = x.shape
        tokens = x.reshape(B * T, D)  # one token per sequence: [B, 1, D] or packed [1, N, D] -> [N, D]
        state = cache if cache is not None else tokens.new_zeros(B * T, D, self.kernel_size)
        y, new_state = causal_conv1d_update(tokens, state, weight, self.bias, self.activation, backend=self.backend)
        return apply_conv_facts(y.reshape(B, T, D), extras), (new_state if output_final_state else None)


class RMSNorm(nn.Module):
    """RMSNorm over the last dim in fp32, optionally gated (fla's ``FusedRMSNormGated`` maths)."""

    def __init__(
        self, hidden_size: int, eps: float, gate_activation: str | None, device: Any = None, dtype: Any = None
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.eps = eps
        self.gate_activation = gate_activation

    def forward(self, x: Tensor, gate: Tensor | None = None) -> Tensor:
        xf = x.float() if x.dtype != torch.float64 else x
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.to(xf.dtype)
        if gate is not None:
            gf = gate.to(xf.dtype)
            y = y * gf * torch.sigmoid(gf) if self.gate_activation in ("swish", "silu") else y * torch.sigmoid(gf)
        return y.to(x.dtype)


@dataclass(frozen=True)
class Projections:
    """The input projections by name, each a channel view ``[B, T, *]`` of one matmul's output;
    ``conv_in`` is the conv slots' inputs side by side (adjacent, so fusing them copies nothing)."""

    conv_in: Tensor
    conv_inputs: tuple[Tensor, ...]
    parts: dict[str, Tensor]

    def __getitem__(self, name: str) -> Tensor:
        return self.parts[name]


@dataclass(frozen=True)
class LayerCall:
    """One call's inputs after unpadding: ``x [B', T', H]`` and where to put the output back.

    ``conv_mask [B, T]`` is set on the dense path (the mask is multiplied into the conv input and
    the sequence is not unpadded)."""

    x: Tensor
    cu_seqlens: Tensor | None
    indices: Tensor | None
    batch_size: int
    q_len: int
    num_seqs: int
    last_state: dict[str, Any] | None
    conv_mask: Tensor | None = None

    def facts(self, use_cache: bool) -> CallFacts:
        """What the guard may know about this call (after unpadding)."""
        return CallFacts(self.last_state is not None, bool(use_cache), self.cu_seqlens is not None)

    def one_token_per_sequence(self) -> bool:
        if self.cu_seqlens is None:
            return self.x.shape[1] == 1
        return bool((self.cu_seqlens.diff() == 1).all())


class ShortConvLayer(nn.Module):
    """A family's reference layer; ``forward`` returns ``(o, None, past_key_values)`` like fla's.

    Subclasses set ``config_cls``, build their parameters in :meth:`_build` (calling
    :meth:`_add_convs` where fla registers the convs), list their input projections in
    :meth:`_input_linears` (conv slots first, in slot order) and implement :meth:`_recurrence`,
    :meth:`_epilogue` and :meth:`recurrent_state_shape`.
    """

    config_cls: ClassVar[type[LayerConfig]] = LayerConfig
    #: how an ``attention_mask`` reaches the convs: unpadded into ``cu_seqlens`` (GDN) or multiplied
    #: into the conv input with the batch kept dense (ABC, SimpleGLA, LightNet)
    MASK: ClassVar[str] = "unpad"
    #: what stands in for a conv when ``use_short_conv`` is off
    NO_CONV_ACTIVATION: ClassVar[str | None] = "silu"
    #: ``past_key_values`` -> what the layer reads and writes (:func:`gdn_equiv.model.cache.layer_cache`); a
    #: subclass may supply another (the suite's planted cache defects do): injection, not patching
    cache_view = staticmethod(layer_cache)

    def __init__(
        self,
        config: LayerConfig | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if config is None:
            config = self.config_cls(**kwargs)
        elif kwargs:
            raise InvalidArgument(f"pass either a config or constructor arguments, got both (and {sorted(kwargs)})")
        if type(config) is not self.config_cls:  # exactly: SimpleGLAConfig is a GLAConfig too
            raise InvalidArgument(
                f"{type(self).__name__} needs a {self.config_cls.__name__}, got {type(config).__name__}"
            )
        self.config = config
        self.hidden_size = config.hidden_size
        self.use_short_conv, self.conv_size, self.conv_bias = config.use_short_conv, config.conv_size, config.conv_bias
        self.layer_idx, self.mode = config.layer_idx, config.mode
        self._build(config, {"device": device, "dtype": dtype})

    @classmethod
    def from_config(cls, config: LayerConfig, **factory: Any) -> ShortConvLayer:
        return cls(config=config, **factory)

    # ---- what a family supplies ----------------------------------------------------------
    def _build(self, config: Any, factory: dict[str, Any]) -> None:
        raise NotImplementedError

    def _input_linears(self) -> list[tuple[str, Any]]:
        """``(name, bias-free Linear)`` in matmul order; the conv slots first, named by slot."""
        raise NotImplementedError

    def _recurrence(self, xs: tuple[Tensor, ...], proj: Projections, call: LayerCall) -> tuple[Tensor, dict[str, Any]]:
        """The core on the prologue's outputs: ``(o, states to cache)``; ``states`` holds at least
        ``recurrent_state``."""
        raise NotImplementedError

    def _epilogue(self, o: Tensor, proj: Projections, call: LayerCall) -> Tensor:
        raise NotImplementedError

    def recurrent_state_shape(self, num_seqs: int) -> tuple[int, ...]:
        raise NotImplementedError

    # ---- convs and facts -----------------------------------------------------------------
    @property
    def slots(self) -> tuple[str, ...]:
        return self.config.SLOTS

    def _add_convs(self, factory: dict[str, Any]) -> None:
        """The family's short convs, one per slot, as ``<slot>_conv1d`` (fla's names)."""
        c = self.config
        if not c.use_short_conv:
            return
        for name in self.slots:
            spec = c.conv_spec(name)
            conv = ShortConv(
                c.conv_channels(name),
                c.slot_kernel_size(name),
                bias=c.slot_bias(name),
                activation=spec.activation,
                backend=c.slot_backend(name),
                device=factory["device"],
                dtype=factory["dtype"] if spec.dtype is None else getattr(torch, spec.dtype),
                **dict(spec.extras),
            )
            self.add_module(f"{name}_conv1d", conv)

    def convs(self) -> tuple[ShortConv, ...]:
        return tuple(getattr(self, f"{name}_conv1d") for name in self.slots)

    def layer_facts(self) -> LayerFacts:
        if not self.use_short_conv:
            return LayerFacts(use_short_conv=False, conv_bias=self.conv_bias, names=self.slots)
        facts = tuple(conv.facts() for conv in self.convs())
        return LayerFacts(use_short_conv=True, conv_bias=self.conv_bias, convs=facts, names=self.slots)

    def call_facts(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool = False,
        cu_seqlens: Tensor | None = None,
    ) -> CallFacts:
        return self._prepare(hidden_states, attention_mask, past_key_values, use_cache, cu_seqlens).facts(use_cache)

    # ---- forward -------------------------------------------------------------------------
    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool = False,
        output_attentions: bool = False,
        cu_seqlens: Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor, None, Any]:
        """``(o, None, past_key_values)``: the cache the caller passed (our ``Cache`` or fla's), updated
        in place when ``use_cache``; a new ``Cache`` when ``use_cache`` and none was passed."""
        cache = self.cache_view(past_key_values)
        call = self._prepare(hidden_states, attention_mask, cache, use_cache, cu_seqlens)
        if use_cache and cache is None:
            past_key_values = cache = Cache()
        proj = self._project(call.x)
        xs, conv_states = self._prologue(proj, call, use_cache, **kwargs)
        o, states = self._recurrence(xs, proj, call)
        if use_cache:
            assert cache is not None and self.layer_idx is not None
            cache.update(
                self.layer_idx, conv_state=conv_states if self.use_short_conv else None, offset=call.q_len, **states
            )
        return self._epilogue(o, proj, call), None, past_key_values

    def _prepare(
        self,
        x: Tensor,
        attention_mask: Tensor | None,
        past_key_values: Any,
        use_cache: bool,
        cu_seqlens: Tensor | None,
    ) -> LayerCall:
        """Check the call, unpad an ``attention_mask`` into ``cu_seqlens`` (or keep it for the dense
        path), find the layer's cache."""
        cache = self.cache_view(past_key_values)
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.hidden_size:
            raise InvalidArgument(f"hidden_states must have shape [B, T, {self.hidden_size}], got {_shape_or_type(x)}")
        weight = self._input_linears()[0][1].weight
        if x.dtype != weight.dtype:
            raise InvalidArgument(
                f"hidden_states dtype {x.dtype} does not match the layer's parameters ({weight.dtype})"
            )
        if x.device != weight.device:
            raise InvalidArgument(f"hidden_states are on {x.device} but the layer is on {weight.device}")
        if not isinstance(use_cache, bool):
            raise InvalidArgument(f"use_cache must be a bool, got {use_cache!r}")
        B, T, _ = x.shape
        if T < 1 or B < 1:
            raise InvalidArgument(f"hidden_states need B >= 1 and T >= 1, got shape {tuple(x.shape)}")
        if (use_cache or cache is not None) and self.layer_idx is None:
            raise InvalidArgument("a cache needs layer_idx, got layer_idx=None")
        indices, conv_mask = None, None
        if attention_mask is not None:
            self._check_mask(attention_mask, B, T, x.device)
        if cu_seqlens is not None:
            if isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.device != x.device:
                raise InvalidArgument(f"cu_seqlens is on {cu_seqlens.device} but hidden_states are on {x.device}")
            check_cu_seqlens(cu_seqlens, T, B)
        elif attention_mask is not None and self.MASK == "dense":
            conv_mask = attention_mask[:, -T:].to(x.dtype)  # [B, S] -> the last T positions, this call's
        elif attention_mask is not None:
            mask = attention_mask[:, -T:].bool()
            indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
            lens = mask.sum(-1, dtype=torch.int32)
            cu_seqlens = F.pad(torch.cumsum(lens, 0, dtype=torch.int32), (1, 0))
            x = x.reshape(B * T, -1)[indices].unsqueeze(0)  # [B, T, H] -> [1, N_tokens, H]
        num_seqs = B if cu_seqlens is None else cu_seqlens.numel() - 1
        last_state = None
        if cache is not None and self.layer_idx is not None:
            last_state = cache.get(self.layer_idx)
            if last_state is not None:
                self._check_state(last_state, num_seqs, x)
        return LayerCall(x, cu_seqlens, indices, B, T, num_seqs, last_state, conv_mask)

    @staticmethod
    def _check_mask(mask: Tensor, B: int, T: int, device: torch.device) -> None:
        if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.shape[0] != B or mask.shape[1] < T:
            raise InvalidArgument(
                f"attention_mask must be a 0/1 matrix of shape [B={B}, S>={T}], got {_shape_or_type(mask)}"
            )
        if mask.device != device:
            raise InvalidArgument(f"attention_mask is on {mask.device} but hidden_states are on {device}")
        if mask.dtype == torch.bool:
            return
        bad = ~((mask == 0) | (mask == 1))
        if bool(bad.any()):
            value = mask[bad][0].item()
            raise InvalidArgument(f"attention_mask must hold only 0 and 1, got {value}")

    def _check_state(self, state: Any, num_seqs: int, x: Tensor) -> None:
        """A cached state must fit this layer and call: keys, shapes, dtypes, device."""
        convs = zip(self.slots, self.convs(), strict=True) if self.use_short_conv else ()
        check_layer_state(
            state,
            self.layer_idx,
            recurrent_shape=self.recurrent_state_shape(num_seqs),
            conv_shapes={name: (num_seqs, c.channels, c.kernel_size) for name, c in convs},
            dtype=x.dtype,
            device=x.device,
        )

    def _project(self, x: Tensor) -> Projections:
        """All input projections as one matmul; the parts are channel views ``[B, T, *]`` of its output."""
        linears = self._input_linears()
        out = F.linear(x, torch.cat([lin.weight for _, lin in linears], dim=0))
        parts = dict(
            zip([n for n, _ in linears], torch.split(out, [lin.out_features for _, lin in linears], -1), strict=True)
        )
        n_conv = sum(lin.out_features for name, lin in linears if name in self.slots)
        return Projections(out[..., :n_conv], tuple(parts[name] for name in self.slots), parts)

    def _prologue(
        self, proj: Projections, call: LayerCall, use_cache: bool, **kwargs: Any
    ) -> tuple[tuple[Tensor, ...], ConvStates]:
        if kwargs:
            raise InvalidArgument(f"unexpected keyword arguments: {sorted(kwargs)}")
        return self._separate_prologue(proj, call, use_cache)

    def _separate_prologue(
        self, proj: Projections, call: LayerCall, use_cache: bool
    ) -> tuple[tuple[Tensor, ...], ConvStates]:
        """One conv per slot, each with its own cache and the call's sequence boundaries."""
        return separate_short_convs(
            self.convs() if self.use_short_conv else None,
            proj.conv_inputs,
            call,
            use_cache,
            no_conv_activation=self.NO_CONV_ACTIVATION,
        )


def separate_short_convs(
    convs: Sequence[ShortConv] | None,
    xs: Sequence[Tensor],
    call: LayerCall,
    use_cache: bool,
    *,
    no_conv_activation: str | None = "silu",
) -> tuple[tuple[Tensor, ...], ConvStates]:
    """The separate prologue: ``convs[i]`` on ``xs[i]`` with its cached state, the call's
    ``cu_seqlens`` and dense mask; ``convs=None`` (short conv off) applies ``no_conv_activation``."""
    if convs is None:
        act = F.silu if no_conv_activation is not None else (lambda t: t)
        return tuple(act(x) for x in xs), tuple(None for _ in xs)
    cached: ConvStates = tuple(None for _ in xs)
    if call.last_state is not None and call.last_state.get("conv_state") is not None:
        cached = tuple(call.last_state["conv_state"])
    # fla's rule: the step kernel when autograd is off and every sequence has one new token.
    step = not torch.is_grad_enabled() and call.one_token_per_sequence()
    outs, states = [], []
    for conv, x, state in zip(convs, xs, cached, strict=True):
        y, final = conv(
            x, mask=call.conv_mask, cache=state, output_final_state=use_cache, cu_seqlens=call.cu_seqlens, step=step
        )
        outs.append(y)
        states.append(final)
    return tuple(outs), tuple(states)


def repad(o: Tensor, call: LayerCall) -> Tensor:
    """``o [1, N_tokens, *]`` back to ``[B, T, *]`` with zeros at padded positions (unpad path only)."""
    if call.indices is None:
        return o
    out = o.new_zeros(call.batch_size * call.q_len, *o.shape[2:])
    out = out.index_copy(0, call.indices, o[0])
    return out.view(call.batch_size, call.q_len, *o.shape[2:])
