"""fla-only families: the seven PR #977 families (SPEC §8) that the suite drives as fla targets only.

An in-house family is a reference layer and core written here; these seven are not (each has its
own core and feature maps; writing and running them would double the suite for what the fla target
asks of them: fla's guard against the spec). What the fla target needs of a family is its fla class,
how to build it and which conv layout it has, and an example strategy that draws that layout. So an
fla-only family is a record that *borrows* the example strategy of the in-house family whose conv
layout is the same (``like``: q/k/v channel structure and mask handling) and says how the borrowed
config becomes its fla class's constructor arguments:

- ``gdn2``, ``comba``, ``delta_net``: Gated DeltaNet's examples (K / K / V, silu, unpad).
- ``gated_deltaproduct``: Gated DeltaNet's examples with ``num_householder`` fixed at fla's default 2
  (k/v convs 2K / 2V wide): Gated DeltaNet's config has no field a householder count could honestly
  be read from, and the guard does not depend on channel counts (SPEC §8: the split comes from the
  weights).
- ``multiscale_retention``, ``gsa``: GLA's examples (K / K/g / V/g, grouped k/v, unpad).
- ``abc``: SimpleGLA's examples (silu convs, dense mask). ABC has no kv heads, so its k/v convs are
  K and V wide whatever ``num_kv_heads`` the borrowed config draws (the record's
  :meth:`FlaOnlyFamily.conv_channels` says so; the fla target builds the convs that wide).

The borrowed examples are valid for the borrowed family's class, not always for this one: each record
lists, per fla version, what its class's constructor refuses (``fla_rules``, e.g. fla 0.6.0's ABC and
MultiScaleRetention build ``RotaryEmbedding(head_k_dim)``, which asserts an even dim; GLA's examples
draw ``head_k_dim = 1``), and the config strategies draw only what the class accepts.

Examples of an fla-only family carry its name (``Example.family = "gdn2"``) and the borrowed
family's config class, so reports, the example database and ``repro`` keep them apart. They are not
in :func:`gdn_equiv.model.families.known_families` (the in-house families every property, planted defect
and pytest run iterates; there is no reference layer to run them against), only in
:func:`gdn_equiv.model.families.fla_only_families`, which ``--family`` accepts for ``--target fla``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gdn_equiv.model.config import LayerConfig
from gdn_equiv.model.families import get_family
from gdn_equiv.model.families.base import (
    DELTA_RULES,
    HEAD_K_DIM_AT_MOST_256,
    HEAD_V_DIM_INTEGRAL,
    KEY_DIM_INTEGRAL,
    KEY_DIM_PER_HEAD,
    KV_GROUPS,
    ROTARY_EVEN,
    V_HEADS_AT_LEAST,
    VALUE_DIM_INTEGRAL,
    VALUE_DIM_PER_HEAD,
    fla_mode,
    modes,
)
from gdn_equiv.model.fla_versions import QKV_HELPER, FlaRule, FlaRules, fla_refusal

#: fla's default; see the module docstring for why it is fixed
NUM_HOUSEHOLDER = 2


@dataclass(frozen=True)
class FlaOnlyFamily:
    """One family that exists as an fla class only.

    ``like``: the in-house family whose example strategy (``dims``, ``config_cls``, ``small``) and
    mask handling it borrows. ``fla_kwargs``: the borrowed config -> the fla class's constructor
    arguments (each one the class declares in every version of :data:`fla_versions.VERSIONS`).
    ``channels``: the borrowed config -> q/k/v conv channel counts of the fla layer built from those
    arguments (``tests/test_fla_target.py`` checks them against the layer fla builds). ``fuses_from``
    and ``fla_rules`` as :class:`gdn_equiv.model.families.base.Family`'s (all seven go through PR #977's
    helper, nothing else): the config
    strategies keep only the borrowed configs this class accepts (every version's rules when no version
    is named: the family exists only as fla).
    """

    name: str
    fla_class: str
    like: str
    fla_kwargs: Callable[[Any], dict[str, Any]]
    channels: Callable[[Any], tuple[int, int, int]]
    description: str
    fla_rules: FlaRules = field(default_factory=dict)
    fuses_from: tuple[str, ...] = (QKV_HELPER,)
    reference_core: str | None = None

    fla_only = True

    @property
    def _like(self) -> Any:
        return get_family(self.like)

    @property
    def config_cls(self) -> type[LayerConfig]:
        return self._like.config_cls

    @property
    def dims(self) -> Any:
        return self._like.dims

    def fla_refusal(self, config: LayerConfig, version: str | None = None) -> str | None:
        """Why fla ``version``'s class (``None``: any version's) refuses ``config``'s arguments, or ``None``."""
        return fla_refusal(self.fla_rules, self.fla_kwargs(config), version)

    @property
    def small(self) -> Mapping[str, Any]:
        return self._like.small

    @property
    def mask(self) -> str:
        return self._like.mask

    def conv_channels(self, config: LayerConfig, name: str) -> int:
        """Channels of fla's ``<name>_conv1d`` for the borrowed ``config``."""
        return dict(zip(("q", "k", "v"), self.channels(config), strict=True))[name]

    def describe(self, config: LayerConfig | None = None) -> str:
        """One line like :meth:`Family.describe`, marked fla-only, naming the borrowed examples."""
        c = config if config is not None else self.config_cls()
        slots = ", ".join(f"{n}={self.conv_channels(c, n)} ({c.conv_spec(n).activation})" for n in c.SLOTS)
        return (
            f"{self.name:<16} fla {self.fla_class:<34} mask {self.mask:<5}  convs {slots}  {self.description} "
            f"[fla-only: --target fla, {self.like}'s examples]"
        )


