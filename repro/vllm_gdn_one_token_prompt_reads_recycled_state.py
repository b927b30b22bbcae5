"""vLLM 0.28.0-0.30.0 (fixed in 0.31.0): a fresh one-token prompt is routed to the decode kernel, which reads its
block's state (a recycled block's) instead of starting from zeros (SPEC §11 S6-routing; issue #50 item 6). Found
by ``S6-routing`` on ``vllm-0.28.0-cpu-torch``, shrunk: ``RoutingCase(k=0 blocks=6 steps=[1p@1c0])``: one request,
one token, nothing computed.

Root cause (metadata): ``vllm/v1/attention/backends/gdn_attn.py:GDNAttentionMetadataBuilder.build`` splits the
batch with ``split_decodes_and_prefills(m, decode_threshold=1)``, by query length alone: a one-token prompt counts
as a decode; the GDN layer's ``_forward_core`` runs ``causal_conv1d_update`` on it, which has no
``has_initial_state`` and always continues the block's state. 0.31.0 classifies first chunks as prefills
(``no_prior_state``: "Classify first chunks as prefills to mask recycled state"). Exit 1 = the row is a decode;
0 = it is a prefill without initial state; 3 = cannot import.

    unzip -q vllm-0.28.0-*.whl 'vllm/*' -d /tmp/vllm-0.28.0   # + its pure-Python deps importable
    PYTHONPATH=/tmp/vllm-0.28.0:<deps> python repro/vllm_gdn_one_token_prompt_reads_recycled_state.py
"""

import sys

from _vllm_builder import build

if __name__ == "__main__":
    md = build(num_spec=0, query_lens=[1], computed=[0], blocks=[1])
    has = None if md.has_initial_state is None else md.has_initial_state.tolist()
    print(f"decodes: {md.num_decodes}, prefills: {md.num_prefills}, has_initial_state: {has}")
    if md.num_decodes == 1:
        print("the fresh one-token prompt goes to the decode kernel: it continues its block's (recycled) state")
        sys.exit(1)
    if md.num_prefills == 1 and has == [False]:
        print("no failure: a prefill from zeros")
        sys.exit(0)
    print("neither a decode nor a prefill without initial state")
    sys.exit(1)
