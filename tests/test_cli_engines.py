"""``gdn-equiv engines fetch``: releases' conv ops extracted side by side, from synthetic wheels built here (no
network: a wheel already in ``--wheels`` is not downloaded again; pip's failure is planted)."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from gdn_equiv.run.cli import common as cli_common
from gdn_equiv.run.cli import engines as cli_engines
from gdn_equiv.serving import engines


def _wheel(wheels: Path, engine: str, version: str, members: dict[str, str]) -> Path:
    folder = wheels / f"{engine}-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{engine}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
        z.writestr(f"{engine}-{version}.dist-info/METADATA", f"Name: {engine}\nVersion: {version}\n")
    return path


def test_fetch_extracts_each_release_s_ops_side_by_side(gdn_main, tmp_path, monkeypatch) -> None:
    wheels, dest = tmp_path / "wheels", tmp_path / "engines"
    vllm_files = {f: f"# {f}\n" for f in cli_engines.OPS_FILES["vllm"]}
    _wheel(wheels, "vllm", "0.34.0", {**vllm_files, "vllm/other.py": "not an ops file\n"})
    _wheel(wheels, "sglang", "0.5.23", {"sglang/elsewhere.py": ""})  # an older layout: its ops file is missing
    (dest / "vllm-0.34.0" / "stale.py").parent.mkdir(parents=True)
    (dest / "vllm-0.34.0" / "stale.py").write_text("from an earlier extraction")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"downloaded again: {a}"))
    status, out, err = gdn_main("engines", "fetch", "vllm==0.34.0", "sglang==0.5.23", "--wheels", str(wheels),
                                "--dest", str(dest))  # fmt: skip
    assert status == cli_common.EXIT_OK, out + err
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert got == sorted([
        *(f"vllm-0.34.0/{f}" for f in vllm_files),
        "vllm-0.34.0/vllm-0.34.0.dist-info/METADATA",
        "sglang-0.5.23/sglang-0.5.23.dist-info/METADATA",
    ])  # fmt: skip
    for f, text in vllm_files.items():
        assert (dest / "vllm-0.34.0" / f).read_text() == text
    assert f"sglang 0.5.23: {dest / 'sglang-0.5.23'}" in out and f"lacks {engines.SGLANG_OPS}" in out, out
    monkeypatch.setenv(engines.ENGINES_DIR_ENV, str(dest))
    assert engines.release_dirs("vllm") == {"0.34.0": dest / "vllm-0.34.0"}


def test_a_bad_release_is_refused_before_any_download(gdn_main, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"downloaded: {a}"))
    for release, says in [
        ("vllm", "release 'vllm': give ENGINE==VERSION"),
        ("tgi==1.0", "no engine 'tgi'; known: vllm, sglang"),
        ("vllm==9.9.9", "vllm 9.9.9 is not in its version table; known: 0.28.0"),
    ]:
        status, out, err = gdn_main("engines", "fetch", "sglang==0.5.23", release, "--wheels", str(tmp_path / "w"))
        assert status == cli_common.EXIT_USAGE, (release, out + err)
        assert says in err, (release, err)
    assert not (tmp_path / "w").exists()


def test_a_download_that_brings_no_wheel_is_an_environment_problem(gdn_main, tmp_path, monkeypatch) -> None:
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found for vllm==0.34.0\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: failed)
    status, out, err = gdn_main("engines", "fetch", "vllm==0.34.0", "--wheels", str(tmp_path / "w"),
                                "--dest", str(tmp_path / "e"))  # fmt: skip
    assert status == cli_common.EXIT_ENVIRONMENT, out + err
    assert "pip download vllm==0.34.0 brought no wheel: ERROR: No matching distribution found" in err, err
