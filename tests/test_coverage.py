"""The coverage report (``gdn-equiv coverage``, :mod:`gdn_equiv.harness.coverage`): the regions an example is labelled
with, the reading and counting of Hypothesis' observability output, the refusals, and that the report fails
when a strategy stops reaching a region.

Expected labels are written out by hand from the dimension definitions (the docstrings and the README), not
computed with the module's own helpers. The planted-defect test runs Hypothesis in a subprocess with
observability on and its own storage directory: the real files, end to end, and nothing written into the
observations of the run that is running these tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gdn_equiv.harness import coverage as C
from gdn_equiv.model.config import ConvSpec
from gdn_equiv.model.example import Example
from gdn_equiv.model.families import get_family
from gdn_equiv.run import cli
from gdn_equiv.run.cli import common as cli_common
from gdn_equiv.strategies import ConvCall

# ---- labels of hand-built conv calls -----------------------------------------------------------------

#: (D, bucket, at a block edge): bucket bounds on both sides, edges at 2^k and 2^k + 1 for 2^k >= 8 only
CHANNELS = [
    (1, "1-16", "off-edge"),
    (4, "1-16", "off-edge"),  # a power of two, but under 8
    (5, "1-16", "off-edge"),
    (7, "1-16", "off-edge"),
    (8, "1-16", "at-edge"),
    (9, "1-16", "at-edge"),
    (10, "1-16", "off-edge"),
    (16, "1-16", "at-edge"),
    (17, "17-64", "at-edge"),
    (64, "17-64", "at-edge"),
    (65, "65-256", "at-edge"),
    (100, "65-256", "off-edge"),
    (256, "65-256", "at-edge"),
    (257, "257-1024", "at-edge"),
    (1023, "257-1024", "off-edge"),
    (1024, "257-1024", "at-edge"),
    (1025, "1025+", "at-edge"),
    (6145, "1025+", "off-edge"),  # 6,144 is a block size of the PR's fused call, not a power of two
]


@pytest.mark.parametrize("D, bucket, edge", CHANNELS, ids=[str(c[0]) for c in CHANNELS])
def test_channel_count_bucket_and_block_edge(D, bucket, edge) -> None:
    regions = C.conv_call_regions(ConvCall(B=1, T=1, D=D, W=2), grad=False, final_state=True)
    assert regions["conv.channels"] == (bucket,)
    assert regions["conv.block_edge"] == (edge,)


#: (T, W, region): every boundary of T < W-1 | T = W-1 | T = W | W < T <= 2W | T > 2W
LENGTHS = [
    (1, 4, "T<W-1"),
    (2, 4, "T<W-1"),
    (3, 4, "T=W-1"),
    (4, 4, "T=W"),
    (5, 4, "W<T<=2W"),
    (8, 4, "W<T<=2W"),
    (9, 4, "T>2W"),
    (1, 2, "T=W-1"),
    (1, 1, "T=W"),
    (2, 1, "W<T<=2W"),
    (3, 1, "T>2W"),
]


@pytest.mark.parametrize("T, W, region", LENGTHS, ids=[f"T{t}-W{w}" for t, w, _ in LENGTHS])
def test_length_against_the_kernel_width(T, W, region) -> None:
    regions = C.conv_call_regions(ConvCall(B=2, T=T, D=3, W=W), grad=False, final_state=True)
    assert regions["conv.length"] == (region,)


@pytest.mark.parametrize(
    "T, region", [(14, "off-tile"), (15, "at-tile"), (17, "at-tile"), (18, "off-tile"), (127, "at-tile")]
)
def test_length_at_a_time_tile(T, region) -> None:
    assert C.conv_call_regions(ConvCall(B=1, T=T, D=3, W=4), grad=False, final_state=True)["conv.tile_edge"] == (
        region,
    )


def test_a_plain_forward_call_is_labelled_in_every_conv_dimension_but_grad_with() -> None:
    call = ConvCall(B=2, T=2, D=1025, W=4, dtype="bfloat16")
    assert C.conv_call_regions(call, grad=False, final_state=True) == {
        "conv.channels": ("1025+",),
        "conv.block_edge": ("at-edge",),
        "conv.length": ("T<W-1",),
        "conv.tile_edge": ("off-tile",),
        "conv.reach": ("T<=64",),
        "conv.values": ("randn",),
        "conv.initial_state": ("off",),
        "conv.final_state": ("requested",),
        "conv.varlen": ("dense",),
        "conv.dtype": ("bfloat16",),
        "conv.param_dtype": ("same",),
        "conv.grad": ("off",),
        "conv.layout": ("contiguous",),
    }


@pytest.mark.parametrize(
    ("dtype", "param_dtype", "region"),
    [
        ("bfloat16", "float32", "mixed"),
        ("float32", "float16", "mixed"),
        ("float16", None, "same"),
        ("float16", "float16", "same"),
    ],
)
def test_a_call_with_parameters_in_another_dtype_is_mixed(dtype, param_dtype, region) -> None:
    call = ConvCall(B=1, T=3, D=4, W=2, dtype=dtype, param_dtype=param_dtype)
    assert C.conv_call_regions(call, grad=False, final_state=False)["conv.param_dtype"] == (region,)


def test_a_packed_call_with_gradients_is_labelled_per_sequence_and_per_layout() -> None:
    call = ConvCall(
        B=1,
        T=28,
        D=17,
        W=4,
        bias=True,
        initial_state=True,
        seq_lens=(0, 3, 4, 6, 15),
        layouts=(("x", "sliced"), ("bias", "transposed"), ("dy", "strided"), ("dfinal", "expanded")),
    )
    regions = C.conv_call_regions(call, grad=True, final_state=False)
    assert {k: set(v) for k, v in regions.items()} == {
        "conv.channels": {"17-64"},
        "conv.block_edge": {"at-edge"},  # D - 1 = 16
        "conv.length": {"T<W-1", "T=W-1", "T=W", "W<T<=2W", "T>2W"},  # 0, 3, 4, 6, 15
        "conv.tile_edge": {"at-tile"},  # 15
        "conv.reach": {"T<=64"},
        "conv.values": {"randn"},
        "conv.initial_state": {"on"},
        "conv.final_state": {"not-requested"},
        "conv.varlen": {"cu_seqlens+empty"},
        "conv.dtype": {"float32"},
        "conv.param_dtype": {"same"},
        "conv.grad": {"on"},
        # dfinal's layout does not count: no final state, so no cotangent for it
        "conv.layout": {"sliced", "transposed", "strided"},
        "conv.grad_with": {"initial_state", "cu_seqlens+empty"},
    }


def test_cotangent_layouts_count_only_with_gradients() -> None:
    call = ConvCall(B=1, T=4, D=3, W=2, layouts=(("dy", "strided"), ("bias", "sliced")))  # no bias drawn
    assert C.conv_call_regions(call, grad=False, final_state=True)["conv.layout"] == ("contiguous",)
    assert C.conv_call_regions(call, grad=True, final_state=True)["conv.layout"] == ("strided",)
    grad_with = C.conv_call_regions(ConvCall(B=1, T=5, D=3, W=2, seq_lens=(2, 3)), grad=True, final_state=True)
    assert set(grad_with["conv.grad_with"]) == {"final_state", "cu_seqlens"}


# ---- labels of hand-built layer examples ----------------------------------------------------------


def _example(family: str = "gated_deltanet", config: dict | None = None, **call) -> Example:
    return Example(config=get_family(family).config_cls(hidden_size=8, **(config or {})), family=family, **call)


def test_a_mixed_precision_decode_step_is_labelled() -> None:
    ex = _example(
        config={"q_conv": ConvSpec(dtype="float32")},
        dtype="bfloat16",
        varlen="cu_seqlens",
        seq_lens=(1, 1),
        seq_len=2,
        cache="populated",
        prefix_len=3,
        use_cache=True,
        grad=False,
    )
    assert C.example_regions(ex) == {
        "layer.family": ("gated_deltanet",),
        "layer.dtype": ("bfloat16",),
        "layer.param_dtype": ("mixed",),
        "layer.length": ("T<W-1",),  # each packed sequence one token, the q conv 4 wide
        "layer.cache": ("populated",),
        "layer.use_cache": ("on",),
        "layer.varlen": ("cu_seqlens",),
        "layer.grad": ("off",),
        "layer.step": ("step",),  # every packed sequence one token, no autograd
    }


@pytest.mark.parametrize("lens, regions", [((2, 5), ("T<W-1", "T>=W-1")), ((3,), ("T>=W-1",))])
def test_layer_length_is_per_packed_sequence_against_the_q_conv_width(lens, regions) -> None:
    ex = _example(varlen="cu_seqlens", seq_lens=lens, seq_len=sum(lens), config={"conv_size": 4})
    assert C.example_regions(ex)["layer.length"] == regions


def test_a_masked_one_token_call_with_gradients_is_labelled() -> None:
    ex = _example("kda", varlen="mask", batch=2, seq_len=1, seq_lens=(1, 0), cache="empty", grad=True)
    regions = C.example_regions(ex)
    assert regions["layer.family"] == ("kda",)
    assert regions["layer.param_dtype"] == ("same",)
    assert regions["layer.step"] == ("one-token-grad",)
    assert set(regions["layer.grad_with"]) == {"cache=empty", "mask"}


@pytest.mark.parametrize(
    "spec, dtype, region",
    [
        (ConvSpec(dtype="bfloat16"), "bfloat16", "same"),  # spelled out, still the layer's dtype
        (ConvSpec(), "float16", "same"),
        (ConvSpec(dtype="float64"), "float32", "mixed"),
    ],
)
def test_conv_parameter_dtype_against_the_layers(spec, dtype, region) -> None:
    ex = _example(config={"v_conv": spec}, dtype=dtype)
    assert C.example_regions(ex)["layer.param_dtype"] == (region,)


def test_without_short_convs_there_is_no_parameter_dtype_and_packed_longer_calls_are_multi_token() -> None:
    ex = _example(config={"use_short_conv": False}, varlen="cu_seqlens", seq_lens=(1, 2), seq_len=3, grad=False)
    regions = C.example_regions(ex)
    assert "layer.param_dtype" not in regions
    assert "layer.length" not in regions  # no conv, no width to measure T against
    assert "layer.grad_with" not in regions
    assert regions["layer.step"] == ("multi-token",)


def test_labels_are_prefixed_dimension_equals_region() -> None:
    assert C.labels({"conv.channels": ("257-1024",), "conv.length": ("T=W-1", "T>2W")}) == [
        "coverage:conv.channels=257-1024",
        "coverage:conv.length=T=W-1",
        "coverage:conv.length=T>2W",
    ]


def test_labelling_outside_a_hypothesis_test_does_nothing() -> None:
    C.label_conv_call(ConvCall(B=1, T=1, D=1, W=1), grad=False, final_state=False)  # no InvalidArgument
    C.label_example(_example())


def test_expected_regions_are_what_the_strategies_and_examples_can_produce() -> None:
    from gdn_equiv.model.example import CACHE_KINDS, VARLEN_KINDS
    from gdn_equiv.model.families import known_families
    from gdn_equiv.strategies.convs import LAYOUTS
    from gdn_equiv.strategies.facts import DTYPE_NAMES

    dims = {d.name: d.regions for d in C.dimensions()}
    assert set(dims["conv.layout"]) == set(LAYOUTS)
    assert set(dims["conv.dtype"]) == set(dims["layer.dtype"]) == set(DTYPE_NAMES)
    assert set(dims["layer.varlen"]) == set(VARLEN_KINDS)
    assert set(dims["layer.cache"]) == set(CACHE_KINDS)
    assert set(dims["layer.family"]) == set(known_families())


# ---- the command on synthetic observations ---------------------------------------------------------


#: the run id the gate's plugin gives the lines of these tests' made-up runs
RUN = "20261207T000000-1"


def _case(test: str, labels: list[str], status: str = "passed", pid: int = 1, run: str | None = RUN) -> dict:
    """A test-case line as Hypothesis 6.170 writes it (the fields the report reads, and a few it ignores), of
    the gate's run ``run`` (``None``: a line without a run id, as an unrelated test's)."""
    return {
        "type": "test_case",
        "property": test,
        "run_start": 1.0,
        "status": status,
        "status_reason": "",
        "representation": "test(...)",
        "arguments": {},
        "how_generated": "during generate phase",
        "features": {
            **dict.fromkeys(labels, ""),
            "other event": "",
            "target:tokens": 3.0,
            **({C.RUN_EVENT: run} if run else {}),
        },
        "coverage": None,
        "timing": {},
        "metadata": {"os.getpid()": pid, "imported_at": 0.5, "phase": "generate"},
    }


def _write(directory: Path, lines: list[dict | str], name: str = "2026-01-01_testcases.jsonl") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    (directory / name).write_text(text)
    return directory


@pytest.fixture
def gdn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """``gdn(*argv) -> (status, stdout, stderr)``: :func:`cli.main` in ``tmp_path``, the process state it
    sets (torch threads, ``TRITON_INTERPRET``) restored afterwards."""
    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    saved_env = os.environ.get("TRITON_INTERPRET")
    threads = torch.get_num_threads()

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = cli.main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err

    try:
        yield run
    finally:
        torch.set_num_threads(threads)
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env


def _row(out: str, region: str) -> list[str]:
    """The cells of the table row for ``region`` in the section of the one dimension printed before it."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == region:
            return cells
    raise AssertionError(f"no row {region!r} in:\n{out}")


