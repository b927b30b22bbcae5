"""Examples run in a worker process, so that a kernel that kills the process is a finding (SPEC §10).

A plug-in kernel may segfault, call ``os._exit`` or hang. Run in the test process, that ends the run
and loses the example; run here, in a worker, it is a failure of that one example:
:class:`WorkerDied` (:class:`WorkerTimedOut` past the per-example time limit) raised in the parent,
inside the Hypothesis test function, so Hypothesis records the input, shrinks it by replaying
candidates (each in a live worker: a dead one is replaced before the next example) and saves it in
the example database. The run goes on with the next row.

Every check that calls the kernel under test runs this way: the layer properties of
:mod:`gdn_equiv.harness.properties` (P2-P5, P8), the conformance checks of :mod:`gdn_equiv.harness.conformance` and
the ground-truth checks of :mod:`gdn_equiv.harness.ground_truth`. The worker gets the function by module and
name (so it must be a module-level function a fresh process can import) and its arguments, pickled
(an ``Example``, a ``ConvCall``, a ``BadCall``, a :class:`~gdn_equiv.model.backends.Backend`, a target); it
sends back the value, or the exception it raised (:class:`~gdn_equiv.harness.properties.NotApplicable`, a
``Mismatch``: re-raised here as they are), and the comparison reports it made (for ``check``'s
worst-difference column).

A backend crosses the boundary as a reference, its name (pickle's persistent IDs: :func:`dumps`), wherever it
sits in the arguments; the worker resolves each name once for the life of its process (:func:`resolved`) and
hands every later call the same object. So a backend must be one a fresh process can resolve by its name
(built-in, entry point or ``module:attr``), not one registered at run time.

Workers start from a fork server that has imported torch and gdn_equiv once, so replacing a dead
worker costs milliseconds, not an interpreter start: shrinking a crash replays many candidates.

Under NVIDIA's compute-sanitizer (``configure(..., sanitize=TOOL)``; the plugin's ``--gdn-sanitize``,
``check --sanitize``) each call runs in a fresh process started as ``compute-sanitizer --tool TOOL
--error-exitcode 86 --log-file LOG python ...`` (:class:`SanitizedPool`): the tool's verdict comes with
the process' exit, so one process per example is what ties a report to its example. A report is
:class:`SanitizerReport` (an ``AssertionError``: a failing example, shrunk like any other) carrying
the sanitizer's log; the example's own result is discarded then.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import math
import multiprocessing
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import compare
from gdn_equiv.harness.compare import observe
from gdn_equiv.harness.interpreter import make_faithful
from gdn_equiv.model.backends import BUILTIN_BACKENDS, Backend, get_backend
from gdn_equiv.model.families import BUILTIN_FAMILIES as FAMILIES

__all__ = [
    "DEFAULT_TIMEOUT",
    "SANITIZER_TOOLS",
    "SanitizedPool",
    "SanitizerReport",
    "WorkerDied",
    "WorkerPool",
    "WorkerTimedOut",
    "call",
    "configure",
    "is_plugin",
    "sanitizer_missing",
]

DEFAULT_TIMEOUT = 60.0  # seconds per example: a cold GPU's first triton compile fits well inside
#: under compute-sanitizer each example starts an interpreter, imports torch and compiles its kernels
#: instrumented: minutes are not rare
SANITIZE_TIMEOUT = 300.0
START_TIMEOUT = 120.0  # a worker that is not ready by then is our failure, not the example's
# what the worker must see as the parent does (the fork server may have started before they were set)
_ENV_PREFIXES = ("GDN_", "TRITON_", "CUDA_VISIBLE_DEVICES")


class WorkerDied(AssertionError):
    """The worker running an example died: killed by a signal or exited. A failure of that example."""

    compared_nothing = True  # not counted by properties (gdn_equiv.harness.testing.compared_something)


class WorkerTimedOut(WorkerDied):
    """The worker running an example ran past the per-example time limit (and was killed)."""


class SanitizerReport(AssertionError):
    """compute-sanitizer reported errors while the example ran: a failure of that example, its report attached."""


#: compute-sanitizer's tools an example can run under (``--gdn-sanitize``, ``check --sanitize``)
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
#: the exit status the sanitizer is told to give a process it found errors in (``--error-exitcode``)
SANITIZER_EXIT = 86
#: where compute-sanitizer lives when it is not on ``PATH`` (the CUDA toolkit's own folder)
SANITIZER_DIRS = ("$CUDA_HOME/bin", "/usr/local/cuda/bin")


def sanitizer_executable() -> str | None:
    """compute-sanitizer on ``PATH``, else in the CUDA toolkit's folder, else ``None``."""
    found = shutil.which("compute-sanitizer")
    if found is not None:
        return found
    for folder in SANITIZER_DIRS:
        candidate = Path(os.path.expandvars(folder)) / "compute-sanitizer"
        if "$" not in str(candidate) and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def sanitizer_missing(tool: str) -> str | None:
    """Why examples cannot run under ``compute-sanitizer --tool tool`` here (one line naming what is
    missing), or ``None``. An unknown tool is the caller's usage error, checked before this."""
    if sanitizer_executable() is None:
        return (
            f"--tool {tool} needs NVIDIA's compute-sanitizer (CUDA toolkit), which is not on PATH nor in "
            f"{' or '.join(SANITIZER_DIRS)}"
        )
    import torch

    if not torch.cuda.is_available():
        return f"--tool {tool} checks CUDA kernels: no CUDA device here (torch {torch.__version__})"
    return None


