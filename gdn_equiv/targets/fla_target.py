"""The ``fla`` target: flash-linear-attention's ``GatedDeltaNet`` (fla >= 0.6.0, the fused prologue).

How the suite drives fla without touching its guard:

- The layer is fla's, built from our :class:`GDNConfig`; it loads the state_dict of our reference
  layer built from the same example (``strict=True``; every parameter then takes the reference's
  dtype too), so the two compute from identical weights.
- Per-conv facts (bias present or not, activation, backend, kernel size, dtype) are applied by
  replacing a conv module with fla's own ``ShortConvolution`` built with those facts, then setting
  ``backend`` and ``activation`` as attributes (fla's constructor would flip ``cuda`` to ``triton``
  when causal-conv1d is missing; an attribute is what a user can set). fla's backend names are
  ``triton`` and ``cuda``; ours map as ``cuda -> cuda``, anything else ``-> triton``.
- The path taken is *observed*: forward hooks on the three conv modules count calls. fla's fused
  branch calls ``causal_conv1d`` directly and never a module's ``forward`` (0 calls); the separate
  branch calls each (3).
- ``prologue="auto"`` runs fla's own guard, unmodified. ``"fused"`` / ``"separate"`` use a
  subclass that overrides ``_use_fused_qkv_conv`` to return a constant: the one decision point fla
  exposes (its own test patched the same method with ``mock``); the prologue code that runs is
  fla's. The override is a class choice made at build time, not a patch of fla.
- ``core="reference"`` (``--fla-core=reference``) substitutes our torch core for fla's
  ``chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule`` (their names in fla's layer
  module) for the duration of a run, with fla's in-kernel maths (q/k L2 norm, the gate
  ``-exp(A_log) softplus(a + dt_bias)``, ``sigmoid(beta)`` (x2 with negative eigenvalues)) done here
  exactly as our reference does. fla's prologue, guard and convs are untouched. Needed on Hopper
  with Triton 3.6, where fla's chunked backward does not run (DEVICE.md). :attr:`FlaHandle.core`
  records which core ran.
- Caches: fla's own ``fla.models.utils.Cache``. A populated cache from the example (filled by our
  reference, same weights) is copied into one; the cache a run returns is copied back into a
  :class:`gdn_equiv.cache.Cache` so the suite compares one type.
"""

from __future__ import annotations

import importlib.util
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from gdn_equiv.cache import Cache
from gdn_equiv.config import CONV_NAMES, CallFacts, ConvFacts, LayerFacts
from gdn_equiv.core import gated_delta_rule, l2norm
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.example import Example, Inputs, build_layer, materialize
from gdn_equiv.families.gated_deltanet import GatedDeltaNet as ReferenceGDN
from gdn_equiv.families.gated_deltanet import GDNConfig

Tensor = torch.Tensor
CORES = ("fla", "reference")
_FORCED = {"fused": True, "separate": False}


def fla_version() -> str | None:
    if importlib.util.find_spec("fla") is None:
        return None
    import fla

    return getattr(fla, "__version__", None)


def fla_backend(ours: str | None) -> str:
    """Our backend name -> fla's (fla has ``triton`` and ``cuda``)."""
    return "cuda" if ours == "cuda" else "triton"


def _layer_classes() -> tuple[type, type]:
    """fla's ``GatedDeltaNet`` and a subclass whose guard answer can be pinned per run."""
    from fla.layers.gated_deltanet import GatedDeltaNet

    class PinnableGatedDeltaNet(GatedDeltaNet):
        """fla's layer; ``pinned`` = ``None`` asks fla's guard, ``True``/``False`` pins its answer."""

        pinned: bool | None = None
        last_guard: bool | None = None

        def _use_fused_qkv_conv(self, last_state, use_cache, cu_seqlens):
            self.last_guard = GatedDeltaNet._use_fused_qkv_conv(self, last_state, use_cache, cu_seqlens)
            return self.last_guard if self.pinned is None else self.pinned

    return GatedDeltaNet, PinnableGatedDeltaNet


