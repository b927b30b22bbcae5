"""``gdn-equiv coverage``: a pytest run's examples counted per input region (:mod:`gdn_equiv.harness.coverage`)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import coverage, ledger
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.run.cli.common import UsageError, make_dirs, one_line, output_file, subcommand

COVERAGE_EXIT_STATUS = """\
exit status:
  0    the report was printed (with --require-all: and every expected region and every
       promised combination of regions was reached)
  1    with --require-all: an expected region or a promised combination was NOT REACHED
       (the report lists them)
  2    --observed is missing, holds no *_testcases.jsonl file or no test case, or has a line
       that is not JSON; --run names no run of the observations; --json names a directory; one
       line on stderr names the path or the run
  4    internal error of gdn-equiv itself; the traceback is saved in gdn-equiv-report/
  130  interrupted
"""


@dataclass
class CoveragePlan:
    observations: list[tuple[Path, dict[str, Any]]]
    json: Path | None
    require_all: bool
    run: str | None = None


def plan_coverage(args: argparse.Namespace) -> CoveragePlan:
    """``coverage`` arguments: ``--observed`` (default: Hypothesis' own ``observed`` directory) read in
    full, so a missing directory, one without test cases or a line that is not JSON is refused before
    anything is printed."""

    observed = args.observed
    if observed is None:  # where Hypothesis writes: its storage directory, .hypothesis unless set
        observed = str(Path(os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or ".hypothesis") / "observed")
    json_path = output_file("--json", args.json)
    try:
        observations = coverage.read_observed(Path(observed))
    except InvalidArgument as exc:
        raise UsageError(f"--observed: {one_line(str(exc))}") from None
    known = coverage.runs(observations)
    if args.run_id is not None and args.run_id not in known:
        raise UsageError(f"--run {args.run_id!r} is not in {observed}: its runs are {', '.join(known) or 'none'}")
    make_dirs({"--json": json_path and json_path.parent})
    return CoveragePlan(observations=observations, json=json_path, require_all=args.require_all, run=args.run_id)


def cmd_coverage(plan: CoveragePlan) -> int:
    """Print the report (and write its JSON); with ``--require-all``, exit 1 when a region or a promised
    combination (:data:`gdn_equiv.harness.coverage.PROMISED`) was not reached. Without it the report only
    informs: a rare region (1,025+ channels is one conformance draw in 75 on a CPU) can miss one
    randomized ``ci`` run without anything being wrong."""
    import json

    tally = coverage.tally(plan.observations, plan.run)
    print(coverage.format_report(tally))
    if plan.json is not None:
        plan.json.write_text(json.dumps(coverage.report_json(tally), indent=2) + "\n")
        print(f"json: {plan.json}")
    missing = [*coverage.not_reached(tally), *coverage.unreached_promised(tally)]
    # each expected region or promised combination is an asked row under --require-all; one unreached fails
    return ledger.exit_status(Outcome.NOT_REACHED for _ in (missing if plan.require_all else ()))


def add_parser(sub: Any) -> None:
    """``coverage``'s parser."""
    p = subcommand(
        sub,
        "coverage",
        "count a pytest run's examples per input region (channel counts, T against W, states, dtypes) from "
        "Hypothesis' observability output: run the tests with HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1 first",
        COVERAGE_EXIT_STATUS,
    )
    p.add_argument(
        "--observed",
        default=None,
        metavar="DIR",
        help="the run's observations: a directory of *_testcases.jsonl files (default: .hypothesis/observed, "
        "or $HYPOTHESIS_STORAGE_DIRECTORY/observed); Hypothesis appends to one file a day, so empty it before "
        "the run to report that run alone",
    )
    p.add_argument(
        "--run",
        dest="run_id",
        default=None,
        metavar="ID",
        help="the run to judge (the gate labels each example with its run's id, GDN_EQUIV_RUN_ID); default: the "
        "newest run in --observed; other runs' observations, and observations without a run id (an unrelated "
        "test's, a run without the gate's plugin), are left out and counted",
    )
    p.add_argument("--json", default=None, metavar="FILE", help="also write the counts as JSON")
    p.add_argument(
        "--require-all",
        action="store_true",
        help="exit 1 when an expected region or a promised combination of regions was not reached (default: report)",
    )
    p.set_defaults(prepare=plan_coverage, run=cmd_coverage)
