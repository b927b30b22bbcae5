"""``gdn-equiv engines fetch [ENGINE==VERSION ...]``: serving engine releases side by side, for ``check
--serving-engine`` (:mod:`gdn_equiv.serving.engines` loads them).

Each release's wheel is downloaded once (``pip download --no-deps``: the wheel only; vLLM's pin a torch and
~100 packages this project does not need to run its convs) into ``--wheels`` and kept there; its conv ops files
and its ``METADATA`` are extracted into ``--dest``/``<engine>-<version>/`` (default ``$GDN_EQUIV_ENGINES``, else
``.engines``), one folder per release. A wheel is never installed and nothing extracted is committed. With no
release named: every release of both version tables. A release without one of the files (an older layout) keeps
the others, and says which is missing (the adapter says so again when asked to run it).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdn_equiv.run.cli.common import EXIT_ENVIRONMENT, EXIT_OK, EnvironmentProblem, UsageError, one_line, subcommand
from gdn_equiv.serving.engines import ENGINES, SGLANG_OPS, VLLM_OPS, engines_dir

__all__ = ["OPS_FILES", "EnginesPlan", "extract", "release_option"]

#: the files of each engine's wheel that :mod:`gdn_equiv.serving.engines` loads (each alone, its imports stubbed)
OPS_FILES: dict[str, tuple[str, ...]] = {
    "vllm": (f"{VLLM_OPS}/causal_conv1d.py", f"{VLLM_OPS}/cpu/causal_conv1d.py"),
    "sglang": (SGLANG_OPS,),
}

DEFAULT_WHEELS = Path(tempfile.gettempdir()) / "gdn-equiv-wheels"


@dataclass(frozen=True)
class EnginesPlan:
    releases: list[tuple[str, str]]  # (engine, version)
    wheels: Path
    dest: Path


def release_option(text: str) -> tuple[str, str]:
    """``ENGINE==VERSION``, an engine and a version its table knows (another could not run as an engine path)."""
    engine, sep, version = text.partition("==")
    if not sep or not version:
        raise UsageError(f"release {text!r}: give ENGINE==VERSION (vllm==0.34.0, sglang==0.5.23)")
    if engine not in ENGINES:
        raise UsageError(f"release {text!r}: no engine {engine!r}; known: {', '.join(ENGINES)}")
    if version not in ENGINES[engine]:
        known = ", ".join(ENGINES[engine])
        raise UsageError(f"release {text!r}: {engine} {version} is not in its version table; known: {known}")
    return engine, version


def plan_engines(args: argparse.Namespace) -> EnginesPlan:
    asked = args.releases or [f"{e}=={v}" for e, table in ENGINES.items() for v in table]
    releases = list(dict.fromkeys(release_option(r) for r in asked))
    for flag, where in (("--wheels", args.wheels), ("--dest", args.dest)):
        if where is not None and Path(where).exists() and not Path(where).is_dir():
            raise UsageError(f"{flag} {where}: exists and is not a directory")
    wheels = Path(args.wheels) if args.wheels is not None else DEFAULT_WHEELS
    return EnginesPlan(releases, wheels, Path(args.dest) if args.dest is not None else engines_dir())


def wheel_release(wheel: Path) -> tuple[str, str]:
    """A wheel file's engine and version, from its name (``vllm-0.34.0-cp38-abi3-manylinux1_x86_64.whl``)."""
    name, _, rest = wheel.name.partition("-")
    version = rest.partition("-")[0]
    if wheel.suffix != ".whl" or name not in OPS_FILES or not version:
        raise UsageError(f"{wheel}: not a wheel of {' or '.join(OPS_FILES)} (ENGINE-VERSION-...whl)")
    return name, version


def extract(wheel: Path, dest: Path) -> tuple[Path, list[str]]:
    """The release's ops files and ``METADATA`` from ``wheel`` into ``dest/<engine>-<version>/`` (made afresh);
    returns the folder and the ops files the wheel lacks."""
    engine, version = wheel_release(wheel)
    out = dest / f"{engine}-{version}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    wanted = [*OPS_FILES[engine], f"{engine}-{version}.dist-info/METADATA"]
    with zipfile.ZipFile(wheel) as z:
        present = set(z.namelist())
        for member in wanted:  # names of our own: nothing the archive names is written
            if member in present:
                (out / member).parent.mkdir(parents=True, exist_ok=True)
                (out / member).write_bytes(z.read(member))
    return out, [m for m in OPS_FILES[engine] if m not in present]


def download(engine: str, version: str, into: Path) -> Path:
    """The release's wheel in ``into`` (``pip download --no-deps`` unless one is there already)."""
    found = sorted(into.glob(f"{engine}-{version}-*.whl"))
    if not found:
        into.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{engine}=={version}", "-d", str(into)]
        done = subprocess.run(pip, capture_output=True, text=True)
        found = sorted(into.glob(f"{engine}-{version}-*.whl"))
        if done.returncode != 0 or not found:
            why = one_line(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
            raise EnvironmentProblem(f"pip download {engine}=={version} brought no wheel: {why}")
    return found[0]


def cmd_engines(plan: EnginesPlan) -> int:
    for engine, version in plan.releases:
        try:
            wheel = download(engine, version, plan.wheels / f"{engine}-{version}")
        except EnvironmentProblem as exc:  # what came before stays extracted
            print(f"gdn-equiv engines fetch: cannot run here: {exc}", file=sys.stderr)
            return EXIT_ENVIRONMENT
        out, missing = extract(wheel, plan.dest)
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        lacks = f"; lacks {', '.join(missing)}" if missing else ""
        print(f"{engine} {version}: {out} ({size / 1024:.0f} KiB, from {wheel.name}){lacks}", flush=True)
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """``engines``' parser (one action, ``fetch``)."""
    p = subcommand(sub, "engines", "serving engine releases side by side for check --serving-engine")
    actions = p.add_subparsers(dest="action", required=True)
    fetch = actions.add_parser(
        "fetch",
        help="download releases' wheels (no dependencies) and extract their conv ops into DEST/<engine>-<version>/",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fetch.add_argument(
        "releases", nargs="*", metavar="ENGINE==VERSION", help="releases (default: every release of both tables)"
    )
    fetch.add_argument("--wheels", default=None, help=f"where wheels are kept (default {DEFAULT_WHEELS})")
    fetch.add_argument(
        "--dest", default=None, help="where releases are extracted (default $GDN_EQUIV_ENGINES or .engines)"
    )
    fetch.set_defaults(prepare=plan_engines, run=cmd_engines)
