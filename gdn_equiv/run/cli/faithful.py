"""``gdn-equiv faithful``: the faithfulness table for the installed fla (:mod:`gdn_equiv.harness.faithful`).

Per family and variant (fla's convs built from our per-conv facts, or fla's own conv defaults), forward
(the output) and backward (dx, every parameter gradient): the largest distance of fla's layer from our fp64
truth against the bar. Every drawn example (gradients on) is judged, none shrunk: the table wants the spread,
the gate (``gdn_equiv.suite.test_faithful``) the first failure. A failing example is printed and its cell
reads FAIL with the failing tensor's distance and bar (the worst failing one); a passing cell the worst ratio
of distance to bar. A cell no example reached is FAIL too: an empty cell is never a pass.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import warnings
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.faithful import FAITHFUL_FAMILIES, check_faithful, unfaithful_reason
from gdn_equiv.model.fla_versions import fla_version
from gdn_equiv.run.cli.common import EXIT_FAILED, EXIT_OK, EnvironmentProblem, UsageError, subcommand
from gdn_equiv.strategies.faithful import faithful_examples

#: "greatest |fla - fp64| = 27.2 at ...; allowed ... = 0.000184; 16 / 16 elements past it"
_FAILED = re.compile(r"greatest \|fla - fp64\| = ([0-9.e+-]+).*= ([0-9.e+-]+); \d+ / \d+ elements past it")
VARIANTS = {"our-conv-facts": False, "fla-defaults": True}
#: a cell: (family, variant, direction)
Cell = tuple[str, str, str]


@dataclass
class FaithfulPlan:
    families: list[str]
    variants: list[str]
    examples: int
    device: str


@dataclass
class Table:
    """The worst (distance, bar) per cell, passing and failing apart, and the examples each family x
    variant ran."""

    worst: dict[Cell, tuple[float, float]] = dataclasses.field(default_factory=dict)
    failed: dict[Cell, tuple[float, float]] = dataclasses.field(default_factory=dict)
    ran: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)


def _keep(table: dict[Cell, tuple[float, float]], key: Cell, err: float, bound: float) -> None:
    if key not in table or err / max(bound, 1e-300) > table[key][0] / max(table[key][1], 1e-300):
        table[key] = (err, bound)


def measure(
    family: str, variant: str, examples: int, table: Table, *, device: str = "cpu", layer_cls: type | None = None
) -> None:
    """``examples`` drawn examples of ``family`` (gradients on) judged against fla's layer, into ``table``
    (``layer_cls``: our reference layer, default the family's; a test passes a planted one)."""
    defaults = VARIANTS[variant]
    table.ran.setdefault((family, variant), 0)

    @settings(
        deadline=None,
        max_examples=examples,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(example=faithful_examples(family).map(lambda e: dataclasses.replace(e, grad=True)))
    def run(example: Any) -> None:
        table.ran[family, variant] += 1
        try:
            differences = check_faithful(example, defaults=defaults, layer_cls=layer_cls, device=device)
        except Mismatch as exc:
            name, _, rest = str(exc).partition(":")
            found = _FAILED.search(rest)
            direction = "forward" if name == "output" else "backward"
            err, bound = (float(found[1]), float(found[2])) if found else (float("nan"), float("nan"))
            _keep(table.failed, (family, variant, direction), err, bound)
            print(f"FAIL {family} {variant} {direction}: {str(exc).splitlines()[0]}; {example.short()}", flush=True)
            if direction == "forward":
                return
            # the output was judged before the gradients: its distance, from the example without them
            differences = check_faithful(
                dataclasses.replace(example, grad=False), defaults=defaults, layer_cls=layer_cls, device=device
            )
        for d in differences:
            direction = "forward" if d.name == "output" else "backward"
            _keep(table.worst, (family, variant, direction), d.fla_error, d.bound)

    run()


def rows(table: Table) -> tuple[list[str], bool]:
    """The table's markdown rows, and whether any cell failed (a failing example, or no example at all)."""
    out, failed = [], bool(table.failed)
    for family, variant in sorted(table.ran):
        if table.ran[family, variant] == 0:
            out.append(f"| {family} | {variant} | - | FAIL (not reached: no example ran) | - | - |")
            failed = True
    for key in sorted({*table.worst, *table.failed}):
        err, bound = table.failed.get(key) or table.worst[key]
        out.append(f"| {' | '.join(key)} | {'FAIL' if key in table.failed else 'pass'} | {err:.2e} | {bound:.2e} |")
    return out, failed


def plan_faithful(args: argparse.Namespace) -> FaithfulPlan:
    """Every argument checked before an example runs: ``--examples`` >= 1, families with a naive-core
    adapter (exit 2 otherwise); fla installed and runnable here (exit 3 otherwise)."""
    if args.examples < 1:
        raise UsageError(f"--examples {args.examples}: must be at least 1")
    families = list(FAITHFUL_FAMILIES) if args.family == "all" else [f for f in args.family.split(",") if f]
    unknown = [f for f in families if f not in FAITHFUL_FAMILIES]
    if unknown or not families:
        raise UsageError(
            f"--family {args.family!r}: {', '.join(unknown) or 'no family'} has no naive-core adapter "
            f"(adapted: {', '.join(FAITHFUL_FAMILIES)}, or all)"
        )
    reasons = {unfaithful_reason(f) for f in families} - {None}
    if reasons:
        raise EnvironmentProblem("; ".join(sorted(str(r) for r in reasons)))
    variants = list(VARIANTS) if args.variant == "both" else [args.variant]
    return FaithfulPlan(families=families, variants=variants, examples=args.examples, device=args.device)


def cmd_faithful(plan: FaithfulPlan) -> int:
    warnings.simplefilter("ignore")
    table = Table()
    for family in plan.families:
        for variant in plan.variants:
            measure(family, variant, plan.examples, table, device=plan.device)
    lines, failed = rows(table)
    print(f"fla {fla_version()}: | family | variant | direction | result | max |fla - fp64| | bar at that tensor |")
    print("\n".join(lines))
    return EXIT_FAILED if failed else EXIT_OK


def add_parser(sub: Any) -> None:
    """``faithful``'s parser."""
    p = subcommand(
        sub,
        "faithful",
        "the faithfulness table: our reference layers against the installed fla's, per family and variant, "
        "forward and backward distance from the fp64 truth against the bar",
    )
    p.add_argument("--examples", type=int, default=4, help="drawn examples per family x variant, >= 1 (default 4)")
    p.add_argument(
        "--family",
        default="all",
        metavar="NAME[,NAME]|all",
        help=f"families with a naive-core adapter (default all: {', '.join(FAITHFUL_FAMILIES)})",
    )
    p.add_argument(
        "--variant",
        choices=[*VARIANTS, "both"],
        default="both",
        help="fla's convs built from our per-conv facts, fla's own conv defaults, or both (default both)",
    )
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda when present)")
    p.set_defaults(prepare=plan_faithful, run=cmd_faithful)
