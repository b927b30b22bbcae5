"""gdn-equiv: a property-based equivalence suite for the fused q/k/v conv prologue of Gated DeltaNet."""

from gdn_equiv.config import CallFacts, ConvFacts, ConvSpec, GDNConfig, LayerFacts
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.guard import Condition, Decision, decide

__version__ = "0.1.0"

__all__ = [
    "CallFacts",
    "Condition",
    "ConvFacts",
    "ConvSpec",
    "Decision",
    "GDNConfig",
    "InvalidArgument",
    "LayerFacts",
    "decide",
]
