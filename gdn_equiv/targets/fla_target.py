"""The ``fla`` target: flash-linear-attention's layer of each family, in each fla version it knows.

Where fusion is decided moves between fla versions, so the adapter follows the version table
(:mod:`gdn_equiv.model.fla_versions`: one row per version, matched exactly). A version it does not
know is refused, naming it and the known ones.

How the suite drives fla without touching its guard:

- The layer is fla's class for the example's family (``Family.fla_class``, constructor arguments from
  ``Family.fla_kwargs``, only those the class declares); it loads the state_dict of our reference
  layer built from the same example (``strict=True``; every parameter then takes the reference's
  dtype too), so the two compute from identical weights.
- Per-conv facts (bias present or not, activation, backend, kernel size, dtype) are applied by
  replacing a conv module with fla's own ``ShortConvolution`` built with those facts, then setting
  ``backend`` and ``activation`` as attributes (fla's constructor would flip ``cuda`` to ``triton``
  when causal-conv1d is missing; an attribute is what a user can set). fla's backend names are
  ``triton`` and ``cuda``; ours map as ``cuda -> cuda``, anything else ``-> triton``.
- The path taken is *observed*, never inferred: forward hooks on the three conv modules count their
  calls, and the ``causal_conv1d`` name that the version's fused branch calls (:attr:`FlaVersion.fused_conv`)
  is wrapped for the run to record the channel count of each call. Fused: no module call and one
  conv call as wide as the three convs together; separate: the three modules called (or three conv
  calls, one per conv). Anything else is reported as what was seen, so a forced ``"fused"`` that
  never reaches the fused conv cannot pass for fused.
- A constructor of fla's that refuses a config (an ``assert`` in ``__init__``, a module it builds) is
  re-raised as :class:`gdn_equiv.targets.UpstreamRefused` naming the class, its arguments and fla's
  message: a search records it and goes on. The family records list what each version refuses
  (``fla_rules``) and :meth:`FlaTarget.example_pins` has the strategies draw only that.
- ``prologue="auto"`` runs fla's own guard, unmodified. ``"fused"`` / ``"separate"`` replace the
  decision at the one place the version table names, inside the adapter and only for that run:
  0.5.2 and 0.6.0: a subclass overriding ``GatedDeltaNet._use_fused_qkv_conv`` (a class choice made at
  build time); PR #977: the name ``can_fuse_qkv_short_conv`` in the family's ``fla.layers`` module, bound
  for the run to a constant (the layer's outer condition, inline code, still applies: a forced
  ``"fused"`` cannot pass a cache or ``cu_seqlens``, and the observed path says so). The prologue
  code that runs is fla's. A family that does not fuse in a version runs ``auto``/``separate`` only.
- ``core="reference"`` (``--fla-core=reference``, families whose record names a ``reference_core``:
  Gated DeltaNet) substitutes our torch core for fla's
  ``chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule`` (their names in fla's layer
  module) for the duration of a run, with fla's in-kernel maths (q/k L2 norm, the gate
  ``-exp(A_log) softplus(a + dt_bias)``, ``sigmoid(beta)`` (x2 with negative eigenvalues)) done here
  exactly as our reference does. fla's prologue, guard and convs are untouched. Needed on Hopper
  with Triton 3.6, where fla's chunked backward does not run (DEVICE.md). :attr:`FlaHandle.core`
  records which core ran.
- Caches: fla's own ``fla.models.utils.Cache``. A populated cache from the example (filled by our
  reference, same weights), or a caller's own fla cache, is copied into a fresh one (the inputs' cache
  is never written); the cache a run returns is copied back into a :class:`gdn_equiv.model.cache.Cache` so
  the suite compares one type.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model import fla_versions
from gdn_equiv.model.backends.fla_backend import pin_loaded_fla
from gdn_equiv.model.cache import Cache, layer_cache
from gdn_equiv.model.config import CallFacts, ConvFacts, LayerConfig, LayerFacts
from gdn_equiv.model.core import gated_delta_rule, l2norm
from gdn_equiv.model.example import Example, Inputs, build_layer, materialize
from gdn_equiv.model.families import get_family, is_fla_only, known_families
from gdn_equiv.model.fla_versions import FlaVersion, version_row
from gdn_equiv.model.reference import ShortConvLayer
from gdn_equiv.targets import UpstreamRefused

Tensor = torch.Tensor
CORES = ("fla", "reference")
_FORCED = {"fused": True, "separate": False}


def fla_backend(ours: str | None) -> str:
    """Our backend name -> fla's (fla has ``triton`` and ``cuda``)."""
    return "cuda" if ours == "cuda" else "triton"


