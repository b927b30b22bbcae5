"""vLLM 0.28.0-0.31.0 (0.32.0 drops the "all" mode): with Mamba2 prefix caching in "all" mode and speculative
decoding, a verify row's conv update reads its initial state from the block of its last computed token, not from
the block the previous verify wrote its windows to (issue #50: the Mamba mixers' prefix-caching modes). Found by
``tools/routing_mamba2_all.py 0.31.0 --max-spec 1`` (the release's own ``Mamba2AttentionMetadataBuilder.build``
and ``MambaMixer2``'s conv calls on drawn steps), shrunk: ``ApcCase(B=2 k=1 tables=[[1, 2, 3]] steps=[r0+1c0 |
r0+2v1a1c1 | r0+1v0a1c2])``: a one-token prompt; a verify of 2 tokens (1 draft) that ends in the second block
and keeps 1; the next verify's conv sees the window after 1 token, not after 2.

Root cause (caller): ``mamba_mixer2.py:MambaMixer2.conv_ssm_forward`` passes ``causal_conv1d_update``
``initial_state_idx=block_idx_last_computed_token_d`` (``ceil(c/B) - 1``), while the update of the previous
step wrote its window state to ``block_idx_last_scheduled_token`` of that step (``ceil(s'/B) - 1``). They differ
whenever a verify's tokens cross a block boundary its accepted tokens do not reach. The SSM update of the same
mixer reads ``block_idx_last_scheduled_token_prev_step_d`` (the runner's ``prev_last_scheduled_idx``, vLLM #41233),
the column the previous step wrote; the conv update was not given it. The windows a count of ``a`` picks lie in
that column at offset ``a - 1``; the read column holds an older state (here: the prompt's).
Exit 1 = the conv's read column is not the one the previous verify wrote; 0 = it is; 3 = cannot import.

    unzip -q vllm-0.31.0-*.whl 'vllm/*' -d /tmp/vllm-0.31.0   # + its pure-Python deps importable
    PYTHONPATH=/tmp/vllm-0.31.0:<deps> python repro/vllm_mamba2_all_mode_verify_reads_stale_conv_block.py
"""

import dataclasses
import importlib.util
import sys
from types import SimpleNamespace

import torch


def load():
    try:
        from vllm.v1.attention import backend
        from vllm.v1.attention.backends import mamba2_attn
        from vllm.v1.kv_cache_interface import MambaSpec
    except Exception as exc:
        print(f"cannot run here: vLLM's Mamba2 metadata builder does not import: {type(exc).__name__}: {exc}")
        sys.exit(3)
    if not hasattr(mamba2_attn.Mamba2AttentionMetadataBuilder, "_compute_prefix_caching_block_indices"):
        print(f"no failure: this release has no Mamba 'all' prefix-caching mode ({mamba2_attn.__file__})")
        sys.exit(0)
    for name, module in list(sys.modules.items()):  # no accelerator platform: no pinned host memory
        if name.startswith("vllm") and hasattr(module, "PIN_MEMORY"):
            module.PIN_MEMORY = False
        if name.startswith("vllm") and hasattr(module, "is_pin_memory_available"):
            module.is_pin_memory_available = lambda: False
    print(f"vLLM's Mamba2 metadata builder from {mamba2_attn.__file__}")
    return mamba2_attn, backend, MambaSpec


