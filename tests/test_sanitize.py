"""``--gdn-sanitize TOOL`` / ``check --sanitize TOOL``: each example in a process under compute-sanitizer.

On a CPU: the options are parsed and checked, a machine without compute-sanitizer or without a GPU
is refused with status 3 before any example runs, and the path "sanitizer report -> a failing example
with the report attached, shrunk by Hypothesis" runs through :class:`~gdn_equiv.harness.isolation.SanitizedPool`
with a fake ``compute-sanitizer`` (a script that runs the command and reports the planted marker
:data:`~gdn_equiv.harness.planted.SANITIZER_MARKER` the way the real one reports an invalid read). The planted
Triton kernels (``SANITIZER_OOB``, ``SANITIZER_RACE``) are caught by the real tool on a GPU only; here
the out-of-bounds one is shown bitwise right (the defect is in its accesses, not its values).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gdn_equiv.harness import isolation, planted
from gdn_equiv.model.backends import get_backend, torch_backend
from gdn_equiv.run.cli import main
from gdn_equiv.run.cli.common import EXIT_ENVIRONMENT, EXIT_USAGE

FAKE = f"""#!{sys.executable}
# a fake compute-sanitizer: runs the command after its options; the planted marker in its output is "an error"
import subprocess, sys

args = sys.argv[1:]
opts = {{}}
while args and args[0].startswith("--"):
    opts[args[0]] = args[1]
    args = args[2:]