def is_plugin(backend: str) -> bool:
    """Whether ``backend`` is a plug-in (anything but our built-ins): ``check``/``fuzz`` isolate those by default."""
    return backend not in BUILTIN_BACKENDS


def _resolve(address: str) -> Callable[..., Any]:
    """The function at ``module:qualname``."""
    module, _, name = address.partition(":")
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


def _address(fn: Callable[..., Any] | str) -> str:
    """``module:qualname`` of ``fn`` (a bare name is a function of :mod:`gdn_equiv.harness.properties`), refused
    unless a fresh process can import it there: the worker must find the same function."""
    if isinstance(fn, str):
        return fn if ":" in fn else f"gdn_equiv.harness.properties:{fn}"
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not name or module == "__main__" or "<locals>" in name:
        raise InvalidArgument(
            f"{fn!r} cannot run in a worker process: only a module-level function of an importable module can "
            f"(got module {module!r}, name {name!r})"
        )
    return f"{module}:{name}"


#: the persistent ID a backend is pickled as: ``(BACKEND_REFERENCE, name)``
BACKEND_REFERENCE = "gdn_equiv.backend"
#: this process' backends resolved from a reference, by name: each name is resolved once per process
_RESOLVED: dict[str, Backend] = {}
#: how many times this process resolved each name (a probe's figure: 1 a name, however many calls it served)
RESOLUTIONS: Counter[str] = Counter()


class _Pickler(pickle.Pickler):
    """Pickles a :class:`Backend` as its name (its functions may be closures, and the worker holds its own)."""

    def persistent_id(self, obj: Any) -> Any:
        return (BACKEND_REFERENCE, obj.name) if isinstance(obj, Backend) else None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        kind, name = pid
        if kind != BACKEND_REFERENCE:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return resolved(name)


def resolved(name: str) -> Backend:
    """The backend a reference names, resolved once for this process (built-in, entry point or ``module:attr``:
    what a fresh process can load) and the same object for every later call; :class:`InvalidArgument` (the
    registry's words) for a name it cannot resolve."""
    if name not in _RESOLVED:
        _RESOLVED[name] = get_backend(name)
        RESOLUTIONS[name] += 1
    return _RESOLVED[name]


def resolutions() -> dict[str, int]:
    """:data:`RESOLUTIONS` as a plain dict (a probe calls it in a worker)."""
    return dict(RESOLUTIONS)