def build(B, k, tokens, computed, drafts, counts, prev_idx, table):
    """One step of one request, as the runner hands it to the builder in "all" mode (no CUDA graph)."""
    mamba2_attn, backend, MambaSpec = load()
    cls = mamba2_attn.Mamba2AttentionMetadataBuilder
    b = cls.__new__(cls)  # its __init__ needs a VllmConfig, which needs a device platform
    cache = SimpleNamespace(mamba_cache_mode="all", use_replayssm=False, replayssm_buffer_len=0)
    no_graphs = SimpleNamespace(cudagraph_mode=SimpleNamespace(has_full_cudagraphs=lambda: False))
    attrs = {
        "vllm_config": SimpleNamespace(cache_config=cache, speculative_config=None),
        "kv_cache_spec": MambaSpec(B, shapes=((1, 3 + k),), dtypes=(torch.float32,), num_speculative_blocks=k),
        "num_spec_tokens": k, "use_spec_decode": True, "reorder_batch_threshold": 1 + k, "chunk_size": B,
        "compilation_config": no_graphs, "decode_cudagraph_max_bs": 16, "device": torch.device("cpu"),
        "use_replayssm": False, "use_flashinfer_replayssm": False, "decode_bc_pre_scratch": None,
        "decode_replayssm_scratch": None,
    }  # fmt: skip
    for name, value in attrs.items():
        setattr(b, name, value)
    starts = torch.tensor([0, tokens], dtype=torch.int32)
    seq = torch.tensor([computed + tokens], dtype=torch.int32)
    comp = torch.tensor([computed], dtype=torch.int32)
    known = {
        "query_start_loc": starts, "query_start_loc_cpu": starts.clone(), "seq_lens": seq, "seq_lens_cpu": seq.clone(),
        "num_computed_tokens_cpu": comp, "num_reqs": 1, "num_actual_tokens": tokens, "max_query_len": tokens,
        "max_seq_len": int(seq[0]), "block_table_tensor": torch.tensor([table], dtype=torch.int32),
        "slot_mapping": torch.zeros(tokens, dtype=torch.int64), "causal": True,
        "is_prefilling": torch.tensor([drafts < 0]), "seq_lens_cpu_upper_bound": seq.clone(),
        "_seq_lens_cpu": seq.clone(), "_num_computed_tokens_cpu": comp.clone(), "_num_computed_tokens_cache": None,
    }  # fmt: skip
    fields = {f.name for f in dataclasses.fields(backend.CommonAttentionMetadata)}
    m = backend.CommonAttentionMetadata(**{n: v for n, v in known.items() if n in fields})
    return b.build(0, m, num_accepted_tokens=torch.tensor([counts], dtype=torch.int32),
                   num_decode_draft_tokens_cpu=torch.tensor([drafts], dtype=torch.int32),
                   prev_last_scheduled_idx=torch.tensor([prev_idx], dtype=torch.int32))  # fmt: skip


if __name__ == "__main__":
    B, k, table = 2, 1, [1, 2, 3]
    # step 1: after a one-token prompt (computed 1), a verify of 2 tokens (1 draft); it keeps 1 of them
    md1 = build(B, k, tokens=2, computed=1, drafts=1, counts=1, prev_idx=-1, table=table)
    wrote = int(md1.block_idx_last_scheduled_token[0])
    # step 2: computed 1 + 1 = 2, a verify of 1 token; the runner recorded (seq_len - 1) // B = 1 (a full verify)
    md2 = build(B, k, tokens=1, computed=2, drafts=0, counts=1, prev_idx=(1 + 2 - 1) // B, table=table)
    conv_reads = int(md2.block_idx_last_computed_token[0])
    ssm_reads = int(md2.block_idx_last_scheduled_token_prev_step[0])
    spec = importlib.util.find_spec("vllm.model_executor.layers.mamba.mamba_mixer2")
    mixer = ""
    if spec and spec.origin:
        with open(spec.origin) as f:
            mixer = f.read()
    passes = "initial_state_idx=block_idx_last_computed_token_d" in mixer
    print(f"step 1's conv update writes column {wrote}; step 2's conv update reads column {conv_reads} "
          f"(MambaMixer2 passes initial_state_idx=block_idx_last_computed_token_d: {passes}); "
          f"its SSM update reads column {ssm_reads}")  # fmt: skip
    if passes and conv_reads != wrote:
        print(
            "the verify row's conv reads a column the previous verify did not write: its window misses the "
            "accepted token"
        )
        sys.exit(1)
    print("no failure: the conv reads the column the previous verify wrote")
