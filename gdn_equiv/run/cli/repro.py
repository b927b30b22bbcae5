"""``gdn-equiv repro FILE``: a failure of a report replayed."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdn_equiv.run import runner
from gdn_equiv.run.cli.check import target_problem
from gdn_equiv.run.cli.common import (
    EnvironmentProblem,
    UsageError,
    backends_option,
    device_option,
    one_line,
    subcommand,
)
from gdn_equiv.run.report import (
    InvalidFailureFile,
    read_failure,
)

REPRO_EXIT_STATUS = """\
exit status:
  0    the example no longer fails
  1    it still fails, or it can no longer be judged (the example no longer meets the
       property's premise)
  2    the file is missing, unreadable, of an unknown format version or does not validate
  3    the environment cannot run it (backend, device or target missing here)
  4    internal error of gdn-equiv itself; the traceback is saved in gdn-equiv-report/
  130  interrupted
"""


@dataclass
class ReproPlan:
    failure: Any  # gdn_equiv.run.report.Failure


def plan_repro(args: argparse.Namespace) -> ReproPlan:

    try:
        failure = read_failure(Path(args.file), functions=runner.replayable_functions())
    except InvalidFailureFile as exc:
        raise UsageError(one_line(str(exc))) from None
    where = f"{args.file}:"
    device_option(failure.device, f"{where} device")
    config = failure.example.config
    backends = {failure.backend, config.conv_backend}
    for slot in getattr(config, "SLOTS", ("q", "k", "v")):
        backends.add(str(getattr(getattr(config, f"{slot}_conv", None), "backend", None) or ""))
    for name in sorted(b for b in backends if b and b != "-"):
        backends_option(name, flag=f"{where} backend")
    if failure.target != "gdn_equiv":
        reason = target_problem(failure.target)
        if reason is not None:
            raise EnvironmentProblem(f"target {failure.target}: {one_line(reason)}")
    return ReproPlan(failure)


def cmd_repro(plan: ReproPlan) -> int:
    return runner.replay(plan.failure)


def add_parser(sub: Any) -> None:
    """``repro``'s parser."""
    p = subcommand(sub, "repro", "replay a failure JSON from a report", REPRO_EXIT_STATUS)
    p.add_argument("file")
    p.set_defaults(prepare=plan_repro, run=cmd_repro)
