"""gdn-equiv: a property-based equivalence suite for the fused short-conv prologue of linear-attention
layers (Gated DeltaNet and the other families that fuse their q/k/v convs)."""

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.config import CallFacts, ConvFacts, ConvSpec, LayerConfig, LayerFacts
from gdn_equiv.model.guard import Condition, Decision, decide

__version__ = "0.1.0"

__all__ = [
    "CallFacts",
    "Condition",
    "ConvFacts",
    "ConvSpec",
    "Decision",
    "InvalidArgument",
    "LayerConfig",
    "LayerFacts",
    "decide",
]
