"""vLLM 0.28.0-0.31.0 (fixed in 0.32.0): a verify batch whose rows all drafted nothing loses the accepted counts
(SPEC §11 S6-routing; issue #50 item 6). Found by ``S6-routing`` on ``vllm-0.31.0-cpu-torch`` (drawn scheduler
batches through the release's own ``GDNAttentionMetadataBuilder.build``), shrunk: ``RoutingCase(k=1 blocks=6
held=[2, ...] steps=[1v0a2@1c2])``: one verify row of 0 drafts (1 token) on a block whose previous verify kept 2.

Root cause (metadata): ``vllm/v1/attention/backends/gdn_attn.py:GDNAttentionMetadataBuilder.build`` takes the
non-speculative path when the verify rows' drafts sum to 0 (``num_decode_draft_tokens_cpu[... >= 0].sum() == 0``,
in 0.28.0 in the first test, in 0.29.0-0.31.0 after the mask): no
``spec_sequence_masks``, no ``num_accepted_tokens``; the GDN layer's ``_forward_core`` then runs the plain
one-token ``causal_conv1d_update``, which reads the window at offset 0 (the state after 1 accepted token), not at
``num_accepted_tokens - 1``. 0.32.0 drops the sum test ("A batch whose rows all drafted nothing still has to run
the speculative path: that is the only path that applies each row's accepted-token offset").
Exit 1 = the metadata carries no accepted count for the verify row; 0 = it carries 2; 3 = cannot import.

    unzip -q vllm-0.31.0-*.whl 'vllm/*' -d /tmp/vllm-0.31.0   # + its pure-Python deps importable
    PYTHONPATH=/tmp/vllm-0.31.0:<deps> python repro/vllm_gdn_zero_draft_verify_drops_counts.py
"""

import sys

from _vllm_builder import build

if __name__ == "__main__":
    md = build(num_spec=1, query_lens=[1], computed=[2], blocks=[1], drafts=[0], accepted=[2])
    counts = None if md.num_accepted_tokens is None else md.num_accepted_tokens.tolist()
    print(f"spec rows: {md.num_spec_decodes}, decodes: {md.num_decodes}, accepted counts: {counts}")
    if counts != [2]:
        print("the verify row's accepted count (2) is lost: its conv reads the window after 1 token")
        sys.exit(1)
    print("no failure: the verify row keeps its count")
