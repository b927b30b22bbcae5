"""One layer's routing alone on one vLLM release: S6-routing drives the GDN and the short-conv builders in every
case and stops at the first that misroutes, so a release whose GDN builder fails says nothing of its short-conv
builder there. This runs one layer's caller (``gdn`` or ``short-conv``) on the same derandomized draws (vLLM's
scheduler order) and prints its verdict: ``pass, N cases, S s`` or ``FINDING (S s): <the shrunk mismatch>``.
Exit 0 pass, 1 finding, 3 the caller cannot be loaded. One release per process (docs/serving-routing.md).

    PYTHONPATH=/tmp/routing-deps GDN_EQUIV_ENGINE_SOURCES=/tmp/eng python tools/routing_one_layer.py 0.28.0 short-conv
"""

from __future__ import annotations

import sys
import time

from hypothesis import HealthCheck, given, settings

from gdn_equiv.serving import routing as R
from gdn_equiv.strategies.pools import routing_cases


def main(version: str, layer: str, examples: int = 200) -> int:
    engine = R.VLLM_ROUTING[layer](version)
    why = engine.unavailable()
    if why:
        print(f"vllm {version} {layer}: {why}")
        return 3
    ran = [0]

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None, report_multiple_bugs=False,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=routing_cases(pads_between=False))
    def run(case: R.RoutingCase) -> None:
        ran[0] += 1
        R.check_routing(engine, case, ctx=f"vllm {version}: ")

    start = time.perf_counter()
    try:
        run()
    except R.Misrouted as exc:
        print(f"vllm {version} {layer}: FINDING ({time.perf_counter() - start:.1f} s): {str(exc).splitlines()[0]}")
        return 1
    print(f"vllm {version} {layer}: pass, {ran[0]} cases, {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in R.LAYERS:
        sys.exit(f"usage: {sys.argv[0]} VERSION {{{','.join(R.LAYERS)}}}")
    sys.exit(main(sys.argv[1], sys.argv[2]))