def fla_class_of(family: str) -> type:
    path = get_family(family).fla_class
    if path is None:
        raise InvalidArgument(f"family {family!r} has no fla class")
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _pinnable(family: str, row: FlaVersion) -> type:
    """fla's class for ``family``; for a 0.6.0 Gated DeltaNet a subclass whose guard can be pinned."""
    cls = fla_class_of(family)
    if row.decision != "method" or not row.fuses(family):
        return cls
    return _pinnable_gdn(cls)


_PINNABLE: dict[type, type] = {}


def _pinnable_gdn(base: Any) -> type:
    if base not in _PINNABLE:

        class PinnableGatedDeltaNet(base):
            """fla's layer; ``pinned`` = ``None`` asks fla's guard, ``True``/``False`` pins its answer."""

            pinned: bool | None = None
            last_guard: bool | None = None

            def _use_fused_qkv_conv(self, last_state, use_cache, cu_seqlens):
                self.last_guard = base._use_fused_qkv_conv(self, last_state, use_cache, cu_seqlens)
                return self.last_guard if self.pinned is None else self.pinned

        _PINNABLE[base] = PinnableGatedDeltaNet
    return _PINNABLE[base]


def _family_module(layer: Any) -> Any:
    """The ``fla.layers.<family>`` module whose global ``can_fuse_qkv_short_conv`` the layer calls."""
    return importlib.import_module(type(layer).__module__ if not hasattr(layer, "_fla_module") else layer._fla_module)


@contextmanager
def _pinned(layer: Any, row: FlaVersion, fused: bool | None) -> Iterator[None]:
    """Run with the version's decision pinned to ``fused`` (``None``: fla decides)."""
    if fused is None or row.decision == "method":
        if row.decision == "method" and hasattr(layer, "pinned"):
            layer.pinned = fused
        try:
            yield
        finally:
            if hasattr(layer, "pinned"):
                layer.pinned = None
        return
    module = _family_module(layer)
    original = module.can_fuse_qkv_short_conv
    module.can_fuse_qkv_short_conv = lambda *convs: fused
    try:
        yield
    finally:
        module.can_fuse_qkv_short_conv = original


def fla_guard(
    layer: torch.nn.Module, call: CallFacts, row: FlaVersion | None = None, family: str = "gated_deltanet"
) -> bool:
    """The version's own decision on ``call``'s facts, asked of fla's code (never an override):
    0.6.0's ``GatedDeltaNet._use_fused_qkv_conv``; PR #977's outer condition (``use_short_conv``, no
    cached state, no ``use_cache``, no ``cu_seqlens``) and its ``can_fuse_qkv_short_conv`` as the family's
    module binds it. A family that does not fuse in that version: ``False``."""
    row = row or version_row()
    if not row.fuses(family):
        return False
    if row.decision == "method":
        base: Any = fla_class_of(family)
        last_state = {"conv_state": None, "recurrent_state": None} if call.has_cached_state else None
        cu_seqlens = torch.tensor([0, 1], dtype=torch.int32) if call.varlen else None
        return bool(base._use_fused_qkv_conv(layer, last_state, call.use_cache, cu_seqlens))
    if not _inline_condition(layer, call):
        return False
    module = importlib.import_module(fla_class_of(family).__module__)
    return bool(module.can_fuse_qkv_short_conv(layer.q_conv1d, layer.k_conv1d, layer.v_conv1d))


def _inline_condition(layer: torch.nn.Module, call: CallFacts) -> bool:
    """PR #977's outer condition, inline code in each layer's ``forward`` before the fusion helper: short
    convs on, no cached state, no ``use_cache``, no ``cu_seqlens``. Pinning the helper cannot reach past it."""
    return bool(layer.use_short_conv and not (call.has_cached_state or call.use_cache or call.varlen))


