"""Replay fla's conv fixes against the suite (issue #20): red just before each fix, green just after?

For every row of :data:`FIXES` (an fla PR that fixed wrong results in its short-conv kernels, with the
commit just before the fix and the fix itself) this builds fla at both commits as pure-Python wheels
with ``../shared/tools/build-fla-wheels.sh`` into a directory *outside* the repository, installs each
build into its own site directory (``pip install --no-deps --target``), runs the backend properties
(``pytest --pyargs gdn_equiv.suite --gdn-backend fla-triton -k conformance``) against that build's conv
under a time budget, and prints the replay table as markdown.

    python tools/replay_upstream.py --mirror /work/.mirror/fla-org+flash-linear-attention/repo
    python tools/replay_upstream.py --mirror DIR --only 1141,1139 --budget 600 --json replay.json
    python tools/replay_upstream.py --list                 # the rows, nothing built or run

Each run starts from an empty Hypothesis database in its own working directory and a fixed
``--hypothesis-seed``, so "seconds to first failure" is the suite unaided (no replayed example) and
repeatable. The "before" run stops at the first failing property (``-x``); its time is measured from
the start of pytest to the moment ``--gdn-failure-log`` receives that failure's report (found and
shrunk). On the fixed build, the "before" run's shrunk example is replayed exactly first (its
``@reproduce_failure`` blob, set on the collected test by a plugin: no test file is edited; a pass
shows as Hypothesis' ``DidNotReproduce``), then every property of the selection runs unaided.

Trees whose ``fla/__init__.py`` says < 0.6.0 import only with ``triton<3.9``: they run under
``--python-old`` (a virtual environment with triton<3.9, torch and gdn-equiv installed); others under
``--python-new`` (default: this interpreter). Rows fla's CPU interpreter cannot reach carry the reason
in ``not_here`` and are listed, not run. Exit status: 0 when every run row is red before and green
after, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT.parent / "shared" / "tools" / "build-fla-wheels.sh"
DEFAULT_MIRROR = Path("/work/.mirror/fla-org+flash-linear-attention/repo")
DEFAULT_OUT = Path("/tmp/fla-builds")


@dataclasses.dataclass(frozen=True)
class Fix:
    pr: int
    fixed: str  # what was wrong, one line
    before: str  # the fix's parent commit
    after: str  # the fix commit (squash-merged)
    not_here: str | None = None  # why this machine cannot replay it (None: it runs)


# fla's conv fixes for wrong results since the v0.5.2 tag (9c8e42e7, 2026-07-28), oldest first; the
# history and why each row is here: docs/upstream-replay.md
FIXES: list[Fix] = [
    Fix(
        1082,
        "int32 overflow in pointer arithmetic of the conv kernels (fwd, bwd, final states) past 2**31 elements",
        "40334f1cb2e3c893fa542dd5ff19a00f7767ed58",
        "31d15f7554bd5df05d3da6f75e09146279d2b1a8",
        "needs tensors of more than 2**31 elements (8 GiB in fp32); the interpreter's examples are tiny",
    ),
    Fix(
        1097,
        "decode-path kernels (update, final states, dh0) launched a (D-blocks, N) grid: N > 65535 is an invalid launch",
        "b9afc14acc1545ba4149f16895e945962ddaf9a9",
        "a4a2624b0f4c1ab9593060acec4d7fd0dcebca32",
        "needs more than 65,535 sequences in one call, and a GPU: the CPU interpreter has no grid limit",
    ),
    Fix(
        1141,
        "final-state gradient routed to the wrong tokens (dx) and dropped from dh0 for sequences shorter than W - 1",
        "4bd2a5cf99c453b7975618efbaebcb2a8a1c6d37",
        "a252c17d770df9f0d3e8d34bd6728150d49322e1",
    ),
    Fix(
        1139,
        "dh0 read a strided dy (and the recomputed y under silu) with dy's strides assumed contiguous",
        "a252c17d770df9f0d3e8d34bd6728150d49322e1",
        "6d80721f74bfd49b229cb4112dacf21237f27989",
    ),
    Fix(
        1146,
        "Ascend (triton-ascend) conv: the #1141 dh0 pass-through, and a T = 1 dw tile miscompiled on the NPU",
        "b67113b41e4730f8d598c284381142c6b78a2fbc",
        "4e1dd3be2662a87b34020f9a97bb2adeb503b165",
        "triton-ascend kernels (tl.extract_slice, Ascend NPU): neither CPU Triton nor a CUDA GPU runs them",
    ),
]


@dataclasses.dataclass
class Run:
    label: str
    rc: int | None = None  # None: not run; pytest's exit status; -1: cut off at the budget
    seconds: float = 0.0
    first_failure_s: float | None = None
    failed_test: str | None = None
    example: str | None = None
    error: str | None = None  # the first line of the assertion
    summary: str = ""  # pytest's last line
    row: str | None = None  # the backend's version-table row the build ran under
    blob: tuple[str, str] | None = None  # (hypothesis version, reproduce_failure blob) of the first failure

    @property
    def red(self) -> bool:
        return self.rc == 1 or self.first_failure_s is not None

    @property
    def green(self) -> bool:
        return self.rc == 0


@dataclasses.dataclass
class Row:
    fix: Fix
    before: Run | None = None  # unaided, stopped at the first failure
    replay: Run | None = None  # the fixed build on the "before" run's shrunk example only
    after: Run | None = None  # unaided, every property of the selection
    error: str | None = None  # why it was not run


# ---- build and install ---------------------------------------------------------------------


def tree_version(mirror: Path, ref: str) -> tuple[int, ...]:
    text = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{ref}:fla/__init__.py"], capture_output=True, text=True, check=True
    ).stdout
    m = re.search(r'^__version__\s*=\s*["\']([0-9.]+)', text, re.M)
    if m is None:
        raise SystemExit(f"no __version__ in fla/__init__.py at {ref}")
    return tuple(int(p) for p in m.group(1).strip(".").split("."))


def build(mirror: Path, ref: str, label: str, out: Path, build_env: Path | None, rebuild: bool) -> list[Path]:
    """Wheels of fla at ``ref`` labelled ``0.5.2+<label>`` in ``out/<label>`` (kept between runs)."""
    dest = out / label
    wheels = sorted(dest.glob(f"*+{label}-*.whl"))
    if wheels and not rebuild:
        return wheels
    env = dict(os.environ)
    if build_env is not None:  # a python3 with build, setuptools and wheel, first on PATH
        env["PATH"] = f"{build_env / 'bin'}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), str(mirror), ref, label, str(dest)], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"build of {ref} ({label}) failed:\n{proc.stderr[-2000:]}")
    return sorted(dest.glob(f"*+{label}-*.whl"))


def install(python: str, wheels: list[Path], site: Path) -> None:
    if site.exists():
        shutil.rmtree(site)
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), *map(str, wheels)],
        check=True,
        capture_output=True,
    )


# ---- what the run adds to the backend, from outside it ---------------------------------------

# The fla-triton backend (gdn_equiv/model/backends/fla_backend.py, through gdn_equiv/model/fla_versions.py)
# matches fla versions exactly, and a build
# here says 0.5.2+<label>. A build whose tree has every module of a known row's conv layout runs under
# that row: a -p plugin written into the run directory adds the build's version to the table with the
# row's module paths (the backend's code is not touched). A build that lacks one is not run, and the
# table says which modules are missing.

_PLUGIN = """# written by tools/replay_upstream.py (see its comments): run fla {version} under row {row!r}
import dataclasses

