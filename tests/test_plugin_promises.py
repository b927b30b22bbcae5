"""The plugin's configure-time promises to a plug-in user (tests of the plugin; not part of the gate).

Each case is a ``python -m pytest --collect-only --pyargs gdn_equiv.suite`` run in a fresh process,
outside any project (the installed plugin, as a kernel repository's CI sees it), all started together:

- names are checked before the first test: an unknown ``--gdn-backend``, ``--gdn-target`` or
  ``--gdn-family``, a bad ``HYPOTHESIS_PROFILE``, ``--gdn-example-timeout`` without ``--gdn-isolate``
  are pytest usage errors (status 4) naming the option;
- a backend or target that cannot run here ends the session with status 3 and one line naming it
  and why (a run that skipped them would pass having checked nothing it was asked to);
- what configuration leaves behind for the tests is observed by a probe plugin (``-p``): Triton's
  interpreter switched on without a GPU (a user's explicit ``TRITON_INTERPRET`` kept), one torch thread
  under it, the Hypothesis profile loaded, the isolation pool and its timeout and worker setup, and
  nothing of this in a pytest run that is not a gdn-equiv run.

A plugin mutant that weakens any of these fails one of the tests below (``tools/mutate.py plugin``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gdn_equiv.harness.isolation import DEFAULT_TIMEOUT
from gdn_equiv.serving.engines import installed_version
from gdn_equiv.targets import get_target

PLANTED = textwrap.dedent(
    """
    from gdn_equiv.model.backends import get_backend


    class _Absent:
        '''A kernel for a device this machine lacks: it loads, and says it cannot run.'''

        forward = staticmethod(get_backend("torch").forward)

        @staticmethod
        def unavailable():
            return "needs the planted accelerator, which this machine lacks"


    absent = _Absent()
    """
)

# An observer, not a stand-in: it reads what the plugin's configure left behind once collection is done.
PROBE = textwrap.dedent(
    """
    import json
    import os


    def pytest_collection_finish(session):
        import torch
        from hypothesis import settings

        from gdn_equiv.harness import isolation
        from gdn_equiv.plugin.options import plan

        pool = isolation._POOL
        state = {
            "active": plan(session.config) is not None,
            "interpret": os.environ.get("TRITON_INTERPRET"),
            "threads": torch.get_num_threads(),
            "profile": settings.get_current_profile_name(),
            "isolation": None if pool is None else {"timeout": pool.timeout, "setup": list(pool.setup)},
            "ids": [item.nodeid for item in session.items],
        }
        print("GATE-PROBE " + json.dumps(state), flush=True)
    """
)

FLA_REASON = get_target("fla").unavailable()
ON_CPU = not __import__("torch").cuda.is_available()
HAS_XDIST = __import__("importlib.util").util.find_spec("xdist") is not None


ONE_FAMILY = ["--gdn-backend", "torch,torch", "--fla-core", "reference"]


def _cases() -> dict[str, tuple[list[str], dict[str, str | None]]]:
    """name -> (pytest arguments after ``--pyargs``, environment changes; None unsets). A run that is to
    collect names one light module of the suite: collecting all of it costs seconds of CPU a run."""
    light, necessity = ["gdn_equiv.suite.test_bad_input"], ["gdn_equiv.suite.test_necessity"]
    fla = ["--gdn-target", "fla", "--fla-core", "reference", "--gdn-family", "gated_deltanet"]
    suite = ["gdn_equiv.suite"]
    cases: dict[str, tuple[list[str], dict[str, str | None]]] = {
        "default": (necessity, {}),
        # --fla-core only matters with the fla target
        "isolate, one family": (
            [*necessity, "--gdn-isolate", "--gdn-example-timeout", "7", "--gdn-family", "gla", *ONE_FAMILY],
            {},
        ),
        "interpreter off, isolate": ([*light, "--gdn-isolate"], {"TRITON_INTERPRET": "0"}),
        "unknown backend": ([*suite, "--gdn-backend", "no-such-backend"], {}),
        "absent backend": ([*suite, "--gdn-backend", "gate_planted:absent"], {}),
        "unknown target": ([*suite, "--gdn-target", "no-such-target"], {}),
        "unknown family": ([*suite, "--gdn-family", "no-such-family"], {}),
        "bad profile": (suite, {"HYPOTHESIS_PROFILE": "no-such-profile"}),
        "timeout without isolate": ([*suite, "--gdn-example-timeout", "5"], {}),
        "isolate, bad timeout": ([*suite, "--gdn-isolate", "--gdn-example-timeout", "-1"], {}),
        "reference core, other families": ([*suite, "--gdn-target", "fla", "--fla-core", "reference"], {}),
        "unknown fla version": ([*suite, *fla], {"FAKE_FLA": "1"}),
        "unknown serving engine": ([*suite, "--gdn-serving-engine", "tgi"], {}),
        "unknown vllm version": ([*suite, "--gdn-serving-engine", "vllm"], {"FAKE_VLLM": "1"}),
        "unknown vllm version, one path": ([*suite, "--gdn-serving-engine", "vllm-gpu"], {"FAKE_VLLM": "1"}),
    }
    if installed_version("sglang") is None:
        cases["sglang not installed"] = ([*suite, "--gdn-serving-engine", "sglang"], {})
    if HAS_XDIST:
        cases["absent backend, xdist"] = ([*suite, "--gdn-backend", "gate_planted:absent", "-n", "2"], {})
    if FLA_REASON is None and ON_CPU:
        own_core = ["--gdn-target", "fla", "--fla-core", "fla", "--gdn-family", "gated_deltanet"]
        cases |= {
            "fla, reference core, isolated": ([*light, *fla, "--gdn-isolate"], {}),
            "fla, its own core": ([*suite, *own_core], {}),
            "fla, autotuning": ([*suite, *fla], {"GDN_EQUIV_FLA_AUTOTUNE": "full"}),
            "fla, interpreter off": ([*suite, *fla], {"TRITON_INTERPRET": "0"}),
        }
    return cases


class Runs:
    """The configure-time runs, started on demand (each test starts the ones it reads, together) and
    kept for the module: a plugin mutant killed by the first test costs that test's runs only."""

    def __init__(self, work: Path) -> None:
        self.work, self.cases = work, _cases()
        self.cases["not a gdn-equiv run"] = ([], {})
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.done: dict[str, subprocess.CompletedProcess[str]] = {}
        (work / "gate_planted.py").write_text(PLANTED)
        (work / "gate_probe.py").write_text(PROBE)
        fake = work / "fake_fla" / "fla"  # an fla whose version the adapter's table does not know
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text('__version__ = "9.9.9"\n')
        # a vLLM whose version the serving engines' table does not know: its metadata alone
        info = work / "fake_vllm" / "vllm-9.9.9.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n")
        # an unrelated project: its pytest run must not become a gdn-equiv run
        (work / "other_project").mkdir()
        (work / "other_project" / "test_plain.py").write_text("def test_plain():\n    pass\n")

    def start(self, *names: str) -> Runs:
        base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "gate_probe", "--collect-only", "-q"]
        for name in names:
            if name in self.procs:
                continue
            argv, changes = self.cases[name]
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GDN_", "TRITON_", "CI"))}
            env["HYPOTHESIS_PROFILE"] = "dev"
            path = [str(self.work), os.environ.get("PYTHONPATH", "")]
            if changes.get("FAKE_FLA"):
                path.insert(0, str(self.work / "fake_fla"))
            if changes.get("FAKE_VLLM"):
                path.insert(0, str(self.work / "fake_vllm"))
            for key, value in changes.items():
                if not key.startswith("FAKE_"):
                    env.pop(key, None) if value is None else env.__setitem__(key, value)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
            if name == "not a gdn-equiv run":
                other = self.work / "other_project"
                command, cwd = [*base, str(other)], other
            else:
                command, cwd = [*base, "--pyargs", *argv], self.work
            self.procs[name] = subprocess.Popen(  # a session of its own: a kill reaches its xdist workers too
                command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True,
            )  # fmt: skip
        return self

    def __getitem__(self, name: str) -> subprocess.CompletedProcess[str]:
        if name not in self.done:
            proc = self.start(name).procs[name]
            try:
                out, err = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
            self.done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        return self.done[name]


