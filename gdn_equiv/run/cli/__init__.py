"""``gdn-equiv``: check, fuzz, repro, bench, families, coverage, faithful, engines.

``check`` runs the properties (P2-P7, and the P6 necessity searches) against a backend with a
Hypothesis profile and prints a summary table, one row per property x family x backend x dtype
(examples run, result, the worst difference seen against its tolerance); ``fuzz`` repeats them with
fresh randomness until a time budget is spent; both keep Hypothesis' example database (one key per
row: saved failures replay first) and write a report directory as they go (``rows.jsonl``,
``summary.json``, each failure's shrunk example and a standalone reproducer), and on request
``--junit-xml`` and ``--json`` files for CI systems. ``repro FILE`` replays a failure.
``bench layer`` / ``bench prologue`` time the fused prologue against the separate one (whole layer,
or the convs alone). ``families`` lists the layer families. ``coverage`` counts a pytest run's examples
per input region (channel counts, T against W, states, dtypes, ...) from Hypothesis' observability
output (:mod:`gdn_equiv.harness.coverage`). ``faithful`` prints the faithfulness table: our reference layers
against the installed fla's, per family (:mod:`gdn_equiv.harness.faithful`). ``engines fetch`` puts serving engine
releases side by side for ``check --serving-engine``.

Every argument is checked before the first example runs (SPEC §10); the exit status says how the run
ended (:data:`EXIT_STATUS`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from gdn_equiv.harness import interpreter
from gdn_equiv.run import plan as run_plan
from gdn_equiv.run.cli import bench, check, coverage, engines, faithful, families, fuzz, repro
from gdn_equiv.run.cli.common import (
    DEFAULT_REPORT,
    EXIT_ENVIRONMENT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_STATUS,
    EXIT_USAGE,
    EnvironmentProblem,
    UsageError,
    one_line,
)
from gdn_equiv.run.report import (
    INTERNAL_ERROR_FILE,
    caused_by_interrupt,
    clear_interrupts,
    note_interrupt,
    stdout_closed,
)
from gdn_equiv.run.runner import default_device


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gdn-equiv",
        description=__doc__.split("\n")[0],
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for subcommand in (check, fuzz, repro, bench, families, coverage, faithful, engines):
        subcommand.add_parser(sub)
    return parser


def _prepare_process(args: argparse.Namespace) -> None:
    if hasattr(args, "device") and args.device is None:
        args.device = default_device()
    if getattr(args, "device", "cpu") == "cpu":
        import torch

        # without a GPU our triton kernels run in the interpreter (set before triton is imported, and
        # before a backend is asked whether it can run), which also gives the G5 necessity search its
        # second backend
        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
        torch.set_num_threads(1)  # examples are tiny; threads cost more than they give
    interpreter.make_faithful()  # before any kernel runs (SPEC §10)


@contextmanager
def _signals_as_interrupt() -> Iterator[None]:
    """Ctrl-C and SIGTERM (a CI job cancelled, a pod stopped) end the run, the report closed: each
    raises ``KeyboardInterrupt`` and is remembered, so the runners stop before their next example even
    if that exception was swallowed on its way up (seen once under load: a fuzz run went on for 30 s
    after its SIGINT)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        note_interrupt(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    clear_interrupts()
    # a SIGINT its parent ignores (a background job of a non-interactive shell) stays ignored
    signals = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN]
    try:
        previous = {s: signal.signal(s, interrupt) for s in signals}
    except ValueError:  # not the main thread: the caller owns the signals
        yield
        return
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _save_traceback(report: Path) -> Path | None:
    try:
        report.mkdir(parents=True, exist_ok=True)
        path = report / INTERNAL_ERROR_FILE
        path.write_text(traceback.format_exc())
        return path
    except OSError:
        return None


def _quiet_stdout(stream: Any = None) -> None:
    """Standard output (or ``stream``) pointed at /dev/null, so that the interpreter's last flush at
    exit does not raise on the closed pipe again ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (stream or sys.stdout).fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def _report_so_far(command: str, report: Path) -> str:
    """``"; report so far: PATH"`` for a check or fuzz run cut short that has written its summary."""
    summary = report / "summary.json"
    return f"; report so far: {summary}" if command in ("check", "fuzz") and summary.exists() else ""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # a malformed option exits with argparse's own status 2
    prog = f"gdn-equiv {args.command}"
    report = Path(getattr(args, "report", DEFAULT_REPORT))
    try:
        with _signals_as_interrupt():
            try:
                _prepare_process(args)
                plan = args.prepare(args)
            except UsageError as exc:
                print(f"{prog}: error: {exc}", file=sys.stderr)
                return EXIT_USAGE
            except EnvironmentProblem as exc:
                print(f"{prog}: cannot run here: {exc}", file=sys.stderr)
                return EXIT_ENVIRONMENT
            with run_plan.profile_loaded(getattr(plan, "profile", None)):
                try:
                    return int(args.run(plan))
                except Exception as exc:
                    if caused_by_interrupt(exc):
                        raise KeyboardInterrupt from exc
                    raise
    except KeyboardInterrupt:
        print(f"{prog}: interrupted{_report_so_far(args.command, report)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if stdout_closed(exc):  # the reader of our output went away (... | head): stopped from outside
            _quiet_stdout()
            # with 2>&1 the same reader held stderr: saying so must not turn 130 into Python's own 1
            with contextlib.suppress(OSError):
                print(
                    f"{prog}: stopped: its standard output was closed{_report_so_far(args.command, report)}",
                    file=sys.stderr,
                    flush=True,
                )
            _quiet_stdout(sys.stderr)
            return EXIT_INTERRUPTED
        saved = _save_traceback(report)
        where = f"; traceback saved to {saved}" if saved else ""
        print(f"{prog}: internal error: {type(exc).__name__}: {one_line(str(exc))}{where}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