@contextmanager
def _refusals(family: str, what: str, kwargs: dict[str, Any]) -> Iterator[None]:
    """An exception from fla's constructor ``what`` (called with ``kwargs``) as :class:`UpstreamRefused`."""
    try:
        yield
    except Exception as exc:
        raise UpstreamRefused(family, what, kwargs, exc) from exc


@contextmanager
def _observed_conv(module: Any, widths: list[int]) -> Iterator[None]:
    """``module.causal_conv1d`` counted for the block: each call's channel count goes into ``widths``
    (the call itself runs unchanged)."""
    original = module.causal_conv1d

    def counted(*args: Any, **kwargs: Any) -> Any:
        weight = kwargs["weight"] if "weight" in kwargs else args[1]
        widths.append(int(weight.shape[0]))
        return original(*args, **kwargs)

    module.causal_conv1d = counted
    try:
        yield
    finally:
        module.causal_conv1d = original


def _conv_module(
    channels: int, kernel_size: int, bias: bool, activation: str | None, backend: str, family: str
) -> torch.nn.Module:
    from fla.modules import ShortConvolution

    args = {"hidden_size": channels, "kernel_size": kernel_size, "bias": bias, "activation": "silu"}
    with _refusals(family, "ShortConvolution", args):
        conv = ShortConvolution(**args)
    conv.activation = activation
    conv.backend = backend
    return conv


def fla_conv_channels(family: str, config: LayerConfig, name: str) -> int:
    """Channels of fla's ``<name>_conv1d`` for ``config``: the config's own count for an in-house
    family; an fla-only family's record says how its class sizes the conv from the borrowed config
    (GatedDeltaProduct's k/v convs are ``num_householder`` times wider, ABC's k/v are not grouped)."""
    fam = get_family(family)
    return fam.conv_channels(config, name) if is_fla_only(fam) else config.conv_channels(name)


def construct_layer(cls: Any, family: str, config: LayerConfig) -> tuple[Any, dict[str, Any]]:
    """fla's layer from our config: the family's fla arguments that the class declares (a version
    may lack one: PR #977's Gated DeltaNet has no ``output_gate_activation``); returns the layer and
    the arguments it did not take."""
    kwargs = get_family(family).fla_kwargs(config)
    params = inspect.signature(cls.__init__).parameters
    taken = {k: v for k, v in kwargs.items() if k in params}
    with _refusals(family, cls.__name__, taken):
        layer = cls(**taken)
    return layer, {k: v for k, v in kwargs.items() if k not in params}