def not_installed() -> str | None:
    """Why the runs below cannot see the plugin as a user's pytest does (its ``pytest11`` entry point), or
    ``None``. A tree on ``PYTHONPATH`` is loaded by the checkout's ``conftest.py`` only: every run outside
    it would fail on "unrecognized arguments: --gdn-..." instead of checking a promise."""
    points = [e for e in importlib.metadata.entry_points(group="pytest11") if e.value == "gdn_equiv.pytest_plugin"]
    if not points:
        return (
            "gdn-equiv is not installed with its entry points (no pytest11 entry point names gdn_equiv.pytest_plugin): "
            "these promises are the installed plugin's; install the package (pip install --no-deps "
            "--no-build-isolation . on a machine without a network) and run the gate again"
        )
    return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    reason = not_installed()
    if reason is not None:
        pytest.fail(reason, pytrace=False)  # a promise not checked is not kept: red, with the one reason
    return Runs(tmp_path_factory.mktemp("promises"))


def _probe(result: subprocess.CompletedProcess[str]) -> dict:
    """The probe's report of a run that collected: status 0 and what configure left behind."""
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("GATE-PROBE ")]
    assert len(lines) == 1, result.stdout[-3000:]
    return json.loads(lines[0].removeprefix("GATE-PROBE "))


