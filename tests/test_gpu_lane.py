"""tools/gpu_lane.py reads its own timing file right: what a run over several backends says per backend,
per test file and about a run cut short is what its tests reported, nothing else (the lane's figures go
into docs and notes)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "gpu_lane.py"


@pytest.fixture(scope="module")
def lane():
    spec = importlib.util.spec_from_file_location("gpu_lane", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_lane"] = module
    spec.loader.exec_module(module)
    return module


ROWS = [
    ("test_conformance.py::test_backend_forward_matches_torch[triton]", "passed", "2.00"),
    ("test_conformance.py::test_backend_forward_matches_torch[fla-triton]", "failed", "3.00"),
    ("test_combinations.py::test_backend_matches_torch_in_every_combination[fla-triton-2]", "passed", "5.00"),
    ("test_combinations.py::test_backend_matches_torch_in_every_combination[triton-0]", "passed", "7.00"),
    ("test_necessity.py::test_every_guard_condition_is_necessary[cuda-kda-G4]", "skipped", "0.50"),
    ("test_compare.py::test_native_dtype_boundary[0.0-torch.float64]", "passed", "0.25"),
    ("test_plugin_promises.py::test_a_users_interpreter_setting_is_kept", "passed", "10.00"),
]


def _timing(tmp_path: Path) -> Path:
    path = tmp_path / "tests.tsv"
    lines = ["#collected\t9"]
    lines += ["\t".join([nodeid, "call", outcome, seconds, "", "gw0", "0.00"]) for nodeid, outcome, seconds in ROWS]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_backend_gets_its_own_rows_and_the_longest_name_wins(lane, tmp_path: Path) -> None:
    rows = lane.per_backend(_timing(tmp_path), ["triton", "cuda", "fla-triton"])
    assert rows["triton"] == {"passed": 2, "failed": 0, "skipped": 0, "seconds": 9.0}
    assert rows["fla-triton"] == {"passed": 1, "failed": 1, "skipped": 0, "seconds": 8.0}
    assert rows["cuda"] == {"passed": 0, "failed": 0, "skipped": 1, "seconds": 0.5}
    # a parameter id that only contains a backend's name inside another word is not that backend's row
    assert rows["(shared)"] == {"passed": 2, "failed": 0, "skipped": 0, "seconds": 10.2}


def test_per_file_counts_and_the_collected_count_are_the_reported_ones(lane, tmp_path: Path) -> None:
    path = _timing(tmp_path)
    files = lane.summarise_timing(path)
    assert files["test_conformance.py"]["passed"] == 1 and files["test_conformance.py"]["failed"] == 1
    assert files["test_necessity.py"]["skipped"] == 1
    assert sum(f["passed"] + f["failed"] + f["skipped"] for f in files.values()) == len(ROWS)
    assert lane._collected_count(path) == 9  # 7 reported of 9 collected: a cut run says how far it got
    assert lane.slowest(path, 1) == [("test_plugin_promises.py::test_a_users_interpreter_setting_is_kept", 10.0)]


def test_specialisations_are_counted_per_kernel_name(lane, tmp_path: Path) -> None:
    for folder, name in (("a", "_fwd_kernel"), ("b", "_fwd_kernel"), ("c", "_bwd_kernel")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{name}.cubin").write_bytes(b"")
    assert lane._kernels_by_name(tmp_path) == {"_fwd_kernel": 2, "_bwd_kernel": 1}


def test_time_targets_are_met_only_by_finished_green_runs(lane) -> None:
    def run(backend, phase, seconds, status=0, green=True):
        return {"backend": backend, "phase": phase, "seconds": seconds, "status": status, "green": green}

    five = "triton+cuda+fla-triton+fla-cuda+fla-gluon"
    lines = lane.targets(
        [
            run("triton", "cold", 110.0),
            run("triton", "warm", 31.0),
            run("cuda", "cold", 90.0, status=1, green=False),
            run(five, "cold", 470.1, status="cut at 470.0 s", green=False),
            run(five, "warm", 500.0),
            run("triton+cuda", "cold", 200.0),
        ]
    )
    assert lines == [
        "triton cold: 110.0 s against 120 s: met",
        "triton warm: 31.0 s against 30 s: NOT met",
        "cuda cold: 90.0 s against 120 s: NOT met (red)",
        f"{five} cold: not measured (cut at 470.0 s; target 600 s)",
        f"{five} warm: 500.0 s against 600 s: met",
        "triton+cuda cold: no target for this set of backends (200.0 s)",
    ]


def test_a_warm_runs_longest_test_is_held_to_a_few_seconds(lane) -> None:
    def run(phase, slowest):
        return {"backend": "triton", "phase": phase, "slowest": slowest}

    lines = lane.longest_tests(
        [
            run("cold", [("a.py::test_x[triton]", 300.0)]),
            run("warm", [("test_combinations.py::test_y[triton-3]", 62.0), ("b.py::z", 1.0)]),
            run("warm", [("c.py::test_z[triton]", lane.LONGEST_TEST)]),
            run("warm", []),
        ]
    )
    assert lines == [
        f"triton warm: longest test test_y[triton-3] 62.0 s against {lane.LONGEST_TEST:.0f} s: NOT met",
        f"triton warm: longest test test_z[triton] {lane.LONGEST_TEST:.1f} s against {lane.LONGEST_TEST:.0f} s: met",
    ]


HANGING_SUITE = """
import os
import time


def test_quick():
    pass


def wait_for_the_device():
    with open(os.environ["LANE_TEST_PID"], "w") as out:
        out.write(str(os.getpid()))
    while True:
        time.sleep(0.05)


def test_hang():
    wait_for_the_device()
"""


@pytest.mark.slow
def test_a_cut_run_names_its_unfinished_tests_with_their_stacks_and_leaves_no_worker_running(
    lane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run cut by its limit: the test it left unfinished, its worker and where that worker was (the stack
    it wrote on the way out), and no process of the run left behind to share the device with the next run."""
    (tmp_path / "lanehang").mkdir()
    (tmp_path / "lanehang" / "__init__.py").write_text("")
    (tmp_path / "lanehang" / "test_hang.py").write_text(HANGING_SUITE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("LANE_TEST_PID", str(tmp_path / "pid"))
    out = tmp_path / "out"
    argv = ["--suite", "lanehang", "--backends", "torch", "--phases", "cold", "--limit", "45", "--workers", "2"]
    assert lane.main([*argv, "--out", str(out), "--cache", str(tmp_path / "cache")]) == 1  # cut: red
    (run,) = json.loads((out / "lane.json").read_text())["runs"]
    assert run["status"] == "cut at 45.0 s" and run["totals"]["passed"] == 1
    (left,) = run["unfinished"]
    assert left["test"].endswith("test_hang.py::test_hang") and left["worker"].startswith("gw")
    assert "in wait_for_the_device" in left["stack"][0]  # innermost frame first
    assert "test_hang.py::test_hang" in (out / "lane.md").read_text()
    assert not _running(int((tmp_path / "pid").read_text()))  # the worker that ran it is gone


def _running(pid: int, wait: float = 5.0) -> bool:
    """Whether ``pid`` still runs ``wait`` seconds from now (a SIGKILL takes effect asynchronously): a process
    gone, or a zombie (killed, not yet reaped by its new parent, which here may be an init that reaps late), is not."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True
