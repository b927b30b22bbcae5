"""What a run asks follows what each backend declares: its dtypes and its devices.

``check``'s dtype rows follow what each backend declares (issue #49: an fp64-only plug-in made ``check`` end in
an internal error, "no dtype asked is run by all of ..."): without ``--dtype`` a backend that declares none of
fp32/bf16/fp16 gets rows of the dtypes it declares; a dtype asked by name that no backend takes is refused
before any example (exit 2); one that only some backends take is ``n/a`` for the others, with the reason.
A backend that declares other devices only cannot run here: ``check`` and the gate end with status 3 naming it,
before any example (they had run a CUDA-only plug-in on the CPU and passed it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gdn_equiv.harness import registry
from gdn_equiv.harness.planted import declared_backend
from gdn_equiv.model.backends import Capabilities, registered
from gdn_equiv.run.cli import main
from gdn_equiv.run.cli.common import DTYPES, EXIT_ENVIRONMENT, EXIT_USAGE

FP64_ONLY = declared_backend(Capabilities(dtypes=("float64",)), "right")
HALF_ONLY = declared_backend(Capabilities(dtypes=("float16", "bfloat16")), "right")


def test_the_default_rows_are_the_dtypes_each_backend_declares() -> None:
    with registered(FP64_ONLY):
        assert registry.default_dtypes([FP64_ONLY.name], DTYPES) == ["float64"]
        assert registry.default_dtypes(["torch"], DTYPES) == list(DTYPES)
        assert registry.default_dtypes([FP64_ONLY.name, "torch"], DTYPES) == ["float64", *DTYPES]
    with registered(HALF_ONLY):
        assert sorted(registry.default_dtypes([HALF_ONLY.name], DTYPES)) == ["bfloat16", "float16"]


def test_a_row_in_a_dtype_its_backend_does_not_declare_is_na_with_the_reason() -> None:
    record = registry.get_record("P3-forward-exact")
    with registered(FP64_ONLY):
        rows = registry.asked_rows([record], families=["gated_deltanet"], backends=[FP64_ONLY.name, "torch"],
                                   dtypes=["float32", "float64"])  # fmt: skip
    reasons = {(row.backend, row.dtype): reason for row, _, reason in rows}
    assert (
        reasons[(FP64_ONLY.name, "float32")]
        == f"{FP64_ONLY.name} declares the dtypes float64: a float32 row has nothing to draw"
    )
    assert reasons[(FP64_ONLY.name, "float64")] is None
    assert reasons[("torch", "float32")] is None and reasons[("torch", "float64")] is None


def _plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, declaration: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        from gdn_equiv.harness.planted import declared_backend
        from gdn_equiv.model.backends import Capabilities
        BACKEND = declared_backend(Capabilities({declaration}), "right")
    """))  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return f"{name}:BACKEND"


@pytest.fixture
def fp64_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    return _plugin(tmp_path, monkeypatch, "fp64_plugin", 'dtypes=("float64",)')


@pytest.fixture
def elsewhere_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A correct backend declaring only the device this machine is not (CUDA here, the CPU on a GPU machine)."""
    import torch

    other = "cpu" if torch.cuda.is_available() else "cuda"
    return _plugin(tmp_path, monkeypatch, "elsewhere_plugin", f"devices=({other!r},)")


def test_check_runs_an_fp64_only_backend_in_float64(fp64_plugin: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["check", "--backend", fp64_plugin, "--profile", "dev", "--examples", "3", "--skip-necessity",
                   "--property", "P7-conv-conformance", "--report", "rep"])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    rows = json.loads(Path("rep/summary.json").read_text())["checks"]
    assert [(r["dtype"], r["result"]) for r in rows if r["property"] == "P7-conv-conformance"] == [("float64", "pass")]


def test_check_refuses_a_dtype_no_backend_takes_before_any_example(
    fp64_plugin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["check", "--backend", fp64_plugin, "--dtype", "float32", "--property", "P3-forward-exact"])
    said = capsys.readouterr()
    assert status == EXIT_USAGE
    assert "--dtype float32: no backend asked takes it (fp64_plugin:BACKEND takes float64)" in said.err + said.out
    assert "examples in" not in said.out


def test_check_refuses_a_backend_declared_for_another_device(
    elsewhere_plugin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["check", "--backend", elsewhere_plugin, "--property", "P7-conv-conformance"])
    said = capsys.readouterr()
    assert status == EXIT_ENVIRONMENT, said.out + said.err
    assert f"--backend {elsewhere_plugin!r} cannot run here: it declares the devices" in said.err + said.out
    assert "examples in" not in said.out


def test_the_gate_ends_before_any_test_for_a_backend_declared_for_another_device(
    elsewhere_plugin: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "gdn_equiv.suite",
         "--gdn-backend", elsewhere_plugin, "-k", "test_backend_forward_matches_torch"],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == EXIT_ENVIRONMENT, done.stdout + done.stderr
    assert f"--gdn-backend {elsewhere_plugin!r} cannot run here: it declares the devices" in done.stdout + done.stderr
    assert "passed" not in done.stdout
