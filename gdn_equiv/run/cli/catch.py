"""``gdn-equiv bench catch``: how often a planted defect is caught in N fresh runs, each a process of its own with
an empty Hypothesis example database (``HYPOTHESIS_STORAGE_DIRECTORY`` a new temporary folder, its working
directory too), so no run replays another's failure. Exit status 1 of a run is a catch, 0 a miss; any other (a
usage error, a crash, a timeout) is no verdict, and ends the count.

A run is either a command (``--command``: a gate run, a ``check``), or one of the planted defects the gate's
single properties must catch, run here as the gate runs them, its examples and budget the gate's under the
profile, without the shrink phase (whether a run catches is decided when its first failing example is drawn;
shrinking a 120-cell combination example on a shared CPU took a minute a run):

- a planted combination kernel (:data:`gdn_equiv.harness.planted.COMBINATION_BACKENDS`): its record's row
  (``P7-combinations``: the layer's conv call in every cell), with the gate test's share of the profile;
- a planted reference edit (:func:`gdn_equiv.harness.planted.reference_defects`): the faithfulness property, once
  with fla's convs from our per-conv facts and once with fla's defaults, as ``gdn_equiv.suite.test_faithful``.

A planted defect's run is :func:`catch_once` in a fresh interpreter (exit 1: caught).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gdn_equiv.harness.compare import Mismatch
from gdn_equiv.harness.faithful import check_faithful
from gdn_equiv.harness.ledger import Outcome
from gdn_equiv.harness.planted import COMBINATION_BACKENDS, defect_family, reference_defects
from gdn_equiv.harness.registry import examples_per_row, get_record
from gdn_equiv.harness.testing import register_profiles
from gdn_equiv.model.backends import Backend, registered
from gdn_equiv.run.cli.common import (
    EXIT_ENVIRONMENT,
    EXIT_OK,
    UsageError,
    at_least,
    gate_profile,
    output_file,
    positive_seconds,
)
from gdn_equiv.run.runner import run_property
from gdn_equiv.strategies.faithful import faithful_budget, faithful_examples

#: the record a planted combination kernel runs under (its teeth)
COMBINATIONS = "P7-combinations"


def planted_defects() -> dict[str, str]:
    """The planted defects a run can be of: name -> what it is."""
    return {
        **{name: "planted combination kernel" for name in COMBINATION_BACKENDS},
        **{name: "planted reference edit" for name in reference_defects()},
    }


def _first_failure(strategy: st.SearchStrategy[Any], check: Callable[[Any], object], examples: int) -> str | None:
    """``check`` on up to ``examples`` draws, shrink phase left out: the first mismatch's first line, or None."""

    @settings(
        deadline=None,
        max_examples=examples,
        phases=[p for p in Phase if p is not Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def gate(drawn: Any) -> None:
        check(drawn)

    try:
        gate()
    except Mismatch as exc:
        return str(exc).splitlines()[0]
    return None


def _combination(backend: Backend, profile: str) -> str | None:
    """P7-combinations' row on the planted kernel, with its gate test's examples (the profile's, divided by the
    record's cost): the first failure drawn, or None."""
    record = get_record(COMBINATIONS)
    examples = max(2, examples_per_row(profile) // record.gate_cost)
    with registered(backend):
        check = run_property(COMBINATIONS, backend.name, max_examples=examples, record=record, shrink=False)
    return check.failure.splitlines()[0] if check.result == Outcome.FAILED else None


def _faithful(layer_cls: type) -> str | None:
    """The faithfulness property on the planted reference layer, as the gate's two parametrizations run it (fla's
    convs from our per-conv facts, then fla's defaults), each with the profile's examples."""
    family = defect_family(layer_cls)
    for defaults in (False, True):

        def check(example: Any, defaults: bool = defaults) -> None:
            check_faithful(example, defaults=defaults, layer_cls=layer_cls)

        found = _first_failure(faithful_examples(family), check, faithful_budget())
        if found:
            return found
    return None


def catch_once(name: str) -> int:
    """One run of the planted defect ``name`` under ``$HYPOTHESIS_PROFILE`` (ci by default): 1 when caught."""
    register_profiles()
    profile = os.environ.get("HYPOTHESIS_PROFILE") or "ci"
    settings.load_profile(profile)  # the strategies' budgets read it
    warnings.simplefilter("ignore")
    if name in COMBINATION_BACKENDS:
        found = _combination(COMBINATION_BACKENDS[name], profile)
    else:
        found = _faithful(reference_defects()[name])
    if found:
        print(found)
    return 1 if found else 0


@dataclass(frozen=True)
class RunResult:
    status: int | None  # None: stopped at its timeout
    seconds: float
    tail: str = ""

    @property
    def verdict(self) -> str | None:
        """``caught``, ``missed``, or None (no verdict)."""
        return {1: "caught", 0: "missed"}.get(self.status) if self.status is not None else None


def one_run(argv: Sequence[str], *, profile: str, timeout: float, env: dict[str, str] | None = None) -> RunResult:
    """``argv`` once, in a fresh folder that is also its Hypothesis storage (an empty example database)."""
    with tempfile.TemporaryDirectory(prefix="gdn-equiv-catch-") as home:
        env = {**os.environ, **(env or {}), "HYPOTHESIS_STORAGE_DIRECTORY": home, "HYPOTHESIS_PROFILE": profile}
        env.pop("PYTEST_XDIST_WORKER", None)
        t0 = time.perf_counter()
        try:
            done = subprocess.run(list(argv), env=env, cwd=home, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            return RunResult(None, time.perf_counter() - t0, out[-2000:])
        return RunResult(done.returncode, time.perf_counter() - t0, (done.stdout + done.stderr)[-2000:])


@dataclass
class CatchPlan:
    """``bench catch``: what runs (planted defects by name, or one command), how often, how."""

    defects: list[str]
    command: list[str] | None
    runs: int
    profile: str
    timeout: float
    json: Path | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)


#: one run of a planted defect: :func:`catch_once` in a fresh interpreter
ONE_RUN = "import sys; from gdn_equiv.run.cli.catch import catch_once; sys.exit(catch_once(sys.argv[1]))"


def _argv(plan: CatchPlan, defect: str | None) -> tuple[list[str], dict[str, str]]:
    """A run's command and what its environment adds: a planted defect's runs as the gate runs on this machine
    (without a GPU, fla's convs and norms in Triton's interpreter, set before triton is imported)."""
    if defect is None:
        return list(plan.command or []), {}
    import torch

    interpret = {} if torch.cuda.is_available() else {"TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    return [sys.executable, "-c", ONE_RUN, defect], interpret


def count(plan: CatchPlan, say: Callable[[str], None] = print) -> int:
    """Every asked defect (or the command) ``plan.runs`` times: one row each, ``caught k of N``. Exit 0 when every
    run gave a verdict, 3 at the first that did not (its output's tail said)."""
    for defect in plan.defects or [None]:  # type: ignore[list-item]
        what = defect or " ".join(plan.command or [])
        caught, seconds = 0, []
        for i in range(plan.runs):
            argv, env = _argv(plan, defect)
            result = one_run(argv, profile=plan.profile, timeout=plan.timeout, env=env)
            seconds.append(result.seconds)
            if result.verdict is None:
                ended = "its timeout" if result.status is None else f"exit status {result.status}"
                say(f"{result.tail}\nrun {i + 1} of {what}: {ended} after {result.seconds:.1f} s, not a verdict")
                return EXIT_ENVIRONMENT
            caught += result.verdict == "caught"
            say(f"run {i + 1}: {result.verdict} in {result.seconds:.1f} s")
        row = {"what": what, "caught": caught, "runs": plan.runs, "seconds_per_run": sum(seconds) / len(seconds)}
        plan.rows.append(row)
        say(f"caught {caught} of {plan.runs} ({row['seconds_per_run']:.1f} s per run, profile {plan.profile}): {what}")
    return 0


#: what ``bench catch`` reads; another ``bench`` option given with it is refused, never ignored
OPTIONS = ("defect", "runs", "profile", "timeout", "catch_command", "json")
#: what every ``bench`` namespace holds that is not an option (``device``: filled in from the machine before the
#: plan; a planted defect's run is the gate's on a CPU, a command's its own)
_NOT_OPTIONS = ("command", "what", "reports", "prepare", "run", "device")


def add_options(p: argparse.ArgumentParser) -> None:
    """``bench catch``'s own option (the others it shares with ``bench verdict``)."""
    g = p.add_argument_group("bench catch")
    g.add_argument(
        "--command",
        dest="catch_command",
        default=None,
        metavar="'CMD ARGS'",
        help="catch: the command each run runs instead of a planted defect (exit 1 is a catch), e.g. 'pytest -q "
        "-p no:cacheprovider --pyargs gdn_equiv.suite --gdn-backend example-wide-rounding -k fused_forward'",
    )


def plan_catch(args: argparse.Namespace) -> CatchPlan:
    given = [
        f"--{n.replace('_', '-')}"
        for n, v in vars(args).items()
        if n not in (*OPTIONS, *_NOT_OPTIONS) and v not in (None, False, [])
    ]
    if given or args.reports:
        raise UsageError(f"{', '.join([*given, *map(repr, args.reports)])}: not options of bench catch")
    known = planted_defects()
    if (args.defect is None) == (args.catch_command is None):
        raise UsageError(f"bench catch: give --defect NAME[,NAME]|all (one of: {', '.join(known)}) or --command")
    asked: list[str] = []
    if args.defect is not None:
        names = [n.strip() for n in args.defect.split(",")]
        asked = list(known) if names == ["all"] else list(dict.fromkeys(names))
        if not asked or any(n not in known for n in asked):
            raise UsageError(f"--defect {args.defect!r}: not a planted defect; known: {', '.join(known)}, all")
    command = None
    if args.catch_command is not None:
        command = shlex.split(args.catch_command)
        if not command:
            raise UsageError("--command '': give the command each run runs")
    runs = 20 if args.runs is None else args.runs
    at_least("--runs", runs, 1)
    profile = gate_profile(args.profile or None)
    timeout = positive_seconds("--timeout", args.timeout, 600.0)
    return CatchPlan(asked, command, runs, profile, timeout, json=output_file("--json", args.json))


def cmd_catch(plan: CatchPlan) -> int:
    what = ",".join(plan.defects) or shlex.join(plan.command or [])
    print(f"gdn-equiv bench catch: {what}, {plan.runs} fresh run(s) each, profile {plan.profile}", flush=True)
    status = count(plan, say=lambda line: print(line, flush=True))
    if plan.json is not None:
        plan.json.parent.mkdir(parents=True, exist_ok=True)
        plan.json.write_text(json.dumps({"profile": plan.profile, "runs": plan.runs, "rows": plan.rows}, indent=1))
        print(f"report: {plan.json}", file=sys.stderr)
    return status if status else EXIT_OK


def is_plan(plan: Any) -> bool:
    return isinstance(plan, CatchPlan)
