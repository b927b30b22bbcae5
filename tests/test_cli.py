"""``gdn-equiv`` on the command line keeps SPEC §10's promises: its exit statuses, arguments checked
before any example runs, findings never lost (a report written as the run goes, the example database,
a time budget checked per example, Ctrl-C / SIGTERM), nothing passing by mistake, and ``repro``.

Most runs call :func:`gdn_equiv.run.cli.main` in this process (no interpreter start: a fraction of a second
each); the signal tests run ``python -m gdn_equiv`` in a subprocess. Planted kernels come from a module
written to a temporary directory and named as ``module:attr`` backends.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import gdn_equiv
from gdn_equiv.harness import properties as P
from gdn_equiv.harness import registry
from gdn_equiv.run import cli, runner
from gdn_equiv.run.cli import check as cli_check
from gdn_equiv.run.cli import common as cli_common
from gdn_equiv.run.report import Check, ReportWriter
from gdn_equiv.strategies.premises import any_examples

PLANTED = textwrap.dedent(
    '''
    """Planted kernels for tests/test_cli.py."""
    from gdn_equiv.model.backends import get_backend

    _torch = get_backend("torch").forward


    def no_bias(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
        """A correct depthwise causal conv that drops the bias."""
        return _torch(x, weight, None, activation, initial_state, output_final_state, cu_seqlens)


    def always_raises(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
        raise RuntimeError("planted: this kernel never runs")


    def correct(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
        return _torch(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)


    class _NeedsAnExtra:
        def forward(self, x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
            return _torch(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens)

        def unavailable(self):
            return "needs the frobnicator extra"


    needs_an_extra = _NeedsAnExtra()
    '''
)
NO_BIAS = "planted_kernels:no_bias"
# the smallest runs: one dtype, short sequences, the dev profile
TINY = ["--profile", "dev", "--examples", "1", "--max-seq-len", "4", "--dtype", "float32", "--skip-necessity"]
REPORT = "gdn-equiv-report"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory holding ``planted_kernels.py``, importable here and in subprocesses."""
    where = tmp_path_factory.mktemp("plugins")
    (where / "planted_kernels.py").write_text(PLANTED)
    sys.path.insert(0, str(where))
    try:
        yield where
    finally:
        sys.path.remove(str(where))
        sys.modules.pop("planted_kernels", None)


@pytest.fixture
def gdn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Iterator[Callable]:
    """``gdn(*argv) -> (status, stdout, stderr)``: :func:`cli.main` in ``tmp_path``, with the process-wide
    state it touches (environment, torch threads, signal handlers) restored afterwards, and an alarm
    that ends a run which would otherwise go on for minutes."""
    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    saved_env = os.environ.get("TRITON_INTERPRET")
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def too_long(signum: int, frame: object) -> None:
        raise TimeoutError("gdn-equiv ran for more than 90 s")

    previous_alarm = signal.signal(signal.SIGALRM, too_long)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        signal.alarm(90)
        try:
            status = cli.main(list(argv))
        finally:
            signal.alarm(0)
        out, err = capsys.readouterr()
        return status, out, err

    try:
        yield run
    finally:
        signal.signal(signal.SIGALRM, previous_alarm)
        torch.set_num_threads(threads)
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env
        for s, handler in handlers.items():
            assert signal.getsignal(s) is handler, f"gdn-equiv left its handler for {s!r} installed"


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    return lines[0]


def _summary(where: Path) -> dict:
    return json.loads((where / REPORT / "summary.json").read_text())


# ---- exit status 2: refused before any example runs -------------------------------------------------