def _expand(channels: int, hidden: int) -> float:
    """An ``expand_*`` for which fla's ``int(hidden * expand)`` is ``channels`` exactly (``8/12*12``
    rounds to 7.999... and would truncate to 7)."""
    expand = channels / hidden
    while int(hidden * expand) < channels:
        expand = math.nextafter(expand, math.inf)
    return expand


# ---- Gated DeltaNet's layout (K / K / V, silu, unpad) ----------------------------------------------
def _value_heads(c: Any) -> dict[str, Any]:
    keys = ("hidden_size", "expand_v", "head_dim", "num_heads", "num_v_heads", "use_short_conv", "conv_size")
    return {k: getattr(c, k) for k in (*keys, "conv_bias", "layer_idx", "norm_eps")} | {"mode": fla_mode(c)}


def _kkv(c: Any) -> tuple[int, int, int]:
    return c.key_dim, c.key_dim, c.value_dim


def _gdn2_kwargs(c: Any) -> dict[str, Any]:
    return _value_heads(c) | {"allow_neg_eigval": c.allow_neg_eigval}


def _comba_kwargs(c: Any) -> dict[str, Any]:
    return _value_heads(c) | {"use_output_gate": c.use_gate}


def _gdp_kwargs(c: Any) -> dict[str, Any]:
    return _value_heads(c) | {
        "use_output_gate": c.use_gate,
        "allow_neg_eigval": c.allow_neg_eigval,
        "num_householder": NUM_HOUSEHOLDER,
    }


def _gdp_channels(c: Any) -> tuple[int, int, int]:
    return c.key_dim, c.key_dim * NUM_HOUSEHOLDER, c.value_dim * NUM_HOUSEHOLDER


def _qk_activation(c: Any) -> str:
    """DeltaNet builds its q/k convs with silu only for ``qk_activation='silu'`` (else none); the
    borrowed config's q conv activation picks the constructor argument that matches it."""
    act = c.conv_spec("q").activation
    return {"silu": "silu", "swish": "silu", "relu": "relu"}.get(act, "identity")


def _delta_net_kwargs(c: Any) -> dict[str, Any]:
    """DeltaNet sizes its convs as ``hidden * expand_k`` / ``hidden * expand_v`` over ``num_heads``
    heads (no separate value heads): Gated DeltaNet's K and V expressed that way."""
    keys = ("hidden_size", "num_heads", "use_gate", "use_short_conv", "conv_size", "conv_bias", "allow_neg_eigval")
    return {k: getattr(c, k) for k in (*keys, "layer_idx", "norm_eps")} | {
        "expand_k": _expand(c.key_dim, c.hidden_size),
        "expand_v": _expand(c.value_dim, c.hidden_size),
        "qk_activation": _qk_activation(c),
        "mode": fla_mode(c),
    }


# ---- GLA's layout (K / K/g / V/g, silu, unpad) ----------------------------------------------------
def _grouped(c: Any) -> dict[str, Any]:
    keys = ("hidden_size", "expand_k", "expand_v", "num_heads", "num_kv_heads", "use_short_conv", "conv_size")
    return {k: getattr(c, k) for k in (*keys, "conv_bias", "norm_eps", "layer_idx")} | {"mode": fla_mode(c)}


def _grouped_channels(c: Any) -> tuple[int, int, int]:
    return c.key_dim, c.key_dim // c.groups, c.value_dim // c.groups


def _msr_kwargs(c: Any) -> dict[str, Any]:
    return _grouped(c) | {"use_output_gate": c.use_output_gate, "gate_fn": c.gate_fn}


def _gsa_kwargs(c: Any) -> dict[str, Any]:
    return _grouped(c) | {"use_output_gate": c.use_output_gate, "gate_logit_normalizer": c.gate_logit_normalizer}


# ---- SimpleGLA's examples (silu, dense mask), ABC's K / K / V ---------------------------------------
def _abc_kwargs(c: Any) -> dict[str, Any]:
    keys = ("hidden_size", "expand_k", "expand_v", "num_heads", "use_short_conv", "conv_size", "conv_bias")
    return {k: getattr(c, k) for k in (*keys, "gate_logit_normalizer", "norm_eps", "layer_idx")}


