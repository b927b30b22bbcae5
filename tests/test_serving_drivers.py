"""S1-S7 in the drivers (SPEC §10, §11): ``gdn-equiv check``/``fuzz`` rows per engine path (``--serving-engine``,
default the in-house reference) and the pytest gate's ``--gdn-serving-engine``.

- An unknown engine is a usage error (2) before any example; an engine none of whose paths runs here ends the
  run with 3 and one line naming it and why (planted: a vLLM whose version the table does not know, an sglang
  that is not installed); a path that cannot run while another of the engine can is an ``n/a`` row with why.
- A serving row that fails keeps the shrunk case and writes a reproducer that fails (exit 1) on it.
- With vLLM 0.34.0's ops extracted (``gdn-equiv engines fetch``) the CPU path's S7 finding is a FAIL row.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings

from gdn_equiv.harness import registry
from gdn_equiv.run import cli, runner
from gdn_equiv.run.cli import check as cli_check
from gdn_equiv.run.cli import common as cli_common
from gdn_equiv.run.report import ReportWriter
from gdn_equiv.serving import engines
from gdn_equiv.serving.records import EngineCase

ROOT = Path(__file__).resolve().parents[1]
EXTRACTED = ROOT / ".engines"
SERVING = [r.name for r in registry.serving_records()]


@pytest.fixture
def gdn(gdn_main: Callable[..., tuple[int, str, str]]) -> Callable[..., tuple[int, str, str]]:
    """``gdn(*argv) -> (status, stdout, stderr)``: the root conftest's ``gdn_main`` (``cli.main`` in ``tmp_path``)."""
    return gdn_main


def _fake_dist(where: Path, name: str, version: str) -> Path:
    """An installed distribution as importlib.metadata sees it: its METADATA, nothing else."""
    info = where / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return where


def _properties(*names: str) -> list[str]:
    return [a for n in names for a in ("--property", n)]


def test_check_asks_s1_to_s7_on_the_reference_by_default() -> None:
    args = cli.build_parser().parse_args(["check", "--device", "cpu", "--profile", "dev"])
    rows = [r for r in cli_check.ledger_rows(cli_check.plan_run(args)) if r.name.startswith("S")]
    assert [(r.name, r.backend, r.family, r.dtype, r.result) for r in rows] == [
        (name, "reference", "-", "any", "pass") for name in SERVING
    ]
    fla = cli.build_parser().parse_args(
        ["check", "--target", "fla", "--serving-engine", "reference", "--device", "cpu"]
    )
    with pytest.raises(cli_common.UsageError, match="--serving-engine do not apply"):
        cli_check.plan_run(fla)


def test_serving_rows_run_on_the_reference(gdn, tmp_path) -> None:
    status, out, _ = gdn("check", "--device", "cpu", "--examples", "15", *_properties(*SERVING))
    assert status == cli_common.EXIT_OK, out
    assert f"ledger: {len(SERVING)} rows asked, {len(SERVING)} to run, 0 n/a" in out
    for name in SERVING:
        assert f"{name:<24} -               reference any      pass" in out, out


def test_an_unknown_engine_is_a_usage_error_before_any_example(gdn, tmp_path) -> None:
    status, out, err = gdn("check", "--device", "cpu", "--serving-engine", "reference,tgi")
    assert status == cli_common.EXIT_USAGE, out + err
    line = err.strip().splitlines()[-1]
    assert "--serving-engine 'tgi': no serving engine 'tgi'; known: vllm, sglang, reference, vllm-cpu-torch" in line
    assert not (tmp_path / cli.DEFAULT_REPORT).exists()


def test_an_engine_that_cannot_run_here_is_an_environment_problem(gdn, tmp_path, monkeypatch) -> None:
    """Planted: a vLLM whose version the table does not know, on the path; an sglang that is not installed."""
    monkeypatch.syspath_prepend(str(_fake_dist(tmp_path / "site", "vllm", "9.9.9")))
    status, _, err = gdn("check", "--device", "cpu", "--serving-engine", "vllm")
    assert status == cli_common.EXIT_ENVIRONMENT, err
    line = err.strip().splitlines()[-1]
    assert (
        "--serving-engine 'vllm' cannot run here: vllm-cpu-torch: vllm 9.9.9 is not a version the adapter knows" in line
    )
    known = ", ".join(engines.VLLM_VERSIONS)
    assert f"vllm-gpu: vllm 9.9.9 is not a version the adapter knows; known versions: {known}" in line
    monkeypatch.setattr(engines, "installed_version", lambda engine: None)
    status, _, err = gdn("check", "--device", "cpu", "--serving-engine", "sglang-gpu")
    assert status == cli_common.EXIT_ENVIRONMENT, err
    assert "--serving-engine 'sglang-gpu' cannot run here: sglang is not installed" in err.strip().splitlines()[-1]