def _section(out: str, dimension: str) -> str:
    start = out.index(f"## {dimension}:")
    end = out.find("\n## ", start + 1)
    return out[start : end if end != -1 else None]


def test_counts_examples_per_region_and_per_test(gdn, tmp_path) -> None:
    a, b = "tests/test_x.py::test_a[torch]", "tests/test_x.py::test_b[torch]"
    small, mid, wide = (f"coverage:conv.channels={r}" for r in ("1-16", "17-64", "9999"))
    _write(
        tmp_path / "obs",
        [
            _case(a, [small, "coverage:conv.dtype=float16"]),
            _case(a, [small, mid]),  # one example, two regions of one dimension: counted in both
            _case(a, [mid], status="failed"),  # a failing example ran too
            _case(b, [small], pid=2),
            _case(b, [wide], status="gave_up"),  # ran no property: not counted
            _case(b, []),  # ran, but carried no coverage label
            {"type": "info", "property": a, "run_start": 1.0, "title": "Hypothesis Statistics", "content": ""},
        ],
    )
    _write(tmp_path / "obs", [], name="2026-01-01_info.jsonl")  # not a test-case file: ignored
    status, out, err = gdn("coverage", "--observed", "obs", "--json", "out/coverage.json")
    assert status == cli_common.EXIT_OK, (out, err)
    assert out.startswith("# Coverage: 5 examples in 2 tests")
    assert "written by 2 process(es)" in out and "1 test case(s) that gave up not counted" in out
    channels = _section(out, "conv.channels")
    assert _row(channels, "1-16") == ["1-16", "3", "2", ""]
    assert _row(channels, "17-64") == ["17-64", "2", "1", ""]
    assert _row(channels, "65-256") == ["65-256", "0", "0", "NOT REACHED"]
    assert _row(channels, "1025+") == ["1025+", "0", "0", "NOT REACHED"]
    assert "9999" not in channels  # only in a test case that gave up
    assert _row(_section(out, "conv.dtype"), "float16") == ["float16", "1", "1", ""]
    assert _row(_section(out, "conv.dtype"), "float32")[-1] == "NOT REACHED"
    # no layer example was labelled: said once per dimension, not as an empty table
    assert "NOT REACHED: no example labelled its layer examples" in _section(out, "layer.cache")
    assert _row(out, a) == [a, "3", "3", "3"]
    assert _row(out, b) == [b, "2", "1", "1"]
    report = json.loads((tmp_path / "out" / "coverage.json").read_text())
    assert report["examples"] == 5 and report["gave_up"] == 1
    assert report["dimensions"]["conv.channels"]["regions"]["1-16"] == {"examples": 3, "tests": 2, "expected": True}
    assert report["tests"][a]["labels"] == {small: 2, mid: 2, "coverage:conv.dtype=float16": 1}
    assert "coverage:conv.channels=1025+" in report["not_reached"]
    assert small not in report["not_reached"]