from gdn_equiv.model import fla_versions

_table = fla_versions.VERSIONS
if {version!r} not in _table:
    _table[{version!r}] = dataclasses.replace(_table[{row!r}], version={version!r})

{replay}
"""

# the shrunk example of the "before" run, replayed exactly (Hypothesis' reproduce_failure, set on the
# collected test as the decorator would; a seeded run saves nothing to the example database). It raises
# DidNotReproduce when the example passes: on the fixed build that is the wanted outcome.
_REPRODUCE = """import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.originalname == {test!r}:
            item.obj._hypothesis_internal_use_reproduce_failure = ({hypothesis!r}, {blob!r})
"""


def conv_layouts(python: str) -> dict[str, list[str]]:
    """The backend's version table: version -> the module paths its row names (read from the tree)."""
    code = (
        "import dataclasses, json; from gdn_equiv.model.fla_versions import VERSIONS as V;"
        "print(json.dumps({k: [m for m in dataclasses.asdict(r.conv).values() if isinstance(m, str)] "
        "for k, r in V.items()}))"
    )
    proc = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    if proc.returncode != 0:
        raise SystemExit(f"cannot read the fla backend's version table:\n{proc.stderr[-1500:]}")
    return json.loads(proc.stdout)


def _has_module(site: Path, dotted: str) -> bool:
    base = site.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def match_row(site: Path, version: str, layouts: dict[str, list[str]]) -> tuple[str | None, str]:
    """(the known row whose modules all exist in ``site``, or None; what is missing from each row)."""
    if version in layouts:
        return version, ""
    missing = {}
    for row, modules in layouts.items():
        lacking = [m for m in modules if not _has_module(site, m)]
        if not lacking:
            return row, ""
        missing[row] = lacking
    return None, "; ".join(f"row {row} needs {', '.join(m)}" for row, m in missing.items())


