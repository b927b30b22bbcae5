"""How many Triton kernel specialisations a gate run draws: where a cold GPU run's compile time goes, measured on a CPU.

A cold run on the GPU compiles one kernel per distinct specialisation: a kernel's constexpr values, its
pointers' element types and 16-byte alignment, its integer arguments' classes (1, a multiple of 16, other;
32 or 64 bits) and its launch options (warps, stages), as Triton's JIT keys its cache. Under Triton's
interpreter (``TRITON_INTERPRET=1``) nothing is compiled, but every launch still goes through
``InterpretedFunction.run``; this script records each launch's key the way the JIT would form it
(``do_not_specialize`` honoured) and runs the gate as asked::

    TRITON_INTERPRET=1 HYPOTHESIS_PROFILE=gpu python tools/specialisations.py --out /tmp/spec -- \\
        --pyargs gdn_equiv.suite --gdn-backend triton -k test_properties -n 2

It prints the distinct specialisations per kernel and per test (the new ones each test adds, in the order
the run met them) and writes ``specialisations.json``. The ``gpu`` profile is derandomized, so the draws
here are the GPU run's draws wherever a strategy does not look at the device.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

#: the plugin each pytest process loads (``-p spec_record``): one line per launch of a new key in that process
RECORDER = r"""
import inspect
import os

import pytest

_SEEN = set()
_CURRENT = ["(collection)"]


def _int_class(v, specialise, align):
    width = "i64" if not -2**31 <= v < 2**31 else "i32"
    if not specialise:
        return width
    if v == 1:
        return "1"
    return width + ("/16" if align and v % 16 == 0 else "")


def _key(fn, args, kwargs):
    import torch

    params = list(inspect.signature(fn.fn).parameters.values())
    bound = dict(zip([p.name for p in params], args))
    bound.update({k: v for k, v in kwargs.items() if k in {p.name for p in params}})
    options = tuple(sorted((k, v) for k, v in kwargs.items() if k not in bound and k not in ("grid", "warmup")))
    # a JITFunction holds its do_not_specialize lists; the interpreter's InterpretedFunction keeps them in kwargs
    given = getattr(fn, "kwargs", None) or {}
    dns = {params[i].name if isinstance(i, int) else i
           for i in (getattr(fn, "do_not_specialize", None) or given.get("do_not_specialize") or [])}
    dnsa = {params[i].name if isinstance(i, int) else i
            for i in (getattr(fn, "do_not_specialize_on_alignment", None)
                      or given.get("do_not_specialize_on_alignment") or [])}
    parts = []
    for p in params:
        v = bound.get(p.name, p.default)
        if "constexpr" in str(p.annotation):
            parts.append((p.name, repr(v)))
        elif isinstance(v, torch.Tensor):
            aligned = p.name not in dns and p.name not in dnsa and v.data_ptr() % 16 == 0
            parts.append((p.name, f"*{v.dtype}" + ("/16" if aligned else "")))
        elif isinstance(v, bool):
            parts.append((p.name, "i1"))
        elif isinstance(v, int):
            parts.append((p.name, _int_class(v, p.name not in dns, p.name not in dnsa)))
        elif isinstance(v, float):
            parts.append((p.name, "fp32"))
        else:
            parts.append((p.name, type(v).__name__))
    return repr((tuple(parts), options))