USAGE_ERRORS = {
    "examples-0": (["check", *TINY, "--examples", "0"], "--examples must be >= 1, got 0"),
    "seconds-negative": (["fuzz", *TINY, "--seconds", "-1"], "--seconds must be a finite number > 0, got -1"),
    "seconds-0": (["fuzz", *TINY, "--seconds", "0"], "--seconds must be a finite number > 0, got 0"),
    "seconds-nan": (["fuzz", *TINY, "--seconds", "nan"], "--seconds must be a finite number > 0, got nan"),
    "seconds-inf": (["fuzz", *TINY, "--seconds", "inf"], "--seconds must be a finite number > 0, got inf"),
    "max-seq-len-0": (["check", *TINY, "--max-seq-len", "0"], "--max-seq-len must be >= 1, got 0"),
    "necessity-examples-0": (["check", "--necessity-examples", "0"], "--necessity-examples must be >= 1, got 0"),
    "backend-typo": (["check", *TINY, "--backend", "troch"], "--backend 'troch': unknown conv backend 'troch'"),
    "backend-empty": (["check", *TINY, "--backend", ""], "--backend '': needs backend names"),
    "backend-empty-name": (["check", *TINY, "--backend", "torch,"], "--backend 'torch,': needs backend names"),
    "backend-not-a-kernel": (["check", *TINY, "--backend", "os:sep"], "--backend 'os:sep'"),
    "backend-no-module": (["check", *TINY, "--backend", "no_such_module:conv"], "No module named 'no_such_module'"),
    "property-unknown": (["check", *TINY, "--property", "P99"], "--property 'P99' is not a property; known: P1-"),
    "family-unknown": (["check", *TINY, "--family", "nosuch"], "--family 'nosuch': unknown family 'nosuch'"),
    "fla-core-without-fla": (["check", *TINY, "--fla-core", "reference"], "--fla-core 'reference' applies to"),
    "fla-core-reference-kda": (
        ["fuzz", "--target", "fla", "--fla-core", "reference", "--family", "gated_deltanet,kda", "--seconds", "5"],
        "--fla-core reference swaps in the core of gated_deltanet only; --family kda would run with fla's core",
    ),
    "fla-ignores-dtype": (["check", "--target", "fla", "--dtype", "float32"], "--dtype do not apply"),
    "skip-necessity-vs-P6": (["check", *TINY, "--property", "P6-necessity"], "--skip-necessity contradicts"),
    "device-unknown": (["check", *TINY, "--device", "tpu"], "--device 'tpu'"),
    "database-unknown-scheme": (["check", *TINY, "--database", "nosuch://x"], "--database 'nosuch://x': a directory"),
    # tools/probe_bad_input.py: these ran every example and then ended in an internal error (exit 4)
    "report-unwritable": (["check", *TINY, "--report", "/proc/gdn-x"], "--report '/proc/gdn-x': cannot write there"),
    "json-unwritable": (["check", *TINY, "--json", "/proc/gdn-x/s.json"], "--json '/proc/gdn-x': cannot write there"),
    "junit-a-directory": (["check", *TINY, "--junit-xml", "."], "--junit-xml '.' is a directory; it must be a file"),
    "bench-iters-0": (["bench", "prologue", "--quick", "--iters", "0"], "--iters must be >= 1, got 0"),
    "bench-warmup-negative": (["bench", "prologue", "--quick", "--warmup", "-1"], "--warmup must be >= 0, got -1"),
    "bench-backend-typo": (["bench", "prologue", "--quick", "--backend", "troch"], "--backend 'troch'"),
    "bench-family": (["bench", "prologue", "--quick", "--family", "kda"], "bench prologue has shapes for"),
}


@pytest.mark.parametrize("argv, message", list(USAGE_ERRORS.values()), ids=list(USAGE_ERRORS))
def test_bad_argument_is_refused_before_any_example(gdn, tmp_path, argv, message) -> None:
    status, out, err = gdn(*argv)
    assert status == cli_common.EXIT_USAGE, (out, err)
    assert message in _one_line(err)
    assert not (tmp_path / REPORT).exists() and "examples" not in out, out


def test_unknown_hypothesis_profile_in_the_environment_is_refused(gdn, monkeypatch) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "nosuch")
    status, _, err = gdn("check", "--examples", "1", "--max-seq-len", "4", "--dtype", "float32", "--skip-necessity")
    assert status == cli_common.EXIT_USAGE
    assert "HYPOTHESIS_PROFILE='nosuch' is not a profile; known profiles: ci, dev, fuzz, gpu" in _one_line(err)


# ---- exit status 3: the environment cannot run it -------------------------------------------------


def test_backend_that_cannot_run_here_is_an_environment_problem(gdn, planted) -> None:
    status, _, err = gdn("check", *TINY, "--backend", "planted_kernels:needs_an_extra")
    assert status == cli_common.EXIT_ENVIRONMENT
    assert "'planted_kernels:needs_an_extra' cannot run here: needs the frobnicator extra" in _one_line(err)


def test_missing_extra_is_an_environment_problem(gdn) -> None:
    try:
        import causal_conv1d  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("causal-conv1d is installed here")
    status, _, err = gdn("check", *TINY, "--backend", "cuda")
    assert status == cli_common.EXIT_ENVIRONMENT
    assert "--backend 'cuda' cannot run here: the causal-conv1d package is not installed" in _one_line(err)


def test_absent_device_is_an_environment_problem(gdn) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    status, _, err = gdn("check", *TINY, "--device", "cuda")
    assert status == cli_common.EXIT_ENVIRONMENT
    assert "--device 'cuda': no CUDA device here" in _one_line(err)


def test_fla_target_without_fla_is_an_environment_problem(gdn, monkeypatch) -> None:
    from gdn_equiv.model import fla_versions

    monkeypatch.setattr(fla_versions, "fla_version", lambda: None)
    status, _, err = gdn("check", "--target", "fla", "--examples", "1")
    assert status == cli_common.EXIT_ENVIRONMENT
    assert "--target fla: flash-linear-attention is not installed" in _one_line(err)


def test_fla_version_the_adapter_does_not_know_is_an_environment_problem(gdn, monkeypatch) -> None:
    from gdn_equiv.model import fla_versions

    monkeypatch.setattr(fla_versions, "fla_version", lambda: "0.5.1")
    status, _, err = gdn("check", "--target", "fla", "--examples", "1")
    assert status == cli_common.EXIT_ENVIRONMENT
    line = _one_line(err)
    assert "fla 0.5.1 is not a version the fla adapter knows; known versions: 0.6.0, 0.5.2+pr977, 0.5.2" in line