USAGE_ERRORS = (
    "unknown backend",
    "unknown target",
    "unknown family",
    "bad profile",
    "timeout without isolate",
    "isolate, bad timeout",
    "reference core, other families",
)


def _usage_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    text = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, text[-3000:]
    assert all(n in result.stderr for n in needles), text[-3000:]
    assert "GATE-PROBE" not in result.stdout, text[-3000:]


def _environment_exit(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Status 3 before any test, and one line on stderr that names the option, the value and why."""
    text = result.stdout + result.stderr
    assert result.returncode == 3, text[-3000:]
    lines = [line for line in result.stderr.splitlines() if "cannot run here" in line]
    assert len(lines) == 1 and all(n in lines[0] for n in needles), text[-3000:]
    assert "gdn-equiv: " in lines[0], lines[0]
    assert "GATE-PROBE" not in result.stdout, text[-3000:]


@pytest.mark.slow
def test_a_gate_run_is_configured_for_the_machine_it_runs_on(runs) -> None:
    runs.start("default")
    state = _probe(runs["default"])
    assert state["active"] and state["profile"] == "dev", state
    assert state["isolation"] is None, state
    if ON_CPU:  # no GPU: Triton kernels run under the interpreter, one torch thread (tiny examples)
        assert state["interpret"] == "1" and state["threads"] == 1, state
    assert len(_necessity_families(state)) > 1  # every family by default
    assert "gdn-equiv:" in runs["default"].stdout  # the run's example tally, printed by an active plugin


def _necessity_families(state: dict) -> set[str]:
    ids = [i for i in state["ids"] if "test_every_guard_condition_is_necessary[" in i]
    assert ids, state["ids"][:20]
    return {i.split("[")[1].split("-")[1] for i in ids}


@pytest.mark.slow
def test_names_narrow_the_run_and_isolation_is_configured_as_asked(runs) -> None:
    state = _probe(runs["isolate, one family"])
    assert _necessity_families(state) == {"gla"}
    assert all("[torch-" in i for i in state["ids"] if "necessary[" in i), state["ids"]
    assert len(state["ids"]) == len(set(state["ids"]))  # torch named twice runs once
    assert state["isolation"] == {"timeout": 7.0, "setup": []}, state


@pytest.mark.slow
def test_unknown_names_and_bad_settings_are_usage_errors(runs) -> None:
    runs.start(*USAGE_ERRORS)
    _usage_error(runs["unknown backend"], "--gdn-backend:", "no-such-backend")
    _usage_error(runs["unknown target"], "--gdn-target: unknown target 'no-such-target'")
    _usage_error(runs["unknown family"], "--gdn-family:", "no-such-family")
    _usage_error(runs["bad profile"], "HYPOTHESIS_PROFILE='no-such-profile' is not a profile")
    _usage_error(runs["timeout without isolate"], "--gdn-example-timeout needs --gdn-isolate")
    _usage_error(runs["isolate, bad timeout"], "--gdn-example-timeout:")
    _usage_error(runs["reference core, other families"], "--fla-core reference swaps in the core of gated_deltanet")


@pytest.mark.slow
def test_a_backend_or_target_that_cannot_run_here_ends_the_session_with_status_3(runs) -> None:
    runs.start("absent backend", "unknown fla version", *(["absent backend, xdist"] if HAS_XDIST else []))
    why = ("--gdn-backend 'gate_planted:absent'", "needs the planted accelerator, which this machine lacks")
    _environment_exit(runs["absent backend"], *why)
    if HAS_XDIST:
        _environment_exit(runs["absent backend, xdist"], *why)  # the controller ends it, before any worker
    _environment_exit(
        runs["unknown fla version"], "--gdn-target 'fla'", "fla 9.9.9 is not a version the fla adapter knows"
    )


@pytest.mark.slow
def test_serving_engine_names_are_checked_and_one_that_cannot_run_here_ends_the_session(runs) -> None:
    runs.start(
        "unknown serving engine",
        "unknown vllm version",
        "unknown vllm version, one path",
        *[n for n in runs.cases if n == "sglang not installed"],
    )
    _usage_error(runs["unknown serving engine"], "--gdn-serving-engine: no serving engine 'tgi'; known:")
    why = "vllm 9.9.9 is not a version the adapter knows"
    # an engine's paths each say why; one path asked by name gives its reason alone
    _environment_exit(runs["unknown vllm version"], "--gdn-serving-engine 'vllm'", f"vllm-cpu-torch: {why}")
    one_path = runs["unknown vllm version, one path"]
    _environment_exit(one_path, f"--gdn-serving-engine 'vllm-gpu' cannot run here: {why}")
    if "sglang not installed" in runs.cases:
        _environment_exit(runs["sglang not installed"], "--gdn-serving-engine 'sglang'", "sglang is not installed")


@pytest.mark.slow
def test_a_users_interpreter_setting_is_kept(runs) -> None:
    runs.start("interpreter off, isolate", "not a gdn-equiv run")
    state = _probe(runs["interpreter off, isolate"])
    assert state["interpret"] == "0", state
    # torch's own thread count (the unrelated run's): the one-thread rule is for the interpreter's examples
    assert state["threads"] == _probe(runs["not a gdn-equiv run"])["threads"], state
    assert state["isolation"] == {"timeout": DEFAULT_TIMEOUT, "setup": []}, state


@pytest.mark.slow
@pytest.mark.skipif(FLA_REASON is not None or not ON_CPU, reason=f"needs fla on a CPU ({FLA_REASON or 'a GPU here'})")
def test_fla_on_a_cpu_runs_only_as_the_interpreter_can(runs) -> None:
    runs.start("fla, reference core, isolated", "fla, its own core", "fla, autotuning", "fla, interpreter off")
    state = _probe(runs["fla, reference core, isolated"])
    assert state["interpret"] == "1", state
    # a fresh worker must make fla's kernels runnable under the interpreter, as this process did
    ready = "gdn_equiv.plugin.options:fla_interpreter_ready"
    assert state["isolation"] == {"timeout": DEFAULT_TIMEOUT, "setup": [ready]}, state
    _environment_exit(runs["fla, its own core"], "--gdn-target 'fla'", "fla's own cores do not run under Triton's")
    _environment_exit(runs["fla, autotuning"], "GDN_EQUIV_FLA_AUTOTUNE=full asks fla to autotune")
    _environment_exit(runs["fla, interpreter off"], "needs a CUDA device, or TRITON_INTERPRET=1 on a CPU")


@pytest.mark.slow
def test_a_pytest_run_that_is_not_a_gdn_equiv_run_is_left_alone(runs) -> None:
    state = _probe(runs["not a gdn-equiv run"])
    assert not state["active"] and state["interpret"] is None and state["isolation"] is None, state
    assert "gdn-equiv:" not in runs["not a gdn-equiv run"].stdout
