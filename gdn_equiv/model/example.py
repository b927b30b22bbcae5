"""One generated test case as plain data, and the tensors it stands for.

Strategies draw an :class:`Example`; :func:`materialize` turns it into a layer and inputs from its
seed, deterministically, so a failure is replayed from the JSON alone (``gdn-equiv repro``).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.cache import Cache
from gdn_equiv.model.config import CallFacts, ConvSpec, LayerConfig
from gdn_equiv.model.families import DEFAULT_FAMILY, get_family
from gdn_equiv.model.fused import FusedPrologue
from gdn_equiv.model.reference import ShortConv

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
VARLEN_KINDS = ("none", "cu_seqlens", "mask")
CACHE_KINDS = ("none", "empty", "populated")


@dataclass(frozen=True)
class Example:
    """A layer family's config plus one call.

    ``varlen``: ``"none"`` (``[B, T]`` batch), ``"cu_seqlens"`` (``B == 1``, ``seq_lens`` sum to ``T``),
    or ``"mask"`` (``seq_lens[b]`` valid tokens in row ``b``, padded on ``pad_side``).
    ``cache``: ``"none"`` (no cache object), ``"empty"`` (a cache without this layer's state) or
    ``"populated"`` (state from a ``prefix_len``-token call through the reference path).
    """

    config: LayerConfig = field(default_factory=lambda: get_family(DEFAULT_FAMILY).config_cls())
    family: str = DEFAULT_FAMILY
    dtype: str = "float32"
    batch: int = 1
    seq_len: int = 1
    seed: int = 0
    scale: float = 1.0
    varlen: str = "none"
    seq_lens: tuple[int, ...] = ()
    pad_side: str = "right"
    cache: str = "none"
    prefix_len: int = 0
    use_cache: bool = False
    grad: bool = True
    train: bool = False
    #: the values of the layer's fused conv call where the P7 conv rows check that call on its own
    #: (``gdn_equiv.strategies.values.VALUE_KINDS``: randn, or an extreme; issue #52); the layer's own
    #: input stays randn times ``scale``
    conv_values: str = "randn"

    def __post_init__(self) -> None:
        config_cls = get_family(self.family).config_cls
        if type(self.config) is not config_cls:
            raise InvalidArgument(
                f"family {self.family!r} needs a {config_cls.__name__}, got {type(self.config).__name__}"
            )
        if self.dtype not in DTYPES:
            raise InvalidArgument(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def call_facts(self) -> CallFacts:
        """The guard's facts of this example's call, read off its description (no layer is run): a
        populated cache is a cached state; ``cu_seqlens``, or a mask in a family that unpads, is
        varlen. ``tests/test_families.py`` checks it against what the layer itself reads."""
        unpads = get_family(self.family).mask == "unpad"
        varlen = self.varlen == "cu_seqlens" or (self.varlen == "mask" and unpads)
        return CallFacts(self.cache == "populated", self.use_cache, varlen)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens) if self.varlen == "cu_seqlens" else self.batch

    def to_json(self) -> str:
        data = asdict(self)
        data["config"] = self.config.as_dict()
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> Example:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        family = data.get("family", DEFAULT_FAMILY)
        data["config"] = get_family(family).config_cls.from_dict(data["config"])
        data["seq_lens"] = tuple(data.get("seq_lens", ()))
        return cls(**data)

    def short(self) -> str:
        """One line for failure messages: the call, then the config fields that differ from the
        family's defaults."""
        c = self.config
        default = type(c)()
        fields_ = ", ".join(
            f"{k}={v.__dict__ if isinstance(v, ConvSpec) else v!r}"
            for k, v in c.as_dict().items()
            if getattr(default, k) != getattr(c, k) or k in ("hidden_size", "conv_size", "conv_bias")
        )
        return (
            f"Example(family={self.family}, dtype={self.dtype}, B={self.batch}, T={self.seq_len}, "
            f"varlen={self.varlen}{self.seq_lens or ''}, cache={self.cache}, use_cache={self.use_cache}, "
            f"grad={self.grad}, train={self.train}, scale={self.scale}, seed={self.seed}, "
            f"{'' if self.conv_values == 'randn' else f'conv_values={self.conv_values}, '}config: {fields_})"
        )


@dataclass
class Inputs:
    """Materialised call arguments; ``cache`` is fresh per :func:`materialize` call."""

    x: torch.Tensor
    attention_mask: torch.Tensor | None
    cu_seqlens: torch.Tensor | None
    cache: Cache | None
    use_cache: bool

    def kwargs(self) -> dict[str, Any]:
        return {
            "attention_mask": self.attention_mask,
            "cu_seqlens": self.cu_seqlens,
            "past_key_values": self.cache,
            "use_cache": self.use_cache,
        }

    def in_fp64(self) -> Inputs:
        """The same call with ``x`` and every cached state cast to fp64 (for :func:`fp64_twin` runs)."""
        cache = None if self.cache is None else self.cache.clone(torch.float64)
        return Inputs(self.x.detach().double(), self.attention_mask, self.cu_seqlens, cache, self.use_cache)


def fp64_twin(layer: torch.nn.Module) -> torch.nn.Module:
    """A copy of the reference ``layer`` in fp64 with ``torch`` convs: the truth that cross-implementation
    checks measure accuracy against (:func:`gdn_equiv.harness.compare.assert_as_accurate`)."""
    twin = copy.deepcopy(layer).double()
    for module in twin.modules():
        if isinstance(module, ShortConv):
            module.backend = "torch"
    for p in twin.parameters():
        p.grad = None
    return twin


class _JitterGrad(torch.autograd.Function):
    """The identity forward; backward, the incoming gradient through ``jitter`` (:func:`ulp_jitter`'s input
    gradients)."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, jitter: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        ctx.jitter = jitter
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.jitter(grad), None


@contextlib.contextmanager
def ulp_jitter(layer: torch.nn.Module, seed: int, *, input_grads: bool = True) -> Iterator[None]:
    """Inside the block, the output of every leaf module of ``layer`` that holds parameters (projections,
    convs, norms), and the gradient of each of their parameters, moves by ``s * eps * max(|t|, rms(t))``
    (``eps`` of its dtype, ``s = ±1`` per element from ``seed``, ``rms`` over the tensor's finite
    elements) and is rounded back to that dtype: the same layer as if each kernel, forward and backward,
    had summed its terms in another order. Such a kernel errs by about one unit *at the scale of its
    terms*, not of its result: where terms cancel (a conv output or a weight gradient near zero), the
    difference is many units of the result (``F.conv1d`` vs our conv, fp32: up to 10^4 units of the
    output in 1 of 500 elements), which a purely relative ``t * (1 + s * eps)`` never moves, and the
    layer amplifies (the q/k L2 norm). The tensor's rms stands in for the terms' size. With
    ``input_grads`` (the default) the gradient each such module passes back to its inputs moves the same
    way, as if its backward kernel's data path had summed in another order: a norm's input gradient
    cancels terms far larger than itself, and where the loss barely depends on a tensor (beta at T=1,
    which the output norm undoes) its gradient is nothing but that cancellation (``input_grads=False`` is
    the bar before 2026-12-07, kept for ``tools/accuracy_spread.py``). A handful of such runs show how far
    *correct* implementations of the layer in that dtype spread around the fp64 truth
    (see :data:`gdn_equiv.harness.compare.ACCURACY_FACTOR`)."""
    gen = torch.Generator().manual_seed(seed)

    def jitter(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point() or t.numel() == 0:
            return t
        sign = torch.randint(0, 2, t.shape, generator=gen).to(t.device, t.dtype) * 2 - 1
        finite = t.detach()[torch.isfinite(t.detach())].double()
        rms = float(finite.square().mean().sqrt()) if finite.numel() else 0.0
        return t + torch.finfo(t.dtype).eps * sign * t.detach().abs().clamp_min(rms)

    def hook(module: torch.nn.Module, args: Any, out: Any) -> Any:
        if isinstance(out, torch.Tensor):
            return jitter(out)
        if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
            return (jitter(out[0]), *out[1:])
        return out

    def pre_hook(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            _JitterGrad.apply(a, jitter) if isinstance(a, torch.Tensor) and a.requires_grad else a for a in args
        )

    leaves = [m for m in layer.modules() if next(m.children(), None) is None and list(m.parameters(recurse=False))]
    handles: list[Any] = [m.register_forward_hook(hook) for m in leaves]
    if input_grads:
        handles += [m.register_forward_pre_hook(pre_hook) for m in leaves]
    # the backward kernels' results too: each parameter gradient as if summed in another order
    handles += [p.register_hook(jitter) for m in leaves for p in m.parameters(recurse=False) if p.requires_grad]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


#: Same-dtype reference runs with one-ulp rounding jitter (:func:`ulp_jitter`) besides the plain one in
#: :func:`accuracy_runs`: the spread of correct implementations another one is judged against.
ROUNDING_VARIANTS = 16

#: One run of a layer: output, dx (``None`` without gradients) and every parameter's gradient by name.
Run = tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor | None]]


def unit_cotangent_backward(seed: int) -> Callable[[torch.Tensor], None]:
    """Backpropagate a fixed unit-normal cotangent (``sum(out * dy)`` in fp64). A loss like
    ``sum(out**2)`` scales the cotangent with the output: its gradients overflow fp16 and are
    ill-conditioned in bf16."""

    def backward(out: torch.Tensor) -> None:
        gen = torch.Generator().manual_seed(seed)
        dy = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.device)
        (out.double() * dy).sum().backward()

    return backward


def run_layer(layer: torch.nn.Module, inputs: Inputs, backward: Callable[[torch.Tensor], None] | None = None) -> Run:
    """``layer`` on ``inputs``, backpropagated with ``backward`` when given; the layer's ``.grad`` are
    handed over in the result and cleared."""
    x = inputs.x.detach().requires_grad_(backward is not None)
    with torch.set_grad_enabled(backward is not None):
        out, _, _ = layer(x, **inputs.kwargs())
        if backward is not None:
            backward(out)
    grads = {name: p.grad for name, p in layer.named_parameters()}
    for p in layer.parameters():
        p.grad = None
    return out, x.grad, grads


def accuracy_runs(
    reference: torch.nn.Module,
    inputs: Callable[[], Inputs],
    backward: Callable[[torch.Tensor], None] | None = None,
    *,
    seed: int = 0,
    variants: int = ROUNDING_VARIANTS,
    input_grads: bool = True,
) -> tuple[list[Run], Run]:
    """The bar for another implementation's accuracy: our ``reference`` run plain and ``variants`` times
    under :func:`ulp_jitter`, and its fp64 twin (the truth), each on fresh ``inputs()``. Judge with
    :func:`gdn_equiv.harness.compare.least_accurate` and :func:`gdn_equiv.harness.compare.assert_as_accurate`.
    ``input_grads``: :func:`ulp_jitter`'s."""
    truth = run_layer(fp64_twin(reference), inputs().in_fp64(), backward)
    runs = [run_layer(reference, inputs(), backward)]
    for k in range(variants):
        fresh = inputs()  # outside the jitter: a cached prefix is the plain reference's
        with ulp_jitter(reference, seed=seed * 31 + k, input_grads=input_grads):
            runs.append(run_layer(reference, fresh, backward))
    return runs, truth


def build_layer(example: Example, cls: type | None = None, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The layer of ``example`` (default: its family's fused-prologue layer), parameters from its seed."""
    cls = cls or get_family(example.family).fused_cls
    gen_state = torch.random.get_rng_state()
    # the CPU generator alone: every floating parameter is drawn from it below (whatever the device's
    # own initialisation drew), and torch.manual_seed would also queue a lazy CUDA/XPU/MTIA seed that
    # formats the whole call stack when no GPU is initialised (0.6 ms a layer under pytest, 7,000 layers)
    torch.random.default_generator.manual_seed(example.seed)
    try:
        layer = cls(config=example.config, device=device, dtype=example.torch_dtype)
        with torch.no_grad():
            for p in layer.parameters():
                if p.dtype.is_floating_point and p.numel():
                    # random but tame values, so bias/weight differences show in the output
                    p.copy_((torch.rand(p.shape, dtype=torch.float32) * 2 - 1).to(p.dtype))
    finally:
        torch.random.set_rng_state(gen_state)
    layer.train(example.train)
    return layer


def _mask(example: Example, device: str | torch.device) -> torch.Tensor:
    mask = torch.zeros(example.batch, example.seq_len, dtype=torch.long, device=device)
    for b, n in enumerate(example.seq_lens):
        if n:
            if example.pad_side == "left":
                mask[b, example.seq_len - n :] = 1
            else:
                mask[b, :n] = 1
    return mask


def materialize(example: Example, layer: torch.nn.Module, device: str | torch.device = "cpu") -> Inputs:
    """Inputs of ``example`` for ``layer``; a populated cache is filled through the separate path."""
    gen = torch.Generator().manual_seed(example.seed + 1)
    H = example.config.hidden_size
    dtype = example.torch_dtype

    def draw(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * example.scale).to(dtype).to(device)

    x = draw(example.batch, example.seq_len, H)
    mask = _mask(example, device) if example.varlen == "mask" else None
    cu = None
    if example.varlen == "cu_seqlens":
        lens = torch.tensor((0, *example.seq_lens), dtype=torch.int64)
        cu = torch.cumsum(lens, 0).to(torch.int32).to(device)
    cache = None
    if example.cache != "none":
        cache = Cache()
        if example.cache == "populated":
            n, P = example.num_seqs, max(example.prefix_len, 1)
            if example.varlen == "cu_seqlens":
                prefix = draw(1, n * P, H)
                prefix_cu = torch.arange(0, n * P + 1, P, dtype=torch.int32, device=device)
            else:
                prefix, prefix_cu = draw(example.batch, P, H), None
            with torch.no_grad():
                layer(prefix, past_key_values=cache, use_cache=True, cu_seqlens=prefix_cu, **_separate(layer))
    return Inputs(x, mask, cu, cache, example.use_cache)


def _separate(layer: torch.nn.Module) -> dict[str, Any]:
    return {"prologue": "separate"} if isinstance(layer, FusedPrologue) else {}
