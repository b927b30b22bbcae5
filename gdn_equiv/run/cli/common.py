"""What every subcommand shares: exit statuses, the usage and environment errors, argument checks."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path
from typing import Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import registry
from gdn_equiv.harness.ledger import EXIT_FAILED as EXIT_FAILED  # the ledger's, for the subcommands
from gdn_equiv.harness.ledger import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from gdn_equiv.harness.ledger import EXIT_OK as EXIT_OK
from gdn_equiv.harness.testing import PROFILES
from gdn_equiv.model.backends import known_backends
from gdn_equiv.model.families import parse_families
from gdn_equiv.run import plan as run_plan
from gdn_equiv.run import report

# 0, 1 and 130 are the ledger's (gdn_equiv.harness.ledger.exit_status computes them from the rows)
EXIT_USAGE = 2


EXIT_ENVIRONMENT = 3


EXIT_INTERNAL = report.EXIT_INTERNAL  # the report's, which names it on the page


EXIT_STATUS = """\
exit status:
  0    everything asked for ran, and nothing failed
  1    a property failed (a finding; the report has its shrunk example), or an asked row
       was not checked: not exercised (none of its examples was applicable) or not
       reached (the budget ended first); the ledger in the report lists every row
  2    usage error: an argument, option, profile name (also HYPOTHESIS_PROFILE) or input
       file refused before any example ran; one line on stderr names the value and the rule
  3    the environment cannot run what was asked: an extra that is not installed (fla,
       causal-conv1d, triton), an absent device, a backend that cannot run here, an upstream
       version the adapter does not know
  4    internal error of gdn-equiv itself; the traceback is saved in the report directory
       (internal-error.txt)
  130  interrupted (Ctrl-C or SIGTERM, or its standard output closed: ... | head); the
       report is complete up to the last finished check
"""


# one summary row per dtype the examples are drawn in (conv weights may still carry another, G9)
DTYPES = registry.DTYPES


DEFAULT_REPORT = "gdn-equiv-report"


NECESSITY = registry.NECESSITY


class UsageError(Exception):
    """An argument refused before any example runs (exit status 2)."""


class EnvironmentProblem(Exception):
    """What was asked cannot run on this machine (exit status 3)."""


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def at_least(flag: str, value: int | None, low: int) -> None:
    if value is not None and value < low:
        raise UsageError(f"{flag} must be >= {low}, got {value}")


def gate_profile(given: str | None, *, hint: str = "") -> str:
    """A gate run's profile (``--profile``, default ``ci``): a registered one other than ``fuzz`` (``hint``: what to
    say after the known ones)."""
    profile = "ci" if given is None else given
    if profile not in PROFILES or profile == "fuzz":
        known = ", ".join(p for p in PROFILES if p != "fuzz")
        raise UsageError(f"--profile {profile!r} is not a gate profile; known: {known}{hint}")
    return profile


def positive_seconds(flag: str, value: float | None, default: float) -> float:
    """``value`` (``default`` when not given), refused unless > 0."""
    seconds = default if value is None else value
    if not seconds > 0:
        raise UsageError(f"{flag} {seconds!r} must be > 0 seconds")
    return seconds


def explicit_options(args: argparse.Namespace, *names: str) -> list[str]:
    """The options among ``names`` that were given (their defaults are ``None`` / ``False``)."""
    return [f"--{n.replace('_', '-')}" for n in names if getattr(args, n, None) not in (None, False)]


def profile_option(args: argparse.Namespace, default: str) -> str:
    """``--profile``, else ``HYPOTHESIS_PROFILE``, else ``default`` (:func:`gdn_equiv.run.plan.profile`, the
    gate's choice too)."""
    try:
        return run_plan.profile(args.profile, default)
    except InvalidArgument as exc:
        raise UsageError(str(exc)) from None


def device_option(name: str, flag: str = "--device") -> str:
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise UsageError(f"{flag} {name!r} is not a device; use cpu or cuda[:N]") from None
    if device.type == "cpu":
        return name
    if device.type != "cuda":
        raise UsageError(f"{flag} {name!r}: gdn-equiv runs on cpu or cuda[:N]")
    if not torch.cuda.is_available():
        raise EnvironmentProblem(f"{flag} {name!r}: no CUDA device here (torch {torch.__version__})")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise EnvironmentProblem(f"{flag} {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return name


def backends_option(option: str, *, flag: str = "--backend", baselines: tuple[str, ...] = ()) -> list[str]:
    """Each comma-separated name (or ``module:attr`` spec) loaded and asked whether it can run here,
    so that a typo costs a second, not a run of failing rows."""
    names = [n.strip() for n in option.split(",")]
    if not option.strip() or not all(names):
        raise UsageError(
            f"{flag} {option!r}: needs backend names or module:attr specs separated by commas; "
            f"known backends: {', '.join([*known_backends(), *baselines])}"
        )
    for name in dict.fromkeys(names):
        if name in baselines:
            continue
        try:
            (backend,) = run_plan.backends([name])
        except Exception as exc:  # unknown name, or a plug-in whose import or protocol check failed
            raise UsageError(f"{flag} {name!r}: {one_line(str(exc)) or type(exc).__name__}") from None
        for reason in run_plan.backends_unavailable([backend]).values():
            raise EnvironmentProblem(f"{flag} {name!r} cannot run here: {one_line(reason)}")
    return list(dict.fromkeys(names))


def families_option(option: str, *, fla_only: bool = False) -> list[str]:
    """``--family``: in-house families; with ``fla_only`` (``--target fla``) the fla-only ones too."""

    try:
        return parse_families(option, fla_only=fla_only)
    except InvalidArgument as exc:
        raise UsageError(f"--family {option!r}: {one_line(str(exc))}") from None


def not_a_directory(flag: str, value: str) -> Path:
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {value!r} is a file; it must be a directory")
    return path


def output_file(flag: str, value: str | None) -> Path | None:
    """A file the run writes at its end: not a directory (its directory is made by :func:`make_dirs`)."""
    if not value:
        return None
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {value!r} is a directory; it must be a file")
    not_a_directory(flag, str(path.parent))
    return path


def make_dirs(outputs: dict[str, Path | None]) -> None:
    """Create the directories the run will write into, once every other argument was accepted: a path
    it cannot write is refused before the first example, not found at the end with findings unsaved
    (``os.access`` cannot tell: root passes it for ``/proc``). A refusal leaves nothing behind."""
    made: list[Path] = []
    for flag, path in outputs.items():
        if path is None:
            continue
        new = [p for p in (path, *path.parents) if not p.exists()]
        try:
            path.mkdir(parents=True, exist_ok=True)
            made.extend(new)
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as exc:
            for p in sorted(made, key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    p.rmdir()
            raise UsageError(f"{flag} {str(path)!r}: cannot write there: {exc.strerror or exc}") from None


def subcommand(sub: Any, name: str, help: str, epilog: str = EXIT_STATUS) -> argparse.ArgumentParser:
    """A subcommand's parser, its help repeated as its description, with the exit statuses below."""
    return sub.add_parser(
        name, help=help, description=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
