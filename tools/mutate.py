"""A small, dependency-free mutation tester for gdn-equiv (issues #18, #21).

Each mutant changes one operator or constant of a target module (parsed with ``ast``, spliced into
the source text, so the rest of the file is byte-identical), is written into a private copy of the
repository (one copy per worker, under a temporary directory; the checkout itself is never
touched), and a pytest selection runs against it with ``-x``: a failing run kills the mutant, a
passing one lets it survive, a run past the timeout is a ``timeout``. Hypothesis runs derandomized
(``--hypothesis-seed``) with a fresh example database per mutant, so a result does not depend on
which mutants ran before it.

    python tools/mutate.py guard fused --against tree,suite --jobs 2 --json mutation.json
    python tools/mutate.py guard --against tree --only 3,17        # re-run two mutants
    python tools/mutate.py guard --list                            # show the mutants, run nothing

Targets are the presets below (a name or the module path); ``--tests`` replaces the "tree"
selection. ``--max-mutants N`` keeps N mutants spread evenly over the file (deterministic).
Mutants argued equivalent (no behaviour the selection can observe) are listed, with the argument, in
``docs/mutation-equivalent.json`` (``--equivalent``), matched by target, selection, kind, before/after
text, the text of their source line and the names of the functions around it (not by id: ids move
when the file changes). A listed mutant that survives counts as ``equivalent``, outside the score; one
that is killed is reported as a stale entry. The score is killed / (run - equivalent).

Exit status: 0 when every selection's score reaches ``--min-score`` (default 1: every mutant killed
or listed as equivalent), 1 otherwise, 2 on a usage error or when the unmutated code fails its own
tests (nothing to measure then).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# target -> the tests of the whole tree that exercise it ("tree"); "suite" is the installed gate
PRESETS: dict[str, tuple[str, list[str]]] = {
    "guard": (
        "gdn_equiv/model/guard.py",
        ["tests/test_guard.py", "tests/test_teeth.py", "gdn_equiv/suite/test_properties.py"],
    ),
    "fused": (
        "gdn_equiv/model/fused.py",
        ["gdn_equiv/suite/test_properties.py", "tests/test_teeth.py", "tests/test_families.py"],
    ),
    "compare": ("gdn_equiv/harness/compare.py", ["tests/test_compare.py"]),
    "cache": (
        "gdn_equiv/model/cache.py",
        [
            "tests/test_bad_input.py",
            "tests/test_families.py",
            "tests/test_reference.py",
            "gdn_equiv/suite/test_callers.py",
        ],
    ),
    "reference": (
        "gdn_equiv/model/reference.py",
        [
            "tests/test_reference.py",
            "tests/test_families.py",
            "tests/test_bad_input.py",
            "gdn_equiv/suite/test_callers.py",
        ],
    ),
    # the verdict: the property records every driver reads, and the ledger that turns rows into a status
    "registry": ("gdn_equiv/harness/registry.py", ["tests/test_verdict.py", "tests/test_registry.py"]),
    "ledger": ("gdn_equiv/run/report.py", ["tests/test_verdict.py", "tests/test_cli.py"]),
    # the ledger's row and its merge rule, and the JUnit writer (split out of report.py)
    "rows": ("gdn_equiv/run/rows.py", ["tests/test_verdict.py", "tests/test_cli.py"]),
    "junit": ("gdn_equiv/run/junit.py", ["tests/test_verdict.py", "tests/test_cli.py"]),
    "plugin": ("gdn_equiv/plugin/options.py", ["tests/test_plugin_promises.py"]),
    # the verdict engine every driver feeds (outcomes, premise, exit status), against the gate's own verdict tests
    "verdict": ("gdn_equiv/harness/ledger.py", ["tests/test_verdict.py"]),
    # the backend registry and dispatcher: argument checks, the launch counter P2 reads, output checks
    "dispatch": (
        "gdn_equiv/model/backends/__init__.py",
        [
            "tests/test_backends_torch.py",
            "gdn_equiv/suite/test_conformance.py",
            "tests/test_bad_input.py",
            "tests/test_teeth.py",
            "tests/test_dispatch.py",
        ],
    ),
    "torch_backend": (
        "gdn_equiv/model/backends/torch_backend.py",
        ["tests/test_backends_torch.py", "gdn_equiv/suite/test_conformance.py"],
    ),
}
SUITE = ["gdn_equiv/suite"]

# Presets that measure one part of a module: only mutants inside these top-level names (functions,
# classes, module constants) count; ids stay those of the whole file, so --list and --only agree.
SCOPES: dict[str, tuple[str, ...]] = {
    # the ledger's writer: rows asked, merged and written as the run goes (the outcomes' rules are harness/ledger.py's,
    # the "verdict" preset)
    "ledger": ("ReportWriter",),
    # a row's fields that decide its result and its merge, not how it prints (Check's texts are the tree's tests)
    "rows": ("UNREACHED", "Check.examples", "Check.not_applicable", "Check.budget_spent", "Check.key", "merge"),
    # the plugin's configure-time promises: names checked, unavailable backends/targets end the session
    "plugin": (
        "pytest_configure",
        "plan_of",
        "_isolate",
        "_page_ready",
        "_runnable_here",
        "_target_unavailable",
    ),
}


def tree_tests(name: str, rev: str) -> list[str]:
    """The preset's tests plus ``tests/test_mutants_<name>.py`` (the tests written for its
    survivors, docs/mutation.md) where ``rev`` has it."""
    extra = f"tests/test_mutants_{name}.py"
    if rev == "WORKTREE":
        exists = (ROOT / extra).exists()
    else:
        exists = (
            subprocess.run(["git", "cat-file", "-e", f"{rev}:{extra}"], cwd=ROOT, capture_output=True).returncode == 0
        )
    return PRESETS[name][1] + ([extra] if exists else [])


PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]


# ---- mutants -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mutant:
    id: int
    line: int
    kind: str
    before: str
    after: str
    start: tuple[int, int]  # (line, col) of the replaced source span, 1-based line
    end: tuple[int, int]

    def describe(self) -> str:
        return f"#{self.id} L{self.line} {self.kind}: {self.before} -> {self.after}"


_CMP_SWAP = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_BIN_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}


def _tweak(value: object) -> object | None:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return {0: 1, 1: 0}.get(value, value + 1)
    if isinstance(value, float):
        return value * 2 if 0 < abs(value) < 1 else value + 1
    return None  # strings (messages), None, bytes: not mutated


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """Docstrings, annotations and ``__all__``: text, not behaviour."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            mark(body[0])
        if isinstance(node, ast.AnnAssign | ast.arg):
            mark(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mark(node.returns)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            mark(node)
    return skip


def _candidates(source: str) -> list[tuple[ast.AST, str, str]]:
    """(node whose source span is replaced, kind, replacement text), in source order."""
    tree = ast.parse(source)
    skip = _skipped_nodes(tree)
    out: list[tuple[ast.AST, str, str]] = []

    def mutated(node: ast.AST, **changes: object) -> str:
        clone = ast.parse(ast.unparse(node), mode="eval").body if isinstance(node, ast.expr) else node
        for k, v in changes.items():
            setattr(clone, k, v)
        return ast.unparse(clone)

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _CMP_SWAP:
                    ops = list(node.ops)
                    ops[i] = _CMP_SWAP[type(op)]()
                    out.append((node, "comparison", mutated(node, ops=ops)))
        elif isinstance(node, ast.BoolOp):
            other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            out.append((node, "boolean", mutated(node, op=other)))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((node, "not removed", ast.unparse(node.operand)))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
            out.append((node, "arithmetic", mutated(node, op=_BIN_SWAP[type(node.op)]())))
        elif isinstance(node, ast.Constant):
            new = _tweak(node.value)
            if new is not None:
                out.append((node, "constant", repr(new)))
        elif isinstance(node, ast.If):
            for stmt in node.body + node.orelse:
                if not isinstance(stmt, ast.Pass) and not (
                    isinstance(stmt, ast.If) and stmt in node.orelse  # elif: its own statements are mutated
                ):
                    out.append((stmt, "statement removed", "pass"))
        elif isinstance(node, ast.Return) and not (
            node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None)
        ):
            out.append((node, "return None", "return None"))
    out.sort(key=lambda c: (c[0].lineno, c[0].col_offset, c[1], c[2]))
    return out


