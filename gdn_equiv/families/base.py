"""The :class:`Family` record: everything the generic properties, strategies, command line and
benchmarks need to know about one layer family, in the spirit of PyTorch's ``OpInfo``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from gdn_equiv.config import LayerConfig
from gdn_equiv.reference import ShortConvLayer

#: the guard gaps fla's prologue has in every family it fuses (0.6.0's Gated DeltaNet, PR #977's
#: families): SPEC §1's two bias gaps, G9 ignored, silu/swish told apart
GAPS = ("BiasDropped", "MissingBiasCrash", "OtherRefusal", "NeedlessFallback")


def fla_mode(config: Any) -> str:
    """fla's core ``mode`` for our ``mode``: ``recurrent`` is fla's ``fused_recurrent``."""
    return "fused_recurrent" if config.mode == "recurrent" else "chunk"


#: dims strategy: keyword-only ``max_heads`` and ``hidden_sizes``; returns the family's own config fields
DimsFn = Callable[..., st.SearchStrategy[dict[str, Any]]]


@dataclass(frozen=True)
class Family:
    """One layer family.

    ``layer_cls`` is the in-house reference layer (separate convs; its ``config_cls`` the config);
    :attr:`fused_cls` adds the fused prologue. ``dims`` draws the family's own config fields (heads,
    dims, gates) small and valid by construction; the generic config strategy adds the conv fields.
    ``fla_class`` / ``fla_kwargs`` say how fla builds the same layer (same state_dict).
    ``bench`` holds the config fields of the PR's benchmark shape, ``small`` those of a small valid
    layer (for hand-written cases: a known gap's minimal state). ``known_gaps`` maps an fla version
    to the guard gap kinds (``properties.Gap<Kind>``) that version has for this family: the tests
    mark them strict xfails, so a fix upstream (an XPASS) is noticed.
    """

    name: str
    layer_cls: type[ShortConvLayer]
    dims: DimsFn
    description: str
    fla_class: str | None = None
    fla_kwargs: Callable[[Any], dict[str, Any]] | None = None
    bench: Mapping[str, Any] = field(default_factory=dict)
    small: Mapping[str, Any] = field(default_factory=dict)
    known_gaps: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def config_cls(self) -> type[LayerConfig]:
        return self.layer_cls.config_cls

    @property
    def fused_cls(self) -> type[ShortConvLayer]:
        from gdn_equiv.fused import fused_variant

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
