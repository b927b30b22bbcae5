"""``gdn-equiv bench layer|prologue`` on CPU in ``--quick`` mode: it runs, its JSON says what the
table says, the table is printed once, the plot is written, bad arguments are refused before
anything runs. Times here are smoke, never asserted: speed lives in the command, not in a test."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from gdn_equiv.run import bench
from gdn_equiv.run.cli import main
from gdn_equiv.run.cli.common import EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

QUICK = ["--quick", "--iters", "2", "--warmup", "0"]
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def _run(capsys, tmp_path: Path, *argv: str) -> tuple[int, str, dict | None]:
    report = tmp_path / "bench.json"
    status = main(["bench", *argv, "--json", str(report)])
    out = capsys.readouterr().out
    return status, out, json.loads(report.read_text()) if report.exists() else None


def _check_report(report: dict, *, command: str, rows: int, iters: int = 2) -> None:
    assert report["format"] == bench.FORMAT and report["command"] == command and report["status"] == "complete"
    for key in ("device", "device_name", "torch", "triton", "fla", "python"):
        assert key in report["machine"], key
    assert report["machine"]["device"] == "cpu" and report["machine"]["peak_hbm_bytes_per_s"] is None
    assert report["timing"]["iters"] == iters and report["timing"]["quantiles"] == [0.2, 0.5, 0.8]
    assert "perf_counter" in report["timing"]["method"]
    assert report["shapes"] == [{"B": B, "T": T} for B, T in bench.QUICK_SHAPES]
    assert len(report["rows"]) == rows
    for row in report["rows"]:
        assert "error" not in row, row
        for key in ("family", "impl", "backend", "B", "T", "dtype"):
            assert key in row, key
        assert row["family"] in report["families"]
        for p in bench.PASSES:
            for path in bench.PATHS:
                t = row[path][p]
                assert t["n"] == iters and 0 < t["p20_ms"] <= t["median_ms"] <= t["p80_ms"], (path, p, t)
                assert len(t["samples_ms"]) == iters and t["median_ms"] == bench.quantile(t["samples_ms"], 0.5)
            assert row["ratio"][p] == row["separate"][p]["median_ms"] / row["fused"][p]["median_ms"]
        assert row["check"]["fwd_equal"] is True
        assert "fused_gb_per_s" not in row and "fused_hbm_fraction" not in row  # no bandwidth without a GPU


def _tables(out: str) -> int:
    """How many tables ``out`` prints; each one's rows have as many cells as its header."""
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("| family |")]
    for start in starts:
        width = lines[start].count(" | ")
        body = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start + 1 :]))
        assert body and all(line.count("|") == lines[start].count("|") for line in body), (lines[start], body)
        assert all(line.count(" | ") == width for line in body[1:]), body  # data rows: one cell per column
    return len(starts)


def test_bench_layer_quick_two_families(capsys, tmp_path: Path) -> None:
    plot = tmp_path / "layer.png"
    argv = ["layer", *QUICK, "--family", "gated_deltanet,gla", "--backend", "torch"]
    status, out, report = _run(capsys, tmp_path, *argv, *(["--plot", str(plot)] if HAS_MATPLOTLIB else []))
    assert status == EXIT_OK, out
    assert report is not None
    _check_report(report, command="bench layer", rows=2 * len(bench.QUICK_SHAPES))
    assert {r["family"] for r in report["rows"]} == {"gated_deltanet", "gla"}
    assert set(report["families"]) == {"gated_deltanet", "gla"}
    for row in report["rows"]:
        assert (row["impl"], row["backend"], row["dtype"]) == ("gdn_equiv", "torch", "float32")
        path = row["check"]["path"]
        assert path["ok"] and path["launches"] == {"separate": 3, "fused": 1}, path
        assert row["check"]["guard_fuses"] is True
    assert _tables(out) == 1
    assert "fla left out" not in out  # fla was not asked for
    if HAS_MATPLOTLIB:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plot: {plot}" in out


