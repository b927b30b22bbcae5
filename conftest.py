"""Source-tree wiring: load the gdn-equiv pytest plugin (:mod:`gdn_equiv.pytest_plugin`).

Installed (``pip install -e .``), pytest has already imported the plugin through its ``pytest11``
entry point before this file runs; naming it again here would register it twice. From a plain
checkout (nothing installed) this is what loads it. ``gdn_equiv_suite = true`` in pyproject.toml
switches it on for this repository's tests.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest

pytest_plugins = [] if "gdn_equiv.pytest_plugin" in sys.modules else ["gdn_equiv.pytest_plugin"]


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under Triton's interpreter (set by the plugin on a machine without CUDA), no int32 overflow checks.

    The interpreter checks every int32 add/sub/mul of a kernel for overflow (``sanitize_overflow``, on
    in its options with no switch; compiled kernels check only in debug builds). This repository's
    interpreter shapes are tiny, so no index can overflow, and the checks were 24 of the 38 s that the
    serial backward's bitwise test spent in the kernel (cProfile); without them that test ran in 11.5 s
    instead of 19.3 s (one run each, fresh draws, a busy machine). An interpreter without that option
    is left as it is; the plugin, which runs plug-in users' kernels, keeps the checks.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if builder is None or not hasattr(options, "sanitize_overflow") or not dataclasses.is_dataclass(options):
        return
    if not isinstance(options, type):
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
