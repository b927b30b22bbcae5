"""The fla versions the suite knows, as one table (SPEC §9): one row per version, one :func:`fla_version`.

A row says everything that moves between fla releases: where the version decides fusion (the
decider: 0.6.0's and 0.5.2's ``GatedDeltaNet._use_fused_qkv_conv``, PR #977's shared
``can_fuse_qkv_short_conv``), how the adapter forces each path there, whose word gives the fused conv
its bias, which module's ``causal_conv1d`` the fused branch calls, where its conv code lives and its
state convention (:class:`FlaConv`, read by the ``fla-*`` conv backends), whose class constructors it
has (the key of the family records' ``fla_rules``) and the gap kinds of its fused path.

What a *family* needs from a version is on the family record, not here: ``fuses_from`` names the
deciders its fla class goes through, so a family fuses on every version whose decider it names (an
entry-point family routed through the shared helper fuses on the PR #977 build with no row edited),
and ``fla_rules`` lists its constructor's checks per constructor generation. Known gaps follow:
a family a version fuses has that version's ``fused_gaps``, any other has ``NoFusedPrologue``.

Versions are matched exactly, never by ordering: the PR #977 build says ``0.5.2+pr977`` and predates
0.6.0's reorganisation. A new fla release is a new row here (and a tox env to run it).

Importing this module never imports fla.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.families import get_family

#: the guard gaps fla's prologue has in every family it fuses (0.6.0's Gated DeltaNet, PR #977's
#: families): SPEC §1's two bias gaps, G9 ignored, silu/swish told apart
GAPS = ("BiasDropped", "MissingBiasCrash", "OtherRefusal", "NeedlessFallback")

#: where an fla version decides fusion (a row's ``decider``; a family record's ``fuses_from`` names those
#: its fla class goes through): 0.5.2's and 0.6.0's method on Gated DeltaNet, PR #977's shared helper
GDN_METHOD = "GatedDeltaNet._use_fused_qkv_conv"
QKV_HELPER = "can_fuse_qkv_short_conv"


@dataclass(frozen=True)
class FlaRule:
    """One check an fla class's constructor makes (an ``assert`` or a ``raise`` in its ``__init__``, or
    in a module it builds), read from fla's source and seen refused: a predicate over the constructor
    arguments the family record builds (:attr:`Family.fla_kwargs`).

    ``breaking``: arguments that, merged into those of the family's ``small`` config, break this rule
    and no other of the family's (``tests/test_fla_rules.py`` shows fla refusing them, so no rule here
    is invented).
    """

    rule: str
    holds: Callable[[Mapping[str, Any]], bool]
    breaking: Mapping[str, Any]


#: constructor generation (an fla version row's ``constructors``, :mod:`gdn_equiv.model.fla_versions`)
#: -> the rules its class for a family checks
FlaRules = Mapping[str, tuple[FlaRule, ...]]


def fla_refusal(rules: FlaRules, kwargs: Mapping[str, Any], version: str | None) -> str | None:
    """The first rule of fla ``version``'s constructors (``None``: of every generation) that ``kwargs``
    break, in words; ``None`` when the class accepts them. A version the table lacks is refused
    (:class:`InvalidArgument`)."""
    key = constructors_of(version)
    chosen = rules.values() if key is None else [rules.get(key, ())]
    for rule in (r for version_rules in chosen for r in version_rules):
        if not rule.holds(kwargs):
            return rule.rule
    return None


def fla_version() -> str | None:
    """The installed fla's ``__version__`` (``None`` without fla); imports fla only when it is there."""
    if importlib.util.find_spec("fla") is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla warns on import without a GPU ("roll back to CPU")
        import fla

    return getattr(fla, "__version__", None)


@dataclass(frozen=True)
class FlaConv:
    """Where one fla version keeps its conv code (module paths; ``None``: that version has none) and
    which slots of a conv state it reads back."""

    #: ``causal_conv1d(...)``, the entry point every fla conv backend goes through
    conv: str
    #: ``causal_conv1d_update(x, cache, residual, weight, bias, activation)``, the Triton step kernel
    update: str
    #: the module holding the autotuned Triton kernels (pinned under the interpreter)
    kernels: str
    #: the module that imports causal-conv1d's step as ``causal_conv1d_update_cuda`` (fla's cuda step)
    cuda_update: str
    #: the module whose import registers the gluon conv with fla's dispatch
    gluon: str | None
    #: leading state slots the backward never reads (the last ``W - 1`` inputs are the state; SPEC §3)
    unused_state_slots: int = 1


