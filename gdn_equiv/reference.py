"""The reference Gated DeltaNet layer: three separate convs, nothing clever (SPEC §2).

Parameter names and shapes are fla 0.6.0's, so a state_dict moves between the two with
``strict=True``. Deliberate differences from fla: no caller tensor is mutated, a conv's backend is
never changed behind the user's back, and bad input raises :class:`InvalidArgument`.

The six input projections run as one matmul over their concatenated weights. That is the same
function as six ``nn.Linear`` calls, and it gives ``dx`` from a single matmul backward instead of
an autograd-order-dependent sum of six, which is what lets the fused and separate prologues give
bitwise-equal ``dx`` (SPEC P4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from gdn_equiv.backends import causal_conv1d, causal_conv1d_update, check_cu_seqlens
from gdn_equiv.cache import Cache
from gdn_equiv.config import (
    CONV_ACTIVATIONS,
    CONV_NAMES,
    CallFacts,
    ConvFacts,
    GDNConfig,
    LayerFacts,
)
from gdn_equiv.core import gated_delta_rule, l2norm
from gdn_equiv.errors import InvalidArgument

Tensor = torch.Tensor
ConvStates = tuple[Tensor | None, Tensor | None, Tensor | None]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class ShortConv(nn.Module):
    """A depthwise causal conv: ``weight [D, 1, W]``, optional ``bias [D]`` (fla's names).

    ``backend`` and ``activation`` are plain attributes and may be reassigned; the kernel size is
    the weight's last dim, and the bias may be set to ``None`` or to a new ``nn.Parameter``.
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
    ) -> None:
        super().__init__()
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

    def facts(self) -> ConvFacts:
        if self.activation not in CONV_ACTIVATIONS:
            raise InvalidArgument(f"conv activation must be one of {CONV_ACTIVATIONS}, got {self.activation!r}")
        return ConvFacts(
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
        cache: Tensor | None = None,
        output_final_state: bool = False,
        cu_seqlens: Tensor | None = None,
        step: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``x [B, T, D]``; ``step`` runs the single-token update (one token per sequence)."""
        weight = self.weight[:, 0]  # [D, 1, W] -> [D, W]
        if not step:
            return causal_conv1d(
                x, weight, self.bias, self.activation, cache, output_final_state, cu_seqlens, backend=self.backend
            )
        B, T, D = x.shape
        tokens = x.reshape(B * T, D)  # one token per sequence: [B, 1, D] or packed [1, N, D] -> [N, D]
        state = cache if cache is not None else tokens.new_zeros(B * T, D, self.kernel_size)
        y, new_state = causal_conv1d_update(tokens, state, weight, self.bias, self.activation, backend=self.backend)
        return y.reshape(B, T, D), (new_state if output_final_state else None)


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
    """The input projections; ``q, k, v`` are adjacent channel slices of ``qkv [B, T, 2Dk+Dv]``."""

    qkv: Tensor
    q: Tensor
    k: Tensor
    v: Tensor
    a: Tensor
    b: Tensor
    g: Tensor | None


@dataclass(frozen=True)
class _Call:
    """One call's inputs after unpadding: ``x [B', T', H]`` and where to put the output back."""

    x: Tensor
    cu_seqlens: Tensor | None
    indices: Tensor | None
    batch_size: int
    q_len: int
    num_seqs: int
    last_state: dict[str, Any] | None

    def facts(self, use_cache: bool) -> CallFacts:
        """What the guard may know about this call (after unpadding)."""
        return CallFacts(self.last_state is not None, bool(use_cache), self.cu_seqlens is not None)

    def one_token_per_sequence(self) -> bool:
        if self.cu_seqlens is None:
            return self.x.shape[1] == 1
        return bool((self.cu_seqlens.diff() == 1).all())


class GatedDeltaNet(nn.Module):
    """Reference GDN layer; ``forward`` returns ``(o, None, past_key_values)`` like fla's."""

    def __init__(
        self,
        hidden_size: int = 2048,
        expand_v: float = 2,
        head_dim: int = 256,
        num_heads: int = 6,
        num_v_heads: int | None = None,
        use_gate: bool = True,
        use_short_conv: bool = True,
        allow_neg_eigval: bool = False,
        conv_size: int = 4,
        conv_bias: bool = False,
        layer_idx: int | None = 0,
        norm_eps: float = 1e-5,
        output_gate_activation: str = "swish",
        mode: str = "chunk",
        conv_backend: str = "torch",
        *,
        config: GDNConfig | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if config is None:
            config = GDNConfig(
                hidden_size=hidden_size,
                expand_v=expand_v,
                head_dim=head_dim,
                num_heads=num_heads,
                num_v_heads=num_v_heads,
                use_gate=use_gate,
                use_short_conv=use_short_conv,
                allow_neg_eigval=allow_neg_eigval,
                conv_size=conv_size,
                conv_bias=conv_bias,
                layer_idx=layer_idx,
                norm_eps=norm_eps,
                output_gate_activation=output_gate_activation,
                mode=mode,
                conv_backend=conv_backend,
            )
        self.config = config
        c = config
        self.hidden_size, self.expand_v, self.head_dim = c.hidden_size, c.expand_v, c.head_dim
        self.num_heads, self.num_v_heads = c.num_heads, c.n_v_heads
        self.head_k_dim, self.head_v_dim = c.head_k_dim, c.head_v_dim
        self.key_dim, self.value_dim = c.key_dim, c.value_dim
        self.use_gate, self.use_short_conv = c.use_gate, c.use_short_conv
        self.allow_neg_eigval, self.conv_size, self.conv_bias = c.allow_neg_eigval, c.conv_size, c.conv_bias
        self.layer_idx, self.mode = c.layer_idx, c.mode
        factory = {"device": device, "dtype": dtype}

        self.q_proj = nn.Linear(c.hidden_size, self.key_dim, bias=False, **factory)
        self.k_proj = nn.Linear(c.hidden_size, self.key_dim, bias=False, **factory)
        self.v_proj = nn.Linear(c.hidden_size, self.value_dim, bias=False, **factory)
        self.a_proj = nn.Linear(c.hidden_size, self.num_v_heads, bias=False, **factory)
        self.b_proj = nn.Linear(c.hidden_size, self.num_v_heads, bias=False, **factory)
        # fla's initialisation ranges; always fp32 like fla.
        A = torch.empty(self.num_v_heads, dtype=torch.float32, device=device).uniform_(1e-3, 16)
        self.A_log = nn.Parameter(torch.log(A))
        dt = torch.exp(
            torch.rand(self.num_v_heads, device=device) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)
        )
        dt = dt.clamp_min(1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        if c.use_short_conv:
            for name in CONV_NAMES:
                spec = c.conv_spec(name)
                conv_dtype = dtype if spec.dtype is None else getattr(torch, spec.dtype)
                conv = ShortConv(
                    c.conv_channels(name),
                    c.conv_size if spec.kernel_size is None else spec.kernel_size,
                    bias=c.conv_bias if spec.bias is None else spec.bias,
                    activation=spec.activation,
                    backend=c.conv_backend if spec.backend is None else spec.backend,
                    device=device,
                    dtype=conv_dtype,
                )
                self.add_module(f"{name}_conv1d", conv)
        if c.use_gate:
            self.g_proj = nn.Linear(c.hidden_size, self.value_dim, bias=False, **factory)
            self.o_norm = RMSNorm(self.head_v_dim, c.norm_eps, c.output_gate_activation, **factory)
        else:
            self.o_norm = RMSNorm(self.head_v_dim, c.norm_eps, None, device=device, dtype=torch.float32)
        self.o_proj = nn.Linear(self.value_dim, c.hidden_size, bias=False, **factory)

    @classmethod
    def from_config(cls, config: GDNConfig, **factory: Any) -> GatedDeltaNet:
        return cls(config=config, **factory)

    # ---- facts for the guard -------------------------------------------------------------
    def convs(self) -> tuple[ShortConv, ShortConv, ShortConv]:
        return cast("tuple[ShortConv, ShortConv, ShortConv]", (self.q_conv1d, self.k_conv1d, self.v_conv1d))

    def layer_facts(self) -> LayerFacts:
        if not self.use_short_conv:
            return LayerFacts(use_short_conv=False, conv_bias=self.conv_bias)
        q, k, v = (conv.facts() for conv in self.convs())
        return LayerFacts(use_short_conv=True, conv_bias=self.conv_bias, convs=(q, k, v))

    def call_facts(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool = False,
        cu_seqlens: Tensor | None = None,
    ) -> CallFacts:
        return self._prepare(hidden_states, attention_mask, past_key_values, use_cache, cu_seqlens).facts(use_cache)

    # ---- forward -------------------------------------------------------------------------
    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool = False,
        output_attentions: bool = False,
        cu_seqlens: Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor, None, Cache | None]:
        call = self._prepare(hidden_states, attention_mask, past_key_values, use_cache, cu_seqlens)
        if use_cache and past_key_values is None:
            past_key_values = Cache()
        proj = self._project(call.x)
        (q, k, v), conv_states = self._prologue(proj, call, use_cache, **kwargs)
        o, recurrent_state = self._recurrence(q, k, v, proj.a, proj.b, call)
        if use_cache:
            assert past_key_values is not None and self.layer_idx is not None
            past_key_values.update(
                self.layer_idx,
                recurrent_state=recurrent_state,
                conv_state=conv_states if self.use_short_conv else None,
                offset=call.q_len,
            )
        return self._epilogue(o, proj.g, call), None, past_key_values

    def _prepare(
        self,
        x: Tensor,
        attention_mask: Tensor | None,
        past_key_values: Cache | None,
        use_cache: bool,
        cu_seqlens: Tensor | None,
    ) -> _Call:
        """Check the call, unpad an ``attention_mask`` into ``cu_seqlens``, find the layer's cache."""
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.hidden_size:
            raise InvalidArgument(
                f"hidden_states must have shape [B, T, {self.hidden_size}], got {tuple(getattr(x, 'shape', ()))}"
            )
        dtype = self.q_proj.weight.dtype
        if x.dtype != dtype:
            raise InvalidArgument(f"hidden_states dtype {x.dtype} does not match the layer's parameters ({dtype})")
        if x.device != self.q_proj.weight.device:
            raise InvalidArgument(f"hidden_states are on {x.device} but the layer is on {self.q_proj.weight.device}")
        B, T, _ = x.shape
        if T < 1 or B < 1:
            raise InvalidArgument(f"hidden_states need B >= 1 and T >= 1, got shape {tuple(x.shape)}")
        if past_key_values is not None and not isinstance(past_key_values, Cache):
            raise InvalidArgument(f"past_key_values must be a gdn_equiv Cache, got {type(past_key_values).__name__}")
        if (use_cache or past_key_values is not None) and self.layer_idx is None:
            raise InvalidArgument("a cache needs layer_idx, got layer_idx=None")
        indices = None
        if attention_mask is not None:
            self._check_mask(attention_mask, B, T, x.device)
        if cu_seqlens is not None:
            if isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.device != x.device:
                raise InvalidArgument(f"cu_seqlens is on {cu_seqlens.device} but hidden_states are on {x.device}")
            check_cu_seqlens(cu_seqlens, T, B)
        elif attention_mask is not None:
            mask = attention_mask[:, -T:].bool()
            indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
            lens = mask.sum(-1, dtype=torch.int32)
            cu_seqlens = F.pad(torch.cumsum(lens, 0, dtype=torch.int32), (1, 0))
            x = x.reshape(B * T, -1)[indices].unsqueeze(0)  # [B, T, H] -> [1, N_tokens, H]
        num_seqs = B if cu_seqlens is None else cu_seqlens.numel() - 1
        last_state = None
        if past_key_values is not None and self.layer_idx is not None:
            last_state = past_key_values.get(self.layer_idx)
            if last_state is not None:
                self._check_state(last_state, num_seqs, x)
        return _Call(x, cu_seqlens, indices, B, T, num_seqs, last_state)

    @staticmethod
    def _check_mask(mask: Tensor, B: int, T: int, device: torch.device) -> None:
        if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.shape[0] != B or mask.shape[1] < T:
            raise InvalidArgument(
                f"attention_mask must be a 0/1 matrix of shape [B={B}, S>={T}], got {tuple(getattr(mask, 'shape', ()))}"
            )
        if mask.device != device:
            raise InvalidArgument(f"attention_mask is on {mask.device} but hidden_states are on {device}")
        if mask.is_floating_point() or mask.is_complex():
            bad = ~((mask == 0) | (mask == 1))
        elif mask.dtype == torch.bool:
            bad = torch.zeros_like(mask)
        else:
            bad = ~((mask == 0) | (mask == 1))
        if bool(bad.any()):
            value = mask[bad][0].item()
            raise InvalidArgument(f"attention_mask must hold only 0 and 1, got {value}")

    def _check_state(self, state: dict[str, Any], num_seqs: int, x: Tensor) -> None:
        """A cached state must fit this layer and call: shapes, dtypes, device."""
        rec = state.get("recurrent_state")
        if rec is not None:
            shape: tuple[int, ...] = (num_seqs, self.num_v_heads, self.head_v_dim, self.head_k_dim)
            if not isinstance(rec, torch.Tensor) or tuple(rec.shape) != shape:
                raise InvalidArgument(
                    f"cached recurrent_state must have shape {shape}, got {tuple(getattr(rec, 'shape', ()))}"
                )
            if rec.dtype not in (torch.float32, torch.float64) or rec.device != x.device:
                raise InvalidArgument(
                    f"cached recurrent_state must be float32/float64 on {x.device}, got {rec.dtype} on {rec.device}"
                )
        conv = state.get("conv_state")
        if not self.use_short_conv or conv is None:
            return
        if not isinstance(conv, tuple) or len(conv) != 3:
            raise InvalidArgument(f"cached conv_state must be a (q, k, v) tuple, got {type(conv).__name__}")
        for name, module, s in zip(CONV_NAMES, self.convs(), conv, strict=True):
            if s is None:
                continue
            shape = (num_seqs, module.channels, module.kernel_size)
            if tuple(s.shape) != shape:
                raise InvalidArgument(f"cached {name} conv_state must have shape {shape}, got {tuple(s.shape)}")
            if s.dtype != x.dtype or s.device != x.device:
                raise InvalidArgument(
                    f"cached {name} conv_state must be {x.dtype} on {x.device}, got {s.dtype} on {s.device}"
                )

    def _project(self, x: Tensor) -> Projections:
        """All input projections as one matmul; the parts are channel views ``[B, T, *]`` of its output."""
        projs = [self.q_proj, self.k_proj, self.v_proj, self.a_proj, self.b_proj]
        if self.use_gate:
            projs.append(self.g_proj)
        out = F.linear(x, torch.cat([p.weight for p in projs], dim=0))
        qkv, a, b, *g = torch.split(out, [2 * self.key_dim + self.value_dim, *(p.out_features for p in projs[3:])], -1)
        q, k, v = torch.split(qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        return Projections(qkv, q, k, v, a, b, g[0] if g else None)

    def _prologue(
        self, proj: Projections, call: _Call, use_cache: bool, **kwargs: Any
    ) -> tuple[tuple[Tensor, Tensor, Tensor], ConvStates]:
        if kwargs:
            raise InvalidArgument(f"unexpected keyword arguments: {sorted(kwargs)}")
        return self._separate_prologue(proj, call, use_cache)

    def _separate_prologue(
        self, proj: Projections, call: _Call, use_cache: bool
    ) -> tuple[tuple[Tensor, Tensor, Tensor], ConvStates]:
        """Three convs, each with its own cache and the call's sequence boundaries."""
        q, k, v = proj.q, proj.k, proj.v
        if not self.use_short_conv:
            return (F.silu(q), F.silu(k), F.silu(v)), (None, None, None)
        cached: ConvStates = (None, None, None)
        if call.last_state is not None and call.last_state.get("conv_state") is not None:
            cached = call.last_state["conv_state"]
        # fla's rule: the step kernel when autograd is off and every sequence has one new token.
        step = not torch.is_grad_enabled() and call.one_token_per_sequence()
        outs, states = [], []
        for conv, x, state in zip(self.convs(), (q, k, v), cached, strict=True):
            y, final = conv(x, cache=state, output_final_state=use_cache, cu_seqlens=call.cu_seqlens, step=step)
            outs.append(y)
            states.append(final)
        return (outs[0], outs[1], outs[2]), (states[0], states[1], states[2])

    def _recurrence(self, q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, call: _Call) -> tuple[Tensor, Tensor]:
        """Heads, gates and the gated delta rule; returns ``o [B, T, Hv, Dv]`` in the input dtype."""
        q = q.unflatten(-1, (self.num_heads, self.head_k_dim))  # [B, T, Hk*Dk] -> [B, T, Hk, Dk]
        k = k.unflatten(-1, (self.num_heads, self.head_k_dim))
        v = v.unflatten(-1, (self.num_v_heads, self.head_v_dim))  # [B, T, Hv, Dv]
        if self.num_v_heads > self.num_heads:
            group = self.num_v_heads // self.num_heads
            q, k = q.repeat_interleave(group, dim=-2), k.repeat_interleave(group, dim=-2)
        cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
        g = -torch.exp(self.A_log.to(cdt)) * F.softplus(a.to(cdt) + self.dt_bias.to(cdt))
        beta = torch.sigmoid(b.to(cdt))
        if self.allow_neg_eigval:
            beta = beta * 2
        initial = None if call.last_state is None else call.last_state.get("recurrent_state")
        o, state = gated_delta_rule(
            l2norm(q.to(cdt)),
            l2norm(k.to(cdt)),
            v,
            g,
            beta,
            scale=self.head_k_dim**-0.5,
            initial_state=initial,
            cu_seqlens=call.cu_seqlens,
            mode=self.mode,
        )
        return o.to(q.dtype), state

    def _epilogue(self, o: Tensor, g: Tensor | None, call: _Call) -> Tensor:
        """Gated RMSNorm, output projection, re-pad to ``[B, T, H]``."""
        if g is not None:
            o = self.o_norm(o, g.unflatten(-1, (self.num_v_heads, self.head_v_dim)))
        else:
            o = self.o_norm(o)
        o = self.o_proj(o.flatten(-2))  # [B, T, Hv, Dv] -> [B, T, value_dim] -> [B, T, H]
        if call.indices is None:
            return o
        out = o.new_zeros(call.batch_size * call.q_len, o.shape[-1])
        out = out.index_copy(0, call.indices, o[0])
        return out.view(call.batch_size, call.q_len, -1)
