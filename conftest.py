"""Source-tree wiring: load the gdn-equiv pytest plugin (:mod:`gdn_equiv.pytest_plugin`).

Installed (``pip install -e .``), pytest has already imported the plugin through its ``pytest11``
entry point before this file runs; naming it again here would register it twice. From a plain
checkout (nothing installed) this is what loads it. ``gdn_equiv_suite = true`` in pyproject.toml
switches it on for this repository's tests.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

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


# ---- a real redis-server for the shared example database's tests (Debian's package; skipped without it) ----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def free_port() -> int:
    """A local TCP port nothing listens on (a redis URL that cannot be reached)."""
    return _free_port()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("needs redis-server (apt-get install redis-server)")
    redis = pytest.importorskip("redis", reason="needs the redis package (pip install gdn-equiv[redis])")
    port = _free_port()
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def gdn_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """``gdn_main(*argv) -> (status, stdout, stderr)``: ``gdn-equiv`` (:func:`gdn_equiv.run.cli.main`) run in
    ``tmp_path`` without ``HYPOTHESIS_PROFILE``; ``TRITON_INTERPRET`` as it was afterwards (the command sets it
    on a machine without CUDA)."""
    from gdn_equiv.run import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    saved = os.environ.get("TRITON_INTERPRET")

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = cli.main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err

    yield run
    if saved is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = saved
