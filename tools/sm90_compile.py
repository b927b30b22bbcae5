"""Compile the triton backend's kernels for an H100/H200 (sm_90) on a machine without a GPU, and print
what ptxas says of each: registers per thread, spill stores/loads, and shared memory.

It runs the whole Triton pipeline (TTIR, TTGIR, LLVM, PTX, ptxas) for a target given by hand, so a
kernel change can be checked for compile errors and register pressure before device time is spent.
It needs only ``triton`` (no torch, no CUDA driver): the kernels' module is loaded from its file.
Run it under the Triton the GPU machine has (3.6 there, 2026-12)::

    python3 -m venv /tmp/t36 && /tmp/t36/bin/pip install triton==3.6.0
    /tmp/t36/bin/python tools/sm90_compile.py                 # the GPU tiles (_GPU_* in triton_backend.py)
    /tmp/t36/bin/python tools/sm90_compile.py --serial 64x256x4x1x4 --fwd-rows 64x1024x4x4
    python3 tools/sm90_compile.py --everything   # every option's branch (tests/test_sm90_compile.py)
    /tmp/t36/bin/python tools/sm90_compile.py --sass  # and SASS instructions per output element
    python3 tools/sm90_compile.py --others 16x256x4 128x64x4 64x64x4  # and every other kernel
    python3 tools/sm90_compile.py --tiles [--everything]      # the tiles it would compile, nothing compiled
    python3 tools/sm90_compile.py --count-sass LISTING.sass 2 # --sass's count for a saved listing

The specialisation is the bench's fused prologue: B2 T2048 D6144 W4 bf16, bias, silu, no state, not
varlen, contiguous (unit strides and multiples of 16 hinted as Triton's launcher would); with
``--everything``, W3, relu2, history, packed sequences and a final-state gradient. The interpreter
(CI) never compiles, so a construct only the compiler rejects shows here first.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget

KERNELS = Path(__file__).resolve().parents[1] / "gdn_equiv" / "model" / "backends" / "_triton_kernels.py"
BACKEND = KERNELS.with_name("triton_backend.py")


def backend_tiles(*, varlen: bool = False) -> dict[str, str]:
    """The backend's GPU tiles (``_GPU_*`` in triton_backend.py) as ``AxBxC`` strings, read from its
    source: importing it would need torch, which this script does without. With ``varlen`` the serial
    tile's row group is capped at ``_SERIAL_VARLEN_ROWS``, as ``triton_backend.serial_tile`` caps it
    for a launch with packed sequences."""
    values = {}
    for node in ast.parse(BACKEND.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.startswith("_GPU_") or name == "_SERIAL_VARLEN_ROWS":
                values[name] = ast.literal_eval(node.value)
    if varlen:
        *tile, rows = values["_GPU_SERIAL"]
        values["_GPU_SERIAL"] = (*tile, min(rows, values["_SERIAL_VARLEN_ROWS"]))
    return {name: "x".join(str(v) for v in value) for name, value in values.items() if name.startswith("_GPU_")}


def _module():
    spec = importlib.util.spec_from_file_location("_gdn_equiv_triton_kernels", KERNELS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _signature(fn, types: dict[str, str], constants: dict[str, object], divisible: set[str]):
    """Every argument typed: pointers and ints by name pattern unless given; constants as constexpr."""
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constants:
            signature[name] = "constexpr"
        elif name in types:
            signature[name] = types[name]
        elif name.endswith("_ptr"):
            signature[name] = "*bf16"
        else:
            signature[name] = "i32"
        if name in divisible:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, attrs


#: pointer arguments that are not bf16 at the bench shape (the rest are: x, weights, states, dy, dx)
POINTER_TYPES = {
    "seq_ptr": "*i32", "cu_ptr": "*i32", "part_ptr": "*fp32", "out_ptr": "*fp32", "g_ptr": "*fp32",
}  # fmt: skip


def sass_per_element(sass: str, elements: int) -> str:
    """SASS instructions per output element: the kernel's longest loop body (its hot path) divided by
    the elements a thread handles per trip, or the whole kernel where it has no loop. A kernel that
    moves a few bytes per element at HBM speed is issue-bound above ~28 of these on an H200 (132 SMs x
    4 schedulers x ~1.98 GHz issue 1.05e12 warp instructions/s; B2 T2048 D6144 is 0.79 M warps of 32)."""
    addr = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+\S")
    code = [(int(m.group(1), 16), line) for line in sass.splitlines() if (m := addr.match(line))]
    labels, at = {}, None
    for line in sass.splitlines():  # a label names the address of the instruction after it
        if m := re.match(r"^(\.L\w+):", line):
            at = m.group(1)
        elif at and (m := addr.match(line)):
            labels[at], at = int(m.group(1), 16), None
    loops = [
        (labels[m.group(1)], pc)
        for pc, line in code
        if (m := re.search(r"BRA\s+`\((\.L\w+)\)", line)) and labels.get(m.group(1), pc) < pc
    ]
    if loops:
        lo, hi = max(loops, key=lambda loop: loop[1] - loop[0])
        n, where = sum(lo <= pc <= hi for pc, _ in code), "loop body"
    else:
        n, where = len(code), "kernel"
    return f"{n / elements:.1f} SASS/element ({where} {n} / {elements})"


def compile_report(
    fn, constants: dict[str, object], *, warps: int, types: dict[str, str] | None = None, elements: int = 0
) -> str:
    """``fn`` compiled for sm_90 with those of ``constants`` it takes; ptxas's resource line for it, and
    with ``elements`` (per thread per loop trip) its SASS instructions per output element."""
    constants = {name: value for name, value in constants.items() if name in fn.arg_names}
    types = {**POINTER_TYPES, **(types or {})}
    D = 6144
    strides = {"sx_b": 2048 * D, "sx_t": D, "sdy_b": 2048 * D, "sdy_t": D, "sw_d": 4, "sb_d": 1}
    consts = dict(constants)
    for name, value in strides.items():  # what Triton's launcher specialises: 1 is a constant
        if name in fn.arg_names and value == 1:
            consts[name] = 1
    for name in ("sx_d", "sdy_d", "sw_w"):
        if name in fn.arg_names:
            consts[name] = 1
    ptrs = {n for n in fn.arg_names if n.endswith("_ptr")}
    divisible = ptrs | {n for n, v in strides.items() if v % 16 == 0} | {"D"}
    signature, attrs = _signature(fn, types or {}, consts, divisible)
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs)
    target = GPUTarget("cuda", 90, 32)
    backend = triton.compiler.make_backend(target)
    options = backend.parse_options({"num_warps": warps, "enable_fp_fusion": False})
    compiled = triton.compile(src, target=target, options=options.__dict__)
    from triton.backends.nvidia.compiler import get_ptxas  # the ptxas Triton itself runs for sm_90

    ptxas = get_ptxas(90).path
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "k.ptx"
        ptx.write_text(compiled.asm["ptx"])
        out = subprocess.run(
            [ptxas, "-arch=sm_90a", "-v", str(ptx), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        per_element = ""
        if elements:
            nvdisasm = [str(Path(ptxas).with_name("nvdisasm")), "-c", str(Path(tmp) / "k.cubin")]
            sass = subprocess.run(nvdisasm, capture_output=True, text=True, check=True).stdout
            per_element = ", " + sass_per_element(sass, elements)
    used = re.search(r"Used (\d+) registers", out)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    smem = re.search(r"(\d+) bytes smem", out)
    return (
        f"{used.group(1) if used else '?'} registers, "
        f"spills {spill.group(1) if spill else '?'}/{spill.group(2) if spill else '?'} B, "
        f"smem {smem.group(1) if smem else 0} B{per_element}"
    )


FLAGS = dict(W=4, HAS_BIAS=True, HAS_STATE=False, ACT=1, VARLEN=False, CDT=None)


# every option on, at another width and activation: the constexpr branches the bench shape leaves out
EVERYTHING = dict(W=3, HAS_BIAS=True, HAS_STATE=True, ACT=3, VARLEN=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # left out, each defaults to the tile the backend launches on a GPU (with --everything, packed sequences)
    parser.add_argument("--serial", nargs="*", help="CTxBDxWARPSxSTAGESxROWS")
    parser.add_argument("--fwd", nargs="*", help="BTxBDxWARPS of _fwd_kernel")
    parser.add_argument("--fwd-rows", nargs="*", help="CTxBDxWARPSxROWS of _fwd_rows_kernel")
    parser.add_argument(
        "--everything", action="store_true", help="W3, relu2, bias, history, packed sequences, d(final state)"
    )
    parser.add_argument(
        "--others",
        nargs=3,
        metavar=("GRAD", "BWD", "ONEPASS"),
        help="BTxBDxWARPS of the two-pass and one-pass kernels: compile every other kernel of the backend too",
    )
    parser.add_argument(
        "--sass", action="store_true", help="also SASS instructions per output element (nvdisasm's count)"
    )
    parser.add_argument(
        "--tiles", action="store_true", help="print the default tiles (NAME=AxBx..., one a line) and compile nothing"
    )
    parser.add_argument(
        "--count-sass",
        nargs=2,
        metavar=("LISTING", "ELEMENTS"),
        help="print --sass's count for a saved nvdisasm listing and output elements per thread; compile nothing",
    )
    args = parser.parse_args(argv)
    tiles = backend_tiles(varlen=args.everything)
    if args.tiles:
        print("\n".join(f"{name}={tile}" for name, tile in tiles.items()))
        return 0
    if args.count_sass:
        print(sass_per_element(Path(args.count_sass[0]).read_text(), int(args.count_sass[1])))
        return 0
    for option, name in (("serial", "_GPU_SERIAL"), ("fwd", "_GPU_FWD"), ("fwd_rows", "_GPU_FWD_ROWS")):
        if getattr(args, option) is None:
            setattr(args, option, [tiles[name]])
    k = _module()
    import triton.language as tl

    flags = {**FLAGS, "CDT": tl.float32, **(EVERYTHING if args.everything else {})}
    what = "W3 relu2 bias state varlen dfinal" if args.everything else "W4 bias silu"
    print(f"triton {triton.__version__}, target sm_90; B2 T2048 D6144 bf16 {what}")
    for spec in args.fwd:
        BT, BD, warps = (int(v) for v in spec.split("x"))
        line = compile_report(k._fwd_kernel, {**flags, "BT": BT, "BD": BD}, warps=warps,
                              types={"seq_ptr": "*i32", "cu_ptr": "*i32"},
                              elements=args.sass and BT * BD // (32 * warps))  # fmt: skip
        print(f"_fwd_kernel {spec}: {line}", flush=True)
    for spec in args.fwd_rows:
        CT, BD, warps, rows = (int(v) for v in spec.split("x"))
        line = compile_report(k._fwd_rows_kernel, {**flags, "CT": CT, "BD": BD, "ROWS": rows}, warps=warps,
                              types={"seq_ptr": "*i32", "cu_ptr": "*i32"},
                              elements=args.sass and rows * BD // (32 * warps))  # fmt: skip
        print(f"_fwd_rows_kernel {spec}: {line}", flush=True)
    for spec in args.serial:
        CT, BD, warps, stages, rows = (int(v) for v in spec.split("x"))
        consts = {
            **flags,
            "HAS_DF": args.everything,
            "NEED_DW": True,
            "CT": CT,
            "BD": BD,
            "STAGES": stages,
            "ROWS": rows,
        }
        line = compile_report(k._bwd_serial_kernel, consts, warps=warps,
                              types={"seq_ptr": "*i32", "cu_ptr": "*i32", "part_ptr": "*fp32"},
                              elements=args.sass and rows * BD // (32 * warps))  # fmt: skip
        print(f"_bwd_serial_kernel {spec}: {line}", flush=True)
    if args.others:
        _others(k, flags, *([int(v) for v in spec.split("x")] for spec in args.others), args.everything)
    return 0


def _others(k, flags: dict, grad: list[int], bwd: list[int], onepass: list[int], everything: bool) -> None:
    """The rest of the backend's kernels, each at the tile its launch uses (triton_backend.py): the final
    state and the two-pass backward's (pass 1, pass 2, d(initial_state), the weight sums), the one-pass
    backward and its d(initial_state), and the decode step."""
    W = int(flags["W"])  # type: ignore[call-overload]
    bw = 1 << max(W - 1, 0).bit_length()
    halo = max(1 << max(W - 2, 0).bit_length(), 2)
    grads = {**flags, "HAS_DF": everything, "NEED_DW": True, "BW": bw}
    plan = [
        ("_final_state_kernel", {"BD": bwd[1]}, bwd[2]),
        ("_grad_kernel", {"BT": grad[0], "BD": grad[1]}, grad[2]),
        ("_bwd_kernel", {"BT": bwd[0], "BD": bwd[1]}, bwd[2]),
        ("_dstate_kernel", {"BD": bwd[1]}, bwd[2]),
        ("_reduce_kernel", {"BD": bwd[1]}, bwd[2]),
        ("_bwd_onepass_kernel", {"BT": onepass[0], "BD": onepass[1], "HB": halo}, onepass[2]),
        ("_dstate_onepass_kernel", {"BD": onepass[1]}, onepass[2]),
        ("_update_kernel", {"BD": 256}, 4),
    ]
    for name, tile, warps in plan:
        line = compile_report(getattr(k, name), {**grads, **tile}, warps=warps)
        print(f"{name} {' '.join(f'{k}={v}' for k, v in tile.items())} warps={warps}: {line}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
