"""``gdn-equiv bench prologue`` runs end to end (on CPU a smoke test: its times are not measurements)."""

from __future__ import annotations

from gdn_equiv import bench
from gdn_equiv.cli import main


def test_bench_prologue_rows_have_both_paths_and_bytes() -> None:
    rows = bench.bench_prologue(quick=True, backends=["torch"], warmup=1, iters=2, device="cpu")
    assert [(r["backend"], r["timing"]) for r in rows] == [("torch", "eager")]
    (row,) = rows
    for key in ("sep_fwd_ms", "fused_fwd_ms", "sep_fwd_bwd_ms", "fused_fwd_bwd_ms"):
        assert row[key] > 0, key
    shape = bench.QUICK_SHAPES[0]
    esize = 4  # fp32
    assert row["fwd_bytes"] == 2 * shape.B * shape.T * sum(shape.dims) * esize + sum(shape.dims) * shape.W * esize
    assert row["fwd_ratio"] == row["sep_fwd_ms"] / row["fused_fwd_ms"]
    table = bench.format_table(rows)
    assert shape.label in table and "torch" in table


def test_bench_command_prints_the_table(capsys) -> None:
    assert main(["bench", "prologue", "--quick", "--backend", "torch", "--iters", "2", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "sep fwd" in out and "fused f+b" in out and bench.QUICK_SHAPES[0].label in out
