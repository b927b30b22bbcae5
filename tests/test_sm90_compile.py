"""The triton backend's kernels compile for an H100/H200 (sm_90) at their GPU tiles, without spills.

CI runs the kernels in Triton's interpreter, which never compiles them: a construct only the compiler
rejects (a tuple holding a dtype, a tensor shape it cannot lay out) would pass every CPU test and fail
on the first GPU call. ``tools/sm90_compile.py`` runs Triton's whole pipeline for sm_90 (no GPU or
driver needed) in a subprocess without ``TRITON_INTERPRET``, at the bench's specialisation and with
every option on, for the tiles the backend launches on a GPU: every kernel of the backend.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gdn_equiv.model.backends import triton_backend as tb

pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
]
SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "sm90_compile.py"


def _tile(t: tuple[int, ...]) -> str:
    return "x".join(str(v) for v in t)


def _run(*options: str) -> subprocess.CompletedProcess[str]:
    """The script run as a command (tests run it, never import it), Triton's interpreter off."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(SCRIPT), *options], capture_output=True, text=True, env=env, timeout=300)


def _compile(*options: str) -> list[str]:
    """The script at its default tiles: the backend's GPU ones (see the defaults test below)."""
    done = _run(*options)
    if done.returncode and "ptxas" in done.stderr and "No such file" in done.stderr:
        pytest.skip(f"this triton has no ptxas to assemble with: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if line.startswith("_")]


MAIN = ["_fwd_kernel", "_fwd_rows_kernel", "_bwd_serial_kernel"]
ALL = [
    *MAIN, "_final_state_kernel", "_grad_kernel", "_bwd_kernel", "_dstate_kernel", "_reduce_kernel",
    "_bwd_onepass_kernel", "_dstate_onepass_kernel", "_update_kernel",
]  # fmt: skip
OTHERS = ("--others", _tile(tb._GPU_GRAD), _tile(tb._GPU_BWD), _tile(tb._GPU_ONEPASS))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "kernels"),
    [(("--sass",), MAIN), (("--everything", *OTHERS), None)],
    ids=["bench-shape", "every-kernel-and-option"],
)
def test_gpu_kernels_compile_for_sm90_without_spills(options: tuple[str, ...], kernels: list[str] | None) -> None:
    """The fast path's kernels at the bench shape, and every kernel with every option on, compile; none
    spills but the two register-bound backwards that are not the default for W <= 4 (pass 2 of the
    two-pass backward and the one-pass one: 255 registers, spills seen on the H200 with Nsight Compute,
    docs/performance.md)."""
    source = (SCRIPT.parents[1] / "gdn_equiv" / "model" / "backends" / "_triton_kernels.py").read_text()
    assert sorted(ALL) == sorted(re.findall(r"^def (_\w+_kernel)\(", source, re.M))  # a new kernel joins ALL
    lines = _compile(*options)
    assert [line.split()[0] for line in lines] == (kernels or ALL)
    for line in lines:
        registers, spills = re.search(r"(\d+) registers, spills (\d+)/(\d+) B", line).group(1, 2)  # type: ignore[union-attr]
        assert 0 < int(registers) <= 255, line
        assert spills == "0" or line.split()[0] in ("_bwd_kernel", "_bwd_onepass_kernel"), line
        if "--sass" in options:  # the main kernels' instructions per element: a loop body for the row walks
            per, where = re.search(r"([\d.]+) SASS/element \((kernel|loop body)", line).group(1, 2)  # type: ignore[union-attr]
            assert 1 < float(per) < 1000, line
            assert where == ("kernel" if line.startswith("_fwd_kernel") else "loop body"), line


LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/              @P1 BRA `(.L_x_2) ;
.L_x_0:
        /*0020*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0030*/                   FADD R3, R2, R2 ;
        /*0040*/              @!P0 BRA `(.L_x_0) ;
.L_x_1:
        /*0050*/                   FMUL R3, R3, R3 ;
        /*0060*/              @!P2 BRA `(.L_x_1) ;
.L_x_2:
        /*0070*/                   EXIT ;
.L_x_3:
        /*0080*/                   BRA `(.L_x_3);
"""


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        (LISTING, "1.5 SASS/element (loop body 3 / 2)"),  # the longer loop; not the forward branch or the tail
        (LISTING.replace("@!P0 BRA `(.L_x_0)", "NOP"), "1.0 SASS/element (loop body 2 / 2)"),
        (
            LISTING.replace("@!P0 BRA `(.L_x_0)", "NOP").replace("@!P2 BRA `(.L_x_1)", "NOP"),
            "4.5 SASS/element (kernel 9 / 2)",
        ),
    ],
    ids=["two-loops", "one-loop", "no-loop"],
)
def test_sass_per_element_counts_the_longest_loop_body(listing: str, expected: str, tmp_path: Path) -> None:
    """The count behind ``--sass`` (no GPU, no ptxas; ``--count-sass`` on a saved listing): the longest
    backward branch's body, the whole kernel where there is none; a forward branch and the end's
    self-branch are not loops."""
    (tmp_path / "listing.sass").write_text(listing)
    done = _run("--count-sass", str(tmp_path / "listing.sass"), "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == expected


@pytest.mark.parametrize("varlen", [False, True])
def test_the_script_defaults_to_the_tiles_the_backend_launches(varlen: bool) -> None:
    """Without tile options the script compiles the backend's GPU tiles (read from its source, as the
    script runs without torch; ``--tiles`` prints them), the serial one as a launch with packed sequences
    has it under ``--everything``: a tile moved in the backend moves the default report with it."""
    done = _run("--tiles", *(["--everything"] if varlen else []))
    assert done.returncode == 0, done.stderr[-3000:]
    tiles = dict(line.split("=", 1) for line in done.stdout.split())
    launched = {
        name: getattr(tb, name) for name in ("_GPU_FWD", "_GPU_FWD_ROWS", "_GPU_GRAD", "_GPU_BWD", "_GPU_ONEPASS")
    }
    launched["_GPU_SERIAL"] = tb.serial_tile(tb._GPU_SERIAL, varlen)
    assert {name: tiles[name] for name in launched} == {name: _tile(t) for name, t in launched.items()}