#: 0.6.0 reorganised the conv into a package of its own, with a gluon backend
CONV_0_6 = FlaConv(
    conv="fla.modules.causal_conv1d",
    update="fla.modules.causal_conv1d",
    kernels="fla.modules.causal_conv1d.ops",
    cuda_update="fla.modules.causal_conv1d.ops",
    gluon="fla.modules.causal_conv1d.backends.gluon",
)
#: 0.5.x (and the PR #977 build, a 0.5.2 branch): ``fla.modules.conv`` (``short_conv.py``, ``triton/``, ``cuda/``)
CONV_0_5 = FlaConv(
    conv="fla.modules.conv",
    update="fla.modules.conv.triton",
    kernels="fla.modules.conv.triton.kernels",
    cuda_update="fla.modules.conv.short_conv",
    gluon=None,
)


@dataclass(frozen=True)
class FlaVersion:
    """One fla version.

    ``decider``: where it decides fusion (:data:`GDN_METHOD` or :data:`QKV_HELPER`); forcing a path
    replaces that decision, inside the adapter: a method is pinned by a subclass override, the helper
    by rebinding the name in the family's ``fla.layers`` module for the run. ``fused_bias``: whose word
    decides that the fused conv gets a bias, ``"flag"`` (the layer's ``conv_bias``) or ``"first"``
    (``q_conv.bias is not None``); then every conv's bias is concatenated (a ``None`` raises
    ``TypeError``), else none is (a bias is dropped). ``fused_conv``: the module whose global
    ``causal_conv1d`` the fused branch calls, ``"layer"`` for the family's own ``fla.layers`` module
    (an inline branch). ``conv``: its conv code (:class:`FlaConv`). ``constructors``: the version whose
    layer constructors this one's check the same things (the key of the family records' ``fla_rules``).
    ``fused_gaps``: the gap kinds its fused path has in every family it fuses.
    """

    version: str
    decider: str
    where: str
    fused_bias: str
    fused_conv: str
    conv: FlaConv
    constructors: str
    fused_gaps: tuple[str, ...] = GAPS

    @property
    def decision(self) -> str:
        """``"method"`` (a method of the fla class, pinned by a subclass) or ``"helper"`` (a shared
        function imported by name into each family's module)."""
        return "method" if self.decider == GDN_METHOD else "helper"

    def fuses(self, family: Any) -> bool:
        """Whether this version fuses ``family`` (a record or a name): its record names this decider."""
        return self.decider in _record(family).fuses_from

    def known_gaps(self, family: Any) -> tuple[str, ...]:
        """The guard gap kinds this version has for ``family`` (``properties.Gap<Kind>``)."""
        return self.fused_gaps if self.fuses(family) else ("NoFusedPrologue",)

    def rules(self, family: Any) -> tuple[FlaRule, ...]:
        """What this version's class for ``family`` refuses in its constructor."""
        return tuple(_record(family).fla_rules.get(self.constructors, ()))


def _record(family: Any) -> Any:
    if isinstance(family, str):
        return get_family(family)
    return family


VERSIONS: dict[str, FlaVersion] = {
    row.version: row
    for row in (
        FlaVersion(
            "0.6.0", GDN_METHOD, "GatedDeltaNet._use_fused_qkv_conv (PR #972)", "flag", "layer", CONV_0_6, "0.6.0"
        ),
        FlaVersion(
            "0.5.2+pr977",
            QKV_HELPER,
            "fla.modules.convolution.can_fuse_qkv_short_conv, imported into each fla.layers.<family> (PR #977)",
            "first",
            "fla.modules.convolution",
            CONV_0_5,
            "0.5.2",
        ),
        FlaVersion(
            "0.5.2", GDN_METHOD, "GatedDeltaNet._use_fused_qkv_conv (PR #972)", "flag", "layer", CONV_0_5, "0.5.2"
        ),
    )
}


def version_row(version: str | None = None) -> FlaVersion:
    """The table's row for ``version`` (default: the installed one); :class:`InvalidArgument` naming
    the version and the known ones otherwise."""
    version = fla_version() if version is None else version
    if version not in VERSIONS:
        raise InvalidArgument(
            f"fla {version} is not a version the fla adapter knows; known versions: {', '.join(VERSIONS)} "
            "(matched exactly: the PR #977 build says 0.5.2+pr977 and predates 0.6.0)"
        )
    return VERSIONS[version]


def constructors_of(version: str | None) -> str | None:
    """The ``fla_rules`` key of ``version`` (``None`` stays ``None``: every version's rules)."""
    return None if version is None else version_row(version).constructors