def build_version(site: Path) -> str:
    text = (site / "fla" / "__init__.py").read_text()
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)', text, re.M)
    return m.group(1) if m else "?"


# ---- the property run ----------------------------------------------------------------------


def plugin_installed(python: str) -> bool:
    """Whether ``python`` loads gdn-equiv's pytest plugin by entry point (gdn-equiv installed there)."""
    code = (
        "from importlib.metadata import entry_points as e;"
        "print(any(p.value == 'gdn_equiv.pytest_plugin' for p in e(group='pytest11')))"
    )
    return subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip() == "True"


def run_properties(
    python: str,
    site: Path,
    workdir: Path,
    *,
    label: str,
    backend: str,
    select: str,
    seed: int,
    budget: float,
    stop_first: bool,
    row: tuple[str, str] | None = None,
    reproduce: tuple[str, str, str] | None = None,
) -> Run:
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    log = workdir / "failures.log"
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "gdn_equiv.suite"]
    cmd += ["--gdn-backend", backend, "-k", select, f"--hypothesis-seed={seed}", "--gdn-failure-log", str(log)]
    if stop_first:
        cmd.append("-x")
    if not plugin_installed(python):
        cmd[3:3] = ["-p", "gdn_equiv.pytest_plugin"]
    if row is not None:
        (workdir / "replay_fla_row.py").write_text(
            _PLUGIN.format(version=row[0], row=row[1], replay=_reproduce_plugin(reproduce))
        )
        cmd[3:3] = ["-p", "replay_fla_row"]
    path = os.pathsep.join(map(str, (site, ROOT, workdir)))
    env = {**os.environ, "PYTHONPATH": path, "TRITON_INTERPRET": "1"}
    env.pop("CI", None)
    env["HYPOTHESIS_PROFILE"] = os.environ.get("HYPOTHESIS_PROFILE", "dev")
    result = Run(label)
    start = time.monotonic()
    with open(workdir / "pytest.out", "w") as out:
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                if result.first_failure_s is None and log.exists():
                    result.first_failure_s = time.monotonic() - start
                if time.monotonic() - start > budget:
                    result.rc = -1
                    break
                time.sleep(0.5)
            else:
                result.rc = proc.returncode
        finally:  # cut at the budget, or this script interrupted: the run does not outlive it
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    result.seconds = time.monotonic() - start
    if result.first_failure_s is None and log.exists():
        result.first_failure_s = result.seconds
    text = (workdir / "pytest.out").read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    result.summary = lines[-1] if lines else ""
    if log.exists():
        _read_failure(result, log.read_text(errors="replace"))
    return result


def _reproduce_plugin(reproduce: tuple[str, str, str] | None) -> str:
    if reproduce is None:
        return ""
    test, version, blob = reproduce
    return _REPRODUCE.format(test=test, hypothesis=version, blob=blob.encode())


def _read_failure(result: Run, report: str) -> None:
    """The first failure's test, shrunk example (the call the property noted) and assertion line."""
    first = report.split("\n==== FAILED ")[0]
    m = re.match(r"==== FAILED (\S+)", first)
    result.failed_test = m.group(1).split("::")[-1] if m else None
    calls = re.findall(r"ConvCall\([^\n]*\)(?:, (?:slices \[[^\]]*\]|split at \d+))?", first)
    result.example = calls[-1] if calls else None
    errors = [ln[1:].strip() for ln in first.splitlines() if ln.startswith("E ") and ln[1:].strip()]
    result.error = errors[0] if errors else None
    m = re.search(r"@reproduce_failure\('([^']+)', b'([^']+)'\)", first)
    result.blob = (m.group(1), m.group(2)) if m else None


# ---- the table -----------------------------------------------------------------------------


def _cell(text: str | None) -> str:
    return "" if text is None else text.replace("|", "\\|").replace("\n", " ")


def _verdict(run: Run | None) -> str:
    if run is None:
        return "not run"
    if run.error and "DidNotReproduce" in run.error:
        return "yes (passes: Hypothesis' DidNotReproduce)"
    if run.green:
        return "yes"
    if run.rc == -1 and not run.red:
        return f"no failure in {run.seconds:.0f} s (cut at the budget)"
    return f"no: {run.failed_test} ({run.error})"