def fla_guard(layer: torch.nn.Module, call: CallFacts) -> bool:
    """fla's own ``_use_fused_qkv_conv`` (the base class's, never an override) on ``call``'s facts."""
    from fla.layers.gated_deltanet import GatedDeltaNet

    last_state = {"conv_state": None, "recurrent_state": None} if call.has_cached_state else None
    cu_seqlens = torch.tensor([0, 1], dtype=torch.int32) if call.varlen else None
    return bool(GatedDeltaNet._use_fused_qkv_conv(layer, last_state, call.use_cache, cu_seqlens))


def _conv_module(channels: int, kernel_size: int, bias: bool, activation: str | None, backend: str) -> torch.nn.Module:
    from fla.modules import ShortConvolution

    conv = ShortConvolution(hidden_size=channels, kernel_size=kernel_size, bias=bias, activation="silu")
    conv.activation = activation
    conv.backend = backend
    return conv


def _construct(cls: type, config: GDNConfig, mode: str) -> Any:
    return cls(
        hidden_size=config.hidden_size,
        expand_v=config.expand_v,
        head_dim=config.head_dim,
        num_heads=config.num_heads,
        num_v_heads=config.num_v_heads,
        mode=mode,
        use_gate=config.use_gate,
        use_short_conv=config.use_short_conv,
        allow_neg_eigval=config.allow_neg_eigval,
        conv_size=config.conv_size,
        conv_bias=config.conv_bias,
        layer_idx=config.layer_idx,
        norm_eps=config.norm_eps,
        output_gate_activation=config.output_gate_activation,
    )


def build_fla_layer(config: GDNConfig, device: str | torch.device = "cpu", *, pinnable: bool = True) -> Any:
    """fla's layer for ``config`` with every per-conv fact applied (parameters uninitialised-random)."""
    base, pinnable_cls = _layer_classes()
    cls = pinnable_cls if pinnable else base
    mode = "fused_recurrent" if config.mode == "recurrent" else "chunk"
    with warnings.catch_warnings():  # fla warns on use_short_conv=False, a state the suite draws on purpose
        warnings.simplefilter("ignore", UserWarning)
        layer = _construct(cls, config, mode)
    if config.use_short_conv:
        for name in CONV_NAMES:
            spec = config.conv_spec(name)
            conv = _conv_module(
                config.conv_channels(name),
                config.conv_size if spec.kernel_size is None else spec.kernel_size,
                config.conv_bias if spec.bias is None else spec.bias,
                spec.activation,
                fla_backend(config.conv_backend if spec.backend is None else spec.backend),
            )
            if spec.dtype is not None:  # G9: one conv's parameters in another dtype
                conv = conv.to(getattr(torch, spec.dtype))
            setattr(layer, f"{name}_conv1d", conv)
    return layer.to(device)


def load_reference_state(layer: torch.nn.Module, state: dict[str, Tensor]) -> None:
    """``strict`` load, then every parameter takes the reference's dtype and device as well."""
    layer.load_state_dict(state, strict=True)
    for name, value in state.items():
        owner, _, attr = name.rpartition(".")
        module = layer.get_submodule(owner) if owner else layer
        current = getattr(module, attr)
        setattr(module, attr, torch.nn.Parameter(value.detach().clone(), requires_grad=current.requires_grad))


def fla_layer_facts(layer: Any) -> LayerFacts:
    if not layer.use_short_conv:
        return LayerFacts(use_short_conv=False, conv_bias=bool(layer.conv_bias))
    facts = []
    for name in CONV_NAMES:
        conv = getattr(layer, f"{name}_conv1d")
        facts.append(
            ConvFacts(
                backend=str(conv.backend),
                activation=conv.activation,
                kernel_size=int(conv.weight.shape[-1]),
                has_bias=conv.bias is not None,
                weight_dtype=str(conv.weight.dtype).removeprefix("torch."),
                bias_dtype=None if conv.bias is None else str(conv.bias.dtype).removeprefix("torch."),
                device=str(conv.weight.device),
            )
        )
    return LayerFacts(use_short_conv=True, conv_bias=bool(layer.conv_bias), convs=(facts[0], facts[1], facts[2]))


