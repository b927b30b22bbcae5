"""Hypothesis strategies for the gdn-equiv suite (installed as ``gdn_equiv.strategies``).

Data flows one way: these strategies draw plain data (facts, configs, :class:`~gdn_equiv.model.example.Example`),
which :func:`gdn_equiv.model.example.build_layer` and :func:`gdn_equiv.model.example.materialize` turn into tensors.
Every strategy follows Hypothesis' own API style: keyword-only arguments, ``min_*``/``max_*`` bounds,
``None`` meaning "draw it", and shrinking towards small shapes, fp32, no bias and no cache.

- facts for guard-level properties: :func:`conv_facts`, :func:`layer_facts`, :func:`call_facts`
- building blocks: :func:`dtypes`, :func:`conv_specs`, :func:`layer_configs`, :func:`cu_seqlens_for`,
  :func:`attention_mask_lens`, :func:`seq_lens`, :func:`rare`
- single conv-backend calls: :func:`conv_calls` (:class:`ConvCall`)
- whole test cases: :func:`examples` (``fusable=True|False`` builds either guard outcome by construction)
- bad input (SPEC P8): :func:`bad_calls` (a valid example with one thing made wrong)
"""

from .bad_inputs import bad_calls
from .convs import ConvCall, OutsideCall, conv_calls, outside_calls
from .examples import CALL_REASONS, REASONS, attention_mask_lens, cu_seqlens_for, examples, seq_lens
from .facts import call_facts, conv_facts, dtypes, layer_facts, rare
from .layers import CONV_REASONS, conv_specs, layer_configs
from .violations import violating

__all__ = [
    "CALL_REASONS",
    "CONV_REASONS",
    "REASONS",
    "ConvCall",
    "OutsideCall",
    "attention_mask_lens",
    "bad_calls",
    "call_facts",
    "conv_calls",
    "conv_facts",
    "conv_specs",
    "cu_seqlens_for",
    "dtypes",
    "examples",
    "layer_configs",
    "layer_facts",
    "outside_calls",
    "rare",
    "seq_lens",
    "violating",
]