def test_a_region_outside_the_expected_ones_is_shown_as_such(gdn, tmp_path) -> None:
    _write(tmp_path / "obs", [_case("t::test", ["coverage:conv.dtype=float64"])])
    status, out, _ = gdn("coverage", "--observed", "obs")
    assert status == cli_common.EXIT_OK
    assert _row(_section(out, "conv.dtype"), "float64") == ["float64", "1", "1", "(not an expected region)"]


def test_require_all_fails_while_a_region_is_not_reached_and_passes_once_all_are(gdn, tmp_path) -> None:
    every = [f"coverage:{d.name}={r}" for d in C.dimensions() for r in d.regions]
    # one joint label per cell of the combination grids: every promised combination reached
    from gdn_equiv.strategies.combinations import all_cells, layer_cells

    joints = [C.joint_label("conv", {d: (r,) for d, r in c.regions().items()}) for c in all_cells()]
    joints += [C.joint_label("layer", {d: (r,) for d, r in c.items()}) for c in layer_cells()]
    _write(tmp_path / "some", [_case("t::test", every[:-1] + joints)])
    _write(tmp_path / "all", [_case("t::test", every[:-1] + joints), _case("t::test", every[-1:])])
    status, out, _ = gdn("coverage", "--observed", "some", "--require-all")
    assert status == cli_common.EXIT_FAILED
    assert out.rstrip().endswith(f"1 expected region(s) NOT REACHED: {every[-1]}")
    assert gdn("coverage", "--observed", "some")[0] == cli_common.EXIT_OK  # without --require-all it only reports
    status, out, _ = gdn("coverage", "--observed", "all", "--require-all")
    assert status == cli_common.EXIT_OK, out
    # the one-dimensional tables (these cases carry no joint label: their combinations are another test's)
    tables = out[out.index("## conv.channels") : out.index("## per test")]
    assert "NOT REACHED" not in tables


