"""The run plan, the one plug-in loader and the plugin's modules without state (docs/run-plan.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gdn_equiv._source import load_plugin
from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model import families
from gdn_equiv.model.backends import Backend, get_backend
from gdn_equiv.run import plan as run_plan
from gdn_equiv.serving import records

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = [ROOT / "gdn_equiv" / "pytest_plugin.py", *sorted((ROOT / "gdn_equiv" / "plugin").glob("*.py"))]

NOT_IMPORTED = "plug-in 'no_such_module:thing' does not import: ModuleNotFoundError: No module named 'no_such_module'"


def test_every_kind_of_plug_in_is_loaded_by_one_loader_with_one_error_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidArgument, match=f"^conv backend {NOT_IMPORTED}$"):
        get_backend("no_such_module:thing")
    monkeypatch.setattr(families, "_entry_point_specs", lambda: {"broken": "no_such_module:thing"})
    with pytest.raises(InvalidArgument, match=f"^layer family {NOT_IMPORTED}$"):
        families.get_family("broken")
    with pytest.raises(KeyError, match=f"serving engine {NOT_IMPORTED}"):  # the engine lookups' KeyError
        records.adapter("no_such_module:thing")
    with pytest.raises(InvalidArgument, match=r"^target plug-in must be module:attr, got 'no_colon'$"):
        load_plugin("no_colon", kind="target")
    assert load_plugin("gdn_equiv.run.plan:RunPlan.backend", kind="x") is run_plan.RunPlan.backend  # dotted attr


def test_the_gate_runs_the_plan_it_built(gdn_plan: run_plan.RunPlan) -> None:
    """The plugin's plan holds the backends as objects (each the registry's), and the profile Hypothesis runs
    with is the plan's, its database suffix only where the plan names a database."""
    from hypothesis import settings

    assert gdn_plan.backends and all(isinstance(b, Backend) for b in gdn_plan.backends)
    assert all(get_backend(b.name) is b for b in gdn_plan.backends)
    assert settings.get_current_profile_name() == gdn_plan.hypothesis_profile
    assert gdn_plan.hypothesis_profile == gdn_plan.profile + ("" if gdn_plan.database is None else "+database")
    assert gdn_plan.device in ("cpu", "cuda")


def test_both_front_ends_refuse_a_bad_profile_with_the_same_words(monkeypatch: pytest.MonkeyPatch) -> None:
    from gdn_equiv.run.cli import common

    monkeypatch.setenv("HYPOTHESIS_PROFILE", "nosuch")
    with pytest.raises(InvalidArgument) as gate:
        run_plan.profile(None, run_plan.pytest_default_profile())
    with pytest.raises(common.UsageError) as command:
        common.profile_option(type("Args", (), {"profile": "ci"})(), "ci")
    assert str(gate.value) == str(command.value)
    assert str(gate.value) == "HYPOTHESIS_PROFILE='nosuch' is not a profile; known profiles: ci, dev, fuzz, gpu"


def module_state(source: str) -> list[str]:
    """What in ``source`` keeps state in the module: a ``global`` statement, or a module-level name that is not
    a constant (UPPER_CASE, or a hook's ``pytest_plugins`` list) being assigned."""
    problems = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            problems.append(f"line {node.lineno}: global {', '.join(node.names)}")
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            name = target.id if isinstance(target, ast.Name) else ast.unparse(target)
            if name != "pytest_plugins" and not name.lstrip("_").isupper():
                problems.append(f"line {node.lineno}: module-level {name}")
    return problems


def test_the_plugin_keeps_no_state_in_its_modules() -> None:
    assert {p.name: module_state(p.read_text()) for p in PLUGIN if module_state(p.read_text())} == {}
    planted = "_ACTIVE = False\n_totals = {}\n\ndef pytest_configure(config):\n    global _ACTIVE\n    _ACTIVE = True\n"
    assert module_state(planted) == ["line 5: global _ACTIVE", "line 2: module-level _totals"]