def test_a_failing_serving_row_keeps_its_shrunk_case_and_writes_a_reproducer_that_fails(tmp_path) -> None:
    """The row's example once was the first failing draw, not the shrunk one the message names."""
    check = runner.run_property("S7-packed-qkv", "planted-packed-drops-k-bias", max_examples=200, first_kind=True)
    assert check.result == "FAIL" and isinstance(check.example, EngineCase)
    assert f"Example: planted-packed-drops-k-bias in-house: {check.example.case.short()}" in check.failure
    assert check.example.case.batch.conv.dim == 3  # shrunk: one channel each of q, k and v
    with ReportWriter(tmp_path, device="cpu", meta={}) as writer:
        writer.ask([check])
        row = writer.add(check)
        writer.finish("complete")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    replay = subprocess.run([sys.executable, row.repro], capture_output=True, text=True, env=env, timeout=120)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    # S7 compares the packed call with the reference first (its own anchor), then with the three calls
    assert "the packed call (against the reference) y of named sequence 0" in replay.stdout


@pytest.mark.skipif(
    not (EXTRACTED / "vllm-0.34.0").is_dir(), reason="vLLM 0.34.0's ops not extracted here (gdn-equiv engines fetch)"
)
def test_vllm_cpu_rows_from_a_release_folder_and_what_cannot_run_says_why(gdn, monkeypatch) -> None:
    """A release beside the others (.engines/vllm-0.34.0/): its CPU path runs S0 (= the reference) and its S4 row
    is n/a with why; its GPU paths are n/a on a CPU."""
    monkeypatch.setenv(engines.ENGINES_DIR_ENV, str(EXTRACTED))
    status, out, err = gdn(
        "check",
        "--device",
        "cpu",
        "--serving-engine",
        "vllm-0.34.0",
        "--examples",
        "30",
        *_properties("S0-reference", "S4-speculation"),
    )
    assert status == cli_common.EXIT_OK, out + err
    assert "S0-reference             -               vllm-0.34.0-cpu-torch any      pass" in out, out
    assert (
        "n/a: S4-speculation[vllm-0.34.0-cpu-torch-any--]: vllm-0.34.0-cpu-torch: vLLM 0.34.0's CPU speculative" in out
    )
    assert "n/a: S0-reference[vllm-0.34.0-gpu-any--]: no CUDA device here" in out


#: the defects only S0 catches, through the plug-in door
ANCHOR_ONLY = ("Zeros", "NoOpPrefill", "Identity", "BiasDropped", "SkipsSequence0", "StateOneSlotOff")
#: the two the gate's own subprocess runs are asked for (each run is seconds; scripts/serving_catch_table.py runs
#: every planted engine through every driver)
GATE_PLANTED = ("Zeros", "SkipsSequence0")


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["check", "fuzz"])
def test_check_and_fuzz_catch_each_planted_engine_through_the_plug_in_door(gdn, driver) -> None:
    """Six engines, each found and shrunk (30-60 s on a busy 2-core machine: shrinking dominates)."""
    budget = ["--examples", "40"] if driver == "check" else ["--seconds", "4"]
    for cls in ANCHOR_ONLY:
        spec = f"gdn_equiv.serving.planted:{cls}"
        status, out, err = gdn(driver, "--device", "cpu", "--serving-engine", spec, *budget, "--skip-necessity",
                               *_properties("S0-reference"))  # fmt: skip
        assert status == cli_common.EXIT_FAILED, (cls, out + err)
        assert f"FAIL S0-reference[{spec}-any--]" in out, (cls, out)


def test_an_installed_package_offers_an_engine_by_entry_point(gdn, tmp_path, monkeypatch) -> None:
    """An engine team's package names its adapter in the ``gdn_equiv.serving_engines`` group: the name is then
    an engine like vllm's (a planted one here, so the row must fail)."""
    site = _fake_dist(tmp_path / "site", "their-engine", "1.0")
    ep = "[gdn_equiv.serving_engines]\ntheirs = gdn_equiv.serving.planted:SkipsSequence0\n"
    (site / "their-engine-1.0.dist-info" / "entry_points.txt").write_text(ep)
    monkeypatch.syspath_prepend(str(site))
    status, out, err = gdn("check", "--device", "cpu", "--serving-engine", "theirs", "--examples", "40",
                           "--skip-necessity", *_properties("S0-reference"))  # fmt: skip
    assert status == cli_common.EXIT_FAILED, out + err
    assert "FAIL S0-reference[theirs-any--]" in out, out


