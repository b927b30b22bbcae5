"""Unaided search of S1-S7 on one serving engine path: each property for up to N cases, the first failure
shrunk by Hypothesis; one ledger line per property (pass / FINDING / not exercised / cannot run here).

    PYTHONPATH=.engines python scripts/serving_search.py vllm-cpu-torch 300
"""

from __future__ import annotations

import sys
import time

from hypothesis import HealthCheck, find, settings

from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.serving import properties as S
from gdn_equiv.serving.records import SERVING, adapter


def main(engine: str, budget: int) -> int:
    a = adapter(engine)
    reason = a.unavailable()
    print(f"{engine} {a.version}: {'runs here' if reason is None else reason}")
    if reason is not None:
        return 3
    findings = 0
    for name, _, premise, check, _ in SERVING:
        strategy = premise(engine, ("gdn",), None, 140).map(lambda d: d.example.case)
        prop = getattr(S, check.__name__)
        ran, skipped, why = [0], [0], [""]

        def fails(case: object, prop: object = prop, ran: list = ran, skipped: list = skipped, why: list = why) -> bool:
            ran[0] += 1
            try:
                prop(a, case)  # type: ignore[operator]
            except S.NotExercised as exc:
                skipped[0] += 1
                why[0] = str(exc)
                return False
            except Mismatch:
                return True
            return False

        start = time.perf_counter()
        search = settings(max_examples=budget, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        try:
            case = find(strategy, fails, settings=search)
        except Exception as exc:
            took = time.perf_counter() - start
            if type(exc).__name__ != "NoSuchExample":
                print(f"{name}: ERROR after {ran[0]} cases ({took:.1f} s): {type(exc).__name__}: {str(exc)[:400]}")
                findings += 1
            elif skipped[0] == ran[0]:
                print(f"{name}: not exercised ({ran[0]} cases, {took:.1f} s): {why[0]}")
            else:
                print(f"{name}: pass ({ran[0] - skipped[0]} cases compared, {skipped[0]} not exercised, {took:.1f} s)")
            continue
        findings += 1
        took = time.perf_counter() - start
        print(f"{name}: FINDING after {ran[0]} cases ({took:.1f} s, shrunk): {case.short()}")
        try:
            prop(a, case)
        except Mismatch as exc:
            print("   " + str(exc).replace("\n", "\n   "))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