def pytest_configure(config):
    from triton.runtime.interpreter import InterpretedFunction

    original = InterpretedFunction.run
    out = os.path.join(os.environ["SPEC_RECORD_DIR"], f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.tsv")

    def run(self, *args, grid, warmup, **kwargs):
        name = getattr(self.fn, "__qualname__", "?")
        module = getattr(self.fn, "__module__", "?")
        try:
            key = _key(self, args, kwargs)
        except Exception as exc:  # a launch we cannot read: counted under its error, never dropped
            key = f"unreadable: {exc!r}"
        if (module, name, key) not in _SEEN:
            _SEEN.add((module, name, key))
            with open(out, "a") as sink:
                sink.write("\t".join([_CURRENT[0], module, name, key]) + "\n")
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _CURRENT[0] = item.nodeid
    return (yield)
"""


def _width(cls: str) -> str:
    """An integer class (``1``, ``i32``, ``i32/16``, ``i64``, ``i64/16``) as an unspecialised argument keys it."""
    return "i64" if cls.startswith("i64") else "i32" if cls == "1" or cls.startswith("i32") else cls


def unspecialised(keys: dict[tuple[str, str, str], str], names: set[str]) -> dict:
    """The distinct keys once the integer arguments ``names`` carry only their width (``i32``/``i64``), as the
    JIT keys a ``do_not_specialize`` argument; an unreadable key is kept as it is."""
    import ast

    left: set[tuple[str, str, str]] = set()
    for module, name, key in keys:
        try:
            parts, options = ast.literal_eval(key)
        except (ValueError, SyntaxError):
            left.add((module, name, key))
            continue
        kept = tuple((n, _width(v) if n in names else v) for n, v in parts)
        left.add((module, name, repr((kept, options))))
    by_kernel: dict[str, int] = defaultdict(int)
    for module, name, _key in left:
        by_kernel[f"{module}.{name}"] += 1
    return {"distinct": len(left), "by_kernel": dict(sorted(by_kernel.items(), key=lambda kv: -kv[1]))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("specialisations"))
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument(
        "--unspecialise",
        default=None,
        metavar="ARG[,ARG]",
        help="also count the specialisations left if these integer arguments were do_not_specialize (every kernel "
        "that takes one): what a do_not_specialize would save, before anyone measures its speed",
    )
    parser.add_argument("pytest_args", nargs="*", help="the gate's pytest arguments (after --)")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") != "1":
        parser.error("run under TRITON_INTERPRET=1: the launches are read in Triton's interpreter")
    args.out.mkdir(parents=True, exist_ok=True)
    record = args.out / "launches"
    record.mkdir(exist_ok=True)
    for stale in record.glob("*.tsv"):
        stale.unlink()
    with tempfile.TemporaryDirectory() as plugin_dir:
        Path(plugin_dir, "spec_record.py").write_text(RECORDER)
        env = {**os.environ, "SPEC_RECORD_DIR": str(record.resolve())}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (plugin_dir, env.get("PYTHONPATH", "")) if p)
        status = subprocess.call([sys.executable, "-m", "pytest", "-p", "spec_record", *args.pytest_args], env=env)
    # one process's first sighting of a key; the same key met by several workers is one specialisation
    first_test: dict[tuple[str, str, str], str] = {}
    per_process = 0
    for path in sorted(record.glob("*.tsv")):
        for line in path.read_text().splitlines():
            test, module, name, key = line.split("\t", 3)
            per_process += 1
            first_test.setdefault((module, name, key), test)
    by_kernel: dict[str, int] = defaultdict(int)
    by_test: dict[str, int] = defaultdict(int)
    for (module, name, _key), test in first_test.items():
        by_kernel[f"{module}.{name}"] += 1
        by_test[test] += 1
    report = {
        "pytest_status": status,
        "distinct": len(first_test),
        "compiles_if_no_process_shared_a_cache": per_process,
        "by_kernel": dict(sorted(by_kernel.items(), key=lambda kv: -kv[1])),
        "by_test": dict(sorted(by_test.items(), key=lambda kv: -kv[1])),
    }
    if args.unspecialise:
        names = {n.strip() for n in args.unspecialise.split(",")}
        report["if_unspecialised"] = {"args": sorted(names), **unspecialised(first_test, names)}
    (args.out / "specialisations.json").write_text(json.dumps(report, indent=1) + "\n")
    seen = f"{len(first_test)} distinct specialisations ({per_process} first sightings per process)"
    print(f"pytest exit {status}; {seen}")
    print("by kernel:")
    for name, n in list(report["by_kernel"].items())[: args.top]:
        print(f"  {n:5d}  {name}")
    if "if_unspecialised" in report:
        u = report["if_unspecialised"]
        print(f"with {', '.join(u['args'])} unspecialised: {u['distinct']} distinct; by kernel:")
        for name, n in list(u["by_kernel"].items())[: args.top]:
            print(f"  {n:5d}  {name} (was {report['by_kernel'][name]})")
    print("by test (specialisations it met first):")
    for name, n in list(report["by_test"].items())[: args.top]:
        print(f"  {n:5d}  {name}")
    return status


if __name__ == "__main__":
    sys.exit(main())
