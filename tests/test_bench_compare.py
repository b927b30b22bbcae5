"""``gdn-equiv bench compare``: the rank test and effect sizes against brute force on small samples, the
refusal of reports from different machines or versions, and the exit statuses. Nothing here is timed:
the samples are synthetic (the false-alarm rate on real runs is ``tools/bench_compare_alarms.py``)."""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
from pathlib import Path

import pytest

from gdn_equiv.run import bench
from gdn_equiv.run import bench_compare as bc
from gdn_equiv.run.cli import main
from gdn_equiv.run.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE

# ---- the statistics against brute force


def _brute_u(a, b) -> float:
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def _permutation_p(a, b) -> float:
    """P(U >= observed) over every way of splitting the pooled values into groups of len(a) and len(b)."""
    pooled, m = [*a, *b], len(a)
    observed = _brute_u(a, b)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), m):
        rest = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        hits += _brute_u([pooled[i] for i in chosen], rest) >= observed - 1e-9
    return hits / total


@pytest.mark.parametrize(("m", "n"), [(1, 1), (1, 4), (3, 3), (4, 6), (6, 5)])
def test_u_distribution_counts_every_ordering(m: int, n: int) -> None:
    counts = [0] * (m * n + 1)
    for chosen in itertools.combinations(range(m + n), m):  # ranks of the first sample among 0..m+n-1
        counts[int(_brute_u([r for r in chosen], [r for r in range(m + n) if r not in chosen]))] += 1
    assert bc.u_distribution(m, n) == counts
    assert sum(counts) == math.comb(m + n, m)


@pytest.mark.parametrize("seed", range(6))
def test_exact_p_value_is_the_permutation_count(seed: int) -> None:
    rng = random.Random(seed)
    m, n = rng.randint(2, 6), rng.randint(2, 6)
    shift = rng.choice([0.0, 0.5, 2.0])
    a = [rng.gauss(shift, 1) for _ in range(m)]
    b = [rng.gauss(0, 1) for _ in range(n)]
    p, method = bc.p_greater(a, b)
    assert method == "exact"
    assert p == pytest.approx(_permutation_p(a, b), abs=1e-12)


def test_all_of_one_sample_above_the_other_gives_the_smallest_p() -> None:
    assert bc.p_greater([5, 6, 7], [1, 2, 3]) == (pytest.approx(1 / 20), "exact")
    assert bc.p_greater([1, 2, 3], [5, 6, 7])[0] == pytest.approx(1.0)
    assert bc.smallest_p(3, 3) == pytest.approx(1 / 20)


@pytest.mark.parametrize("seed", range(3))
def test_normal_approximation_with_ties_is_close_to_the_permutation_count(seed: int) -> None:
    rng = random.Random(seed)
    a = [float(rng.randint(0, 4) + 1) for _ in range(8)]  # few distinct values: many ties
    b = [float(rng.randint(0, 4)) for _ in range(8)]
    p, method = bc.p_greater(a, b)
    assert method == "normal"
    assert abs(p - _permutation_p(a, b)) < 0.02


def test_every_value_tied_is_no_evidence() -> None:
    assert bc.p_greater([1.0] * 5, [1.0] * 5) == (1.0, "normal")


def test_holm_adjusts_in_step_down_order() -> None:
    # sorted 0.01, 0.03, 0.04: 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, max(0.06, 1 x 0.04) = 0.06
    assert bc.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert bc.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_effect_sizes_against_a_double_loop() -> None:
    rng = random.Random(3)
    a = [float(rng.randint(0, 9)) for _ in range(11)]
    b = [float(rng.randint(0, 9)) for _ in range(7)]
    greater = sum(x > y for x in a for y in b)
    less = sum(x < y for x in a for y in b)
    assert bc.cliffs_delta(a, b) == pytest.approx((greater - less) / 77)
    assert bc.common_language(a, b) == pytest.approx(_brute_u(a, b) / 77)
    assert bc.median([3.0, 1.0, 2.0, 10.0]) == 2.5


# ---- the command on synthetic reports


def _samples(seed: int, n: int, ms: float) -> list[float]:
    rng = random.Random(seed)
    return [ms * (1 + abs(rng.gauss(0, 0.03))) for _ in range(n)]


