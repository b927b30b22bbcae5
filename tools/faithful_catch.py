"""One gate run of the faithfulness property against a planted reference edit (gdn_equiv.harness.planted.
reference_defects), for tools/catch_rate.py: exit 1 when the edit is caught, 0 when it is not.

    python tools/catch_rate.py --runs 20 -- python tools/faithful_catch.py reference-gate-before-norm

The examples are the gate's (gdn_equiv.strategies.faithful's strategy and budget in the profile of
HYPOTHESIS_PROFILE, ci by default), the database the one catch_rate.py gives each run (empty).
"""

from __future__ import annotations

import os
import sys
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: fla's convs and norms on a CPU


def main() -> int:
    from hypothesis import HealthCheck, Phase, given, settings

    from gdn_equiv.harness.testing import register_profiles

    register_profiles()
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    from gdn_equiv.harness.compare import Mismatch
    from gdn_equiv.harness.faithful import check_faithful
    from gdn_equiv.harness.planted import defect_family, reference_defects
    from gdn_equiv.strategies.faithful import faithful_budget, faithful_examples

    layer_cls = reference_defects()[sys.argv[1]]
    family = defect_family(layer_cls)
    warnings.simplefilter("ignore")

    # as the gate runs it: once with fla's convs from our per-conv facts, once with fla's defaults, each
    # with the profile's examples (gdn_equiv.suite.test_faithful's two parametrizations)
    for defaults in (False, True):
        # no shrink phase: a run catches when its first failing example is drawn (shrinking it only costs)
        @settings(
            deadline=None,
            max_examples=faithful_budget(),
            phases=[p for p in Phase if p is not Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )
        @given(example=faithful_examples(family))
        def gate(example, defaults=defaults) -> None:
            check_faithful(example, defaults=defaults, layer_cls=layer_cls)

        try:
            gate()
        except Mismatch as exc:
            print(f"defaults={defaults}: {str(exc).splitlines()[0]}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
