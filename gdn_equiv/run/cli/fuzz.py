"""``gdn-equiv fuzz``: the property records run with fresh randomness until a time budget is spent."""

from __future__ import annotations

from typing import Any

from gdn_equiv.run import fuzz_engines
from gdn_equiv.run.cli.check import (
    Plan,
    add_run_options,
    describe_plan,
    ledger_rows,
    plan_run,
    plan_writer,
    print_findings,
    run_plan,
)
from gdn_equiv.run.cli.common import subcommand


def cmd_fuzz(plan: Plan) -> int:
    assert plan.seconds is not None
    if plan.engine == "hypofuzz":
        return fuzz_engines.run_hypofuzz(
            plan,
            rows=ledger_rows(plan),
            header=f"{describe_plan(plan)} for {plan.seconds:g}s",
            writer=plan_writer(plan),
            findings=print_findings,
            workers=plan.workers,
            dashboard_port=plan.dashboard_port,
        )
    header = f"gdn-equiv fuzz (engine: ours): {describe_plan(plan)} for {plan.seconds:g}s, shared over the rows"
    return run_plan(plan, header, deadline=plan.seconds)


def add_parser(sub: Any) -> None:
    """``fuzz``'s parser."""
    p = subcommand(sub, "fuzz", "run the properties with fresh randomness until the time budget is spent")
    add_run_options(p)
    p.add_argument("--seconds", type=float, default=60.0, help="time budget, checked before each example (> 0)")
    p.add_argument(
        "--engine",
        choices=("ours", "hypofuzz"),
        default=None,
        help="ours (default): this loop, the budget shared over the rows; hypofuzz: the gate's property tests "
        "under HypoFuzz (pip install gdn-equiv[hypofuzz], AGPL-3.0), coverage-guided, same ledger and report",
    )
    p.add_argument("--workers", type=int, default=None, help="--engine hypofuzz: worker processes (default 1)")
    p.add_argument(
        "--dashboard-port", type=int, default=None, help="--engine hypofuzz: serve HypoFuzz's dashboard on this port"
    )
    p.set_defaults(prepare=plan_run, run=cmd_fuzz)
