"""The faithfulness table for the installed fla: per family and variant (fla's convs built from our
per-conv facts, or fla's own defaults), forward (output) and backward (dx, every parameter gradient),
the largest distance of fla's run from our fp64 truth against the bar (gdn_equiv.faithful).

    python scripts/faithful_table.py --examples 4

Exit 1 if any example fails the bar (the failure is printed), 0 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: fla's convs and norms on a CPU


def _runner(family: str, defaults: bool, variant: str, examples: int, worst: dict) -> object:
    from hypothesis import HealthCheck, given, settings

    from gdn_equiv.faithful import check_faithful
    from gdn_equiv.suite.test_faithful import faithful_examples

    @settings(deadline=None, max_examples=examples, database=None, suppress_health_check=list(HealthCheck))
    @given(example=faithful_examples(family).map(lambda e: dataclasses.replace(e, grad=True)))
    def run(example) -> None:
        for d in check_faithful(example, defaults=defaults):
            key = (family, variant, "forward" if d.name == "output" else "backward")
            ratio = d.fla_error / d.bound if d.bound else 0.0
            if key not in worst or ratio > worst[key][0] / max(worst[key][1], 1e-300):
                worst[key] = (d.fla_error, d.bound)

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=4)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from gdn_equiv.compare import Mismatch
    from gdn_equiv.faithful import FAITHFUL_FAMILIES
    from gdn_equiv.targets.fla_versions import fla_version

    worst: dict[tuple[str, str, str], tuple[float, float]] = {}
    status = 0
    for family in FAITHFUL_FAMILIES:
        for defaults in (False, True):
            variant = "fla-defaults" if defaults else "our-conv-facts"

            run = _runner(family, defaults, variant, args.examples, worst)
            try:
                run()  # type: ignore[operator]
            except Mismatch as exc:
                print(exc)
                status = 1
    print(f"fla {fla_version()}: family | variant | direction | max |fla - fp64| | bar (2x ours) at that tensor")
    for (family, variant, direction), (err, bound) in sorted(worst.items()):
        print(f"| {family} | {variant} | {direction} | {err:.2e} | {bound:.2e} |")
    return status


if __name__ == "__main__":
    sys.exit(main())
