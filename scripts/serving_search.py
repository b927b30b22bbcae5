"""Unaided search of S0-S7 on serving engine paths: each property for up to N cases (a fixed, derandomized
sequence: the same cases on every machine), the first failure shrunk by Hypothesis; one ledger line per
engine path x property (pass / FINDING / not exercised / cannot run here / ERROR), and with ``--json`` the
same rows as JSON (what a device call brings back). A path "runs here" when its smallest case (D1 W2, one
token) computes right against the reference (S0); "cannot run here" is only what the adapter's ``unavailable()``
says is missing (package, version, ops file, device, a known interpreter limit).
Exit 0: every row that can run here ran and passed; 1: a
finding, an error, or a row not exercised or not reached; 3: no asked engine path can run here.

    PYTHONPATH=.engines python scripts/serving_search.py vllm-cpu-torch 300
    PYTHONPATH=.engines python scripts/serving_search.py vllm-gpu,sglang-gpu 40 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any

import torch
from hypothesis import HealthCheck, find, settings

from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.serving import properties as S
from gdn_equiv.serving.cases import Batch, ConvSpec, SpecCase
from gdn_equiv.serving.records import SERVING, adapter

#: the smallest S0 case: one fresh sequence of one token, D1 W2 fp32, no bias, no activation
SMALLEST = SpecCase(Batch(ConvSpec(1, 2), 1, (1,), (0,), (False,), 0), 1, (1,))


class _Spent(Exception):
    """The row's seconds ran out before its budget of cases (ledger: not reached)."""


def search(engine: str, record: Any, budget: int, seconds: float = float("inf")) -> dict[str, Any]:
    """One engine path x property: its row. ``seconds`` ends a row that found nothing yet as ``not reached``
    with the cases it ran (a failure being shrunk is not cut off)."""
    a, prop_name, prop = adapter(engine), record.name, record.prop
    row: dict[str, Any] = {"engine": engine, "version": a.version, "property": prop_name}
    if prop is S.check_s4_speculation and not getattr(a, "speculative", True):
        return {**row, "result": "cannot run here", "why": a.not_speculative, "cases": 0, "seconds": 0.0}
    if prop in (S.check_s0_surface, S.check_s0_outside) and (why_not := record.not_applicable(engine)) is not None:
        return {**row, "result": "cannot run here", "why": why_not, "cases": 0, "seconds": 0.0}
    strategy = record.strategy(engine).map(lambda d: d.example.case)
    ran, skipped, first_hit, why = [0], [0], [0], [""]
    start = time.perf_counter()
    raised: list[Any] = []

    def fails(case: Any) -> bool:
        if not first_hit[0] and time.perf_counter() - start > seconds:
            raise _Spent
        ran[0] += 1
        try:
            prop(a, case)
        except S.NotExercised as exc:
            skipped[0] += 1
            why[0] = str(exc)
            return False
        except Mismatch:
            first_hit[0] = first_hit[0] or ran[0]
            return True
        except Exception:
            raised.append(case)  # the kernel's own error: reported with the case that raised it
            raise
        return False

    fixed = settings(
        max_examples=budget, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    try:
        case = find(strategy, fails, settings=fixed)
    except Exception as exc:
        took = round(time.perf_counter() - start, 2)
        if isinstance(exc, _Spent):
            why = f"{seconds:g} s spent after {ran[0]} cases ({ran[0] - skipped[0]} compared, none failed)"
            return {**row, "result": "not reached", "cases": ran[0], "seconds": took, "why": why}
        if type(exc).__name__ != "NoSuchExample":
            return {
                **row,
                "result": "ERROR",
                "cases": ran[0],
                "seconds": took,
                "case": raised[-1].short() if raised else None,
                "error": f"{type(exc).__name__}: {str(exc)[:600]}",
            }
        if skipped[0] == ran[0]:
            return {**row, "result": "not exercised", "cases": ran[0], "seconds": took, "why": why[0]}
        compared = ran[0] - skipped[0]
        return {**row, "result": "pass", "cases": ran[0], "compared": compared, "seconds": took}
    took = round(time.perf_counter() - start, 2)
    message = ""
    try:
        prop(a, case)
    except Mismatch as exc:
        message = str(exc)
    return {
        **row,
        "result": "FINDING",
        "cases": ran[0],
        "cases_to_first_hit": first_hit[0],
        "seconds": took,
        "shrunk": case.short(),
        "shrunk_repr": repr(case),
        "mismatch": message,
    }


def _callers(a: Any) -> dict[str, str]:
    callers = getattr(a, "callers", None)
    return callers() if callable(callers) else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("engines", help="comma list of engine paths (reference, vllm-cpu-torch, vllm-gpu, ...)")
    parser.add_argument("examples", type=int, help="cases per property row")
    parser.add_argument(
        "--properties", default=None, help="comma list of S<n> or full names (S0-surface) to run (default: all)"
    )
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--seconds", type=float, default=float("inf"), help="per row: then it is not reached")
    args = parser.parse_args(argv)
    wanted = None if args.properties is None else set(args.properties.split(","))
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"
    out: dict[str, Any] = {"device": device, "torch": torch.__version__, "examples": args.examples, "rows": []}
    with_triton = sys.modules.get("triton") or __import__("importlib").util.find_spec("triton")
    if with_triton:
        import triton

        out["triton"] = triton.__version__
    findings, ran_any = 0, False
    started = time.perf_counter()
    for engine in args.engines.split(","):
        a = adapter(engine)
        t0 = time.perf_counter()
        reason = a.unavailable()  # what is missing here, if anything (imports the ops)
        runs = "cannot run here: " + str(reason)
        if reason is None:
            try:
                S.check_s0_reference(a, SMALLEST)  # a first call: a first compile on a GPU
                runs = "runs here (S0 on the smallest case: = the reference)"
            except Mismatch as exc:
                runs = f"does not compute right (S0 on the smallest case): {str(exc).splitlines()[0]}"
            except Exception as exc:  # the adapter's or the engine's error: an ERROR row below, never n/a
                runs = f"raises on the smallest case: {type(exc).__name__}: {str(exc)[:200]}"
        first = round(time.perf_counter() - t0, 2)
        print(f"{engine} {a.version}: {runs} ({first} s)", flush=True)
        out.setdefault("paths", {})[engine] = {"version": a.version, "runs": runs, "callers": _callers(a)}
        for record in SERVING:
            name = record.name
            if wanted is not None and name.split("-")[0] not in wanted and name not in wanted:
                continue
            if reason is not None:
                row = {"engine": engine, "version": a.version, "property": name, "result": "cannot run here"}
                out["rows"].append({**row, "why": reason, "cases": 0, "seconds": 0.0})
                continue
            ran_any = True
            row = search(engine, record, args.examples, args.seconds)
            out["rows"].append(row)
            findings += row["result"] not in ("pass", "cannot run here")
            detail = row.get("shrunk") or row.get("why") or row.get("error") or ""
            print(f"  {name:<16} {row['result']:<15} {row['cases']:>4} cases {row['seconds']:7.1f} s  {detail}")
            if row.get("mismatch"):
                print("     " + row["mismatch"].replace("\n", "\n     ")[:1500])
            if args.json:  # rewritten after each row: a call cut off still brings back what finished
                out["seconds"] = round(time.perf_counter() - started, 1)
                with open(args.json, "w") as f:
                    json.dump(out, f, indent=1)
    out["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if not ran_any:
        return 3
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
