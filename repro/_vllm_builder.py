"""Load vLLM's GDN attention metadata builder from a release's whole Python source on PYTHONPATH (an unpacked
wheel: ``unzip vllm-<v>-*.whl 'vllm/*' -d /tmp/vllm-<v>``) with its pure-Python dependencies importable, and
build the metadata of one scheduler step on the CPU. The builder's ``__init__`` needs a ``VllmConfig``, which asks
for a device platform a CPU machine cannot give: the object is made without it and given the attributes ``build``
reads (mamba cache mode "none", no CUDA graph, the persistent index buffers); no pinned host memory. Exit 3 where
the release cannot be imported."""

import dataclasses
import sys
from types import SimpleNamespace

import torch


def _no_pinned_memory():
    return False


def load():
    try:
        from vllm.v1.attention import backend
        from vllm.v1.attention.backends import gdn_attn
        from vllm.v1.kv_cache_interface import MambaSpec
    except Exception as exc:
        print(f"cannot run here: vLLM's GDN metadata builder does not import: {type(exc).__name__}: {exc}")
        sys.exit(3)
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and hasattr(module, "PIN_MEMORY"):
            module.PIN_MEMORY = False
        if name.startswith("vllm") and hasattr(module, "is_pin_memory_available"):
            module.is_pin_memory_available = _no_pinned_memory
    print(f"vLLM's GDN metadata builder from {gdn_attn.__file__}")
    return gdn_attn, backend, MambaSpec


def build(num_spec, query_lens, computed, blocks, drafts=None, accepted=None):
    """The metadata of one step: per request its query tokens, tokens already computed, state block, drafts
    (-1: not a verify row) and the previous verify's accepted count."""
    gdn_attn, backend, MambaSpec = load()
    cls = gdn_attn.GDNAttentionMetadataBuilder
    b = cls.__new__(cls)
    k, max_bs = num_spec, 16 * (num_spec + 1)
    attrs = {
        "vllm_config": SimpleNamespace(cache_config=SimpleNamespace(mamba_cache_mode="none")),
        "kv_cache_spec": MambaSpec(block_size=16, shapes=((1, 3),), dtypes=(torch.float32,), num_speculative_blocks=k),
        "num_spec": k,
        "use_spec_decode": k > 0,
        "use_full_cuda_graph": False,
        "decode_cudagraph_max_bs": max_bs,
        "_adaptive_verification": False,
        "gdn_prefill_backend": "triton",
        "plan_flashinfer_checkpoints": False,
        "mamba_aligned_state_indices": None,
        "checkpoint_builder": SimpleNamespace(build=lambda m, rows: None),
        "spec_state_indices_tensor": torch.empty((max_bs, k + 1), dtype=torch.int32),
        "non_spec_state_indices_tensor": torch.empty((max_bs,), dtype=torch.int32),
        "spec_sequence_masks": torch.empty((max_bs,), dtype=torch.bool),
        "spec_token_indx": torch.empty((max_bs * (k + 1),), dtype=torch.int32),
        "non_spec_token_indx": torch.empty((max_bs * (k + 1),), dtype=torch.int32),
        "spec_query_start_loc": torch.empty((max_bs + 1,), dtype=torch.int32),
        "non_spec_query_start_loc": torch.empty((max_bs + 1,), dtype=torch.int32),
        "num_accepted_tokens": torch.empty((max_bs,), dtype=torch.int32),
    }
    for name, value in attrs.items():
        setattr(b, name, value)
    n = len(query_lens)
    starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    seq = torch.tensor([c + q for c, q in zip(computed, query_lens, strict=True)], dtype=torch.int32)
    drafts = [-1] * n if drafts is None else drafts
    known = {
        "query_start_loc": starts,
        "query_start_loc_cpu": starts.clone(),
        "seq_lens": seq,
        "seq_lens_cpu": seq.clone(),
        "num_computed_tokens_cpu": torch.tensor(computed, dtype=torch.int32),
        "num_reqs": n,
        "num_actual_tokens": int(starts[-1]),
        "max_query_len": max(query_lens),
        "max_seq_len": int(seq.max()),
        "block_table_tensor": torch.tensor([[blk] + [0] * k for blk in blocks], dtype=torch.int32),
        "slot_mapping": torch.zeros(int(starts[-1]), dtype=torch.int64),
        "causal": True,
        "is_prefilling": torch.tensor([d < 0 for d in drafts]),
        "seq_lens_cpu_upper_bound": seq.clone(),
        "_seq_lens_cpu": seq.clone(),
        "_num_computed_tokens_cpu": torch.tensor(computed, dtype=torch.int32),
    }
    fields = {f.name for f in dataclasses.fields(backend.CommonAttentionMetadata)}
    m = backend.CommonAttentionMetadata(**{k_: v for k_, v in known.items() if k_ in fields})
    acc = None if accepted is None else torch.tensor(accepted, dtype=torch.int32)
    dr = torch.tensor(drafts, dtype=torch.int32) if num_spec else None
    return b.build(0, m, num_accepted_tokens=acc, num_decode_draft_tokens_cpu=dr)
