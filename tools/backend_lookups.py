"""How many times the conv checks look a backend up by name, in the test process and in an isolation worker
(issue #51: nothing below the run plan looks a backend up by name). Each conformance and ground-truth check is
called as the suite calls it (its backend resolved by the suite, or by name where a check still takes one), on a
plug-in loaded from ``module:attr`` (torch's kernels under another name, so its lookups are told apart from the
torch reference's), and every ``get_backend`` call with a name is counted, by name::

    python tools/backend_lookups.py            # this checkout
    PYTHONPATH=/path/to/other/checkout python tools/backend_lookups.py   # another one, to compare

In the worker, the same checks run ``--repeat`` times each in one process; the tool counts the lookups the worker
made (``get_backend`` with a name, and ``isolation.resolved`` where the checkout has it).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
from collections import Counter
from typing import Any

PLUGIN = "gdn_equiv.model.backends.torch_backend:BACKEND"
COUNTS: Counter[str] = Counter()


def install() -> None:
    """Count every ``get_backend`` call with a name, in every gdn_equiv module that holds the function (a worker's
    setup step, and this process')."""
    from gdn_equiv.model import backends

    real = backends.get_backend
    if getattr(real, "counting", False):
        return

    def counting(name: Any) -> Any:
        if isinstance(name, str):
            COUNTS[name] += 1
        return real(name)

    counting.counting = True  # type: ignore[attr-defined]
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("gdn_equiv") and getattr(module, "get_backend", None) is real:
            module.get_backend = counting  # type: ignore[attr-defined]


def counts() -> dict[str, int]:
    """This process' counts: lookups by name, and the isolation layer's resolutions where it has them."""
    from gdn_equiv.harness import isolation

    out = {f"get_backend({name!r})": n for name, n in COUNTS.items()}
    out.update({f"resolved({name!r})": n for name, n in getattr(isolation, "RESOLUTIONS", {}).items()})
    return out


def _calls() -> list[tuple[Any, tuple]]:
    from gdn_equiv.harness import conformance as C
    from gdn_equiv.harness import ground_truth as G
    from gdn_equiv.strategies import ConvCall

    call = ConvCall(B=2, T=5, D=6, W=3, bias=True, activation="silu", initial_state=True, seed=3)
    step = dataclasses.replace(call, T=1)
    return [
        (C.check_forward, (call,)),
        (C.check_gradients, (call,)),
        (C.check_update, (step,)),
        (C.check_continuation, (call, 2)),
        (C.check_decode_continuation, (call, 2)),
        (C.check_fused_slices, (dataclasses.replace(call, initial_state=False), [2, 4])),
        (G.check_forward, (call,)),
        (G.check_gradients, (call,)),
        (G.check_update, (step,)),
    ]


def _backend_argument(check: Any) -> Any:
    """What the suite hands ``check``: the resolved object where the check takes one, else the name."""
    from gdn_equiv.model.backends import get_backend

    takes_object = "impl" in inspect.signature(check).parameters
    return get_backend(PLUGIN) if takes_object else PLUGIN


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="how many times the worker runs each check")
    parser.add_argument(
        "--spawn", action="store_true", help="start the worker by spawn (its sys.path this process'; PYTHONPATH runs)"
    )
    args = parser.parse_args()

    import gdn_equiv
    from gdn_equiv.harness import isolation
    from gdn_equiv.model.backends import get_backend

    print(f"checkout: {gdn_equiv.__file__}")
    get_backend(PLUGIN)  # the plan's load, before counting
    install()
    for check, head in _calls():
        COUNTS.clear()
        isolation.call(check, *head, _backend_argument(check), "cpu")
        per = dict(COUNTS)
        print(f"in-process {check.__module__.rsplit('.', 1)[1]}.{check.__name__}: {per}")
    COUNTS.clear()

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    if args.spawn:  # Python 3.11's fork server keeps its own sys.path: another checkout needs spawn
        import multiprocessing

        isolation._context = lambda: multiprocessing.get_context("spawn")  # type: ignore[attr-defined]
    pool = isolation.WorkerPool(timeout=120, setup=("backend_lookups:install",))
    try:
        n = 0
        for _ in range(args.repeat):
            for check, head in _calls():
                pool.call(check, *head, _backend_argument(check), "cpu")
                n += 1
        worker = pool.call("backend_lookups:counts")
    finally:
        pool.close()
    print(f"worker, {n} checks in one process ({pool.started} started): {worker}")
    print(f"test process, sending them: {dict(COUNTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
