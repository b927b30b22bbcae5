"""The planted serving engines' catch table, per driver: each engine of :data:`gdn_equiv.serving.planted.PLANTED`
goes through the plug-in door (``gdn_equiv.serving.planted:<class>``) into ``gdn-equiv check``, ``gdn-equiv fuzz``
and the pytest gate (``--pyargs gdn_equiv.suite.test_serving --gdn-serving-engine``), asked for S0-S7; a row
prints each driver's exit status and the properties whose rows (tests) failed. Every engine must be caught by
every property :data:`PLANTED` names for it, in every driver; exit 1 where one is not.

    python scripts/serving_catch_table.py            # check --examples 60, fuzz --seconds 20, the gate's dev profile
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from gdn_equiv.serving.planted import PLANTED

SHORT = {f"check_s{n}": f"S{n}" for n in range(8)}


def _short(prop: str) -> str:
    return prop.split("_")[1].upper()


def _run(argv: list[str], cwd: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    env["HYPOTHESIS_PROFILE"] = "dev"
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main() -> int:
    work = tempfile.mkdtemp(prefix="gdn-catch-")
    py = sys.executable
    missed = 0
    print(f"{'planted engine':<36} {'must catch':<10} {'check':<22} {'fuzz':<22} {'gate':<22}")
    for name, (cls, props) in PLANTED.items():
        spec = f"gdn_equiv.serving.planted:{cls.__name__}"
        drivers = {
            "check": [py, "-m", "gdn_equiv", "check", "--device", "cpu", "--serving-engine", spec, "--examples", "60",
                      "--skip-necessity", "--report", f"{work}/{cls.__name__}-check", *_props()],
            "fuzz": [py, "-m", "gdn_equiv", "fuzz", "--device", "cpu", "--serving-engine", spec, "--seconds", "20",
                     "--skip-necessity", "--report", f"{work}/{cls.__name__}-fuzz", *_props()],
            "gate": [py, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--pyargs", "gdn_equiv.suite.test_serving",
                     "--gdn-serving-engine", spec],
        }  # fmt: skip
        procs = {d: _run(argv, work) for d, argv in drivers.items()}
        cells = []
        for driver, proc in procs.items():
            out, _ = proc.communicate(timeout=600)
            if driver == "gate":
                failed = sorted(set(re.findall(r"FAILED \S*test_serving_property\[\S*-(S\d)-[\w-]+\]", out)))
            else:
                failed = sorted(set(re.findall(r"^FAIL (S\d)-", out, re.M)))
            want = {_short(p) for p in props}
            missed += not want <= set(failed)
            cells.append(f"{proc.returncode} {','.join(failed) or '-'}")
        print(f"{name:<36} {','.join(sorted(_short(p) for p in props)):<10} " + " ".join(f"{c:<22}" for c in cells))
    print("cells: exit status, then the properties whose rows (gate: tests) failed")
    return 1 if missed else 0


def _props() -> list[str]:
    return [a for n in range(8) for a in ("--property", _NAMES[n])]


_NAMES = ["S0-reference", "S1-pool-alone", "S2-untouched", "S3-handoff", "S4-speculation", "S5-prefix-cache",
          "S6-dispatch", "S7-packed-qkv"]  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
