"""The wheel users install holds every package of the tree.

A wheel built at 933dd7e lacked the families subpackage (pyproject.toml then listed the packages by hand):
``pip install .`` gave ``ModuleNotFoundError`` while the editable install CI used worked. setup.py now finds
them (``strategies/`` installs as ``gdn_equiv.strategies``, pyproject's package-dir). Here the wheel is built
as ``pip install .`` builds it, offline, from a copy of the tree (an in-tree build leaves ``build/lib``, whose
stale files a later wheel would pick up).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the installed name of each top-level source folder
INSTALLED_AS = {"gdn_equiv": "gdn_equiv", "strategies": "gdn_equiv/strategies"}
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv*", ".tox", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def package_files(root: Path) -> dict[str, str]:
    """``{path in the wheel: path in the tree}`` of every module, template (``*.j2``, the report page's: package
    data) and ``py.typed`` of every package under
    ``root``'s source folders (a package: a folder with an ``__init__.py``, itself in a package)."""
    out = {}
    for top, installed in INSTALLED_AS.items():
        for init in sorted((root / top).rglob("__init__.py")):
            package = init.parent
            if not all(
                (p / "__init__.py").is_file() for p in [package, *package.parents] if p.is_relative_to(root / top)
            ):
                continue  # under a folder that is no package: not importable, not installed
            for f in package.iterdir():
                if f.is_file() and (f.suffix in (".py", ".j2") or f.name == "py.typed"):
                    out[f"{installed}/{f.relative_to(root / top).as_posix()}"] = str(f.relative_to(root))
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    work = tmp_path_factory.mktemp("packaging")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE)
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(work), str(src)]
    build = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    assert build.returncode == 0, f"pip wheel failed:\n{build.stdout[-2000:]}\n{build.stderr[-3000:]}"
    (path,) = work.glob("gdn_equiv-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow
def test_the_wheel_holds_every_package_module(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    missing = {installed: tree for installed, tree in package_files(ROOT).items() if installed not in names}
    assert not missing, "the wheel lacks (setup.py's package discovery left it out):\n" + "\n".join(
        f"  {installed}" + ("" if installed == tree else f" (from {tree})")
        for installed, tree in sorted(missing.items())
    )


@pytest.mark.slow
def test_the_wheel_installs_nothing_beside_gdn_equiv(wheel: zipfile.ZipFile) -> None:
    stray = sorted(
        {n.split("/")[0] for n in wheel.namelist()}
        - {"gdn_equiv"}
        - {n.split("/")[0] for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info")}
    )
    assert not stray, f"top-level names in the wheel other than gdn_equiv: {stray}"
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "gdn-equiv = gdn_equiv.run.cli:main" in text and "gdn_equiv = gdn_equiv.pytest_plugin" in text, text


def test_package_files_finds_each_package(tmp_path: Path) -> None:
    """The expectation itself: a subpackage, the strategies' renaming, py.typed; not a folder outside a package."""
    for rel in ("gdn_equiv/__init__.py", "gdn_equiv/py.typed", "gdn_equiv/sub/__init__.py", "gdn_equiv/sub/m.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    for rel in ("strategies/__init__.py", "strategies/s.py", "gdn_equiv/loose/x/__init__.py", "gdn_equiv/d.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert set(package_files(tmp_path)) == {
        "gdn_equiv/__init__.py",
        "gdn_equiv/py.typed",
        "gdn_equiv/sub/__init__.py",
        "gdn_equiv/sub/m.py",
        "gdn_equiv/strategies/__init__.py",
        "gdn_equiv/strategies/s.py",
    }