def build_fla_layer(
    config: LayerConfig, device: str | torch.device = "cpu", *, family: str = "gated_deltanet", pinnable: bool = True
) -> Any:
    """fla's layer for ``config`` with every per-conv fact applied (parameters uninitialised-random)."""
    row = version_row()
    cls = _pinnable(family, row) if pinnable else fla_class_of(family)
    with warnings.catch_warnings():  # fla warns on use_short_conv=False, a state the suite draws on purpose
        warnings.simplefilter("ignore", UserWarning)
        layer, dropped = construct_layer(cls, family, config)
    layer._gdn_dropped_kwargs = dropped
    if config.use_short_conv:
        for name in config.SLOTS:
            spec = config.conv_spec(name)
            conv = _conv_module(
                fla_conv_channels(family, config, name),
                config.slot_kernel_size(name),
                config.slot_bias(name),
                spec.activation,
                fla_backend(config.slot_backend(name)),
                family,
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


def fla_layer_facts(layer: Any, slots: tuple[str, ...] = ("q", "k", "v")) -> LayerFacts:
    if not layer.use_short_conv:
        return LayerFacts(use_short_conv=False, conv_bias=bool(layer.conv_bias), names=slots)
    facts = []
    for name in slots:
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
    return LayerFacts(use_short_conv=True, conv_bias=bool(layer.conv_bias), convs=tuple(facts), names=slots)


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
    """fla's ``chunk_gated_delta_rule`` signature over :func:`gdn_equiv.model.core.gated_delta_rule`.

    The maths and casts are those of :meth:`gdn_equiv.model.reference.GatedDeltaNet._recurrence`.
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


def __getattr__(name: str) -> Any:
    """``REFERENCE_CORE_FAMILIES``: the families whose core ``core="reference"`` can swap in (their record
    names a ``reference_core``; the others run fla's own core). Read on use, not at import: it loads
    every family record, entry points included."""
    if name == "REFERENCE_CORE_FAMILIES":
        return tuple(f for f in known_families() if get_family(f).reference_core)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextmanager
def _core(core: str, family: str = "gated_deltanet"):
    """Run fla's layer with ``core``; ``reference`` swaps the two core names (fla's Gated DeltaNet
    core's) in the module the family record names (the only core the adapter restates)."""
    if core == "fla":
        yield
        return
    where = get_family(family).reference_core
    if where is None:
        raise InvalidArgument(f"--fla-core reference restates Gated DeltaNet's core only, not {family!r}'s")
    mod: Any = importlib.import_module(where)

    saved = (mod.chunk_gated_delta_rule, mod.fused_recurrent_gated_delta_rule)
    mod.chunk_gated_delta_rule = mod.fused_recurrent_gated_delta_rule = reference_core
    try:
        yield
    finally:
        mod.chunk_gated_delta_rule, mod.fused_recurrent_gated_delta_rule = saved


# ---- caches -------------------------------------------------------------------------------------
def to_fla_cache(cache: Any) -> Any:
    """A fresh ``fla.models.utils.Cache`` holding copies of ``cache``'s layer states and token counts.

    ``cache`` is our :class:`Cache` or a caller's fla cache (read as our layers read one,
    :func:`gdn_equiv.model.cache.layer_cache`); either way fla's layer writes into the copy, never into it."""
    source = layer_cache(cache)
    if source is None:
        return None
    from fla.models.utils import Cache as FlaCache

    out = FlaCache()
    for idx in range(len(source)):
        state = source.get(idx)
        if state is None:
            continue
        conv = state["conv_state"]
        extra = {
            k: _clone(v)
            for k, v in state.items()
            if k not in ("recurrent_state", "conv_state", "offset") and v is not None
        }
        out.update(
            layer_idx=idx,
            recurrent_state=_clone(state["recurrent_state"]),
            conv_state=None if conv is None else tuple(_clone(c) for c in conv),
            offset=state["offset"],
            **extra,
        )
    return out


def from_fla_cache(cache: Any) -> Cache | None:
    """Our :class:`Cache` holding ``cache``'s layer states (the same tensors) and token counts."""
    source = layer_cache(cache)
    if source is None:
        return None
    out = Cache()
    for idx in range(len(source)):
        state = source.get(idx)
        if state is None:
            out.states.append(None)
            continue
        conv = state.get("conv_state")
        extra = {k: v for k, v in state.items() if k in ("ffn_state",) and v is not None}
        out.update(
            idx,
            recurrent_state=state.get("recurrent_state"),
            conv_state=None if conv is None else tuple(conv),
            offset=int(state["offset"]),
            **extra,
        )
    return out


def _clone(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.detach().clone()


# ---- the target ---------------------------------------------------------------------------------
@dataclass
class FlaHandle:
    example: Example
    layer: Any
    reference: ShortConvLayer
    device: str | torch.device
    core: str
    row: FlaVersion
    _calls: list[str] = field(default_factory=list)
    _conv_widths: list[int] = field(default_factory=list)
    _path: str | None = None

    def __post_init__(self) -> None:
        if self.layer.use_short_conv:
            for name in self.reference.slots:
                getattr(self.layer, f"{name}_conv1d").register_forward_hook(self._hook(name))

    def _hook(self, name: str):
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            self._calls.append(name)

        return hook

    @property
    def family(self) -> str:
        return self.example.family

    @property
    def prologues(self) -> tuple[str, ...]:
        """What this version lets the adapter force for this family."""
        return ("auto", "fused", "separate") if self.row.fuses(self.family) else ("auto", "separate")

    def inputs(self) -> Inputs:
        """The example's inputs; a populated cache is filled by our reference layer (same weights).

        An fla-only family's ``reference`` is the borrowed family's layer: its inputs (x, mask,
        ``cu_seqlens``) fit, but a cache it fills has that family's state layout, not fla's class's;
        such an example is refused rather than fed to fla (its guard refuses a cached state anyway)."""
        if self.example.cache == "populated" and is_fla_only(self.family):
            raise InvalidArgument(
                f"{self.family!r} is fla-only: a populated cache would come from {get_family(self.family).like!r}'s "
                "reference layer, whose state layout is not fla's; give the example cache='none' or 'empty'"
            )
        return materialize(self.example, self.reference, self.device)

    def run(self, inputs: Inputs, prologue: str = "auto") -> tuple[Tensor, Any]:
        from gdn_equiv.targets import check_prologue

        check_prologue(TARGET, prologue)
        if prologue not in self.prologues:
            raise InvalidArgument(
                f"fla {self.row.version} has no fused prologue for {self.family!r}; prologue must be one of "
                f"{self.prologues}, got {prologue!r}"
            )
        self._calls.clear()
        self._conv_widths.clear()
        self._path = None  # a run that raises has no path: not the previous run's
        x = inputs.x.clone()  # fla may write into its input (ShortConvolution's x.mul_(mask))
        kwargs: dict[str, Any] = {"attention_mask": inputs.attention_mask, "use_cache": inputs.use_cache}
        if inputs.cu_seqlens is not None:
            kwargs["cu_seqlens"] = inputs.cu_seqlens
        cache = to_fla_cache(inputs.cache)
        forced = {"fused": True, "separate": False}.get(prologue)
        with (
            _pinned(self.layer, self.row, forced),
            _core(self.core, self.family),
            self._observing_fused_conv(),
        ):
            out, _, cache = self.layer(x, past_key_values=cache, **kwargs)
        self._path = self._observed_path()
        return out, from_fla_cache(cache)

    def _observing_fused_conv(self) -> AbstractContextManager[None]:
        """Counting the ``causal_conv1d`` this version's fused branch calls (the version table's
        module); a family the version does not fuse has no fused branch to watch."""
        if not self.row.fuses(self.family):
            return nullcontext()
        name = self.row.fused_conv
        module = importlib.import_module(fla_class_of(self.family).__module__ if name == "layer" else name)
        return _observed_conv(module, self._conv_widths)

    def _observed_path(self) -> str:
        """The path of the last run, from what was seen: conv-module calls and fused-conv calls."""
        if not self.layer.use_short_conv:
            return "none"
        slots = [int(getattr(self.layer, f"{n}_conv1d").weight.shape[0]) for n in self.reference.slots]
        calls, widths = len(self._calls), list(self._conv_widths)
        if calls == 0 and widths == [sum(slots)]:
            return "fused"
        if (calls == len(slots) and widths in ([], slots)) or (calls == 0 and widths == slots):
            return "separate"
        return f"unobserved ({calls} conv-module calls, fused-conv calls of widths {widths}, convs {slots})"

    def path_taken(self) -> str | None:
        """``"fused"`` only when the fused conv was seen to run (see :meth:`_observed_path`)."""
        return self._path

    def launches(self) -> int:
        """Conv calls seen in the last run: conv-module calls plus direct calls of the fused branch's
        ``causal_conv1d`` (1 on the fused path, 3 on the separate one)."""
        return len(self._calls) + len(self._conv_widths)

    def call_facts(self, inputs: Inputs) -> CallFacts:
        """The call's facts, read by our reference layer (the same unpadding rules as fla's)."""
        return self.reference.call_facts(
            inputs.x, inputs.attention_mask, inputs.cache, inputs.use_cache, inputs.cu_seqlens
        )

    def layer_facts(self) -> LayerFacts:
        return fla_layer_facts(self.layer, self.reference.slots)

    def decide(self, call_facts: CallFacts) -> tuple[bool, str | None]:
        return fla_guard(self.layer, call_facts, self.row, self.family), None  # fla's guard gives no reason

    def forceable(self, call_facts: CallFacts) -> bool:
        """Whether ``prologue="fused"`` can reach the fused path for this call. 0.5.2 and 0.6.0 decide in
        one method, which the adapter pins; PR #977's layers test their outer condition (no cached state, no
        ``use_cache``, no ``cu_seqlens``) in inline code before the helper the adapter pins, so a forced
        ``"fused"`` takes the separate path there (seen on the H200: a ``cu_seqlens`` example)."""
        if not self.row.fuses(self.family) or not self.layer.use_short_conv:
            return False
        return self.row.decision == "method" or _inline_condition(self.layer, call_facts)

    def bias_gap(self) -> str | None:
        """What this version's fused path does with these convs' biases (:func:`bias_gap`)."""
        return bias_gap(self.layer_facts(), self.row)

    def state_dict(self) -> dict[str, Tensor]:
        return self.layer.state_dict()


def bias_gap(facts: LayerFacts, row: FlaVersion) -> str | None:
    """What ``row``'s fused path does with these convs' biases: ``"crash"`` (it concatenates them and one
    is ``None``), ``"dropped"`` (it concatenates none and one exists) or ``None``."""
    if facts.convs is None:
        return None
    has = [c.has_bias for c in facts.convs]
    concatenates = facts.conv_bias if row.fused_bias == "flag" else has[0]
    if concatenates and not all(has):
        return "crash"
    if not concatenates and any(has):
        return "dropped"
    return None


#: a decision table's two conv backends, as fla's two (the table only asks "equal or not")
_TABLE_BACKENDS = {"torch": "triton", "triton": "cuda"}


@dataclass
class FlaGuardProbe:
    """fla's own guard asked on a decision table's states (P1 in the gate): each state is built on one
    fla layer of the family's small config (one per ``use_short_conv``/``conv_bias``), its q/k/v conv
    modules swapped for ShortConvolutions with the state's facts, and judged on the facts read back from
    that layer. A state fla cannot hold (a relu or L2-norm conv, a device not here) is ``None``."""

    family: str
    row: FlaVersion
    _layers: dict[tuple[bool, bool], Any] = field(default_factory=dict)
    _convs: dict[tuple[str, ConvFacts], torch.nn.Module] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"fla {self.row.version} {self.row.where}"

    def known_gaps(self) -> tuple[str, ...]:
        """The gap kinds the version table lists for this family (``properties.Gap<Kind>``)."""
        return self.row.known_gaps(self.family)

    def gap_kind(self, d: Any) -> str:
        """The gap kind of a disagreement (a ``guard_oracle.Difference``), as
        ``properties.check_target_guard`` names it."""
        if d.kind != "unsafe":
            return "NeedlessFallback" if self.row.fuses(self.family) else "NoFusedPrologue"
        gap = bias_gap(d.layer, self.row) if "G8" in d.spec_failed else None
        return {"crash": "MissingBiasCrash", "dropped": "BiasDropped"}.get(gap or "", "OtherRefusal")

    def _layer(self, use_short_conv: bool, conv_bias: bool) -> Any:
        key = (use_short_conv, conv_bias)
        if key not in self._layers:
            fam = get_family(self.family)
            config = fam.config_cls(**{**fam.small, "use_short_conv": use_short_conv, "conv_bias": conv_bias})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._layers[key] = (build_fla_layer(config, "cpu", family=self.family, pinnable=False), config)
        return self._layers[key]

    def _conv(self, config: LayerConfig, name: str, facts: ConvFacts) -> torch.nn.Module | None:
        if facts.activation not in ("silu", "swish", None) or facts.extras or facts.backend not in _TABLE_BACKENDS:
            return None
        if facts.device != "cpu" and not (facts.device.startswith("cuda") and torch.cuda.is_available()):
            return None
        key = (name, facts)
        if key not in self._convs:
            channels = fla_conv_channels(self.family, config, name)
            backend = _TABLE_BACKENDS[facts.backend]
            conv = _conv_module(channels, facts.kernel_size, facts.has_bias, facts.activation, backend, self.family)
            conv = conv.to(device=facts.device, dtype=getattr(torch, facts.weight_dtype))
            bias: Any = conv.bias
            if bias is not None and facts.bias_dtype is not None:
                conv.bias = torch.nn.Parameter(bias.detach().to(getattr(torch, facts.bias_dtype)))
            self._convs[key] = conv
        return self._convs[key]

    def ask(self, layer_facts: LayerFacts, call: CallFacts) -> tuple[bool, None, LayerFacts] | None:
        """fla's decision on the state (it gives no reasons) and the facts the built layer holds."""
        layer, config = self._layer(layer_facts.use_short_conv, layer_facts.conv_bias)
        slots = get_family(self.family).config_cls.SLOTS
        if layer_facts.convs is not None:  # without short convs: leftover conv modules the guard must ignore
            if len(layer_facts.convs) != len(slots):
                return None
            convs = [self._conv(config, n, c) for n, c in zip(slots, layer_facts.convs, strict=True)]
            if any(c is None for c in convs):
                return None
            for name, conv in zip(slots, convs, strict=True):
                setattr(layer, f"{name}_conv1d", conv)
        elif layer_facts.use_short_conv:
            return None
        return fla_guard(layer, call, self.row, self.family), None, fla_layer_facts(layer, slots)


@dataclass(frozen=True)
class FlaTarget:
    name: str = "fla"
    prologues: tuple[str, ...] = ("auto", "fused", "separate")
    core: str = "fla"

    def configured(self, *, core: str = "fla") -> FlaTarget:
        if core not in CORES:
            raise InvalidArgument(f"fla core must be one of {CORES}, got {core!r}")
        return FlaTarget(core=core)

    def example_pins(self) -> dict[str, Any]:
        """What example strategies must be given to draw only configs the installed fla's classes accept
        (``examples(**pins)``: its version, whose ``fla_rules`` the family records list)."""
        version = fla_versions.fla_version()
        return {"fla_version": version} if version in fla_versions.VERSIONS else {}

    def unavailable(self) -> str | None:
        """Why the installed fla cannot be driven here (not installed, a version the table does not
        know, a class that does not import), or ``None``."""
        version = fla_versions.fla_version()
        if version is None:
            return "flash-linear-attention is not installed (pip install flash-linear-attention einops transformers)"
        try:
            version_row(version)
        except InvalidArgument as exc:
            return str(exc)
        try:
            fla_class_of("gated_deltanet")
        except Exception as exc:
            return f"fla {version} is installed but its layers do not import: {type(exc).__name__}: {exc}"
        return None

    def known_gaps(self, family: str) -> tuple[str, ...]:
        """The guard gap kinds the installed version has for ``family`` (its version row's)."""
        return version_row().known_gaps(family)

    def guard_probe(self, family: str) -> FlaGuardProbe:
        """The installed version's guard for ``family``, asked on a decision table's states."""
        return FlaGuardProbe(family, version_row())

    def unavailable_to_run(self) -> str | None:
        """Building works on CPU (the guard can be asked there); running needs fla's Triton kernels on CUDA."""
        reason = self.unavailable()
        if reason is None and not torch.cuda.is_available():
            return "fla's layer runs Triton kernels (conv, norm, core) and needs a CUDA device"
        return reason

    def build(self, example: Example, device: str | torch.device = "cpu") -> FlaHandle:
        """fla's layer for ``example`` with our reference's state_dict. An fla-only family has no
        reference of its own: the borrowed family's layer makes the inputs and reads the call facts
        (same mask handling), and fla's layer keeps its own initialisation (from the example's
        seed), cast to the example's dtype except where a conv's facts name another (G9)."""
        family = get_family(example.family)
        if not is_fla_only(family):
            reference = build_layer(example, family.layer_cls, device=device)
            layer = build_fla_layer(example.config, device, family=example.family)
            load_reference_state(layer, reference.state_dict())
        else:
            reference = build_layer(example, get_family(family.like).layer_cls, device=device)
            gen_state = torch.random.get_rng_state()
            torch.manual_seed(example.seed)
            try:
                layer = build_fla_layer(example.config, device, family=example.family)
            finally:
                torch.random.set_rng_state(gen_state)
            _cast(layer, example.config, example.torch_dtype)
        layer.train(example.train)
        pin_loaded_fla()
        return FlaHandle(example, layer, reference, device, self.core, version_row())  # type: ignore[arg-type]


def _cast(layer: torch.nn.Module, config: LayerConfig, dtype: torch.dtype) -> None:
    """Every parameter in ``dtype``, but a conv whose facts name a dtype keeps it (as the reference's
    state_dict would leave it for an in-house family)."""
    layer.to(dtype)
    if config.use_short_conv:
        for name in config.SLOTS:
            spec = config.conv_spec(name)
            if spec.dtype is not None:
                getattr(layer, f"{name}_conv1d").to(getattr(torch, spec.dtype))


TARGET = FlaTarget()
