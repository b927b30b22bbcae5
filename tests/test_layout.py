"""The layout shows the architecture: the README's map is the tree, and the imports keep the rooms' order.

The import rules are tools/import_picture.py's (read from the source, nothing imported), run as a command
(a test runs the tool, never imports it): no circles,
no upward arrows between rooms, the project's own imports at the top of each file. Each rule is shown
to fail on a copy of the package with one violation planted.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = Path("tools") / "import_picture.py"


def figures(root: Path) -> dict[str, Any]:
    """``tools/import_picture.py --json`` on a checkout (the copy of the tool inside it): its figures."""
    run = subprocess.run(
        [sys.executable, str(root / TOOL), "--json", "--root", str(root)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def violations(root: Path) -> list[str]:
    """The layout rules a checkout breaks, one line each (the tool's ``--check`` lines)."""
    return figures(root)["violations"]


#: a room's line in the map: its folder (two spaces of indent per level), then what it holds
ROOM = re.compile(r"^( *)([A-Za-z_][\w-]*)/\s")
MODULE = re.compile(r"(?<![\w/.])([A-Za-z_]\w*\.py)\b")


def layout_map(readme: str) -> list[str]:
    """The lines of the README's Layout code block."""
    section = readme.split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```\n", 2)[1].splitlines()


def map_problems(root: Path) -> list[str]:
    """What the README's map names that the tree lacks, and the packages of the tree the map leaves out."""
    problems = []
    named_packages: set[Path] = set()
    stack: list[str] = []
    for line in layout_map((root / "README.md").read_text()):
        m = ROOM.match(line)
        if m is None:
            continue
        depth = len(m.group(1)) // 2
        stack[depth:] = [m.group(2)]
        folder = root.joinpath(*stack)
        if not folder.is_dir():
            problems.append(f"the map names {'/'.join(stack)}/, which is not in the tree")
            continue
        named_packages.add(folder)
        for module in MODULE.findall(line[m.end() :]):
            if not (folder / module).is_file():
                problems.append(f"the map names {'/'.join(stack)}/{module}, which is not in the tree")
    for top in ("gdn_equiv", "strategies"):
        for init in sorted((root / top).rglob("__init__.py")):
            if init.parent not in named_packages:
                problems.append(f"the map leaves out the package {init.parent.relative_to(root).as_posix()}/")
    return problems


def test_the_readme_map_is_the_tree() -> None:
    assert map_problems(ROOT) == []


def test_the_imports_keep_the_rooms_order() -> None:
    pic = figures(ROOT)
    assert pic["violations"] == []
    # the rooms exist and hold what the layout says (a picture of an empty or mis-rooted tree passes vacuously)
    rooms = pic["rooms"]
    assert {"gdn_equiv.model", "gdn_equiv.harness", "gdn_equiv.run", "gdn_equiv.run.cli", "gdn_equiv.targets"} <= set(
        rooms
    ), rooms
    # the draw layer is in the picture (installed as gdn_equiv.strategies), a room below the harness
    assert rooms.get("gdn_equiv.strategies", 0) > 5, rooms
    assert pic["modules"] > 0 and pic["roomless_modules"] == []


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package's source (and the README) to plant violations in."""
    for name in ("gdn_equiv", "strategies"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    for folder in ("tests", "scripts", "tools", "examples", "docs", "repro"):  # named by the map (folders only)
        (tmp_path / folder).mkdir()
    shutil.copy(ROOT / "tools" / "import_picture.py", tmp_path / "tools")
    return tmp_path


PLANTED = {
    # two model modules that import each other: a circle, within one room
    "import circle": {
        "gdn_equiv/model/planted_a.py": "from gdn_equiv.model import planted_b\n",
        "gdn_equiv/model/planted_b.py": "from gdn_equiv.model import planted_a\n",
    },
    # the model importing the command line, which nothing imports back
    "upward arrow": {"gdn_equiv/model/planted_up.py": "from gdn_equiv.run import report\n"},
    # a project import inside a function
    "function-local import": {
        "gdn_equiv/harness/planted_late.py": "def late():\n    from gdn_equiv.model import guard\n\n    return guard\n"
    },
}


@pytest.mark.parametrize("kind", PLANTED)
def test_a_planted_violation_is_named(tree: Path, kind: str) -> None:
    for rel, text in PLANTED[kind].items():
        (tree / rel).write_text(text or "")
    found = violations(tree)
    assert found, f"a planted {kind} passed the rules"
    assert all(line.startswith(kind) for line in found), found
    assert all("planted" in line for line in found), found


def test_the_draw_layer_sits_between_the_model_and_the_harness(tree: Path) -> None:
    """The model declares its choices and never imports the draw layer; the draw layer draws what the harness'
    checks take and never imports a check: either is an upward arrow, named."""
    (tree / "gdn_equiv/model/planted_draws.py").write_text("from gdn_equiv.strategies import sampling\n")
    (tree / "strategies/planted_check.py").write_text("from gdn_equiv.harness import conformance\n")
    found = violations(tree)
    assert any(
        line.startswith("upward arrow: gdn_equiv.model.planted_draws:1 imports gdn_equiv.strategies") for line in found
    ), found
    assert any(
        line.startswith("upward arrow: gdn_equiv.strategies.planted_check:1 imports gdn_equiv.harness.conformance")
        for line in found
    ), found


def test_the_old_conv_ops_backends_circle_is_caught(tree: Path) -> None:
    conv_ops = tree / "gdn_equiv/model/conv_ops.py"
    conv_ops.write_text(conv_ops.read_text() + "\nfrom gdn_equiv.model.backends import get_backend  # noqa\n")
    found = violations(tree)
    assert any(
        line.startswith("import circle") and "gdn_equiv.model.conv_ops" in line and "gdn_equiv.model.backends" in line
        for line in found
    ), found


def test_a_lazy_import_of_an_optional_extra_needs_its_comment(tree: Path) -> None:
    """A module that imports triton at its top may be imported inside a function, saying why; silently, not."""
    (tree / "gdn_equiv/model/planted_kernels.py").write_text("import triton\n")
    late = "def f():\n    {comment}from gdn_equiv.model import planted_kernels\n\n    return planted_kernels\n"
    (tree / "gdn_equiv/model/planted_user.py").write_text(late.format(comment=""))
    found = violations(tree)
    assert found == ["function-local import: gdn_equiv.model.planted_user:2 imports gdn_equiv.model.planted_kernels"]
    (tree / "gdn_equiv/model/planted_user.py").write_text(late.format(comment="# lazily: triton is optional\n    "))
    assert violations(tree) == []


def test_a_type_checking_import_is_no_edge(tree: Path) -> None:
    """An import that never runs (``if TYPE_CHECKING:``) draws no arrow: annotations may name any room."""
    (tree / "gdn_equiv/model/planted_hint.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from gdn_equiv.run import report\n"
    )
    assert violations(tree) == []


def test_the_map_check_names_a_missing_package_and_a_missing_module(tree: Path) -> None:
    (tree / "gdn_equiv/newroom").mkdir()
    (tree / "gdn_equiv/newroom/__init__.py").write_text("")
    (tree / "gdn_equiv/model/guard.py").unlink()
    assert sorted(map_problems(tree)) == [
        "the map leaves out the package gdn_equiv/newroom/",
        "the map names gdn_equiv/model/guard.py, which is not in the tree",
    ]


def test_a_hidden_import_module_is_an_edge_and_named(tree: Path) -> None:
    """``importlib.import_module`` of a project module, by a string or a module constant, is an import the
    header does not show: its arrow counts (here upward: the model loading the run's report), and it is named."""
    (tree / "gdn_equiv/model/planted_hidden.py").write_text(
        'import importlib\n\nREPORT = "gdn_equiv.run.report"\n\n\n'
        "def f():\n    return importlib.import_module(REPORT)\n"
    )
    found = violations(tree)
    assert found == [
        "upward arrow: gdn_equiv.model.planted_hidden:7 imports gdn_equiv.run.report "
        "(gdn_equiv.model is below gdn_equiv.run)",
        "hidden import: gdn_equiv.model.planted_hidden:7 imports gdn_equiv.run.report through import_module",
    ]


def test_a_private_name_imported_from_another_module_is_named(tree: Path) -> None:
    (tree / "gdn_equiv/harness/planted_private.py").write_text(
        "from gdn_equiv.harness.conformance import close_to_torch\n"
    )
    assert violations(tree) == []
    (tree / "gdn_equiv/harness/planted_private.py").write_text("from gdn_equiv.model.guard import _planted\n")
    (tree / "gdn_equiv/model/guard.py").write_text((tree / "gdn_equiv/model/guard.py").read_text() + "\n_planted = 1\n")
    assert violations(tree) == [
        "private name: gdn_equiv.harness.planted_private:1 imports _planted from gdn_equiv.model.guard"
    ]


def test_the_plugin_imports_no_driver() -> None:
    """The gate's plugin sits on top, but it drives nothing: it reads the records, the ledger and the page
    writer, never ``check``'s runner, the fuzz engines or the command line (which run the gate themselves)."""
    pic = figures(ROOT)
    drivers = ("gdn_equiv.run.runner", "gdn_equiv.run.fuzz_engines", "gdn_equiv.run.cli", "gdn_equiv.run.bench")
    plugin = ("gdn_equiv.pytest_plugin", "gdn_equiv.plugin")
    imported = {target for importer, target in pic["edges"] if importer.startswith(plugin)}
    assert not {m for m in imported if m.startswith(drivers)}, imported