def test_default_directory_is_hypothesis_own(gdn, tmp_path, monkeypatch) -> None:
    _write(tmp_path / ".hypothesis" / "observed", [_case("t::test", ["coverage:conv.grad=on"])])
    status, out, _ = gdn("coverage")
    assert status == cli_common.EXIT_OK and _row(_section(out, "conv.grad"), "on") == ["on", "1", "1", ""]
    _write(tmp_path / "elsewhere" / "observed", [_case("t::test", ["coverage:conv.grad=off"])])
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", "elsewhere")
    status, out, _ = gdn("coverage")
    assert status == cli_common.EXIT_OK and _row(_section(out, "conv.grad"), "off") == ["off", "1", "1", ""]


REFUSALS = {
    "missing": (lambda p: None, ["--observed", "nosuch"], "observed directory 'nosuch' does not exist"),
    "a-file": (lambda p: (p / "f").write_text("{}"), ["--observed", "f"], "observed directory 'f' is not a directory"),
    "empty": (lambda p: (p / "obs").mkdir(), ["--observed", "obs"], "'obs' holds no *_testcases.jsonl file"),
    "info-only": (
        lambda p: _write(p / "obs", [], name="2026-01-01_info.jsonl"),
        ["--observed", "obs"],
        "'obs' holds no *_testcases.jsonl file: run the tests with HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1",
    ),
    "no-test-case": (
        lambda p: _write(p / "obs", [{"type": "info", "property": "t", "run_start": 1.0}]),
        ["--observed", "obs"],
        "observed directory 'obs' holds no test-case observation",
    ),
    "not-json": (
        lambda p: _write(p / "obs", [_case("t::test", []), '{"type": "test_ca']),
        ["--observed", "obs"],
        "obs/2026-01-01_testcases.jsonl:2 is not JSON",
    ),
    "not-an-object": (
        lambda p: _write(p / "obs", ["[1, 2]"]),
        ["--observed", "obs"],
        "obs/2026-01-01_testcases.jsonl:1 must be a JSON object, got list",
    ),
    "json-a-directory": (
        lambda p: _write(p / "obs", [_case("t::test", [])]),
        ["--observed", "obs", "--json", "."],
        "--json '.' is a directory; it must be a file",
    ),
}