def table(rows: list[Row]) -> str:
    out = [
        "| PR | what it fixed | red before? | s to first failure | shrunk example (failing property) "
        "| shrunk example green after? | green after (unaided)? |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        pr = f"[#{r.fix.pr}](https://github.com/fla-org/flash-linear-attention/pull/{r.fix.pr})"
        b = r.before
        if b is None:
            out.append(f"| {pr} | {_cell(r.fix.fixed)} | not run | | {_cell(r.fix.not_here or r.error)} | | |")
            continue
        red = "yes" if b.red else (f"no failure in {b.seconds:.0f} s (budget)" if b.rc == -1 else f"no (rc {b.rc})")
        first = f"{b.first_failure_s:.0f}" if b.first_failure_s is not None else ""
        example = f"`{b.example}` ({b.failed_test}: {b.error})" if b.red else ""
        out.append(
            f"| {pr} | {_cell(r.fix.fixed)} | {red} | {first} | {_cell(example)} "
            f"| {_cell(_verdict(r.replay))} | {_cell(_verdict(r.after))} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="fla git dir (the fetch tool's bare mirror)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="builds, site dirs and run dirs (outside the repo)")
    p.add_argument("--build-env", type=Path, default=None, help="venv with build/setuptools/wheel for the build")
    p.add_argument("--python-old", default="/tmp/venv977/bin/python", help="python with triton<3.9 (trees < 0.6.0)")
    p.add_argument("--python-new", default=sys.executable, help="python for trees >= 0.6.0")
    p.add_argument("--backend", default="fla-triton", help="--gdn-backend for the runs")
    p.add_argument("-k", dest="select", default="conformance", help="pytest -k selection")
    p.add_argument("--seed", type=int, default=0, help="--hypothesis-seed of every run")
    p.add_argument("--budget", type=float, default=600.0, help="seconds per run before it is cut off")
    p.add_argument("--only", default=None, help="comma list of PR numbers to replay")
    p.add_argument("--rebuild", action="store_true", help="build again even where wheels exist")
    p.add_argument("--list", action="store_true", help="print the rows and exit")
    p.add_argument("--json", type=Path, default=None, help="also write the measured runs as JSON here")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so the running pytest is ended

    out = args.out.resolve()
    if out == ROOT or ROOT in out.parents:
        p.error(f"--out {out} is inside the repository; builds go outside it")
    fixes = FIXES
    if args.only:
        wanted = {int(n) for n in args.only.split(",")}
        unknown = wanted - {f.pr for f in FIXES}
        if unknown:
            p.error(f"--only: no row for PR {sorted(unknown)}; rows: {[f.pr for f in FIXES]}")
        fixes = [f for f in FIXES if f.pr in wanted]
    if args.list:
        for f in fixes:
            print(
                f"#{f.pr} {f.before[:10]}..{f.after[:10]} {f.fixed}"
                + (f" [not here: {f.not_here}]" if f.not_here else "")
            )
        return 0
    build_env = args.build_env or (out / ".buildenv" if (out / ".buildenv").exists() else None)

    layouts: dict[str, dict[str, list[str]]] = {}
    rows: list[Row] = []
    for fix in fixes:
        if fix.not_here:
            rows.append(Row(fix))
            continue
        row = Row(fix)
        for when, ref in (("pre", fix.before), ("post", fix.after)):
            label = f"pr{fix.pr}.{when}"
            python = args.python_new if tree_version(args.mirror, ref) >= (0, 6, 0) else args.python_old
            wheels = build(args.mirror, ref, label, out, build_env, args.rebuild)
            site = out / label / "site"
            install(python, wheels, site)
            version = build_version(site)
            if python not in layouts:
                layouts[python] = conv_layouts(python)
            known, missing = match_row(site, version, layouts[python])
            if known is None:
                row.error = f"fla {version}: the backend knows no row for this conv layout ({missing})"
                break
            common = dict(label=label, backend=args.backend, seed=args.seed, budget=args.budget, row=(version, known))
            if when == "pre":
                # unaided: a fresh database, stop at the first failing property
                row.before = run_properties(
                    python, site, out / label / "run", select=args.select, stop_first=True, **common
                )
                _progress(row.before)
                continue
            if row.before is not None and row.before.failed_test and row.before.blob:
                # the shrunk example (from the "before" database) and nothing else, on the fixed build
                test = row.before.failed_test.split("[")[0]
                row.replay = run_properties(
                    python,
                    site,
                    out / label / "replay",
                    select=f"{args.select} and {test}",
                    stop_first=True,
                    reproduce=(test, *row.before.blob),
                    **common,
                )
                _progress(row.replay)
            # unaided again: a fresh database, every property of the selection
            row.after = run_properties(
                python, site, out / label / "run", select=args.select, stop_first=False, **common
            )
            _progress(row.after)
        rows.append(row)

    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    ran = [r for r in rows if not r.fix.not_here]
    return 0 if all(r.before and r.before.red and r.after and r.after.green for r in ran) else 1


def _progress(run: Run) -> None:
    print(f"# {run.label}: rc {run.rc}, {run.seconds:.0f} s, {run.summary}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