# ---- the reference core in fla's calling convention ---------------------------------------------
def reference_core(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Tensor | None = None,
    use_gate_in_kernel: bool = False,
    A_log: Tensor | None = None,
    dt_bias: Tensor | None = None,
    **unused: Any,
) -> tuple[Tensor, Tensor | None]:
    """fla's ``chunk_gated_delta_rule`` signature over :func:`gdn_equiv.core.gated_delta_rule`.

    The maths and casts are those of :meth:`gdn_equiv.reference.GatedDeltaNet._recurrence`.
    """
    if not state_v_first:
        raise InvalidArgument("the reference core keeps the state v-first (fla passes state_v_first=True)")
    Hk, Hv, Dk = q.shape[-2], v.shape[-2], q.shape[-1]
    if Hv > Hk:
        q, k = q.repeat_interleave(Hv // Hk, dim=-2), k.repeat_interleave(Hv // Hk, dim=-2)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    if use_gate_in_kernel:
        assert A_log is not None and dt_bias is not None
        g = -torch.exp(A_log.to(cdt)) * F.softplus(g.to(cdt) + dt_bias.to(cdt))
    if use_beta_sigmoid_in_kernel:
        beta = torch.sigmoid(beta.to(cdt))
        if allow_neg_eigval:
            beta = beta * 2
    qc, kc = q.to(cdt), k.to(cdt)
    if use_qk_l2norm_in_kernel:
        qc, kc = l2norm(qc), l2norm(kc)
    o, state = gated_delta_rule(
        qc, kc, v, g, beta, scale=Dk**-0.5 if scale is None else scale, initial_state=initial_state,
        cu_seqlens=cu_seqlens, mode="chunk",
    )  # fmt: skip
    return o.to(q.dtype), (state if output_final_state else None)


@contextmanager
def _core(core: str):
    """Run fla's layer with ``core``; ``reference`` swaps the two core names in fla's layer module."""
    if core == "fla":
        yield
        return
    import fla.layers.gated_deltanet as mod

    saved = (mod.chunk_gated_delta_rule, mod.fused_recurrent_gated_delta_rule)
    mod.chunk_gated_delta_rule = mod.fused_recurrent_gated_delta_rule = reference_core
    try:
        yield
    finally:
        mod.chunk_gated_delta_rule, mod.fused_recurrent_gated_delta_rule = saved


# ---- caches -------------------------------------------------------------------------------------
def _to_fla_cache(cache: Cache | None) -> Any:
    if cache is None:
        return None
    from fla.models.utils import Cache as FlaCache

    out = FlaCache()
    for idx, state in enumerate(cache.states):
        if state is None:
            continue
        conv = state["conv_state"]
        out.update(
            layer_idx=idx,
            recurrent_state=_clone(state["recurrent_state"]),
            conv_state=None if conv is None else tuple(_clone(c) for c in conv),
            offset=state["offset"],
        )
    return out


def _from_fla_cache(cache: Any) -> Cache | None:
    if cache is None:
        return None
    out = Cache()
    for idx in range(len(cache)):
        state = cache[idx]
        if state is None:
            out.states.append(None)
            continue
        conv = state.get("conv_state")
        out.update(
            idx,
            recurrent_state=state.get("recurrent_state"),
            conv_state=None if conv is None else tuple(conv),
            offset=int(cache.get_seq_length(idx)),
        )
    return out


def _clone(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.detach().clone()


# ---- the target ---------------------------------------------------------------------------------
@dataclass
class FlaHandle:
    example: Example
    layer: Any
    reference: ReferenceGDN
    device: str | torch.device
    core: str
    _calls: list[str] = field(default_factory=list)
    _path: str | None = None

    def __post_init__(self) -> None:
        if self.layer.use_short_conv:
            for name in CONV_NAMES:
                getattr(self.layer, f"{name}_conv1d").register_forward_hook(self._hook(name))

    def _hook(self, name: str):
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            self._calls.append(name)

        return hook

    def inputs(self) -> Inputs:
        """The example's inputs; a populated cache is filled by our reference layer (same weights)."""
        return materialize(self.example, self.reference, self.device)

    def run(self, inputs: Inputs, prologue: str = "auto") -> tuple[Tensor, Any]:
        from gdn_equiv.targets import check_prologue

        check_prologue(TARGET, prologue)
        self.layer.pinned = _FORCED.get(prologue)
        self._calls.clear()
        x = inputs.x.clone()  # fla may write into its input (ShortConvolution's x.mul_(mask))
        kwargs: dict[str, Any] = {"attention_mask": inputs.attention_mask, "use_cache": inputs.use_cache}
        if inputs.cu_seqlens is not None:
            kwargs["cu_seqlens"] = inputs.cu_seqlens
        cache = _to_fla_cache(inputs.cache)
        try:
            with _core(self.core):
                out, _, cache = self.layer(x, past_key_values=cache, **kwargs)
        finally:
            self.layer.pinned = None
        calls = len(self._calls)
        self._path = "none" if not self.layer.use_short_conv else ("fused" if calls == 0 else "separate")
        return out, _from_fla_cache(cache)

    def path_taken(self) -> str | None:
        return self._path

    def launches(self) -> int:
        """Conv-module calls of the last run (the fused path calls none; it is one kernel)."""
        return len(self._calls) if self._path != "fused" else 1

    def guard_said(self) -> bool | None:
        """What fla's own guard answered in the last run (also when the run pinned a path)."""
        return self.layer.last_guard

    def call_facts(self, inputs: Inputs) -> CallFacts:
        """The call's facts, read by our reference layer (the same unpadding rules as fla's)."""
        return self.reference.call_facts(
            inputs.x, inputs.attention_mask, inputs.cache, inputs.use_cache, inputs.cu_seqlens
        )

    def layer_facts(self) -> LayerFacts:
        return fla_layer_facts(self.layer)

    def decide(self, call_facts: CallFacts) -> tuple[bool, str | None]:
        return fla_guard(self.layer, call_facts), None  # fla's guard gives no reason

    def state_dict(self) -> dict[str, Tensor]:
        return self.layer.state_dict()


@dataclass(frozen=True)
class FlaTarget:
    name: str = "fla"
    prologues: tuple[str, ...] = ("auto", "fused", "separate")
    core: str = "fla"

    def configured(self, *, core: str = "fla") -> FlaTarget:
        if core not in CORES:
            raise InvalidArgument(f"fla core must be one of {CORES}, got {core!r}")
        return FlaTarget(core=core)

    def unavailable(self) -> str | None:
        version = fla_version()
        if version is None:
            return "flash-linear-attention is not installed (pip install flash-linear-attention einops transformers)"
        try:
            _layer_classes()
        except Exception as exc:
            return f"fla {version} is installed but its GatedDeltaNet does not import: {type(exc).__name__}: {exc}"
        return None

    def unavailable_to_run(self) -> str | None:
        """Building works on CPU (the guard can be asked there); running needs fla's Triton kernels on CUDA."""
        reason = self.unavailable()
        if reason is None and not torch.cuda.is_available():
            return "fla's layer runs Triton kernels (conv, norm, core) and needs a CUDA device"
        return reason

    def build(self, example: Example, device: str | torch.device = "cpu") -> FlaHandle:
        reference = build_layer(example, ReferenceGDN, device=device)
        assert isinstance(reference, ReferenceGDN)
        layer = build_fla_layer(example.config, device)
        load_reference_state(layer, reference.state_dict())
        layer.train(example.train)
        return FlaHandle(example, layer, reference, device, self.core)


TARGET = FlaTarget()