def _report(seed: int, *, scale: float = 1.0, n: int = 40, backend: str = "torch", **machine) -> dict:
    rows = []
    for k, (B, T) in enumerate(((1, 16), (2, 32))):
        row = {"family": "gated_deltanet", "impl": "gdn_equiv", "backend": backend, "B": B, "T": T}
        row["dtype"] = "float32"
        for path in bench.PATHS:
            row[path] = {}
            for p in bench.PASSES:
                xs = [t * scale for t in _samples(seed * 100 + k * 10 + len(row), n, 1.0 + k)]
                row[path][p] = {"median_ms": bench.quantile(xs, 0.5), "n": n, "samples_ms": xs}
        rows.append(row)
    base = {"device": "cpu", "device_name": "cpu x86_64", "torch": "2.13.0", "cuda": None, "triton": "3.9.0"}
    base.update(gdn_equiv="0.1.0", fla=None, causal_conv1d=None, triton_interpret=True)
    base.update(machine)
    return {
        "format": bench.FORMAT,
        "command": "bench prologue",
        "machine": base,
        "timing": {"method": "wall clock"},
        "status": "complete",
        "rows": rows,
    }


def _compare(capsys, tmp_path: Path, old: dict, new: dict, *extra: str) -> tuple[int, str, str]:
    paths = []
    for name, report in (("old", old), ("new", new)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(report))
    status = main(["bench", "compare", *map(str, paths), *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_same_distribution_is_not_flagged(capsys, tmp_path: Path) -> None:
    status, out, _ = _compare(capsys, tmp_path, _report(1), _report(2))
    assert status == EXIT_OK, out
    assert "SLOWER" not in out.split("\n\n")[1] and out.count("| same |") == 8


def test_a_slowdown_past_the_margin_is_flagged(capsys, tmp_path: Path) -> None:
    md = tmp_path / "pr" / "compare.md"
    status, out, _ = _compare(capsys, tmp_path, _report(1), _report(2, scale=1.2), "--markdown", str(md))
    assert status == EXIT_FAILED
    assert out.count("**SLOWER**") == 8 and out.count("FINDING") == 8
    assert md.read_text().count("**SLOWER**") == 8


def test_a_slowdown_within_the_margin_is_not_flagged(capsys, tmp_path: Path) -> None:
    old, new = _report(1), _report(1, scale=1.03)  # the same draws, 3% slower: inside the 5% allowed
    status, out, _ = _compare(capsys, tmp_path, old, new)
    assert status == EXIT_OK, out
    status, out, _ = _compare(capsys, tmp_path, old, new, "--max-slowdown", "1%")
    assert status == EXIT_FAILED and out.count("**SLOWER**") == 8


def test_a_faster_kernel_passes_and_is_called_faster(capsys, tmp_path: Path) -> None:
    status, out, _ = _compare(capsys, tmp_path, _report(1), _report(2, scale=0.7))
    assert status == EXIT_OK and out.count("| faster |") == 8


@pytest.mark.parametrize(
    ("key", "value"),
    [("device_name", "NVIDIA H100 80GB HBM3"), ("torch", "2.11.0"), ("triton", "3.6.0"), ("gdn_equiv", "0.2.0")],
)
def test_reports_of_another_device_or_version_are_refused_by_name(capsys, tmp_path: Path, key, value) -> None:
    status, out, err = _compare(capsys, tmp_path, _report(1), _report(2, **{key: value}))
    assert status == EXIT_USAGE and out == ""
    assert f"machine {key} differs" in err and repr(value) in err and len(err.strip().splitlines()) == 1


def test_reports_of_another_command_or_timing_are_refused(capsys, tmp_path: Path) -> None:
    new = _report(2)
    new["command"] = "bench layer"
    status, _, err = _compare(capsys, tmp_path, _report(1), new)
    assert status == EXIT_USAGE and "command differs" in err
    new = _report(2)
    new["timing"]["method"] = "graph"
    status, _, err = _compare(capsys, tmp_path, _report(1), new)
    assert status == EXIT_USAGE and "timing method differs" in err


def test_a_report_without_samples_is_refused(capsys, tmp_path: Path) -> None:
    old = _report(1)
    old["format"] = "gdn-equiv-bench/1"
    status, _, err = _compare(capsys, tmp_path, old, _report(2))
    assert status == EXIT_USAGE and "'gdn-equiv-bench/1'" in err and "keep every timed call" in err


def test_a_row_in_one_report_only_is_not_a_pass(capsys, tmp_path: Path) -> None:
    old, new = _report(1), _report(2)
    new["rows"] = new["rows"][:1]
    status, out, _ = _compare(capsys, tmp_path, old, new)
    assert status == EXIT_FAILED
    assert "B2 T32 float32: only in OLD" in out and "not a pass" in out and "FINDING" not in out
    status, out, _ = _compare(capsys, tmp_path, new, old)
    assert status == EXIT_FAILED and "B2 T32 float32: only in NEW" in out


def test_a_row_that_errored_is_not_compared(capsys, tmp_path: Path) -> None:
    new = _report(2)
    new["rows"][0] = {k: new["rows"][0][k] for k in bc.ROW_KEY} | {"error": "RuntimeError: out of memory"}
    status, out, _ = _compare(capsys, tmp_path, _report(1), new)
    assert status == EXIT_FAILED and "did not run (NEW: RuntimeError: out of memory)" in out


def test_too_few_samples_to_reach_alpha_is_not_compared(capsys, tmp_path: Path) -> None:
    status, out, _ = _compare(capsys, tmp_path, _report(1, n=3), _report(2, n=3, scale=2.0))
    assert status == EXIT_FAILED and "too few samples (3 OLD, 3 NEW)" in out and "nothing compared" in out


def test_pair_matches_a_kernel_under_review_with_the_one_it_replaces(capsys, tmp_path: Path) -> None:
    old, new = _report(1), _report(2, scale=1.25, backend="mine:conv")
    status, out, _ = _compare(capsys, tmp_path, old, new)
    assert status == EXIT_FAILED and out.count("only in") == 4  # unmatched without --pair
    status, out, _ = _compare(capsys, tmp_path, old, new, "--pair", "torch=mine:conv")
    assert status == EXIT_FAILED and out.count("**SLOWER**") == 8 and "only in" not in out
    status, _, err = _compare(capsys, tmp_path, old, new, "--pair", "triton=mine:conv")
    assert status == EXIT_USAGE and "OLD has no rows of backend 'triton'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-slowdown", "five"], "must be a percentage"),
        (["--max-slowdown", "-1"], ">= 0 and < 100"),
        (["--alpha", "0.7"], "--alpha 0.7 must be > 0 and < 0.5"),
        (["--alpha", "nan"], "--alpha nan"),
        (["--markdown", "x.txt"], "must name a .md file"),
        (["--iters", "3"], "bench compare reads two reports and times nothing"),
        (["--pair", "torch"], "must be OLD_BACKEND=NEW_BACKEND"),
    ],
)
def test_bad_compare_arguments_are_refused(capsys, tmp_path: Path, argv, message) -> None:
    status, out, err = _compare(capsys, tmp_path, _report(1), _report(2), *argv)
    assert status == EXIT_USAGE and message in err and out == ""


def test_compare_needs_two_existing_reports(capsys, tmp_path: Path) -> None:
    assert main(["bench", "compare", str(tmp_path / "a.json")]) == EXIT_USAGE
    assert "needs two reports" in capsys.readouterr().err
    assert main(["bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == EXIT_USAGE
    assert "must name an existing bench report" in capsys.readouterr().err
    (tmp_path / "a.json").write_text("{")
    assert main(["bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == EXIT_USAGE
    assert "is not a JSON file" in capsys.readouterr().err


def test_compare_options_are_refused_elsewhere(capsys) -> None:
    assert main(["bench", "prologue", "--quick", "--max-slowdown", "5"]) == EXIT_USAGE
    assert "bench compare's, not bench prologue's" in capsys.readouterr().err
    assert main(["bench", "layer", "old.json", "--quick"]) == EXIT_USAGE
    assert "'old.json'" in capsys.readouterr().err


def test_the_comparison_does_not_change_the_reports(capsys, tmp_path: Path) -> None:
    old, new = _report(1), _report(2)
    kept = copy.deepcopy((old, new))
    _compare(capsys, tmp_path, old, new)
    assert json.loads((tmp_path / "old.json").read_text()) == kept[0]