# ---- exit status 4: an internal error, its traceback kept -----------------------------------------------


def test_internal_error_saves_its_traceback_in_the_report(gdn, tmp_path, monkeypatch) -> None:
    def broken(*args: object, **kwargs: object) -> Check:
        raise RuntimeError("planted internal error")

    monkeypatch.setattr(runner, "run_property", broken)
    status, _, err = gdn("check", *TINY)
    assert status == cli_common.EXIT_INTERNAL
    line = _one_line(err)
    assert "internal error: RuntimeError: planted internal error" in line and "internal-error.txt" in line
    saved = (tmp_path / REPORT / "internal-error.txt").read_text()
    assert saved.startswith("Traceback") and "planted internal error" in saved
    assert _summary(tmp_path)["status"] == "internal-error"


# ---- --help documents the statuses; families ---------------------------------------------------------


@pytest.mark.parametrize("argv", [[], ["check"], ["fuzz"], ["repro"], ["bench"], ["families"], ["faithful"]])
def test_help_documents_the_exit_statuses(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "exit status:" in out
    for status in ("0 ", "1 ", "2 ", "3 ", "4 ", "130 ") if argv != ["repro"] else ("0 ", "1 ", "2 "):
        assert f"\n  {status}" in out, (status, out)


def test_families_lists_every_known_family(gdn) -> None:
    from gdn_equiv.model.families import known_families

    status, out, _ = gdn("families")
    assert status == cli_common.EXIT_OK
    for name in known_families():
        assert name in out


def test_family_option_reaches_every_row(gdn, tmp_path, monkeypatch) -> None:
    """``--family all``: every family gets its rows, each carrying its family (row id, JSON, JUnit, table)."""
    from gdn_equiv.model.families import known_families

    seen: list[tuple[str, str]] = []

    def fake_property(name: str, backend: str, *, family: str, dtype: str, **_: object) -> Check:
        seen.append((name, family))
        return Check(name, backend, dtype, family=family, examples=1)

    def fake_search(condition: object, backend: str, *, family: str, **_: object) -> Check:
        seen.append((f"P6-{condition.id}", family))  # type: ignore[attr-defined]
        return Check(f"P6-necessity-{condition.id}", backend, family=family, examples=1, result="counterexample")  # type: ignore[attr-defined]

    monkeypatch.setattr(runner, "run_property", fake_property)
    monkeypatch.setattr(runner, "find_counterexample", fake_search)
    status, out, _ = gdn(
        "check", "--family", "all", "--examples", "1", "--dtype", "float32", "--property", "P3-forward-exact",
        "--property", "P6-necessity-G8", "--junit-xml", "junit.xml",
    )  # fmt: skip
    assert status == cli_common.EXIT_OK, out
    families = known_families()
    assert seen == [(n, f) for f in families for n in ("P3-forward-exact", "P6-G8")]
    rows = _summary(tmp_path)["checks"]
    assert [r["family"] for r in rows] == [f for f in families for _ in range(2)]
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="P3-forward-exact[torch-float32]"' in junit  # the default family keeps its old ids
    for family in families[1:]:
        assert f'name="P3-forward-exact[torch-float32-{family}]"' in junit and family in out


def test_run_property_draws_examples_of_the_family(monkeypatch) -> None:
    import gdn_equiv.strategies as strategies

    asked: list[object] = []
    real = strategies.examples

    def spy(**kwargs: object) -> object:
        asked.append(kwargs.get("family"))
        return real(**{**kwargs, "family": "gated_deltanet"})

    monkeypatch.setattr(strategies, "examples", spy)
    check = runner.run_property("P3-forward-exact", "torch", max_examples=1, max_seq_len=4, family="kda")
    # the premise's two strategies (fusable, one condition broken), each of kda alone
    assert asked == [("kda",), ("kda",)] and check.family == "kda" and check.row_id == "P3-forward-exact[torch-any-kda]"


# ---- nothing passes by mistake ----------------------------------------------------------------------


def test_property_with_no_applicable_example_is_not_exercised_and_fails(gdn, tmp_path, monkeypatch) -> None:
    from gdn_equiv.harness import properties as P

    def never_applies(example: object, **_: object) -> None:
        raise P.NotApplicable("planted: never applies")

    # drawn with no promise to apply (P3's own premise builds most examples to apply: see the next test)
    record = dataclasses.replace(registry.get_record("P3-forward-exact"), check=never_applies, premise=any_examples)
    monkeypatch.setitem(registry.records(), "P3-forward-exact", record)
    status, out, _ = gdn("check", *TINY, "--examples", "2", "--property", "P3-forward-exact")
    assert status == cli_common.EXIT_FAILED
    assert "NOT EXERCISED P3-forward-exact[torch-float32]" in out and "planted: never applies" in out
    assert [r["result"] for r in _summary(tmp_path)["checks"]] == ["not exercised"]


def test_an_example_built_to_meet_the_premise_that_does_not_is_a_failure(gdn, tmp_path, monkeypatch) -> None:
    """P3 draws states built fusable from the spec's conditions: a property (or guard) that calls them
    not applicable compared nothing on them, and that fails the row rather than thinning it out."""
    from gdn_equiv.harness import properties as P

    def never_applies(example: object, **_: object) -> None:
        raise P.NotApplicable("planted: the guard refuses")

    record = dataclasses.replace(registry.get_record("P3-forward-exact"), check=never_applies)
    monkeypatch.setitem(registry.records(), "P3-forward-exact", record)
    status, out, _ = gdn("check", *TINY, "--examples", "5", "--property", "P3-forward-exact")
    assert status == cli_common.EXIT_FAILED, out
    assert "FAIL P3-forward-exact[torch-float32]" in out and "built to meet the property's premise" in out
    assert [r["result"] for r in _summary(tmp_path)["checks"]] == ["FAIL"]


def test_necessity_search_where_the_separate_path_breaks_is_a_finding(gdn, tmp_path, planted) -> None:
    """A backend that never runs makes the separate (production) path raise: a finding about the kernel,
    never a counterexample for the condition, and never a row that passes."""
    status, out, _ = gdn(
        "check", "--profile", "dev", "--max-seq-len", "4", "--backend", "planted_kernels:always_raises",
        "--property", "P6-necessity-G8", "--necessity-examples", "3",
    )  # fmt: skip
    assert status == cli_common.EXIT_FAILED, out
    assert "FAIL P6-necessity-G8" in out and "separate (production) path raised" in out
    (row,) = _summary(tmp_path)["checks"]
    assert row["result"] == "FAIL" and row["example"] is not None


def test_necessity_search_with_no_applicable_example_is_not_exercised_and_fails(gdn, tmp_path, monkeypatch) -> None:
    """States the guard fuses are not applicable to a necessity search: a search drawing only those
    checked nothing."""
    from gdn_equiv.strategies import examples

    fusable = examples(fusable=True, max_seq_len=4).map(lambda e: registry.Draw(e, False))
    record = dataclasses.replace(registry.get_record("P6-necessity-G8"), premise=lambda *_: fusable)
    monkeypatch.setitem(registry.records(), "P6-necessity-G8", record)
    status, out, _ = gdn("check", *TINY[:-1], "--property", "P6-necessity-G8", "--necessity-examples", "3")
    assert status == cli_common.EXIT_FAILED, out
    assert "NOT EXERCISED P6-necessity-G8" in out and "none found" not in out
    (row,) = _summary(tmp_path)["checks"]
    assert row["result"] == "not exercised" and row["examples"] == row["not_applicable"] > 0


def test_necessity_search_that_finds_nothing_fails_on_a_built_in_backend(gdn, tmp_path, monkeypatch) -> None:
    """On torch every condition is known to be necessary: a search that finds nothing is a regression,
    the same verdict as the pytest gate's (one search, one answer)."""
    from gdn_equiv.harness import properties as P

    monkeypatch.setattr(P, "forced_fusion_error", lambda example, **_: None)
    status, out, _ = gdn("check", *TINY[:-1], "--property", "P6-necessity-G8", "--necessity-examples", "3")
    assert status == cli_common.EXIT_FAILED, out
    assert re.search(r"no state where forcing fusion is wrong in [1-9]\d* applicable states on the built-in", out), out
    (row,) = _summary(tmp_path)["checks"]
    assert row["result"] == "FAIL"


def test_necessity_search_that_finds_nothing_on_a_plug_in_says_so(gdn, tmp_path, planted, monkeypatch) -> None:
    """On a plug-in kernel a condition may be stricter than it needs: "none found" is reported, not passed."""
    from gdn_equiv.harness import properties as P

    monkeypatch.setattr(P, "forced_fusion_error", lambda example, **_: None)
    status, out, _ = gdn(
        "check", *TINY[:-1], "--property", "P6-necessity-G8", "--necessity-examples", "3", "--backend",
        "planted_kernels:correct", "--no-isolate",
    )  # fmt: skip
    assert status == cli_common.EXIT_OK, out
    assert re.search(
        r"none found: P6-necessity-G8\[.*\]: G8 is not needed for this kernel: no counterexample in [1-9]", out
    )
    (row,) = _summary(tmp_path)["checks"]
    assert row["result"] == "none found"


# ---- findings never lost: the example database, the time budget, the report as it goes -----------------


def test_fuzz_saves_its_finding_and_the_next_check_replays_it_first(gdn, tmp_path, planted) -> None:
    """A bias-dropping kernel: the first example Hypothesis draws (the simplest: no bias) passes, so a
    one-example check fails only by replaying what fuzz saved; a check of another property in between
    must not delete it (each row has its own database key)."""
    p7 = ["--property", "P7-backend-vs-torch", "--backend", NO_BIAS, *TINY]
    status, out, _ = gdn("check", *p7, "--database", "fresh-db")
    assert status == cli_common.EXIT_OK, out  # the control: one fresh example does not find the defect

    status, out, _ = gdn("fuzz", *p7, "--examples", "10", "--seconds", "30")
    assert status == cli_common.EXIT_FAILED, out
    assert any((tmp_path / ".hypothesis" / "examples").iterdir())

    status, out, _ = gdn("check", *TINY, "--property", "P3-forward-exact", "--backend", NO_BIAS)
    assert status == cli_common.EXIT_OK, out  # both prologues drop the bias: P3 cannot see it

    status, out, _ = gdn("check", *p7)
    assert status == cli_common.EXIT_FAILED, out
    assert "FAIL P7-backend-vs-torch[planted_kernels:no_bias-float32]" in out
    assert "conv_bias" in out


def test_fuzz_time_budget_is_checked_per_example(gdn, tmp_path) -> None:
    """A round of 1000 examples takes far longer than the budget; the run still ends on time."""
    started = time.perf_counter()
    status, out, _ = gdn("fuzz", *TINY, "--property", "P3-forward-exact", "--examples", "1000", "--seconds", "2")
    elapsed = time.perf_counter() - started
    assert status == cli_common.EXIT_OK, out
    # 2.1 s measured on a loaded 2-core machine; a round that ran out its 1,000 examples would take about
    # 15 s (200 such examples: 2.9 s), so 6 s of slack for a busy CI machine still tells the two apart
    assert elapsed < 2 + 6, f"fuzz --seconds 2 took {elapsed:.1f} s"
    summary = _summary(tmp_path)
    assert summary["status"] == "complete" and summary["checks"][0]["budget_spent"] is True


def test_report_is_written_check_by_check(gdn, tmp_path, monkeypatch) -> None:
    """When the third check starts, the first two are already in rows.jsonl and summary.json."""
    real = runner.run_property
    calls: list[str] = []

    def watched(name: str, *args: object, **kwargs: object) -> Check:
        if len(calls) == 2:
            report = tmp_path / REPORT
            lines = (report / "rows.jsonl").read_text().splitlines()
            summary = json.loads((report / "summary.json").read_text())
            assert [json.loads(line)["property"] for line in lines] == calls
            # the ledger: every asked row from the start, those still to run "not reached"
            assert [r["property"] for r in summary["checks"]] == [*calls, "P5-fallback-exact"]
            assert [r["result"] for r in summary["checks"]] == ["pass", "pass", "not reached"]
            assert summary["status"] == "running"
        calls.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(runner, "run_property", watched)
    status, out, _ = gdn(
        "check",
        *TINY,
        "--property",
        "P2-path-taken",
        "--property",
        "P3-forward-exact",
        "--property",
        "P5-fallback-exact",
    )
    assert status == cli_common.EXIT_OK, out
    assert len(calls) == 3 and _summary(tmp_path)["status"] == "complete"


def _subprocess_env(planted: Path) -> dict[str, str]:
    env = dict(os.environ)
    here = str(Path(gdn_equiv.__file__).resolve().parent.parent)  # this checkout, not another install
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(planted), here, env.get("PYTHONPATH")) if p)
    env.pop("HYPOTHESIS_PROFILE", None)
    return env