def dumps(obj: Any) -> bytes:
    """``obj`` pickled for a worker, every :class:`Backend` in it as a reference (:func:`loads` resolves it)."""
    buffer = io.BytesIO()
    _Pickler(buffer, pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """What :func:`dumps` pickled, each backend reference resolved (once a process: :func:`resolved`)."""
    return _Unpickler(io.BytesIO(data)).load()


def _serve(conn: Any, env: dict[str, str], threads: int, setup: tuple[str, ...]) -> None:
    """The worker: run requests until the parent closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends us
    os.environ.update(env)
    import torch

    torch.set_num_threads(threads)

    make_faithful()  # a fresh process: Triton's interpreter rounds as the parent's does (as a GPU does)
    try:
        for step in setup:
            _resolve(step)()
    except Exception:
        conn.send(("setup failed", traceback.format_exc()))
        return
    conn.send("ready")  # the time limit starts with the examples, not with the imports
    while True:
        try:
            request = conn.recv_bytes()
        except (EOFError, OSError):
            return
        with observe() as reports:
            try:
                where, args, kwargs = loads(request)  # a backend it cannot resolve is the call's exception
                reply: tuple[Any, ...] = ("ok", _resolve(where)(*args, **kwargs))
            except Exception as exc:
                reply = ("raised", _portable(exc), traceback.format_exc())
        conn.send((*reply, list(reports)))


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives pickling, else a ``RuntimeError`` that names it."""
    try:
        return pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__qualname__}: {exc}")


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")

    ctx = multiprocessing.get_context("forkserver")
    families = [spec.partition(":")[0] for spec in FAMILIES.values()]
    checks = [
        "gdn_equiv.harness.properties",
        "gdn_equiv.harness.conformance",
        "gdn_equiv.harness.ground_truth",
        "gdn_equiv.harness.bad_input",
    ]
    ctx.set_forkserver_preload(["torch", *checks, "gdn_equiv.model.backends.torch_backend", *families])
    return ctx


def _settle(reply: Any, where: str) -> Any:
    """A worker's answer (``("ok", value, reports)`` or ``("raised", exc, traceback, reports)``) as if the call
    ran here: its comparisons' reports handed to this process' observers, its value returned or its exception
    raised with the worker's traceback noted (``where``: which process raised it)."""
    *result, reports = reply
    for observer in compare._OBSERVERS:  # the reports the worker's comparisons made, as if made here
        observer.extend(reports)
    if result[0] == "ok":
        return result[1]
    _, exc, text = result
    if hasattr(exc, "add_note"):
        exc.add_note(f"raised in {where}:\n{text}")
    raise exc


