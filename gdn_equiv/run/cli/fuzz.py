"""``gdn-equiv fuzz``: the property records run with fresh randomness until a time budget is spent."""

from __future__ import annotations

from typing import Any

from gdn_equiv.run.cli.check import Plan, _run, _what, add_run_options, plan_run
from gdn_equiv.run.cli.common import subcommand


def cmd_fuzz(plan: Plan) -> int:
    assert plan.seconds is not None
    header = f"gdn-equiv fuzz: {_what(plan)} for {plan.seconds:g}s, shared over the rows"
    return _run(plan, header, deadline=plan.seconds)


def add_parser(sub: Any) -> None:
    """``fuzz``'s parser."""
    p = subcommand(sub, "fuzz", "run the properties with fresh randomness until the time budget is spent")
    add_run_options(p)
    p.add_argument("--seconds", type=float, default=60.0, help="time budget, checked before each example (> 0)")
    p.set_defaults(prepare=plan_run, run=cmd_fuzz)