# ---- what each class's constructor refuses, per fla version (read from its source, seen refused) ----
_GDN2_RULES = (HEAD_V_DIM_INTEGRAL, V_HEADS_AT_LEAST, modes("chunk", "fused_recurrent"))
_DELTA = {"0.6.0": DELTA_RULES, "0.5.2": DELTA_RULES}
_QK_ACTIVATION = FlaRule(
    "qk_activation in ('silu', 'relu', 'elu', 'identity')",
    lambda a: a["qk_activation"] in ("silu", "relu", "elu", "identity"),
    {"qk_activation": "gelu"},
)
# DeltaNet's heads (2 in Gated DeltaNet's small config) divide an even dim: an odd one breaks the rule
_DELTA_NET_PER_HEAD = (
    dataclasses.replace(KEY_DIM_PER_HEAD, breaking={"expand_k": 0.5625}),
    dataclasses.replace(VALUE_DIM_PER_HEAD, breaking={"expand_v": 0.5625}),
)
_DELTA_NET_MODES = modes("chunk", "fused_recurrent")
_MSR_MODES = modes("chunk", "fused_chunk", "parallel", "fused_recurrent")
_RULES: dict[str, FlaRules] = {
    "gdn2": {"0.6.0": _GDN2_RULES, "0.5.2": _GDN2_RULES},
    "comba": _DELTA,
    "gated_deltaproduct": _DELTA,
    "delta_net": {
        "0.6.0": (_QK_ACTIVATION, KEY_DIM_INTEGRAL, VALUE_DIM_INTEGRAL, _DELTA_NET_MODES, *_DELTA_NET_PER_HEAD),
        "0.5.2": (_QK_ACTIVATION, _DELTA_NET_MODES, *_DELTA_NET_PER_HEAD),
    },
    "multiscale_retention": {
        "0.6.0": (KV_GROUPS, KEY_DIM_INTEGRAL, VALUE_DIM_INTEGRAL, _MSR_MODES, KEY_DIM_PER_HEAD, VALUE_DIM_PER_HEAD,
                  HEAD_K_DIM_AT_MOST_256, ROTARY_EVEN),
        "0.5.2": (_MSR_MODES, KEY_DIM_PER_HEAD, VALUE_DIM_PER_HEAD, HEAD_K_DIM_AT_MOST_256),
    },
    # PR #977's GatedSlotAttention and ABCAttention check nothing in their constructors
    "gsa": {"0.6.0": (KV_GROUPS, KEY_DIM_INTEGRAL, VALUE_DIM_INTEGRAL), "0.5.2": ()},
    "abc": {
        "0.6.0": (KEY_DIM_INTEGRAL, VALUE_DIM_INTEGRAL, KEY_DIM_PER_HEAD, VALUE_DIM_PER_HEAD, ROTARY_EVEN),
        "0.5.2": (),
    },
}  # fmt: skip


FAMILIES: dict[str, FlaOnlyFamily] = {
    f.name: f
    for f in (
        FlaOnlyFamily("gdn2", "fla.layers.gdn2.GatedDeltaNet2", "gated_deltanet", _gdn2_kwargs, _kkv,
                      "gated delta rule, v2 gates", _RULES["gdn2"]),
        FlaOnlyFamily("comba", "fla.layers.comba.Comba", "gated_deltanet", _comba_kwargs, _kkv,
                      "delta rule with output correction", _RULES["comba"]),
        FlaOnlyFamily("gated_deltaproduct", "fla.layers.gated_deltaproduct.GatedDeltaProduct", "gated_deltanet",
                      _gdp_kwargs, _gdp_channels, f"{NUM_HOUSEHOLDER} householder steps per token (k/v convs x2)",
                      _RULES["gated_deltaproduct"]),
        FlaOnlyFamily("delta_net", "fla.layers.delta_net.DeltaNet", "gated_deltanet", _delta_net_kwargs, _kkv,
                      "delta rule; q/k conv silu only with qk_activation='silu'", _RULES["delta_net"]),
        FlaOnlyFamily("multiscale_retention", "fla.layers.multiscale_retention.MultiScaleRetention", "gla",
                      _msr_kwargs, _grouped_channels, "retention, grouped k/v convs",
                      _RULES["multiscale_retention"]),
        FlaOnlyFamily("gsa", "fla.layers.gsa.GatedSlotAttention", "gla", _gsa_kwargs, _grouped_channels,
                      "gated slot attention, grouped k/v convs", _RULES["gsa"]),
        FlaOnlyFamily("abc", "fla.layers.abc.ABCAttention", "simple_gla", _abc_kwargs, _kkv,
                      "slot attention, dense mask (k/v ungrouped)", _RULES["abc"]),
    )
}  # fmt: skip
