"""One generated test case as plain data, and the tensors it stands for.

Strategies draw an :class:`Example`; :func:`materialize` turns it into a layer and inputs from its
seed, deterministically, so a failure is replayed from the JSON alone (``gdn-equiv repro``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from gdn_equiv.cache import Cache
from gdn_equiv.config import GDNConfig

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
VARLEN_KINDS = ("none", "cu_seqlens", "mask")
CACHE_KINDS = ("none", "empty", "populated")


@dataclass(frozen=True)
class Example:
    """A layer config plus one call.

    ``varlen``: ``"none"`` (``[B, T]`` batch), ``"cu_seqlens"`` (``B == 1``, ``seq_lens`` sum to ``T``),
    or ``"mask"`` (``seq_lens[b]`` valid tokens in row ``b``, padded on ``pad_side``).
    ``cache``: ``"none"`` (no cache object), ``"empty"`` (a cache without this layer's state) or
    ``"populated"`` (state from a ``prefix_len``-token call through the reference path).
    """

    config: GDNConfig = field(default_factory=GDNConfig)
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

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

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
        data["config"] = GDNConfig.from_dict(data["config"])
        data["seq_lens"] = tuple(data.get("seq_lens", ()))
        return cls(**data)

    def short(self) -> str:
        """One line for failure messages."""
        c = self.config
        convs = ", ".join(f"{n}={c.conv_spec(n).__dict__}" for n in "qkv" if c.conv_spec(n) != type(c.conv_spec(n))())
        return (
            f"Example(dtype={self.dtype}, B={self.batch}, T={self.seq_len}, varlen={self.varlen}{self.seq_lens or ''}, "
            f"cache={self.cache}, use_cache={self.use_cache}, grad={self.grad}, train={self.train}, "
            f"scale={self.scale}, "
            f"seed={self.seed}, heads={c.num_heads}/{c.n_v_heads}, head_dim={c.head_dim}, expand_v={c.expand_v}, "
            f"gate={c.use_gate}, short_conv={c.use_short_conv}, conv_bias={c.conv_bias}, conv_size={c.conv_size}, "
            f"backend={c.conv_backend}{', ' + convs if convs else ''})"
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
    checks measure accuracy against (:func:`gdn_equiv.compare.assert_as_accurate`)."""
    from gdn_equiv.reference import ShortConv

    twin = copy.deepcopy(layer).double()
    for module in twin.modules():
        if isinstance(module, ShortConv):
            module.backend = "torch"
    for p in twin.parameters():
        p.grad = None
    return twin


def build_layer(example: Example, cls: type | None = None, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The layer of ``example`` (default :class:`FusedGatedDeltaNet`), parameters from its seed."""
    from gdn_equiv.fused import FusedGatedDeltaNet

    cls = cls or FusedGatedDeltaNet
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(example.seed)
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
    from gdn_equiv.fused import FusedGatedDeltaNet

    return {"prologue": "separate"} if isinstance(layer, FusedGatedDeltaNet) else {}