def test_bench_says_each_row_as_it_finishes(capsys, tmp_path: Path) -> None:
    assert main(["bench", "prologue", *QUICK, "--backend", "torch", "--json", str(tmp_path / "r.json")]) == EXIT_OK
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    n = len(bench.QUICK_SHAPES)
    assert [line.split("]")[0] + "]" for line in progress] == [f"[{i}/{n}]" for i in range(1, n + 1)]
    assert all("gated_deltanet gdn_equiv/torch" in line and "fwd+bwd" in line for line in progress)


def test_bench_prologue_quick(capsys, tmp_path: Path) -> None:
    plot = ["--plot", str(tmp_path / "p.png")] if HAS_MATPLOTLIB else []  # an asked-for plot needs the extra
    status, out, report = _run(capsys, tmp_path, "prologue", *QUICK, "--backend", "torch", *plot)
    assert status == EXIT_OK, out
    assert report is not None
    _check_report(report, command="bench prologue", rows=len(bench.QUICK_SHAPES))
    channels = report["families"]["gated_deltanet"]["conv_channels"]
    (B, T), esize, W = bench.QUICK_SHAPES[0], 4, 4
    D = sum(channels.values())
    act, weight = B * T * D * esize, D * W * esize
    moved = report["rows"][0]["fused_min_bytes"]
    assert moved["fwd"] == 2 * act + weight  # read x, write y, read the weight
    assert moved["fwd_bwd"] == moved["fwd"] + 3 * act + weight  # read dy and x, write dx and dweight
    assert all(f"| {r['B']} | {r['T']} | float32 |" in out for r in report["rows"])
    assert out.count(" | bitwise |") == len(report["rows"])  # the check column, one per row
    assert _tables(out) == 1 and "| gated_deltanet | gdn_equiv | torch |" in out


def test_a_gpu_reports_bandwidth_column(capsys, tmp_path: Path) -> None:
    """The GB/s column (filled only on a GPU): a CPU report given a GPU row's bandwidth fields prints
    them, and a row without them (an older report, an error) keeps the table's width."""
    status, _, report = _run(capsys, tmp_path, "prologue", *QUICK, "--backend", "torch")
    assert status == EXIT_OK and report is not None
    first = report["rows"][0]
    first["fused_gb_per_s"] = {"fwd": 2199.6, "fwd_bwd": 1979.4}
    first["fused_hbm_fraction"] = {"fwd": 0.6566, "fwd_bwd": 0.5909}
    table = bench.format_table(report)
    assert _tables(table) == 1 and "fused GB/s fwd / fwd+bwd" in table
    assert "| 2200 / 1979 (66% / 59% of HBM) | bitwise |" in table
    assert table.count("|  | bitwise |") == len(report["rows"]) - 1


def test_bandwidth_figures() -> None:
    # B2 T2048 D6144 bf16 W4: read x and write y (2 x 50,331,648 bytes) and read the weight (49,152) in
    # 0.0458 ms is 2.199 TB/s, 65.6% of an H100 SXM's 3.35 TB/s
    moved = {"fwd": 100_712_448}
    figures = bench.bandwidth_figures(moved, {"fwd": 0.0458}, 3.35e12)
    assert figures["fused_gb_per_s"]["fwd"] == pytest.approx(2198.96, abs=0.01)
    assert figures["fused_hbm_fraction"]["fwd"] == pytest.approx(0.6564, abs=1e-4)
    assert bench.bandwidth_figures(moved, {"fwd": 0.0458}, None).keys() == {"fused_gb_per_s"}


@pytest.mark.parametrize(
    "name,peak",
    [("NVIDIA H200", 4.8e12), ("NVIDIA H100 80GB HBM3", 3.35e12), ("NVIDIA H100 PCIe", None), ("NVIDIA A100", None)],
)
def test_peak_hbm_is_known_only_for_the_cards_it_names(monkeypatch, name: str, peak: float | None) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert bench.peak_hbm("cuda") == peak  # an H100 PCIe (HBM2e, 2 TB/s) is not taken for the SXM card
    assert bench.peak_hbm("cpu") is None


