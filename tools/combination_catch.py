"""One gate run of the combination test against a planted combination kernel (gdn_equiv.harness.planted.
COMBINATION_BACKENDS), for tools/catch_rate.py: exit 1 when the kernel is caught, 0 when it is not.

    python tools/catch_rate.py --runs 20 -- python tools/combination_catch.py planted-short-state-grad

The examples are the gate's (gdn_equiv.suite.test_combinations.test_backend_matches_torch_in_every_combination:
its strategy, its share of the profile's examples, HYPOTHESIS_PROFILE, ci by default), the database the
one catch_rate.py gives each run (empty). Hypothesis' shrink phase is left out: whether a run catches is
decided when the first failing example is drawn, and shrinking 120-cell examples under a shared CPU took
a minute a run (the pytest gate, shrinking included, caught 9 of 9 before it was stopped).
"""

from __future__ import annotations

import os
import sys
import warnings


def main() -> int:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    from gdn_equiv.harness.testing import register_profiles

    register_profiles()
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    from gdn_equiv.harness.cells import parts
    from gdn_equiv.harness.compare import Mismatch
    from gdn_equiv.harness.planted import COMBINATION_BACKENDS
    from gdn_equiv.model.backends import registered
    from gdn_equiv.suite import test_combinations as gate_module

    backend = COMBINATION_BACKENDS[sys.argv[1]]
    warnings.simplefilter("ignore")
    test = gate_module.test_backend_matches_torch_in_every_combination
    examples = test._hypothesis_internal_use_settings.max_examples  # the gate's own share of the profile

    with registered(backend):

        @settings(
            deadline=None,
            max_examples=examples,
            phases=[p for p in Phase if p is not Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )
        @given(data=st.data())
        def gate(data) -> None:
            for part in range(parts("conv")):  # every part: the whole test's checks
                test.hypothesis.inner_test(data=data, gdn_backend=backend.name, device="cpu", part=part)

        try:
            gate()
        except Mismatch as exc:
            print(f"{examples} examples at most: {str(exc).splitlines()[0]}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