def _how(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


class WorkerPool:
    """One worker process at a time (examples run one after another), replaced when it dies.

    ``call(fn, *args, **kwargs)`` runs ``fn(*args, **kwargs)`` in the worker (``fn`` a module-level
    function, or the name of one of :mod:`gdn_equiv.harness.properties`) and returns its value or raises its
    exception; a death raises :class:`WorkerDied`, an example that takes longer than ``timeout``
    seconds :class:`WorkerTimedOut`. ``deaths`` counts both. ``setup``: ``module:function`` names each
    worker calls (no arguments) before its first example, for process state a run needs that a fresh
    process lacks (fla's kernels made ready for Triton's interpreter).
    """

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT, setup: tuple[str, ...] = ()) -> None:
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise InvalidArgument(f"the per-example timeout must be a finite number of seconds > 0, got {timeout!r}")
        self.timeout = float(timeout)
        self.setup = tuple(setup)
        self.deaths = 0
        self.started = 0
        self._process: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        import torch

        ctx = _context()
        parent, child = ctx.Pipe()
        env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
        process = ctx.Process(
            target=_serve,
            args=(child, env, torch.get_num_threads(), self.setup),
            daemon=True,
            name="gdn-equiv-worker",
        )
        process.start()
        child.close()
        self._process, self._conn = process, parent
        self.started += 1
        try:
            said = parent.recv() if parent.poll(START_TIMEOUT) else None
        except (EOFError, OSError):
            said = None
        if said != "ready":
            how = _how(self._discard(kill=True))
            detail = f":\n{said[1]}" if isinstance(said, tuple) else ""
            raise RuntimeError(f"a gdn-equiv worker process did not start ({how}){detail}")

    def _discard(self, *, kill: bool) -> int | None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is None:
            return None
        if kill and process.is_alive():
            process.kill()
        process.join(5)
        return process.exitcode

    def call(self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        where = _address(fn)
        if self._process is None or not self._process.is_alive():
            self._discard(kill=True)
            self._start()
        what = f"{where.partition(':')[2]} on {_describe(args)}"
        try:
            self._conn.send_bytes(dumps((where, args, kwargs)))
            if not self._conn.poll(self.timeout):
                self._discard(kill=True)
                self.deaths += 1
                raise WorkerTimedOut(f"the example ran past the {self.timeout:g} s time limit (worker killed): {what}")
            reply = self._conn.recv()
        except (EOFError, OSError):
            self.deaths += 1
            raise WorkerDied(f"the worker running the example {_how(self._discard(kill=True))}: {what}") from None
        return _settle(reply, "the worker process")

    def close(self) -> None:
        self._discard(kill=True)


#: the one call a sanitized process runs: ``python -c SANITIZED_MAIN REQUEST REPLY``
SANITIZED_MAIN = "import sys; from gdn_equiv.harness.isolation import run_one; run_one(sys.argv[1], sys.argv[2])"


def run_one(request: str, reply: str) -> None:
    """A sanitized process' body: the pickled request's call, its pickled reply written (as a worker sends it)."""
    env, threads, setup, call = pickle.loads(Path(request).read_bytes())
    os.environ.update(env)
    import torch

    torch.set_num_threads(threads)
    make_faithful()
    for step in setup:
        _resolve(step)()
    with observe() as reports:
        try:
            where, args, kwargs = loads(call)  # after the setup, as a worker's calls come after its setup
            answer: tuple[Any, ...] = ("ok", _resolve(where)(*args, **kwargs))
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()  # every kernel finished (and checked) before the process says it is done
        except Exception as exc:
            answer = ("raised", _portable(exc), traceback.format_exc())
    Path(reply).write_bytes(pickle.dumps((*answer, list(reports))))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


#: bytes of padding compute-sanitizer's memcheck puts after every CUDA allocation (``--padding``)
MEMCHECK_PADDING = 512


class SanitizedPool(WorkerPool):
    """Each call in a fresh process under ``compute-sanitizer --tool TOOL`` (``executable``: the
    sanitizer, found by :func:`sanitizer_executable` unless given). The sanitizer's error exit is a
    :class:`SanitizerReport` with its log; a death or a timeout is :class:`WorkerDied` /
    :class:`WorkerTimedOut` as in a plain worker (the process group killed)."""

    def __init__(
        self,
        tool: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        setup: tuple[str, ...] = (),
        executable: str | None = None,
    ) -> None:
        super().__init__(timeout=timeout, setup=setup)
        if tool not in SANITIZER_TOOLS:
            raise InvalidArgument(f"sanitizer tool must be one of {', '.join(SANITIZER_TOOLS)}, got {tool!r}")
        found = executable or sanitizer_executable()
        if found is None:
            raise InvalidArgument(sanitizer_missing(tool) or "compute-sanitizer not found")
        self.tool, self.executable = tool, found
        self.reports = 0

    def command(self, log: Path, request: Path, reply: Path) -> list[str]:
        # memcheck flags an address outside every allocation; tensors lie back to back (x of 2,560 bytes ends
        # where the next begins), so a read one element past x lands in a live allocation and passed clean on
        # the H200 (2026-12-07). Padding after every allocation puts such a read outside all of them.
        padding = ["--padding", str(MEMCHECK_PADDING)] if self.tool == "memcheck" else []
        return [
            self.executable,
            "--tool",
            self.tool,
            *padding,
            "--error-exitcode",
            str(SANITIZER_EXIT),
            "--log-file",
            str(log),
            sys.executable,
            "-c",
            SANITIZED_MAIN,
            str(request),
            str(reply),
        ]

    def call(self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        import torch

        where = _address(fn)
        what = f"{where.partition(':')[2]} on {_describe(args)}"
        env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
        with tempfile.TemporaryDirectory(prefix="gdn-equiv-sanitize-") as tmp:
            request, reply, log = Path(tmp, "request"), Path(tmp, "reply"), Path(tmp, "sanitizer.log")
            call = dumps((where, args, kwargs))
            request.write_bytes(pickle.dumps((env, torch.get_num_threads(), self.setup, call)))
            self.started += 1
            process = subprocess.Popen(
                self.command(log, request, reply),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                # every tensor its own allocation: an access past one is past what the sanitizer knows was allocated
                env={**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
                start_new_session=True,  # the sanitizer and the python under it, killed together
            )
            try:
                output, _ = process.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                self.deaths += 1
                raise WorkerTimedOut(
                    f"the example ran past the {self.timeout:g} s time limit under compute-sanitizer (killed): {what}"
                ) from None
            except BaseException:  # Ctrl-C, SIGTERM: the sanitizer and its python go with us
                _kill_group(process)
                raise
            text = output.decode(errors="replace")
            report = log.read_text(errors="replace") if log.exists() else ""
            if process.returncode == SANITIZER_EXIT:
                self.reports += 1
                raise SanitizerReport(
                    f"compute-sanitizer --tool {self.tool} reported errors while the example ran: {what}\n"
                    f"{(report or text).strip()}"
                )
            if not reply.exists():
                self.deaths += 1
                tail = "\n".join((report + text).strip().splitlines()[-40:])
                raise WorkerDied(
                    f"the process running the example under compute-sanitizer {_how(process.returncode)}: {what}\n"
                    f"{tail}"
                )
            answer = pickle.loads(reply.read_bytes())
        return _settle(answer, "the process under compute-sanitizer")

    def close(self) -> None:
        pass  # no process outlives its call


_POOL: WorkerPool | None = None


def configure(
    timeout: float | None, *, setup: tuple[str, ...] = (), sanitize: str | None = None, sanitizer: str | None = None
) -> WorkerPool | None:
    """Switch isolation on for :func:`call` with this per-example ``timeout`` (``None``: off) and each
    worker's ``setup`` (see :class:`WorkerPool`); with ``sanitize`` (a tool of :data:`SANITIZER_TOOLS`) each
    call runs under compute-sanitizer (``sanitizer``: its executable, default the one found here). The pytest
    plugin does this for ``--gdn-isolate`` / ``--gdn-sanitize``; ``check``/``fuzz`` too, for ``--isolate`` /
    ``--sanitize``."""
    global _POOL
    if _POOL is not None:
        _POOL.close()
    if timeout is None:
        _POOL = None
    elif sanitize is not None:
        _POOL = SanitizedPool(sanitize, timeout=timeout, setup=setup, executable=sanitizer)
    else:
        _POOL = WorkerPool(timeout=timeout, setup=setup)
    return _POOL


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``: in a worker when isolation is on (:func:`configure`), else here. ``fn``
    is a module-level function (a property, a conformance or ground-truth check) that calls the
    kernel under test, so a fresh process can find it."""
    if _POOL is None:
        return fn(*args, **kwargs)
    return _POOL.call(fn, *args, **kwargs)


def _describe(args: tuple[Any, ...]) -> str:
    """The example a call runs, in words: its ``short()`` where it has one (Example, BadCall), else its repr."""
    if not args:
        return "no arguments"
    first = args[0]
    text = first.short() if callable(getattr(first, "short", None)) else repr(first)
    return text if len(text) <= 2000 else text[:2000] + "..."


@atexit.register
def _shutdown() -> None:
    if _POOL is not None:
        _POOL.close()
