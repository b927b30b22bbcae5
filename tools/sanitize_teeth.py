"""compute-sanitizer against the planted kernels and the correct ones, through the gate's own sanitized worker
(:class:`gdn_equiv.harness.isolation.SanitizedPool`): each line one forward call in a fresh process under
``compute-sanitizer --tool TOOL``. Expected: the planted ones caught by their tool, the correct ones clean.
Needs a CUDA device and compute-sanitizer::

    python tools/sanitize_teeth.py            # prints one line per (backend, tool); exit 1 on a surprise
"""

from __future__ import annotations

import sys
import time

from gdn_equiv.harness import isolation, planted
from gdn_equiv.model.backends import get_backend

PLANTED = "gdn_equiv.harness.planted:"
#: (backend, tool, caught?) : what the run must show
CASES = (
    (PLANTED + "SANITIZER_OOB", "memcheck", True),
    (PLANTED + "SANITIZER_RACE", "racecheck", True),
    (PLANTED + "SANITIZER_CLEAN", "memcheck", False),
    (PLANTED + "SANITIZER_CLEAN", "racecheck", False),
    ("triton", "memcheck", False),
    ("triton", "racecheck", False),
    ("triton", "initcheck", False),
    ("triton", "synccheck", False),
)


def main() -> int:
    surprises = 0
    for backend, tool, expected in CASES:
        missing = isolation.sanitizer_missing(tool)
        if missing is not None:
            print(f"cannot run here: {missing}")
            return 3
        pool = isolation.SanitizedPool(tool, timeout=isolation.SANITIZE_TIMEOUT)
        start = time.perf_counter()
        try:
            right = pool.call(planted.sanitizer_probe, get_backend(backend))  # resolved again in its process
            verdict, detail = "clean", f"output right: {right}"
        except isolation.SanitizerReport as report:
            lines = [line for line in str(report).splitlines() if line.startswith("=========")]
            verdict, detail = "CAUGHT", " | ".join(lines[1:4])
        except Exception as exc:  # a crash is neither: a surprise either way
            verdict, detail = "error", f"{type(exc).__name__}: {str(exc)[:300]}"
        ok = verdict == ("CAUGHT" if expected else "clean")
        surprises += not ok
        took = time.perf_counter() - start
        print(
            f"{'ok ' if ok else 'BAD'} {tool:9s} {backend.removeprefix(PLANTED):16s} {verdict} ({took:.0f} s): {detail}"
        )
    return 1 if surprises else 0


if __name__ == "__main__":
    sys.exit(main())
