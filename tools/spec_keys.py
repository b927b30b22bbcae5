"""How many Triton specialisations a GPU suite run asks for (issue #17's cold start), counted on a CPU.

Records every launch of the triton backend's kernels while the layer properties run on drawn
examples (under ``TRITON_INTERPRET=1``, so no GPU is needed), and counts the distinct keys Triton
compiles one binary per: the kernel, its constexpr values and launch options, each tensor's dtype and
16-byte alignment, each integer's class (``== 1``, divisible by 16, other). It prints the counts as
they are and with the integer arguments unspecialised (what ``do_not_specialize`` on all of them would
give), per kernel::

    TRITON_INTERPRET=1 PYTHONPATH=$PWD python3 tools/spec_keys.py 200

A GPU compiles each key once per process that lacks it in the on-disk cache: the count bounds the
cold start's compilations.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import defaultdict
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
from hypothesis import HealthCheck, given, settings

from gdn_equiv.harness import properties as P
from gdn_equiv.model.backends import triton_backend
from gdn_equiv.strategies import examples

KEYS: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
LOOSE: dict[str, set[tuple[Any, ...]]] = defaultdict(set)


def _arg_class(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.data_ptr() % 16 == 0)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", "1" if value == 1 else "16" if value % 16 == 0 else "i")
    return (type(value).__name__,)


class _Recorder:
    def __init__(self, name: str, kernel: Any) -> None:
        self.name, self.kernel = name, kernel

    def __getitem__(self, grid: Any) -> Any:
        launch = self.kernel[grid]

        def record(*args: Any, **kwargs: Any) -> Any:
            classes = tuple(_arg_class(a) for a in args)
            options = tuple(
                sorted((k, v if not isinstance(v, torch.Tensor) else _arg_class(v)) for k, v in kwargs.items())
            )
            KEYS[self.name].add((classes, options))
            LOOSE[self.name].add((tuple(c if c[0] != "int" else ("int",) for c in classes), options))
            return launch(*args, **kwargs)

        return record


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    module = triton_backend._kernels()
    for name in dir(module):
        if name.endswith("_kernel"):
            setattr(module, name, _Recorder(name, getattr(module, name)))

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(examples(backends=("triton",), max_seq_len=20, family=["gated_deltanet", "kda", "gla", "lightnet"]))
    def run(example: Any) -> None:
        for check in (P.check_forward_exact, P.check_gradients):
            with contextlib.suppress(P.NotApplicable):
                check(example)

    run()
    total, loose = sum(map(len, KEYS.values())), sum(map(len, LOOSE.values()))
    print(f"{n} examples: {total} specialisations as launched, {loose} with every int argument unspecialised")
    for name in sorted(KEYS):
        print(f"  {name:28s} {len(KEYS[name]):5d} {len(LOOSE[name]):5d}")


if __name__ == "__main__":
    main()