def mutants(source: str) -> list[Mutant]:
    result = []
    for i, (node, kind, after) in enumerate(_candidates(source)):
        before = ast.get_source_segment(source, node) or ast.unparse(node)
        if isinstance(node, ast.expr) and kind != "constant":
            after = f"({after})"
        start = (node.lineno, node.col_offset)
        end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
        result.append(Mutant(i, node.lineno, kind, " ".join(before.split()), after, start, end))
    return result


def apply(source: str, m: Mutant) -> str:
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    data = source.encode()
    a = offsets[m.start[0] - 1] + m.start[1]  # ast columns are utf-8 byte offsets
    b = offsets[m.end[0] - 1] + m.end[1]
    new = (data[:a] + m.after.encode() + data[b:]).decode()
    ast.parse(new)  # every mutant must at least compile
    return new


def sample(all_mutants: list[Mutant], limit: int | None) -> list[Mutant]:
    if limit is None or len(all_mutants) <= limit:
        return all_mutants
    n = len(all_mutants)
    return [all_mutants[(i * n) // limit] for i in range(limit)]


EQUIVALENT = ROOT / "docs" / "mutation-equivalent.json"


def line_text(source: str, m: Mutant) -> str:
    """The stripped text of the mutant's first source line: with kind, before/after and :func:`scope`,
    what names a mutant across file versions."""
    return source.splitlines()[m.line - 1].strip()


def scope(source: str, m: Mutant) -> str:
    """The dotted names of the classes and functions around the mutant (``""`` at module level): the same
    line can sit in two places (``return c`` in two lookups)."""
    names: list[str] = []

    def visit(node: ast.AST, path: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                end = child.end_lineno or child.lineno
                if child.lineno <= m.line <= end:
                    names[:] = [*path, child.name]
                    visit(child, [*path, child.name])
            else:
                visit(child, path)

    visit(ast.parse(source), [])
    return ".".join(names)


def _defined(node: ast.stmt) -> list[str]:
    """The names a statement defines: a def, a class, an assignment's plain targets."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def in_scope(source: str, m: Mutant, names: tuple[str, ...]) -> bool:
    """Whether the mutant sits inside one of ``names``: top-level defs, classes and assignments, or a
    class's member as ``Class.member`` (a method, a property, a dataclass field)."""
    for node in ast.parse(source).body:
        members = [(name, node) for name in _defined(node)]
        if isinstance(node, ast.ClassDef):
            members += [(f"{node.name}.{name}", child) for child in node.body for name in _defined(child)]
        for name, where in members:
            if name in names and where.lineno <= m.line <= (where.end_lineno or where.lineno):
                return True
    return False


def load_equivalent(path: Path | None) -> list[dict]:
    """The entries of the equivalence list (none without one); each must say why."""
    if path is None or not path.is_file():
        return []
    entries = json.loads(path.read_text())["equivalent"]
    for e in entries:
        missing = {"target", "against", "kind", "before", "after", "line", "scope", "why"} - e.keys()
        if missing:
            raise SystemExit(f"{path}: an entry lacks {sorted(missing)}: {e}")
    return entries


def equivalent_entry(entries: list[dict], target: str, against: str, source: str, m: Mutant) -> dict | None:
    """The entry that argues this mutant equivalent for this selection, if any."""
    key = (m.kind, m.before, m.after, line_text(source, m))
    here = None  # the scope, parsed only for an entry that matches the rest
    for e in entries:
        if e["target"] != target or against not in e["against"]:
            continue
        if (e["kind"], e["before"], e["after"], e["line"]) == key:
            here = scope(source, m) if here is None else here
            if e["scope"] == here:
                return e
    return None


# ---- running -------------------------------------------------------------------------------


def make_copy(rev: str, dest: Path) -> None:
    """The repository at ``rev`` (``WORKTREE``: the working tree's tracked and unignored files)."""
    dest.mkdir(parents=True)
    if rev == "WORKTREE":
        files = subprocess.run(
            ["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True
        ).stdout.split(b"\0")
        for f in filter(None, files):
            src = ROOT / f.decode()
            if src.is_file():
                (dest / f.decode()).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / f.decode())
    else:
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    # the editable install maps gdn_equiv.strategies to the checkout's strategies/: point it at the copy's
    (dest / "gdn_equiv" / "strategies").symlink_to(Path("..") / "strategies")


@dataclasses.dataclass
class Result:
    status: str  # killed | survived | timeout | error
    seconds: float
    rc: int | None
    tail: str


def run_pytest(copy: Path, tests: list[str], args: argparse.Namespace, timeout: float) -> Result:
    shutil.rmtree(copy / ".hypothesis", ignore_errors=True)  # no replay of another mutant's failure
    env = dict(os.environ, PYTHONPATH=str(copy), HYPOTHESIS_PROFILE=args.profile, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", *PYTEST_ARGS, f"--hypothesis-seed={args.seed}", *tests]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return Result("timeout", time.monotonic() - t0, None, out[-2000:])
    dt = time.monotonic() - t0
    status = {0: "survived", 1: "killed", 2: "killed", 3: "killed", 4: "killed"}.get(proc.returncode, "error")
    return Result(status, dt, proc.returncode, out[-2000:])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def score(
    target: str, against: str, tests: list[str], chosen: list[Mutant], copies: list[Path], args, equivalent: list[dict]
) -> dict:
    source = (copies[0] / target).read_text()
    baseline = run_pytest(copies[0], tests, args, timeout=args.baseline_timeout)
    print(
        f"[{target} vs {against}] baseline: {baseline.status} rc={baseline.rc} in {baseline.seconds:.1f}s", flush=True
    )
    if baseline.status != "survived":
        print(baseline.tail, file=sys.stderr)
        raise SystemExit(f"the unmutated {target} fails {' '.join(tests)}: nothing to measure")
    timeout = args.timeout or max(60.0, 3 * baseline.seconds + 30)
    free: queue.Queue[Path] = queue.Queue()
    for c in copies:
        free.put(c)

    def one(m: Mutant) -> dict:
        copy = free.get()
        path = copy / target
        try:
            path.write_text(apply(source, m))
            for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
                pyc.unlink()
            r = run_pytest(copy, tests, args, timeout)
        finally:
            path.write_text(source)
            assert digest(path) == hashlib.sha256(source.encode()).hexdigest(), f"{path} not restored"
            free.put(copy)
        print(f"  {r.status:8s} {r.seconds:5.1f}s {m.describe()}", flush=True)
        return {**dataclasses.asdict(m), "status": r.status, "seconds": round(r.seconds, 1), "rc": r.rc} | (
            {"tail": r.tail} if r.status in ("survived", "error") and args.verbose else {}
        )

    with concurrent.futures.ThreadPoolExecutor(len(copies)) as pool:
        results = list(pool.map(one, chosen))
    for m, r in zip(chosen, results, strict=True):
        entry = equivalent_entry(equivalent, target, against, source, m)
        if entry is None:
            continue
        if r["status"] in ("survived", "timeout"):
            r["status"], r["why"] = "equivalent", entry["why"]
        else:
            r["stale_entry"] = entry["why"]  # listed as equivalent, yet the selection kills it
    counts = {
        s: sum(r["status"] == s for r in results) for s in ("killed", "survived", "timeout", "error", "equivalent")
    }
    run = len(results)
    scored = run - counts["equivalent"]
    return {
        "target": target,
        "against": against,
        "tests": tests,
        "baseline_seconds": round(baseline.seconds, 1),
        "timeout": timeout,
        "mutants_total": len(mutants(source)),
        "mutants_run": run,
        **counts,
        "score": round(counts["killed"] / scored, 3) if scored else None,
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("targets", nargs="+", help=f"preset names ({', '.join(PRESETS)}) or module paths with --tests")
    p.add_argument("--against", default="tree,suite", help="tree, suite or both (comma-separated); default both")
    p.add_argument("--tests", nargs="+", help="the 'tree' pytest selection (default: the target's preset)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes, each with its own copy of the repo")
    p.add_argument("--timeout", type=float, help="seconds per mutant (default: 3x the baseline run + 30)")
    p.add_argument("--baseline-timeout", type=float, default=600)
    p.add_argument("--max-mutants", type=int, help="keep at most N mutants, spread evenly over the file")
    p.add_argument(
        "--scope", help="comma-separated top-level names whose mutants count (default: the preset's SCOPES entry)"
    )
    p.add_argument("--only", help="comma-separated mutant ids to run (ids from --list)")
    p.add_argument("--profile", default=os.environ.get("HYPOTHESIS_PROFILE", "ci"), help="Hypothesis profile")
    p.add_argument("--seed", type=int, default=0, help="--hypothesis-seed (derandomized runs)")
    p.add_argument("--rev", default="HEAD", help="git revision to copy, or WORKTREE for the working tree")
    p.add_argument("--json", type=Path, help="write every result here")
    p.add_argument("--list", action="store_true", help="list the (sampled) mutants and exit")
    p.add_argument("--verbose", action="store_true", help="keep pytest's output tail of survivors in the JSON")
    p.add_argument(
        "--equivalent",
        type=Path,
        default=EQUIVALENT,
        help="the list of mutants argued equivalent (default docs/mutation-equivalent.json; a missing file: none)",
    )
    p.add_argument(
        "--min-score", type=float, default=1.0, help="exit 0 when every selection's score reaches this (default 1)"
    )
    args = p.parse_args(argv)

    jobs = []
    for name in args.targets:
        if name in PRESETS:
            target, tree = PRESETS[name][0], tree_tests(name, args.rev)
        else:
            match = [k for k, (t, _) in PRESETS.items() if t == name]
            if not match and not args.tests:
                p.error(f"{name}: not a preset ({', '.join(PRESETS)}); give --tests for other modules")
            target, tree = name, (tree_tests(match[0], args.rev) if match else [])
        tree = args.tests or tree
        for against in args.against.split(","):
            if against not in ("tree", "suite"):
                p.error(f"--against takes tree and/or suite, got {against!r}")
            names = tuple(args.scope.split(",")) if args.scope else SCOPES.get(name, ())
            jobs.append((target, against, tree if against == "tree" else SUITE, names))
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    if not 0 <= args.min_score <= 1:
        p.error(f"--min-score must be within [0, 1], got {args.min_score}")
    equivalent = load_equivalent(args.equivalent)  # read once; a malformed list is refused before any run

    checkout_digests = {t: digest(ROOT / t) for t, _, _, _ in jobs}
    reports = []
    with tempfile.TemporaryDirectory(prefix="gdn-mutate-") as tmp:
        copies = [Path(tmp) / f"w{i}" for i in range(args.jobs)]
        if not args.list:
            for c in copies:
                make_copy(args.rev, c)
        listed: set[str] = set()
        for target, against, tests, names in jobs:
            if args.list and target in listed:
                continue
            listed.add(target)
            source = (ROOT / target).read_text() if args.list else (copies[0] / target).read_text()
            all_m = mutants(source)
            if names:
                all_m = [m for m in all_m if in_scope(source, m, names)]
            chosen = sample(all_m, args.max_mutants)
            if args.only:
                wanted = {int(x) for x in args.only.split(",")}
                chosen = [m for m in all_m if m.id in wanted]
            if args.list:
                print(f"{target}: {len(chosen)} of {len(all_m)} mutants")
                for m in chosen:
                    print("  " + m.describe())
                continue
            reports.append(score(target, against, tests, chosen, copies, args, equivalent))
    for t, d in checkout_digests.items():  # the checkout is never written; say so if it changed under us
        if digest(ROOT / t) != d:
            print(f"note: {t} changed in the checkout during the run (someone else's edit)", file=sys.stderr)
    if args.list:
        return 0
    print("\n| target | against | mutants (run/total) | killed | survived | timeout | error | equivalent | score |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in reports:
        shown = "-" if r["score"] is None else f"{r['score']:.0%}"
        print(
            f"| {r['target']} | {r['against']} | {r['mutants_run']}/{r['mutants_total']} | {r['killed']} | "
            f"{r['survived']} | {r['timeout']} | {r['error']} | {r['equivalent']} | {shown} |"
        )
    for r in reports:
        for m in r["results"]:
            said = f"{r['target']} ({r['against']}) #{m['id']} L{m['line']} {m['kind']}: {m['before']} -> {m['after']}"
            if m["status"] not in ("killed", "equivalent"):
                print(f"{m['status']}: {said}")
            if "stale_entry" in m:
                print(f"stale equivalence entry (killed): {said}")
    if args.json:
        args.json.write_text(json.dumps({"profile": args.profile, "seed": args.seed, "reports": reports}, indent=1))
    return 0 if all(passes(r, args.min_score) for r in reports) else 1


def passes(report: dict, min_score: float) -> bool:
    """A selection passes when its score reaches ``min_score`` and nothing errored (a selection whose
    every mutant is listed as equivalent has no score, and passes)."""
    return report["error"] == 0 and (report["score"] is None or report["score"] >= min_score)


if __name__ == "__main__":
    sys.exit(main())
