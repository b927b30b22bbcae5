"""tools/specialisations.py reads the keys Triton's JIT would compile from the interpreter's launches: an
argument a kernel marks ``do_not_specialize`` is keyed by its width alone, as the JIT keys it (the
interpreter's ``InterpretedFunction`` keeps that list in its kwargs, not as an attribute: the recorder
missed it there, and counted the kernels as if nothing were unspecialised)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

TOOL = Path(__file__).resolve().parents[1] / "tools" / "specialisations.py"


def _kernel(x_ptr, T, D):  # the signature is all the recorder reads
    pass


def _recorder() -> dict:
    spec = importlib.util.spec_from_file_location("specialisations", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    namespace: dict = {}
    exec(module.RECORDER, namespace)
    return namespace


def test_a_do_not_specialize_argument_is_keyed_by_its_width_alone() -> None:
    from triton.runtime.interpreter import InterpretedFunction

    key = _recorder()["_key"]
    marked = InterpretedFunction(_kernel, do_not_specialize=["T"])
    plain = InterpretedFunction(_kernel)
    x = torch.zeros(4)
    assert "('T', 'i32')" in key(marked, (x, 32, 32), {}) and "('D', 'i32/16')" in key(marked, (x, 32, 32), {})
    assert key(marked, (x, 1, 32), {}) == key(marked, (x, 32, 32), {}) == key(marked, (x, 7, 32), {})
    assert len({key(plain, (x, t, 32), {}) for t in (1, 32, 7)}) == 3