def test_a_closed_standard_output_stops_the_run_as_an_interrupt(tmp_path, planted) -> None:
    """``gdn-equiv check ... | head``: once the reader has gone, the next line written ends the run with
    status 130 and one line on stderr, the report closed as interrupted (or complete, if only the final
    table was left to print), never an internal error with a saved traceback."""
    argv = [sys.executable, "-m", "gdn_equiv", "check", *TINY, "--property", "P3-forward-exact", "--property",
            "P2-path-taken", "--backend", "torch"]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=_subprocess_env(planted), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        header = proc.stdout.readline()  # what head -1 reads
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert header.startswith("gdn-equiv check:"), header
    assert proc.returncode == cli_common.EXIT_INTERRUPTED, err
    assert err.strip().splitlines() == [
        f"gdn-equiv check: stopped: its standard output was closed; report so far: {REPORT}/summary.json"
    ], err
    assert not (tmp_path / REPORT / "internal-error.txt").exists()
    assert _summary(tmp_path)["status"] in ("interrupted", "complete")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_fuzz_exits_130_with_a_valid_report(tmp_path, planted, sig) -> None:
    argv = [sys.executable, "-m", "gdn_equiv", "fuzz", *TINY, "--property", "P3-forward-exact", "--seconds", "60"]
    env = {**_subprocess_env(planted), "PYTHONFAULTHANDLER": "1"}
    # the child as a terminal would start it: a background job of a non-interactive shell (how CI may
    # run pytest) inherits SIGINT ignored, and gdn-equiv leaves an ignored SIGINT ignored, as Python does
    proc = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    rows = tmp_path / REPORT / "rows.jsonl"
    try:
        deadline = time.monotonic() + 45
        while not (rows.exists() and rows.read_text().strip()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no finished check was reported within 45 s"
            time.sleep(0.1)
        proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # still running: faulthandler prints where it is stuck
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"still running 30 s after {sig.name}; its stacks:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == cli_common.EXIT_INTERRUPTED, (out, err)
    # the one line, unless the signal landed in a gc callback (Hypothesis installs one): Python then
    # prints "Exception ignored in ..." and swallows the KeyboardInterrupt, and the remembered
    # interrupt ends the run at the next example (seen in CI)
    lines = [line for line in err.splitlines() if line.strip()]
    assert "interrupted; report so far:" in lines[-1], err
    assert len(lines) == 1 or lines[0].startswith("Exception ignored in"), err
    summary = _summary(tmp_path)
    logged = [json.loads(line) for line in rows.read_text().splitlines()]
    assert summary["status"] == "interrupted" and summary["checks"], (summary, err)
    # complete up to the last finished check: the summary holds exactly what the log holds
    counts = [r["examples"] for r in summary["checks"]], [r["examples"] for r in logged]
    assert sum(counts[0]) == sum(counts[1]) > 0, (counts, err)


def test_an_interrupt_that_was_swallowed_still_ends_the_run_before_the_next_example(monkeypatch) -> None:
    """The signal handler remembers the interrupt; the runner checks before every example, so code
    under test that swallows the ``KeyboardInterrupt`` (here: the handler ran, nothing was raised)
    cannot keep a fuzz run going."""
    from gdn_equiv.run.report import clear_interrupts, note_interrupt

    calls = []

    def swallows(example, device="cpu"):
        calls.append(example)
        note_interrupt(signal.SIGINT)  # what the handler records before it raises
        return P.check_forward_exact(example, device=device)

    record = dataclasses.replace(registry.get_record("P3-forward-exact"), check=swallows)
    monkeypatch.setitem(registry.records(), "P3-forward-exact", record)
    try:
        with pytest.raises(KeyboardInterrupt, match="a signal arrived during an earlier example"):
            runner.run_property("P3-forward-exact", "torch", max_examples=20, dtype="float32", max_seq_len=4)
    finally:
        clear_interrupts()
    assert len(calls) == 1


# ---- repro: the failure file is validated, then replayed -----------------------------------------------


@pytest.fixture(scope="module")
def biased_example(planted: Path) -> object:
    """The smallest example whose layer has conv biases: the bias-dropping kernel fails P7 on it."""
    from hypothesis import find, settings

    from gdn_equiv.strategies import examples

    return find(
        examples(backends=(NO_BIAS,), dtypes=("float32",), max_seq_len=4),
        lambda e: e.config.conv_bias and e.config.use_short_conv,
        settings=settings(database=None, max_examples=500),
    )


@pytest.fixture
def failure_json(tmp_path: Path, biased_example: object) -> Path:
    """A failure file as a run writes it: P7 on the bias-dropping kernel."""
    example = biased_example
    check = Check("P7-backend-vs-torch", NO_BIAS, "float32", function="check_backend_matches_torch")
    check.result, check.failure, check.example = "FAIL", "Mismatch: planted", example
    ReportWriter(tmp_path / "found", device="cpu", meta={}).add(check)
    return Path(check.repro_json)


def test_repro_exits_1_while_the_example_still_fails_and_0_once_fixed(gdn, failure_json, tmp_path) -> None:
    status, out, _ = gdn("repro", str(failure_json))
    assert status == cli_common.EXIT_FAILED and "are not close" in out, out
    fixed = tmp_path / "fixed.json"
    fixed.write_text(failure_json.read_text().replace(NO_BIAS, "torch"))
    status, out, _ = gdn("repro", str(fixed))
    assert status == cli_common.EXIT_OK and "passes now" in out, out


def _edit(path: Path, change: Callable[[dict], object]) -> str:
    data = json.loads(path.read_text())
    change(data)
    return json.dumps(data)


BAD_FILES: dict[str, tuple[Callable[[Path], str | bytes | None], str]] = {
    "missing": (lambda f: None, "no such file"),
    "empty": (lambda f: "", "is empty"),
    "empty-object": (lambda f: "{}", "has no format_version"),
    "a-list": (lambda f: "[]", "must hold a JSON object, got list"),
    "not-json": (lambda f: "{not json", "not JSON"),
    "not-text": (lambda f: b"\xff\xfe\x00{", "not a UTF-8 text file"),
    "future-version": (lambda f: _edit(f, lambda d: d.update(format_version=2)), "format_version 2 is unknown"),
    "version-as-string": (lambda f: _edit(f, lambda d: d.update(format_version="1")), 'format_version "1"'),
    "missing-field": (lambda f: _edit(f, lambda d: d.pop("dtype")), "missing field(s) 'dtype'"),
    "unknown-field": (lambda f: _edit(f, lambda d: d.update(extra=1)), "unknown field(s) 'extra'"),
    "device-as-number": (lambda f: _edit(f, lambda d: d.update(device=0)), "'device' must be a string, got 0"),
    "bool-as-string": (
        lambda f: _edit(f, lambda d: d["example"].update(use_cache="false")),
        'example.use_cache must be a boolean, got "false"',
    ),
    "config-bool-as-string": (
        lambda f: _edit(f, lambda d: d["example"]["config"].update(conv_bias="false")),
        'example.config.conv_bias must be a boolean, got "false"',
    ),
    "int-as-bool": (lambda f: _edit(f, lambda d: d["example"].update(batch=True)), "example.batch must be"),
    "example-missing-field": (
        lambda f: _edit(f, lambda d: d["example"].pop("seq_len")),
        "example is missing field(s) 'seq_len'",
    ),
    "not-a-property": (
        lambda f: _edit(f, lambda d: d.update(function="system")),
        "function 'system' is not a gdn-equiv property",
    ),
    "invalid-example": (lambda f: _edit(f, lambda d: d["example"].update(dtype="int8")), "does not validate"),
}


@pytest.mark.parametrize("make, message", list(BAD_FILES.values()), ids=list(BAD_FILES))
def test_repro_refuses_a_file_that_does_not_validate(gdn, failure_json, tmp_path, make, message) -> None:
    path = tmp_path / "bad.json"
    content = make(failure_json)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    status, out, err = gdn("repro", str(path))
    assert status == cli_common.EXIT_USAGE, (out, err)
    line = _one_line(err)
    assert message in line and str(path) in line, line
    assert "replaying" not in out


def test_a_failure_file_with_conv_facts_reads_back_as_written(tmp_path, biased_example) -> None:
    """A conv's registered facts (``extras``: ``(("head_dim", 1), ("norm", "l2"))``) come back from JSON
    as lists of pairs; the file checker once read ``tuple[str, Any]`` as "a tuple of strings" and refused
    every failure file of an example with a conv norm (what a kernel repo's CI replays)."""
    from gdn_equiv.run.report import read_failure

    spec = dataclasses.replace(biased_example.config.k_conv, extras=(("head_dim", 1), ("norm", "l2")))
    example = dataclasses.replace(biased_example, config=dataclasses.replace(biased_example.config, k_conv=spec))
    check = Check("P7-backend-vs-torch", NO_BIAS, "float32", function="check_backend_matches_torch")
    check.result, check.failure, check.example = "FAIL", "Mismatch: planted", example
    ReportWriter(tmp_path / "facts", device="cpu", meta={}).add(check)
    failure = read_failure(Path(check.repro_json), functions=("check_backend_matches_torch",))
    assert failure.example == example
    # and a pair of the wrong length is still refused, naming the field
    bad = tmp_path / "bad-pair.json"
    bad.write_text(_edit(Path(check.repro_json), lambda d: d["example"]["config"]["k_conv"].update(extras=[["norm"]])))
    with pytest.raises(Exception, match=r"k_conv\.extras must be"):
        read_failure(bad, functions=("check_backend_matches_torch",))


def test_repro_of_a_backend_that_is_gone_is_an_environment_problem(gdn, failure_json, tmp_path) -> None:
    path = tmp_path / "moved.json"
    path.write_text(failure_json.read_text().replace(NO_BIAS, "planted_kernels:needs_an_extra"))
    status, _, err = gdn("repro", str(path))
    assert status == cli_common.EXIT_ENVIRONMENT
    assert "needs the frobnicator extra" in _one_line(err)


# ---- the ledger: a verdict computed from what ran against what was asked ---------------------------------


def test_a_fuzz_budget_too_short_for_the_plan_is_refused_naming_the_minimum(gdn, tmp_path) -> None:
    """``fuzz --seconds 0.001`` once ran nothing and said "0 examples", exit 0; ``--seconds 10`` left rows
    out of the report. Each row needs a share: a shorter budget is a usage error before any example."""
    for seconds in ("0.001", "10"):
        status, _, err = gdn("fuzz", "--profile", "dev", "--seconds", seconds)
        assert status == cli_common.EXIT_USAGE, err
        assert not (tmp_path / REPORT).exists()
        rows = int(re.search(r"(\d+) rows need at least", err).group(1))  # type: ignore[union-attr]
        assert rows >= 20 and f"at least {rows * cli_check.MIN_SECONDS_PER_ROW:g} s" in err, err
    # the count named is the plan's: every row but those that cannot be asked here
    plan = cli_check.plan_run(cli.build_parser().parse_args(["fuzz", "--profile", "dev", "--device", "cpu"]))
    assert rows == sum(r.result != "n/a" for r in cli_check.ledger_rows(plan))


def test_a_row_the_budget_did_not_reach_fails_the_run(gdn, tmp_path, monkeypatch) -> None:
    """The first row's example outlasts the whole budget (the budget is checked before each example):
    the second row never starts, stays "not reached" in the report, and the run fails saying so."""
    from gdn_equiv.harness import properties as P

    def slow(example: object, **kwargs: object) -> object:
        time.sleep(2.5)
        return P.check_path_taken(example, **kwargs)

    record = dataclasses.replace(registry.get_record("P2-path-taken"), check=slow, premise=any_examples)
    monkeypatch.setitem(registry.records(), "P2-path-taken", record)
    status, out, _ = gdn(
        "fuzz", *TINY, "--property", "P2-path-taken", "--property", "P3-forward-exact", "--seconds", "2"
    )
    assert status == cli_common.EXIT_FAILED, out
    assert "NOT REACHED P3-forward-exact[torch-float32]" in out and "not checked" in out, out
    results = {r["property"]: r["result"] for r in _summary(tmp_path)["checks"]}
    assert results == {"P2-path-taken": "pass", "P3-forward-exact": "not reached"}


def test_every_row_gets_a_share_of_the_fuzz_budget(gdn, tmp_path) -> None:
    """No row of a fuzz run ends with 0 examples while the budget lasts: the shares are cumulative. The layer
    rows and the serving rows on the in-house reference (27 asked: the plan's minimum is 27 s, 1 s a row)."""
    status, out, _ = gdn("fuzz", *TINY, "--examples", "2", "--seconds", "30")
    assert status == cli_common.EXIT_OK, out
    rows = _summary(tmp_path)["checks"]
    assert rows and all(r["examples"] > 0 or r["result"] == "n/a" for r in rows), rows


def test_a_row_comparing_a_backend_with_itself_is_not_a_pass(gdn, tmp_path) -> None:
    """On torch, P7's comparisons with torch say n/a (same backend); the fp64 ground truth checks torch."""
    status, out, _ = gdn(
        "check", *TINY, "--property", "P7-backend-vs-torch", "--property", "P7-conv-conformance",
        "--property", "P7-ground-truth", "--examples", "3",
    )  # fmt: skip
    assert status == cli_common.EXIT_OK, out
    results = {r["property"]: (r["result"], r["failure"]) for r in _summary(tmp_path)["checks"]}
    assert results["P7-backend-vs-torch"][0] == results["P7-conv-conformance"][0] == "n/a"
    assert "same backend" in results["P7-backend-vs-torch"][1]
    assert results["P7-ground-truth"][0] == "pass"


def test_the_ground_truth_row_catches_a_defect_the_torch_backend_would_share(gdn, tmp_path, planted) -> None:
    """A bias-dropping kernel passes every comparison with itself; against the fp64 truth it fails."""
    status, out, _ = gdn(
        "check", *TINY, "--property", "P7-ground-truth", "--examples", "40", "--backend", NO_BIAS, "--no-isolate"
    )
    assert status == cli_common.EXIT_FAILED, out
    assert "FAIL P7-ground-truth" in out and "fp64 conv1d" in out, out


def test_a_report_holds_what_this_run_found_and_nothing_older(gdn, tmp_path, planted) -> None:
    """A clean check after a failing one into the same directory leaves no failure file of the old run."""
    status, out, _ = gdn("check", *TINY, "--property", "P7-ground-truth", "--examples", "40", "--backend", NO_BIAS,
                         "--no-isolate")  # fmt: skip
    assert status == cli_common.EXIT_FAILED and list((tmp_path / REPORT).glob("failure-*")), out
    status, out, _ = gdn("check", *TINY, "--property", "P2-path-taken")
    assert status == cli_common.EXIT_OK, out
    assert not list((tmp_path / REPORT).glob("failure-*"))
    assert [r["result"] for r in _summary(tmp_path)["checks"]] == ["pass"]


def test_a_reproducer_of_a_cpu_run_sets_the_triton_interpreter(failure_json) -> None:
    """A Triton kernel found failing on a CPU ran in the interpreter: so does its reproducer."""
    script = failure_json.with_suffix(".py").read_text()
    assert 'os.environ.setdefault("TRITON_INTERPRET", "1")' in script
    assert script.index("TRITON_INTERPRET") < script.index("from gdn_equiv")


def test_repro_of_an_example_whose_premise_no_longer_holds_does_not_say_passes(gdn, tmp_path, failure_json) -> None:
    """A P3 failure whose example the guard now refuses cannot be judged: exit 1, never "passes now"."""
    data = json.loads(failure_json.read_text())
    data["function"], data["property"] = "check_forward_exact", "P3-forward-exact"
    data["example"]["use_cache"] = True  # the guard refuses (G3): P3 does not apply
    data["example"]["cache"] = "empty"
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(data))
    status, out, _ = gdn("repro", str(path))
    assert status == cli_common.EXIT_FAILED, out
    assert "NOT JUDGED" in out and "passes now" not in out, out


def test_a_clean_fuzz_run_prints_no_seed_hint(gdn, tmp_path) -> None:
    """Hypothesis' "@seed(...)" hint follows an exception in a run it seeded, a spent budget included:
    nothing failed, so nothing may read like a failure."""
    status, out, err = gdn("fuzz", *TINY, "--property", "P2-path-taken", "--seconds", "2")
    assert status == cli_common.EXIT_OK, out
    assert "@seed" not in out + err


def test_check_piped_into_head_with_stderr_on_the_same_pipe_exits_130(tmp_path, planted) -> None:
    """``gdn-equiv check 2>&1 | head -3`` exited 1: the line saying the run stopped went to the same
    closed pipe and raised there."""
    argv = [sys.executable, "-m", "gdn_equiv", "check", *TINY, "--property", "P3-forward-exact", "--property",
            "P2-path-taken", "--property", "P5-fallback-exact"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_subprocess_env(planted), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert proc.stdout is not None
    try:
        proc.stdout.readline()
        proc.stdout.close()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == cli_common.EXIT_INTERRUPTED