def test_a_plug_in_that_is_not_an_engine_is_a_usage_error_before_any_example(gdn, tmp_path) -> None:
    status, out, err = gdn("check", "--device", "cpu", "--serving-engine", "gdn_equiv.serving.pool:prefill")
    assert status == cli_common.EXIT_USAGE, out + err
    assert "is not an engine adapter, nor makes one without arguments" in err
    status, out, err = gdn("check", "--device", "cpu", "--serving-engine", "no_such_module:Engine")
    assert status == cli_common.EXIT_USAGE and "does not import: ModuleNotFoundError" in err, out + err


# ---- the pytest gate: --gdn-serving-engine ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gate_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """``pytest --pyargs gdn_equiv.suite.test_serving --gdn-serving-engine ...`` runs, outside the repository."""
    work = tmp_path_factory.mktemp("gate")
    fake = _fake_dist(work / "fake", "vllm", "9.9.9")
    suite = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "--pyargs"]
    # (names checked and an engine that cannot run here: tests/test_plugin_promises.py)
    runs = {"reference": [*suite, "gdn_equiv.suite.test_serving", "--gdn-serving-engine", "reference"]}
    for cls in GATE_PLANTED:  # planted engines only S0 catches, through the plug-in door
        spec = f"gdn_equiv.serving.planted:{cls}"
        runs[cls] = [*suite, "-rf", "gdn_equiv.suite.test_serving", "--gdn-serving-engine", spec, "-k", "S0-reference"]
    runs["never exercised"] = [*suite, "gdn_equiv.suite.test_serving", "--gdn-serving-engine",
                               "gdn_equiv.serving.planted:GuardAdmitsNothing", "-k", "S6-dispatch"]  # fmt: skip
    procs = {}
    for name, argv in runs.items():
        path = [str(fake)] if name == "unknown version" else []
        path += [str(ROOT), os.environ.get("PYTHONPATH", "")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env.update(PYTHONPATH=os.pathsep.join(filter(None, path)), HYPOTHESIS_PROFILE="dev")
        procs[name] = subprocess.Popen(
            argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        done[name] = subprocess.CompletedProcess(runs[name], proc.returncode, out, err)
    return done


@pytest.mark.slow
def test_gdn_serving_engine_reference_runs_s1_to_s7_on_the_reference_only(gate_runs) -> None:
    result = gate_runs["reference"]
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert f"{len(SERVING)} passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("cls", GATE_PLANTED)
def test_the_gate_catches_each_planted_engine_through_the_plug_in_door(gate_runs, cls) -> None:
    result = gate_runs[cls]
    assert result.returncode == 1, (result.stdout + result.stderr)[-3000:]
    # the test generated from the S0 record, on the planted engine's path
    assert f"FAILED ::test_serving_property[gdn_equiv.serving.planted:{cls}-S0-reference]" in result.stdout, (
        result.stdout[-3000:]
    )


@pytest.mark.slow
def test_a_serving_test_none_of_whose_examples_compared_anything_fails_in_the_gate(gate_runs) -> None:
    """As ``check`` says NOT EXERCISED (exit 1): an engine whose fast path admits no batch."""
    result = gate_runs["never exercised"]
    assert result.returncode == 1, (result.stdout + result.stderr)[-3000:]
    assert "not exercised: none of the" in result.stdout and "1 failed" in result.stdout, result.stdout[-3000:]


def test_an_adapter_that_raises_is_a_failing_row_never_cannot_run_here(gdn) -> None:
    spec = "gdn_equiv.serving.planted:AdapterTypeError"
    status, out, err = gdn("check", "--device", "cpu", "--serving-engine", spec, "--examples", "5",
                           "--skip-necessity", *_properties("S0-reference"))  # fmt: skip
    assert status == cli_common.EXIT_FAILED, out + err
    assert f"FAIL S0-reference[{spec}-any--]" in out and "TypeError: causal_conv1d_fn() got an unexpected" in out
    assert "ledger: 1 rows asked, 1 to run, 0 n/a" in out


def test_check_says_not_exercised_for_the_same_engine(gdn) -> None:
    spec = "gdn_equiv.serving.planted:GuardAdmitsNothing"
    status, out, err = gdn("check", "--device", "cpu", "--serving-engine", spec, "--examples", "10",
                           "--skip-necessity", *_properties("S6-dispatch"))  # fmt: skip
    assert status == cli_common.EXIT_FAILED, out + err
    assert "not exercised" in out


@settings(max_examples=60, database=None, deadline=None)
@given(draw=registry.get_record("S2-untouched").strategy("reference"))
def test_s2_cases_always_hold_a_slot_no_sequence_names(draw: registry.Draw) -> None:
    """Its first (smallest) case named every slot: a ``--examples 1`` row was "not exercised", by construction."""
    batch = draw.example.case.batch
    assert batch.num_slots > len(batch.named())
