"""``check``'s dtype rows follow what each backend declares (issue #49: an fp64-only plug-in made ``check`` end in
an internal error, "no dtype asked is run by all of ..."): without ``--dtype`` a backend that declares none of
fp32/bf16/fp16 gets rows of the dtypes it declares; a dtype asked by name that no backend takes is refused
before any example (exit 2); one that only some backends take is ``n/a`` for the others, with the reason."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gdn_equiv.harness import registry
from gdn_equiv.harness.planted import declared_backend
from gdn_equiv.model.backends import Capabilities, registered
from gdn_equiv.run.cli import main
from gdn_equiv.run.cli.common import DTYPES, EXIT_USAGE

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


@pytest.fixture
def fp64_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "fp64_plugin.py").write_text(textwrap.dedent("""
        from gdn_equiv.harness.planted import declared_backend
        from gdn_equiv.model.backends import Capabilities
        BACKEND = declared_backend(Capabilities(dtypes=("float64",)), "right")
    """))  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return "fp64_plugin:BACKEND"


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
