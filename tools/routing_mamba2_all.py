"""vLLM's Mamba2 "all" prefix-caching mode on one release (or the in-house builder, or a planted one): the
release's own ``Mamba2AttentionMetadataBuilder.build`` and ``MambaMixer2``'s conv calls from its metadata (with
``--mixer mamba1``: ``Mamba1AttentionMetadataBuilder.build`` and ``MambaMixer``'s) on
derandomized draws of ``apc_cases``, against the block-keyed pool's contract (``gdn_equiv/serving/routing_apc.py``,
``docs/serving-routing.md``). Prints ``pass, N cases, S s``, ``FINDING (S s): <the shrunk mismatch>`` or the
reason it cannot run (``n/a: ...`` where the release has no such mode). ``--rate``: every case judged, none
shrunk, and how many catch the engine (a planted builder's catch rate). Exit 0 pass, 1 finding, 3 not driven.
One release per process.

    PYTHONPATH=/tmp/routing-deps GDN_EQUIV_ENGINE_SOURCES=/tmp/eng python tools/routing_mamba2_all.py 0.31.0
    python tools/routing_mamba2_all.py apc-reads-first-scheduled-block --rate --examples 400
    ... tools/routing_mamba2_all.py 0.31.0+reads-first-scheduled-block   # the defect planted in the release's builder
    ... tools/routing_mamba2_all.py 0.31.0+conv-reads-prev-step --max-spec 3   # what if the conv read the SSM's column
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from hypothesis import HealthCheck, Phase, given, settings

from gdn_equiv.serving import routing_apc as A
from gdn_equiv.serving.planted import PLANTED_APC, ReleaseReadsFirstScheduledBlock
from gdn_equiv.serving.routing import Misrouted
from gdn_equiv.strategies.pools import apc_cases


class ConvReadsPrevStep(A.VllmMamba2ApcRouting):
    """What if (the finding's fix, in part): the release's builder and mixer, but the conv update of a row with
    counts reads ``block_idx_last_scheduled_token_prev_step`` (the SSM update's read column) instead of
    ``block_idx_last_computed_token``."""

    def __init__(self, version: str) -> None:
        super().__init__(version)
        self.caller = f"{A.VllmMamba2ApcRouting.caller}, what if: conv reads prev_step"

    def route(self, case: A.ApcCase, s: int) -> list[A.ConvCall]:
        md = self.metadata(case, s)
        prev = md.block_idx_last_scheduled_token_prev_step
        out, j = [], 0
        for call in super().route(case, s):
            if call.kind == "update" and call.accepted is not None and prev is not None:
                call = replace(call, initial=int(prev[j]))
                j += 1
            out.append(call)
        return out


VARIANTS = {"reads-first-scheduled-block": ReleaseReadsFirstScheduledBlock, "conv-reads-prev-step": ConvReadsPrevStep}


def engine(name: str, mixer: str = "mamba2") -> A.ApcRouting | str:
    if mixer == "mamba1":  # a release's Mamba1 builder and MambaMixer (no planted or in-house variant)
        e1 = A.VllmMamba1ApcRouting(name)
        return e1.unavailable() or e1
    if name == "reference":
        return A.ReferenceApcRouting()
    if name in PLANTED_APC:
        return PLANTED_APC[name]()
    version, _, variant = name.partition("+")
    if variant and variant not in VARIANTS:
        return f"not driven: no release variant {variant!r} (there are: {', '.join(VARIANTS)})"
    e = VARIANTS[variant](version) if variant else A.VllmMamba2ApcRouting(version)
    return e.unavailable() or e


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("engine", help=f"a vLLM release (0.28.0 ...; <v>+reads-first-scheduled-block: that defect "
                   "planted in the release's builder; <v>+conv-reads-prev-step: what if its conv update read the "
                   f"SSM's column), 'reference' or one of {sorted(PLANTED_APC)}")  # fmt: skip
    p.add_argument("--examples", type=int, default=200)
    p.add_argument("--mixer", choices=("mamba2", "mamba1"), default="mamba2",
                   help="mamba1: the release's Mamba1AttentionMetadataBuilder and MambaMixer instead")  # fmt: skip
    p.add_argument("--max-spec", type=int, default=0, help="drafts per verify row, 1..this (0: no speculation)")
    p.add_argument("--rate", action="store_true", help="judge every case (no shrinking): how many catch it")
    args = p.parse_args(argv)
    if args.examples < 1:
        p.error(f"--examples {args.examples}: need at least 1")
    if not 0 <= args.max_spec <= 3:
        p.error(f"--max-spec {args.max_spec}: need 0..3")
    e = engine(args.engine, args.mixer)
    label = f"{args.engine} {args.mixer.capitalize()} all mode"
    label += f", verify rows of 0..{args.max_spec} drafts" if args.max_spec else ""
    if args.max_spec and isinstance(e, A.VllmMamba1ApcRouting):
        e = "n/a: MambaMixer's update takes no counts and Mamba1AttentionMetadataBuilder.build none (no speculation)"
    if isinstance(e, str):
        print(f"{label}: {e}")
        return 3
    ran, caught = [0], [0]
    phases = [Phase.generate] if args.rate else [Phase.generate, Phase.shrink]

    @settings(max_examples=args.examples, derandomize=True, database=None, deadline=None, phases=phases,
              report_multiple_bugs=False, suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=apc_cases(min_spec=min(args.max_spec, 1), max_spec=args.max_spec))
    def run(case: A.ApcCase) -> None:
        ran[0] += 1
        try:
            A.check_apc(e, case, ctx=f"{args.engine}: ")
        except Misrouted:
            caught[0] += 1
            if not args.rate:
                raise

    start = time.perf_counter()
    try:
        run()
    except Misrouted as exc:
        secs = time.perf_counter() - start
        print(f"{label}: FINDING ({secs:.1f} s): {str(exc).splitlines()[0]}")
        return 1
    secs = time.perf_counter() - start
    if args.rate:
        print(f"{label}: {caught[0]} of {ran[0]} cases catch it "
              f"({100 * caught[0] / ran[0]:.1f}%), {secs:.1f} s")  # fmt: skip
        return 1 if caught[0] else 0
    print(f"{label}: pass, {ran[0]} cases, {secs:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
