"""The :class:`Family` record: everything the generic properties, strategies, command line and
benchmarks need to know about one layer family, in the spirit of PyTorch's ``OpInfo``."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gdn_equiv.model.config import LayerConfig
from gdn_equiv.model.fla_versions import FlaRule, FlaRules, fla_refusal
from gdn_equiv.model.fused import fused_variant
from gdn_equiv.model.reference import ShortConvLayer


def fla_mode(config: Any) -> str:
    """fla's core ``mode`` for our ``mode``: ``recurrent`` is fla's ``fused_recurrent``."""
    return "fused_recurrent" if config.mode == "recurrent" else "chunk"


def _integral(x: float) -> bool:
    return math.isclose(x, round(x))


def _kv_heads(a: Mapping[str, Any]) -> int:
    return a.get("num_kv_heads") or a["num_heads"]


def _v_heads(a: Mapping[str, Any]) -> int:
    return a.get("num_v_heads") or a["num_heads"]


def _head_k_dim(a: Mapping[str, Any]) -> int:
    return round(a["hidden_size"] * a["expand_k"]) // a["num_heads"]


# Rules shared by several classes (each family's record lists those its class checks, per version).
# The GLA layout: ``key_dim = hidden_size * expand_k`` (``value_dim`` alike) over ``num_heads``.
KEY_DIM_INTEGRAL = FlaRule(
    "hidden_size * expand_k is an integer", lambda a: _integral(a["hidden_size"] * a["expand_k"]), {"expand_k": 0.53125}
)
VALUE_DIM_INTEGRAL = FlaRule(
    "hidden_size * expand_v is an integer", lambda a: _integral(a["hidden_size"] * a["expand_v"]), {"expand_v": 1.03125}
)
KEY_DIM_PER_HEAD = FlaRule(
    "key_dim (hidden_size * expand_k) divisible by num_heads",
    lambda a: round(a["hidden_size"] * a["expand_k"]) % a["num_heads"] == 0,
    {"expand_k": 0.625},
)
VALUE_DIM_PER_HEAD = FlaRule(
    "value_dim (hidden_size * expand_v) divisible by num_heads",
    lambda a: round(a["hidden_size"] * a["expand_v"]) % a["num_heads"] == 0,
    {"expand_v": 0.625},
)
KV_GROUPS = FlaRule(
    "num_heads divisible by num_kv_heads", lambda a: a["num_heads"] % _kv_heads(a) == 0, {"num_kv_heads": 3}
)
#: fla 0.6.0's ``RotaryEmbedding(head_k_dim)`` asserts an even dim ("Rotary dimension must be even")
ROTARY_EVEN = FlaRule(
    "rotary dim head_k_dim (hidden_size * expand_k / num_heads) is even",
    lambda a: _head_k_dim(a) % 2 == 0,
    {"expand_k": 0.25},
)
# The delta-rule layout: ``head_v_dim = head_dim * expand_v``, ``num_v_heads`` value heads.
HEAD_V_DIM_INTEGRAL = FlaRule(
    "head_dim * expand_v is an integer", lambda a: _integral(a["head_dim"] * a["expand_v"]), {"expand_v": 0.375}
)
V_HEADS_GROUPED = FlaRule(
    "num_v_heads, where above num_heads, divisible by num_heads",
    lambda a: _v_heads(a) <= a["num_heads"] or _v_heads(a) % a["num_heads"] == 0,
    {"num_heads": 2, "num_v_heads": 3},
)
V_HEADS_AT_LEAST = FlaRule(
    "num_v_heads >= num_heads and divisible by it",
    lambda a: _v_heads(a) >= a["num_heads"] and _v_heads(a) % a["num_heads"] == 0,
    {"num_heads": 2, "num_v_heads": 1},
)


HEAD_K_DIM_AT_MOST_256 = FlaRule(
    "head_k_dim (hidden_size * expand_k / num_heads) <= 256",
    lambda a: _head_k_dim(a) <= 256,
    {"hidden_size": 1024, "expand_k": 1.0, "num_heads": 2, "num_kv_heads": None},
)


def modes(*allowed: str) -> FlaRule:
    """``assert mode in [...]``: the core modes the class runs."""
    return FlaRule(f"mode in {allowed}", lambda a: a.get("mode", allowed[0]) in allowed, {"mode": "no-such-mode"})


#: the delta-rule classes (GatedDeltaNet, KDA, Comba, GatedDeltaProduct), 0.6.0 and PR #977 alike
DELTA_RULES = (HEAD_V_DIM_INTEGRAL, V_HEADS_GROUPED, modes("chunk", "fused_recurrent"))


#: the family's own config fields chosen from a :class:`~gdn_equiv.model.choices.Choices` (the draw layer's),
#: with keyword-only ``max_heads``, ``hidden_sizes`` and optionally ``channel_multiple``
DimsFn = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Family:
    """One layer family.

    ``layer_cls`` is the in-house reference layer (separate convs; its ``config_cls`` the config);
    :attr:`fused_cls` adds the fused prologue. ``dims(choices, ...)`` chooses the family's own config fields
    (heads, dims, gates) small and valid by construction, every range and choice declared there and drawn by
    ``strategies/`` (:func:`gdn_equiv.strategies.layers.family_dims`); the generic config strategy adds the conv
    fields.
    ``fla_class`` / ``fla_kwargs`` say how fla builds the same layer (same state_dict).
    ``bench`` holds the config fields of the PR's benchmark shape, ``small`` those of a small valid
    layer (for hand-written cases: a known gap's minimal state). ``fuses_from``: the fla deciders its
    fla class goes through (:data:`GDN_METHOD`, :data:`QKV_HELPER`): it fuses on every fla version whose
    row decides there, and has that row's gap kinds (``FlaVersion.known_gaps``; the tests mark them
    strict xfails, so a fix upstream, an XPASS, is noticed). ``reference_core``: the ``fla.layers``
    module whose core ``--fla-core reference`` can replace with ours (``None``: fla's core only).
    ``fla_rules`` maps a constructor generation (a row's ``constructors``) to what its class's
    constructor refuses (:class:`FlaRule`); strategies given an fla version draw only configs it
    accepts (``layer_configs(fla_version=...)``).
    """

    name: str
    layer_cls: type[ShortConvLayer]
    dims: DimsFn
    description: str
    fla_class: str | None = None
    fla_kwargs: Callable[[Any], dict[str, Any]] | None = None
    bench: Mapping[str, Any] = field(default_factory=dict)
    small: Mapping[str, Any] = field(default_factory=dict)
    fuses_from: tuple[str, ...] = ()
    reference_core: str | None = None
    fla_rules: FlaRules = field(default_factory=dict)

    def fla_refusal(self, config: LayerConfig, version: str | None = None) -> str | None:
        """Why fla ``version``'s class (``None``: any version's) refuses ``config``'s arguments, or ``None``."""
        if self.fla_kwargs is None:
            return None
        return fla_refusal(self.fla_rules, self.fla_kwargs(config), version)

    @property
    def config_cls(self) -> type[LayerConfig]:
        return self.layer_cls.config_cls

    @property
    def fused_cls(self) -> type[ShortConvLayer]:
        return fused_variant(self.layer_cls)  # type: ignore[arg-type]  # classes hash; mypy sees nn.Module.__hash__

    @property
    def mask(self) -> str:
        """``"unpad"`` or ``"dense"``: how an ``attention_mask`` reaches the convs."""
        return self.layer_cls.MASK

    def describe(self, config: LayerConfig | None = None) -> str:
        """One line: the family, its fla class, its mask handling and its conv slots with their
        channel counts for ``config`` (default: the config's defaults) and activations."""
        c = config if config is not None else self.config_cls()
        slots = ", ".join(f"{n}={c.conv_channels(n)} ({c.conv_spec(n).activation})" for n in c.SLOTS)
        fla = self.fla_class or "-"
        return f"{self.name:<16} fla {fla:<34} mask {self.mask:<5}  convs {slots}  {self.description}"