@pytest.mark.parametrize("make, argv, message", list(REFUSALS.values()), ids=list(REFUSALS))
def test_bad_observed_directory_is_refused_with_one_line_naming_it(gdn, tmp_path, make, argv, message) -> None:
    make(tmp_path)
    status, out, err = gdn("coverage", *argv)
    assert status == cli_common.EXIT_USAGE, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], err
    assert lines[0].startswith("gdn-equiv coverage: error:")
    assert out == ""


def test_help_documents_the_exit_statuses(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["coverage", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for status in ("0 ", "1 ", "2 ", "4 ", "130 "):
        assert f"\n  {status}" in out, (status, out)


# ---- the report can fail: a strategy narrowed to small channel counts --------------------------------

RUN = textwrap.dedent(
    """
    import sys

    from hypothesis import given, settings

    from gdn_equiv.harness.coverage import label_conv_call
    from gdn_equiv.strategies import conv_calls

    # narrowed to one block of channels (the planted defect), or drawn wide (the control)
    options = {"max_channels": 16} if sys.argv[1] == "narrowed" else {"min_channels": 300, "max_channels": 1100}


    @settings(max_examples=40, database=None, derandomize=True, deadline=None)
    @given(call=conv_calls(**options))
    def test_calls(call):
        label_conv_call(call, grad=False, final_state=True)


    test_calls()
    """
)


def _observe(tmp_path: Path, which: str) -> Path:
    """Run a tiny Hypothesis test with observability on and a storage directory of its own; its observations."""
    storage = tmp_path / which
    env = {
        **os.environ,
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY": "1",
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER": "1",
        "HYPOTHESIS_STORAGE_DIRECTORY": str(storage),
    }
    done = subprocess.run(
        [sys.executable, "-c", RUN, which], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return storage / "observed"


def test_a_strategy_narrowed_to_small_channel_counts_leaves_the_large_regions_not_reached(gdn, tmp_path) -> None:
    status, out, _ = gdn("coverage", "--observed", str(_observe(tmp_path, "narrowed")), "--require-all")
    assert status == cli_common.EXIT_FAILED, out
    channels = _section(out, "conv.channels")
    assert _row(channels, "1-16")[1] == "40"
    for region in ("17-64", "65-256", "257-1024", "1025+"):
        assert _row(channels, region)[1:] == ["0", "0", "NOT REACHED"], channels
    # the same run through the same pipeline, with the channel counts drawn wide: those regions show
    status, out, _ = gdn("coverage", "--observed", str(_observe(tmp_path, "wide")))
    channels = _section(out, "conv.channels")
    assert status == cli_common.EXIT_OK
    assert _row(channels, "1-16")[-1] == "NOT REACHED"
    assert int(_row(channels, "257-1024")[1]) > 0


# ---- combinations: regions one call held together ------------------------------------------------

PROMISE_RUN = textwrap.dedent(
    """
    import dataclasses
    import sys

    from hypothesis import given, settings

    from gdn_equiv.harness.coverage import label_conv_call
    from gdn_equiv.strategies.combinations import combination_calls

    planted = sys.argv[1] == "planted"


    # the gate's grid, or (the planted defect) the grid whose calls holding a sequence of T < W-1 lost
    # their initial state
    @settings(max_examples=2, database=None, deadline=None)
    @given(cells=combination_calls("torch"))
    def test_cells(cells):
        for cell, call in cells:
            if planted and any(T < call.W - 1 for T in call.seq_lens or (call.T,)):
                call = dataclasses.replace(call, initial_state=False)
            label_conv_call(call, grad=cell.grad, final_state=cell.final_state)


    test_cells()
    """
)


def _observe_script(tmp_path: Path, script: str, which: str) -> Path:
    storage = tmp_path / which
    env = {
        **os.environ,
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY": "1",
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER": "1",
        "HYPOTHESIS_STORAGE_DIRECTORY": str(storage),
    }
    done = subprocess.run(
        [sys.executable, "-c", script, which], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return storage / "observed"


def test_require_all_fails_a_run_that_leaves_a_promised_combination_unreached(gdn, tmp_path) -> None:
    status, out, _ = gdn(
        "coverage", "--observed", str(_observe_script(tmp_path, PROMISE_RUN, "planted")), "--require-all"
    )
    assert status == cli_common.EXIT_FAILED, out
    lost = "conv.length=T<W-1 & conv.initial_state=on"
    assert f"- NOT REACHED: {lost}\n" in out  # promised: listed without "(not promised)"
    assert "T<W-1 & conv.initial_state=on & conv.final_state=requested" in out
    # the same grid without the planted defect: no promised combination unreached (the one-dimensional
    # regions it never draws, 1,025+ channels say, still fail --require-all: this run is no ci run)
    status, out, _ = gdn("coverage", "--observed", str(_observe_script(tmp_path, PROMISE_RUN, "grid")))
    assert status == cli_common.EXIT_OK
    assert lost not in out
    assert re.search(r"### conv: \d+ of \d+ combination\(s\) NOT REACHED, 0 of them promised", out), out


def test_a_joint_label_round_trips_with_every_region_of_the_pair_dimensions() -> None:
    call = ConvCall(B=1, T=5, D=3, W=4, initial_state=True, seq_lens=(2, 0, 3))
    regions = C.conv_call_regions(call, grad=True, final_state=False)
    kind, parsed = C.parse_joint(C.joint_label("conv", regions))
    assert kind == "conv"
    assert parsed == {d: tuple(v) for d, v in regions.items() if d in C.PAIR_DIMENSIONS["conv"]}
    assert parsed["conv.length"] == ("T<W-1", "T=W-1")  # a packed call holds one region per sequence
    assert C.parse_joint("coverage:conv.length=T=W") is None


def _joint(**regions: str) -> str:
    base = {
        "conv.length": "T=W",
        "conv.initial_state": "off",
        "conv.final_state": "requested",
        "conv.varlen": "dense",
        "conv.grad": "off",
        "conv.channels": "1-16",
        "conv.dtype": "float32",
        "conv.layout": "contiguous",
    }
    return C.joint_label("conv", {k: (v,) for k, v in {**base, **regions}.items()})


def test_combinations_count_what_one_call_held_together_not_what_two_calls_held_apart(tmp_path) -> None:
    # one example holds two calls: T<W-1 without a state, T=W with one; T<W-1 & initial_state=on was not reached
    apart = [_joint(**{"conv.length": "T<W-1"}), _joint(**{"conv.initial_state": "on"})]
    t = C.tally(C.read_observed(_write(tmp_path, [_case("t", apart)])))
    combos = {c.name: c.examples for c in C.combinations(t, "conv")}
    assert combos["conv.length=T<W-1 & conv.initial_state=off"] == 1
    assert combos["conv.length=T=W & conv.initial_state=on"] == 1
    assert combos["conv.length=T<W-1 & conv.initial_state=on"] == 0
    unreached = C.unreached_combinations(t, "conv", within=C.TRIPLE_DIMENSIONS["conv"])
    assert "conv.length=T<W-1 & conv.initial_state=on" in [c.name for c in unreached]
    assert all(set(c.dimensions) <= set(C.TRIPLE_DIMENSIONS["conv"]) for c in unreached)
    # the report lists the unreached combinations before the one-dimensional tables
    report = C.format_report(t)
    assert report.index("NOT REACHED: conv.length=T<W-1 & conv.initial_state=on") < report.index("## conv.channels")
    assert "### layer" in report and "NOT REACHED: no layer.example label" in report


COMBINATION_RUN = textwrap.dedent(
    """
    import random
    import sys

    from hypothesis import given, settings, strategies as st

    from gdn_equiv.harness.coverage import label_conv_call
    from gdn_equiv.strategies import conv_calls

    # the conformance tests' way (a random call, random options), as many examples as the combination
    # test runs in ci: the control that shows the measurement can fail
    @settings(max_examples=10, database=None, deadline=None)
    @given(call=conv_calls(widths=(1, 4), layouts=("contiguous",)), grad=st.booleans(), final=st.booleans())
    def test_calls(call, grad, final):
        label_conv_call(call, grad=grad, final_state=final)


    test_calls()
    """
)


def _observe_run(tmp_path: Path, argv: list[str], profile: str = "ci") -> C.Tally:
    storage = tmp_path / "storage"
    env = {
        **os.environ,
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY": "1",
        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER": "1",
        "HYPOTHESIS_STORAGE_DIRECTORY": str(storage),
        "HYPOTHESIS_PROFILE": profile,
    }
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return C.tally(C.read_observed(storage / "observed"))


@pytest.mark.slow
def test_a_ci_run_of_the_combination_tests_reaches_every_combination_of_the_triple_dimensions(tmp_path) -> None:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    t = _observe_run(tmp_path, [*argv, "--pyargs", "gdn_equiv.suite.test_combinations"])
    within = C.TRIPLE_DIMENSIONS["conv"]
    assert C.unreached_combinations(t, "conv", within=within) == []
    assert C.unreached_combinations(t, "layer", within=C.TRIPLE_DIMENSIONS["layer"]) == []
    # the control: random draws, as many examples, leave combinations of the same dimensions unreached
    (tmp_path / "control").mkdir()
    control = _observe_run(tmp_path / "control", [sys.executable, "-c", COMBINATION_RUN])
    assert C.unreached_combinations(control, "conv", within=within)


def _in_run(case: dict, run: str) -> dict:
    return {**case, "features": {**case["features"], C.RUN_EVENT: run}}


def test_coverage_judges_one_run_and_leaves_older_and_unlabelled_lines_out(gdn, tmp_path) -> None:
    """A stale line (an older run's, or an unrelated test's without a run id) must not reach a region for
    the run judged: the default is the newest run, ``--run`` picks another, and the report names it."""
    every = [f"coverage:{d.name}={r}" for d in C.dimensions() for r in d.regions]
    from gdn_equiv.strategies.combinations import all_cells, layer_cells

    joints = [C.joint_label("conv", {d: (r,) for d, r in c.regions().items()}) for c in all_cells()]
    joints += [C.joint_label("layer", {d: (r,) for d, r in c.items()}) for c in layer_cells()]
    old, new = "20261206T090000-11", "20261206T100000-22"
    _write(
        tmp_path / "obs",
        [
            _in_run(_case("t::test", every[:-1] + joints), new),
            _in_run(_case("t::test", every[-1:]), old),  # the one region only an older run reached
            _case("other::test", every[-1:], run=None),  # and an unrelated test's line, with no run id
        ],
    )
    status, out, _ = gdn("coverage", "--observed", "obs", "--require-all")
    assert status == cli_common.EXIT_FAILED, out
    assert f"Run judged: {new}; 2 observation(s) of other runs, or of none, left out." in out
    assert out.rstrip().endswith(f"1 expected region(s) NOT REACHED: {every[-1]}")
    status, out, _ = gdn("coverage", "--observed", "obs", "--run", old)
    assert status == cli_common.EXIT_OK and f"Run judged: {old}; 2 observation(s)" in out
    status, _, err = gdn("coverage", "--observed", "obs", "--run", "no-such-run")
    assert status == cli_common.EXIT_USAGE and f"its runs are {old}, {new}" in err


def test_require_all_fails_a_folder_without_a_run_id(gdn, tmp_path) -> None:
    """A folder whose only line is an unrelated test's (no run id: not a gate run's), even one labelled with every
    region and combination, has no run to judge: every region NOT REACHED, and ``--require-all`` fails (it was
    judged whole and passed, issue #49)."""
    every = [f"coverage:{d.name}={r}" for d in C.dimensions() for r in d.regions]
    from gdn_equiv.strategies.combinations import all_cells, layer_cells

    joints = [C.joint_label("conv", {d: (r,) for d, r in c.regions().items()}) for c in all_cells()]
    joints += [C.joint_label("layer", {d: (r,) for d, r in c.items()}) for c in layer_cells()]
    _write(tmp_path / "obs", [_case("tests/test_other.py::test_unrelated", every + joints, run=None)])
    status, out, _ = gdn("coverage", "--observed", "obs", "--require-all")
    assert status == cli_common.EXIT_FAILED, out
    assert "Run judged: none: no observation carries a run id" in out and "1 observation(s) left out" in out
    assert out.rstrip().endswith(f"{len(every)} expected region(s) NOT REACHED: {', '.join(every)}")
    # the same line in a gate run judges whole (the control)
    _write(tmp_path / "run", [_case("tests/test_other.py::test_unrelated", every + joints)])
    assert gdn("coverage", "--observed", "run", "--require-all")[0] == cli_common.EXIT_OK


def test_the_gates_labels_carry_the_runs_id(monkeypatch) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.control import current_build_context

    from gdn_equiv.strategies import ConvCall

    monkeypatch.setenv(C.RUN_ID_ENV, "20261206T120000-7")
    seen: list[dict] = []

    @settings(max_examples=1, database=None)
    @given(st.none())
    def labelled(_: None) -> None:
        C.label_conv_call(ConvCall(B=1, T=2, D=3, W=2), grad=False, final_state=True)
        seen.append(dict(current_build_context().data.events))

    labelled()
    assert seen and seen[0][C.RUN_EVENT] == "20261206T120000-7"


def test_a_gate_run_has_one_run_id_in_every_process() -> None:
    """Set by the plugin at configure time, before xdist starts its workers (they inherit it)."""
    run = os.environ.get(C.RUN_ID_ENV, "")
    assert run[:8].isdigit() and "-" in run, run


@pytest.mark.parametrize(
    ("T", "lens", "region"),
    [
        (64, (), "T<=64"),
        (65, (), "64<T<=128"),
        (128, (), "64<T<=128"),
        (129, (), "128<T<=256"),
        (257, (), "T>256"),
        (70, (3, 0, 67), "64<T<=128"),
    ],
)
def test_a_call_is_labelled_by_its_longest_sequence_against_the_time_tiles(T, lens, region) -> None:
    """Issue #49: a packed call reaches past a tile when one of its sequences does."""
    call = ConvCall(B=1, T=T, D=3, W=4, seq_lens=lens)
    assert C.conv_call_regions(call, grad=False, final_state=True)["conv.reach"] == (region,)


def test_a_call_is_labelled_by_the_values_it_carries() -> None:
    """Issue #52: one region per value kind, the strategies' kinds restated by the harness."""
    from gdn_equiv.strategies.values import VALUE_KINDS

    assert C.VALUE_KINDS == VALUE_KINDS
    for kind in VALUE_KINDS:
        call = ConvCall(B=1, T=3, D=2, W=2, values=kind)
        assert C.conv_call_regions(call, grad=False, final_state=True)["conv.values"] == (kind,)
