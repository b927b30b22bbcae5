"""gdn-equiv: a property-based equivalence suite for the fused short-conv prologue of linear-attention
layers (Gated DeltaNet and the other families that fuse their q/k/v convs)."""

from pathlib import Path

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.config import CallFacts, ConvFacts, ConvSpec, LayerConfig, LayerFacts
from gdn_equiv.model.guard import Condition, Decision, decide

# The Hypothesis strategies live in the checkout's top-level strategies/ folder and install as
# gdn_equiv.strategies (pyproject's package-dir). From a checkout that is not installed (PYTHONPATH=$PWD,
# as on the GPU machines) the folder beside this package is searched too, so `import gdn_equiv.strategies`
# finds the same files either way.
_CHECKOUT = Path(__file__).resolve().parent.parent
if not (Path(__file__).parent / "strategies").is_dir() and (_CHECKOUT / "strategies" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))

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