def test_bench_without_matplotlib_skips_the_plot_or_refuses_it(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(bench, "matplotlib_missing", lambda: "matplotlib is not installed (pip install x)")
    argv = ["prologue", *QUICK, "--backend", "torch"]
    status, out, _ = _run(capsys, tmp_path, *argv)
    assert status == EXIT_OK and "plot skipped: matplotlib is not installed" in out
    assert main(["bench", *argv, "--plot", str(tmp_path / "p.png")]) == EXIT_ENVIRONMENT
    assert "--plot" in capsys.readouterr().err


def test_bench_fused_output_differing_is_a_finding(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(bench, "_outputs_equal", lambda a, b: False)
    status, out, report = _run(capsys, tmp_path, "layer", *QUICK, "--family", "gla", "--backend", "torch")
    assert status == EXIT_FAILED
    assert "FINDING gla gdn_equiv/torch B1 T16 float32: fused forward output differs" in out
    assert report is not None and report["rows"][0]["check"]["fwd_equal"] is False


class _FusedRunsTheSeparateConvs:
    """Planted: prologue="fused" runs the three convs one by one (same outputs, three launches)."""

    def _fused_prologue(self, proj, call):
        return self._separate_prologue(proj, call, False)[0]


def test_bench_fused_path_that_did_not_run_is_a_finding(capsys, tmp_path: Path, monkeypatch) -> None:
    """The defect enters through the gdn_equiv target's ``defect`` option; the bench asks for each path
    by argument and sees from the launch count that the fused one ran three convs."""
    from gdn_equiv import targets

    get_target = targets.get_target
    monkeypatch.setattr(
        targets, "get_target", lambda name, **options: get_target(name, defect=_FusedRunsTheSeparateConvs)
    )
    status, out, report = _run(capsys, tmp_path, "layer", *QUICK, "--family", "gla", "--backend", "torch")
    assert status == EXIT_FAILED
    assert (
        "FINDING gla gdn_equiv/torch B1 T16 float32: prologue=separate ran separate, prologue=fused ran separate" in out
    )
    assert report is not None and report["rows"][0]["check"]["path"]["ok"] is False
    assert report["rows"][0]["check"]["path"]["launches"] == {"separate": 3, "fused": 3}
    assert report["rows"][0]["check"]["fwd_equal"] is True  # same outputs: only the launch count tells


def test_bench_row_that_cannot_run_is_reported(capsys, tmp_path: Path, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory (planted)")

    monkeypatch.setattr(bench, "_prologue_subject", broken)
    status, out, report = _run(capsys, tmp_path, "prologue", *QUICK, "--backend", "torch")
    assert status == EXIT_ENVIRONMENT
    assert report is not None and all(
        r["error"] == "RuntimeError: CUDA out of memory (planted)" for r in report["rows"]
    )
    assert _tables(out) == 1 and "error: RuntimeError: CUDA out of memory (planted)" in out


def _interrupt_the_second_measurement(monkeypatch, *, then: str = "raised") -> list[int]:
    """``bench.measure`` is interrupted during its second call: a KeyboardInterrupt ``raised`` there, or
    SIGTERM sent to this process whose KeyboardInterrupt (the CLI's handler raises one) is then
    ``swallowed`` (what Python does to one raised in a gc callback or a finaliser: "Exception ignored
    in ...", and the bench calls ``gc.collect()`` after every row on a GPU) or ``wrapped`` in a
    RuntimeError (a library frame that converts what it catches). The list records every call."""
    measure = bench.measure
    calls: list[int] = []

    def interrupt_second(subject, plan):
        calls.append(1)
        if len(calls) == 2 and then == "raised":
            raise KeyboardInterrupt
        if len(calls) == 2:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler runs at the next bytecode; this never finishes
            except KeyboardInterrupt:
                if then == "wrapped":
                    raise RuntimeError("planted: an extension caught the interrupt and raised its own error")  # noqa: B904
        return measure(subject, plan)

    monkeypatch.setattr(bench, "measure", interrupt_second)
    return calls


def test_bench_interrupted_keeps_finished_rows(capsys, tmp_path: Path, monkeypatch) -> None:
    _interrupt_the_second_measurement(monkeypatch)
    status, out, report = _run(capsys, tmp_path, "prologue", *QUICK, "--backend", "torch")
    assert status == EXIT_INTERRUPTED
    assert report is not None and report["status"] == "interrupted" and len(report["rows"]) == 1
    assert _tables(out) == 1  # the finished rows are still shown


@pytest.mark.parametrize("then", ["swallowed", "wrapped"])
def test_bench_stops_at_a_signal_whose_interrupt_was_lost(capsys, tmp_path: Path, monkeypatch, then: str) -> None:
    """SIGTERM during a row ends the bench after that row (status 130, report ``interrupted``, the
    finished rows in the table) even when the KeyboardInterrupt raised for it never reaches the row
    loop: swallowed (the row finishes; no later row starts) or turned into another error (not
    recorded as a row that could not run)."""
    if threading.current_thread() is not threading.main_thread():  # the CLI installs no handler there
        pytest.skip("signal handlers can only be installed in the main thread")
    calls = _interrupt_the_second_measurement(monkeypatch, then=then)
    shapes = ["--shape", "1x8", "--shape", "1x16", "--shape", "2x8"]
    status, out, report = _run(capsys, tmp_path, "prologue", *QUICK, "--backend", "torch", *shapes)
    assert status == EXIT_INTERRUPTED, out
    assert len(calls) == 2  # no row was started after the signal
    assert report is not None and report["status"] == "interrupted"
    assert len(report["rows"]) == (2 if then == "swallowed" else 1)
    assert not any("error" in r for r in report["rows"])
    assert _tables(out) == 1


def test_timing_quantiles() -> None:
    t = bench.Timing.of([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (t.p20_ms, t.median_ms, t.p80_ms, t.n) == (1.8, 3.0, 4.2, 5)
    assert bench.Timing.of([2.0, 1.0]).median_ms == 1.5
    calls = []
    assert bench.time_cpu(lambda: calls.append(1), warmup=3, iters=4).n == 4 and len(calls) == 7


REFUSED = {
    "iters-0": (["layer", "--quick", "--iters", "0"], EXIT_USAGE, "--iters must be >= 1, got 0"),
    "warmup-negative": (["layer", "--quick", "--warmup", "-1"], EXIT_USAGE, "--warmup must be >= 0, got -1"),
    "family-typo": (["layer", "--quick", "--family", "gated_deltnet"], EXIT_USAGE, "unknown family 'gated_deltnet'"),
    "family-empty": (["layer", "--quick", "--family", ""], EXIT_USAGE, "--family ''"),
    "prologue-family": (["prologue", "--quick", "--family", "kda"], EXIT_USAGE, "bench prologue has shapes for"),
    "backend-typo": (["layer", "--quick", "--backend", "troch"], EXIT_USAGE, "--backend 'troch'"),
    "shape": (["layer", "--quick", "--shape", "2x0"], EXIT_USAGE, "--shape '2x0' must be BxT"),
    "json-suffix": (["layer", "--quick", "--json", "out.txt"], EXIT_USAGE, "--json 'out.txt' must name a .json file"),
    "cpu-full-shapes": (["layer", "--device", "cpu"], EXIT_ENVIRONMENT, "only --quick"),
    "fla-on-cpu": (["layer", "--quick", "--backend", "fla"], EXIT_ENVIRONMENT, "--backend 'fla'"),
    "graph-on-cpu": (["prologue", "--quick", "--timing", "graph"], EXIT_ENVIRONMENT, "--timing graph needs a CUDA"),
    "graph-layer": (["layer", "--quick", "--timing", "graph"], EXIT_USAGE, "bench layer times eagerly only"),
}


@pytest.mark.parametrize("argv,status,message", REFUSED.values(), ids=REFUSED.keys())
def test_bench_refuses_bad_arguments_before_running(capsys, tmp_path: Path, argv, status, message) -> None:
    report = tmp_path / "never.json"
    if "--json" not in argv:
        argv = [*argv, "--json", str(report)]
    assert main(["bench", *argv]) == status
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not report.exists()


def test_graph_timing_times_a_captured_graph_of_every_call(tmp_path: Path, monkeypatch) -> None:
    """``timing="graph"``: each of a row's four calls is captured (once) and the capture's replay is
    what gets timed; ``eager`` times the calls themselves. The capture is stood in for here (CUDA
    graphs need a GPU; test_cuda_graph_replays_what_it_captured runs the real one there)."""
    captured: list[object] = []
    timed: list[object] = []

    def capture(fn, warmup=3):
        def replay():
            return fn()

        captured.append(fn)
        return replay

    def timer(fn, warmup, iters):
        timed.append(fn)
        return bench.time_cpu(fn, warmup, iters)

    monkeypatch.setattr(bench, "cuda_graph", capture)
    monkeypatch.setattr(bench, "timer", lambda device: timer)
    for timing in ("graph", "eager"):
        captured.clear(), timed.clear()
        plan = bench.BenchPlan(
            what="prologue", families=["gated_deltanet"], backends=["torch"], fla=False, dtypes=["float32"],
            device="cpu", iters=1, warmup=0, quick=True, json=None, plot=None, shapes=((1, 16),), timing=timing,
        )  # fmt: skip
        subject = bench._prologue_subject("gated_deltanet", "gdn_equiv", "torch", 1, 16, torch.float32, "cpu", True)
        row = bench.measure(subject, plan)
        calls = [subject.calls[path, p] for p in bench.PASSES for path in bench.PATHS]
        if timing == "graph":
            assert captured == calls and len(timed) == 4 and not set(map(id, timed)) & set(map(id, calls))
        else:
            assert not captured and timed == calls
        assert set(row["ratio"]) == set(bench.PASSES)
        assert ("CUDA graph" in bench.timing_method("cuda", timing)) == (timing == "graph")
        assert "do_bench" in bench.timing_method("cuda", timing) and "L2 flushed" in bench.timing_method("cuda", timing)
        assert bench.new_report(plan)["plan"]["timing"] == timing


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_cuda_graph_replays_what_it_captured() -> None:
    x, out, calls = torch.arange(4.0, device="cuda"), torch.zeros(4, device="cuda"), []

    def fn() -> None:
        calls.append(1)
        out.copy_(x * 2)

    replay = bench.cuda_graph(fn, warmup=2)
    assert len(calls) == 3  # two warm-up calls and the one captured
    out.zero_()
    x.add_(1)
    replay()
    torch.cuda.synchronize()
    assert len(calls) == 3 and torch.equal(out, x * 2)  # the kernels ran again on the new x, Python did not


def test_bench_refuses_a_plot_path_that_is_a_directory(capsys, tmp_path: Path) -> None:
    (tmp_path / "d.png").mkdir()
    assert main(["bench", "layer", "--quick", "--plot", str(tmp_path / "d.png")]) == EXIT_USAGE
    assert "is a directory" in capsys.readouterr().err


def test_bench_refuses_cuda_without_a_gpu(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert main(["bench", "layer", "--quick", "--device", "cuda"]) == EXIT_ENVIRONMENT
    assert "no CUDA device" in capsys.readouterr().err


def test_bench_refuses_an_unknown_dtype() -> None:
    with pytest.raises(SystemExit) as exc:  # argparse's own refusal, status 2 as well
        main(["bench", "layer", "--quick", "--dtype", "float8"])
    assert exc.value.code == EXIT_USAGE


def test_a_row_without_a_backward_shows_its_forward_and_says_why(capsys, tmp_path: Path, monkeypatch) -> None:
    """fla's own backward refuses some machines (Hopper, Triton < 3.7.1) where no core of ours can stand
    in (every family but Gated DeltaNet): the check drops the fwd+bwd calls, and the row keeps its forward
    timing, says n/a for the rest, and the progress line, table and report stay whole."""
    measure = bench.measure

    def forward_only(subject, plan):
        for path in bench.PATHS:
            del subject.calls[path, "fwd_bwd"]
        subject.meta["note"] = "fla's own backward did not run here (planted)"
        return measure(subject, plan)

    monkeypatch.setattr(bench, "measure", forward_only)
    status, out, report = _run(capsys, tmp_path, "layer", *QUICK, "--family", "gla", "--backend", "torch")
    assert status == EXIT_OK
    assert report is not None and all(set(r["ratio"]) == {"fwd"} for r in report["rows"])
    assert "n/a (see note)" in out
    line = bench.progress_line(report["rows"][0])
    assert re.fullmatch(r"gla gdn_equiv/torch B1 T16 float32: fwd [\d.]+ -> [\d.]+ ms \([\d.]+x\)", line), line
    assert "fla's own backward did not run here (planted)" in out


# ---- bench --from: an earlier report printed and plotted again -------------------------------------


def test_bench_from_shows_an_interrupted_reports_rows_and_times_nothing(capsys, tmp_path: Path, monkeypatch) -> None:
    """The finished rows of a run cut short (here by a planted interrupt) come back as the table and the
    plot, the report file untouched, and ``measure`` is never called."""
    calls = _interrupt_the_second_measurement(monkeypatch)
    assert _run(capsys, tmp_path, "prologue", *QUICK, "--backend", "torch")[0] == EXIT_INTERRUPTED
    source = tmp_path / "bench.json"
    before = source.read_bytes()
    row = json.loads(before)["rows"][0]
    calls.clear()
    plot = tmp_path / "again.png"
    status = main(["bench", "prologue", "--from", str(source), *(["--plot", str(plot)] if HAS_MATPLOTLIB else [])])
    out = capsys.readouterr().out
    assert status == EXIT_OK and calls == [], out
    assert f"{source} (interrupted, 1 rows)" in out and _tables(out) == 1, out
    assert f"| {row['family']} | {row['impl']} | {row['backend']} | {row['B']} | {row['T']} |" in out, out
    assert source.read_bytes() == before
    assert plot.exists() == HAS_MATPLOTLIB


def test_bench_from_keeps_a_reports_finding(capsys, tmp_path: Path, monkeypatch) -> None:
    with monkeypatch.context() as m:
        m.setattr(bench, "_outputs_equal", lambda a, b: False)
        assert _run(capsys, tmp_path, "layer", *QUICK, "--family", "gla", "--backend", "torch")[0] == EXIT_FAILED
    assert main(["bench", "layer", "--from", str(tmp_path / "bench.json")]) == EXIT_FAILED
    assert "FINDING gla gdn_equiv/torch B1 T16 float32: fused forward output differs" in capsys.readouterr().out


def test_bench_from_refuses_what_cannot_apply(capsys, tmp_path: Path) -> None:
    layer = tmp_path / "layer.json"
    layer.write_text(json.dumps({"format": bench.FORMAT, "command": "bench layer", "rows": []}))
    (tmp_path / "other.json").write_text(json.dumps({"format": "something/1", "command": "bench layer"}))
    (tmp_path / "broken.json").write_text("{")
    refused = {
        ("layer", str(layer), "--iters", "3"): "times nothing: --iters cannot apply",
        ("layer", str(layer), "--quick", "--shape", "2x8"): "times nothing: --shape, --quick cannot apply",
        ("prologue", str(layer)): "is a report of 'bench layer', not of 'bench prologue'",
        ("layer", str(tmp_path / "missing.json")): "must name an existing bench report",
        ("layer", str(tmp_path / "other.json")): "is not a gdn-equiv bench report",
        ("layer", str(tmp_path / "broken.json")): "is not a JSON file",
        ("layer", str(layer), "--plot", str(tmp_path / "p.txt")): "must name a .png file",
    }
    for (what, source, *rest), message in refused.items():
        assert main(["bench", what, "--from", source, *rest]) == EXIT_USAGE, (what, source, rest)
        captured = capsys.readouterr()
        assert message in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
        assert captured.out == "", captured.out