done = subprocess.run(args, capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
marker = [line for line in done.stderr.splitlines() if line.startswith({planted.SANITIZER_MARKER!r})]
if marker:
    with open(opts["--log-file"], "w") as log:
        log.write("========= COMPUTE-SANITIZER\\n")
        log.write("========= Invalid __global__ read of size 4 bytes\\n")
        log.write("=========     at planted_conv_fwd_kernel+0x1a0 (tool " + opts["--tool"] + ")\\n")
        log.write("=========     " + marker[0] + "\\n")
        log.write("========= ERROR SUMMARY: 1 error\\n")
    sys.exit(int(opts["--error-exitcode"]))
sys.exit(done.returncode)
"""


SANITIZE = ("-k", "P3", "--gdn-sanitize", "initcheck")
P3_ONCE = ("--property", "P3-forward-exact", "--examples", "1")


@pytest.fixture
def fake_sanitizer(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "compute-sanitizer"
    path.parent.mkdir()
    path.write_text(FAKE)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_sanitizer(monkeypatch, tmp_path: Path) -> None:
    """A PATH and CUDA_HOME without compute-sanitizer (the python running the tests stays reachable)."""
    if os.access("/usr/local/cuda/bin/compute-sanitizer", os.X_OK):
        pytest.skip("this machine has compute-sanitizer in /usr/local/cuda/bin")
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))


@pytest.mark.slow  # each call starts an interpreter that imports torch: seconds a call
def test_a_sanitizer_report_is_a_failing_example_with_the_report_shrunk(fake_sanitizer: Path, monkeypatch) -> None:
    from hypothesis.internal.conjecture import engine

    # the plugin bounds shrinking by profile (dev: 10 s), less than a few sanitized calls take on a busy CPU
    monkeypatch.setattr(engine, "MAX_SHRINKING_SECONDS", 300)
    isolation.configure(60, sanitize="memcheck", sanitizer=str(fake_sanitizer))
    seen: list[int] = []

    @settings(max_examples=6, database=None, derandomize=True, deadline=None)
    @given(st.integers(2, 4))
    def calls(T: int) -> None:
        seen.append(T)
        assert isolation.call(planted.sanitizer_marked_call, T) is True  # its value comes back when clean

    try:
        with pytest.raises(isolation.SanitizerReport) as failure:
            calls()
    finally:
        isolation.configure(None)
    text = str(failure.value)
    assert "compute-sanitizer --tool memcheck reported errors while the example ran: sanitizer_marked_call on 3" in text
    assert "Invalid __global__ read of size 4 bytes" in text and "(tool memcheck)" in text
    assert f"{planted.SANITIZER_MARKER} T=3" in text  # the report of the shrunk example, not of a larger one
    assert min(seen) < 3 and any(T >= 3 for T in seen)  # clean calls passed, the marked ones failed


@pytest.mark.slow
def test_a_sanitized_call_returns_its_value_and_a_death_is_a_death(fake_sanitizer: Path) -> None:
    pool = isolation.SanitizedPool("racecheck", timeout=60, executable=str(fake_sanitizer))
    assert pool.call(planted.sanitizer_marked_call, 2) is True
    from gdn_equiv.harness import conformance
    from gdn_equiv.strategies import ConvCall

    # a backend goes as its name and is resolved in the sanitized process, after its setup
    call = ConvCall(B=1, T=3, D=4, W=2, initial_state=True, seed=1)
    assert pool.call(conformance.check_forward, call, get_backend("torch"), "cpu") is None
    with pytest.raises(isolation.WorkerDied, match="exited with status 7"):
        pool.call(os._exit, 7)
    assert pool.deaths == 1 and pool.reports == 0


def test_an_unknown_tool_is_refused() -> None:
    with pytest.raises(ValueError, match="sanitizer tool must be one of memcheck, racecheck, initcheck, synccheck"):
        isolation.SanitizedPool("leakcheck", executable="/bin/true")


def test_check_without_compute_sanitizer_is_status_3_before_any_example(capsys, no_sanitizer) -> None:
    assert main(["check", "--sanitize", "memcheck", *P3_ONCE]) == EXIT_ENVIRONMENT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "compute-sanitizer" in err and "not on PATH" in err


def test_check_without_a_gpu_is_status_3_naming_it(capsys, monkeypatch, fake_sanitizer: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    monkeypatch.setenv("PATH", f"{fake_sanitizer.parent}{os.pathsep}{os.environ['PATH']}")
    assert main(["check", "--sanitize", "racecheck", *P3_ONCE]) == EXIT_ENVIRONMENT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--sanitize racecheck" in err and "no CUDA device here" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sanitize", "leakcheck"], "invalid choice: 'leakcheck'"),
        (["--sanitize", "memcheck", "--no-isolate"], "not with --no-isolate"),
    ],
)
def test_check_refuses_a_bad_sanitize_option(capsys, argv, message) -> None:
    try:
        status = main(["check", *argv])
    except SystemExit as exc:  # argparse's own refusal
        status = exc.code
    assert status == EXIT_USAGE and message in capsys.readouterr().err


@pytest.mark.slow
def test_gate_without_compute_sanitizer_ends_with_status_3_before_any_test(tmp_path: Path, no_sanitizer) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--pyargs",
            "gdn_equiv.suite",
            "-k",
            "P3",
            *SANITIZE,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=os.environ,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    said = [line for line in (done.stdout + done.stderr).splitlines() if "gdn-equiv:" in line]
    assert said and "--gdn-sanitize initcheck cannot run here" in said[0] and "compute-sanitizer" in said[0]
    assert "passed" not in done.stdout


def test_the_planted_out_of_bounds_kernel_is_bitwise_the_clean_one() -> None:
    if planted.SANITIZER_OOB.unavailable() is not None:
        pytest.skip(planted.SANITIZER_OOB.unavailable())
    gen = torch.Generator().manual_seed(0)
    for B, T, D in ((2, 4, 5), (1, 3, 16)):
        x = torch.randn(B, T, D, generator=gen)
        weight, bias = torch.randn(D, 4, generator=gen), torch.randn(D, generator=gen)
        clean = planted.SANITIZER_CLEAN.forward(x, weight, bias, "silu", None, False, None)[0]
        oob = planted.SANITIZER_OOB.forward(x, weight, bias, "silu", None, False, None)[0]
        assert torch.equal(clean, oob)
        torch.testing.assert_close(clean, torch_backend.forward(x, weight, bias, "silu", None, False, None)[0])


def test_memcheck_pads_every_allocation_so_a_read_just_past_a_tensor_is_outside_all(tmp_path: Path) -> None:
    """On the H200 the planted one-past-the-edge read passed memcheck clean: the next tensor began where x
    ended. memcheck's ``--padding`` is asked for memcheck (and only there: the other tools do not take it)."""
    exe = tmp_path / "compute-sanitizer"
    exe.write_text("#!/bin/sh\n")
    for tool in isolation.SANITIZER_TOOLS:
        cmd = isolation.SanitizedPool(tool, executable=str(exe)).command(tmp_path / "l", tmp_path / "q", tmp_path / "r")
        assert ("--padding" in cmd) == (tool == "memcheck"), cmd
        if tool == "memcheck":
            assert int(cmd[cmd.index("--padding") + 1]) >= 16


def _sass(edge: int, race: int) -> str:
    """The planted kernel compiled for sm_90 (Triton's own ptxas, no GPU) and disassembled."""
    import subprocess
    import tempfile

    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget

    try:
        from triton.backends.nvidia.compiler import get_ptxas

        ptxas = get_ptxas(90).path
    except Exception as exc:  # a Triton build without the NVIDIA toolchain
        pytest.skip(f"no ptxas in this Triton: {exc}")
    from gdn_equiv.harness import _sanitizer_kernels as kernels

    fn = kernels.planted_conv_fwd_kernel
    if not hasattr(fn, "cache_key"):  # decorated under the interpreter (a CPU session): compile its Python source
        from triton.runtime.jit import JITFunction

        fn = JITFunction(fn.fn)
    consts = {"W": 4, "HAS_BIAS": True, "BD": 64, "EDGE": edge, "RACE": race}
    signature = {n: "constexpr" if n in consts else ("*fp32" if n.endswith("_ptr") else "i32") for n in fn.arg_names}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=consts)
    target = GPUTarget("cuda", 90, 32)
    options = triton.compiler.make_backend(target).parse_options({"num_warps": 4})
    ptx = triton.compile(src, target=target, options=options.__dict__).asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        subprocess.run([ptxas, "-arch=sm_90a", f"{tmp}/k.ptx", "-o", f"{tmp}/k.cubin"], check=True)
        nvdisasm = str(Path(ptxas).with_name("nvdisasm"))
        return subprocess.run([nvdisasm, "-c", f"{tmp}/k.cubin"], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_the_planted_race_keeps_its_shared_load_in_the_machine_code() -> None:
    """On the H200 the planted race passed racecheck clean: ptxas had dropped its shared-memory load (its value
    fed a select the compiler could fold). The racing store and load must both be in the SASS, no barrier
    between; the clean build has neither."""
    race, clean = _sass(0, 1), _sass(0, 0)
    assert "STS" in race and "LDS" in race and "BAR" not in race, race
    assert "STS" not in clean and "LDS" not in clean


def test_the_gates_forward_check_reaches_the_planted_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The conformance forward check asks for the final state; the planted kernels must run for such calls (on
    the H100 they ran only for calls without one, so the sanitized gate never reached them: 15 examples green
    under memcheck). Launches of the planted Triton kernel counted, through the gate's own check."""
    if planted.SANITIZER_OOB.unavailable() is not None:
        pytest.skip(planted.SANITIZER_OOB.unavailable())
    from gdn_equiv.harness import _sanitizer_kernels as kernels
    from gdn_equiv.harness import conformance
    from gdn_equiv.model.backends import registered
    from gdn_equiv.strategies import ConvCall

    launches: list[tuple] = []
    kernel = kernels.planted_conv_fwd_kernel

    class Counted:
        def __getitem__(self, grid: tuple) -> object:
            launches.append(grid)
            return kernel[grid]

    monkeypatch.setattr(kernels, "planted_conv_fwd_kernel", Counted())
    call = ConvCall(B=1, T=5, D=6, W=3, dtype="float32", bias=True, activation="silu", initial_state=False)
    with registered(planted.SANITIZER_OOB):
        conformance.check_forward(call, planted.SANITIZER_OOB, "cpu")
    assert launches == [(1, 5)]
