"""Every argument an engine's conv ops take (SPEC §11, "the whole surface"), declared per engine version as data,
and the reference of each: which states, blocks, windows and rows a call changes and to what.

An op's :class:`OpSurface` names its entry point (``file:function``), every argument that function takes, and
what its version declares about them: how it addresses states (one index tensor for read and write, positional
batch rows, a 2-D block table read at ``initial_state_idx`` and written at ``block_idx_last_scheduled_token``
with the blocks between filled at aligned boundaries, or a state row plus separate draft-window rows), the widths
it computes, its kernel's channel block, how much wider than ``W-1`` a state may be and how the window sits in it,
whether it takes accepted counts or circular ``cache_seqlens``, and its pad id. A :class:`SurfaceCase` is one
call drawn on that surface (:func:`gdn_equiv.strategies.pools.surface_cases`): every read and write location
drawn on its own (equal is one case among many), pads between rows, counts ``1..k``.

:func:`expected` is the reference of one call, written from the ops' documented argument contracts in our own
words: it starts from a copy of every tensor the call may touch and changes exactly what the call must change;
every other slot, block, window and column stays as it was. :func:`check_s0_surface` compares the engine with it
(outputs within §6, every tensor bitwise); :func:`check_s0_outside` calls an op with what its version declares
outside (a width, count, index or state shape) and requires a raise or the right answer.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from gdn_equiv.harness.compare import Mismatch, assert_equivalent, compare
from gdn_equiv.model.backends import torch_backend as tb
from gdn_equiv.serving.adapters import NotExercised
from gdn_equiv.serving.engines import SGLANG_VERSIONS, VLLM_VERSIONS, load_ops_file

Tensor = torch.Tensor

__all__ = [
    "OpSurface",
    "Row",
    "SurfaceCase",
    "SurfaceOp",
    "check_s0_outside",
    "check_s0_surface",
    "expected",
    "surface_ops",
    "surfaces",
]

#: how an op finds the states of a call's rows
SLOTS = "slots"  # one index tensor, read and written at the same slot (cache_indices / conv_state_indices)
POSITIONAL = "positional"  # no index: batch row i is state i (the op is handed the batch's states)
BLOCK_TABLE = "block-table"  # vLLM APC: a 2-D table; read at initial_state_idx, written at the last block
WINDOWS = "windows"  # sglang verify: conv_state_indices for the state, intermediate_state_indices for draft windows
ADDRESSING = (SLOTS, POSITIONAL, BLOCK_TABLE, WINDOWS)

#: how the window sits in a state ``L >= W-1`` columns wide
WINDOW_FIRST = "window-first"  # the Triton ops: the window is columns [off, off + W-1), off = accepted - 1
SHIFT_REGISTER = "shift-register"  # vLLM's torch update: the last L inputs, the window the last W-1 of them


@dataclass(frozen=True)
class OpSurface:
    """What one op entry point of one engine version takes (data, as a backend declares its capabilities)."""

    engine: str
    version: str
    path: str  # "cpu-torch" or "gpu" (the Triton ops; "interpret" runs them too where the interpreter can)
    op: str  # "prefill" or "update"
    function: str  # "file:function" inside the release
    caller: str  # the engine's own caller this surface is drawn from
    args: tuple[str, ...]  # every parameter the function takes (checked against its signature when loaded)
    addressing: tuple[str, ...]
    widths: tuple[int, int]  # the widths it computes, inclusive
    block_n: int | None = None  # the kernel's channel block (a sweep crosses it)
    max_extra: int = 0  # how much wider than W-1 a state may be
    layout: str = WINDOW_FIRST
    accepted: bool = False  # num_accepted_tokens: window at offset count - 1, count in [1, k]
    circular: bool = False  # cache_seqlens: the state a circular buffer
    pad_id: int | None = None  # the pad id it skips (None: it takes no pads)
    reserved: int = 0  # slots below this are the engine's own (vLLM's null block)
    block_sizes: tuple[int, ...] = ()  # block_size_to_align values it takes (BLOCK_TABLE)
    #: what its version declares outside, each a kind of :data:`OUTSIDE`, and whether a GPU may be handed it
    #: (an out-of-range index on a device is an illegal address that ends the process, not a raise)
    outside: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.engine}-{self.version}-{self.path}-{self.op}"


#: what may be asked outside a surface: a width past the op's, an accepted count of 0 or k+1, a state narrower
#: than W-1, an index past the pool
OUTSIDE = ("width", "count-0", "count-k+1", "narrow-state", "index", "circular")
#: outside kinds whose right answer the reference defines (a wider kernel; a circular state as documented)
ANSWERABLE = ("width", "circular")


@dataclass(frozen=True)
class Row:
    """One row of a call: ``tokens`` inputs; the state read at ``read`` and written at ``write`` (``None``: a pad);
    ``window`` the draft-window row (WINDOWS); ``accepted`` the count (window offset ``accepted - 1``);
    ``blocks``: (initial, first, last) block positions in the row's table (BLOCK_TABLE) and ``computed`` its
    tokens already computed; ``seqlen`` its circular buffer's length so far (``cache_seqlens``)."""

    tokens: int
    read: int | None
    write: int | None
    has_state: bool = True
    window: int | None = None
    accepted: int = 1
    blocks: tuple[int, int, int] | None = None
    table: tuple[int, ...] = ()
    computed: int = 0
    seqlen: int | None = None


@dataclass(frozen=True)
class SurfaceCase:
    """One call on one op's surface: ``op`` is its :attr:`OpSurface.op`; the pool has ``reserved + num_slots``
    states ``W-1+extra`` wide (all random, so a write anywhere shows); ``k`` tokens per row for an update."""

    op: str
    addressing: str
    dim: int
    width: int
    rows: tuple[Row, ...]
    num_slots: int
    extra: int = 0
    k: int = 1
    spec: bool = False
    circular: bool = False
    block_size: int = 0
    num_windows: int = 0
    dtype: str = "float32"
    bias: bool = False
    activation: str | None = None
    seed: int = 0
    outside: str | None = None

    def short(self) -> str:
        rows = ";".join(_row_short(r) for r in self.rows)
        extras = [f"{k}={v}" for k, v in (("extra", self.extra), ("k", self.k), ("B", self.block_size)) if v]
        extras += ["spec"] * self.spec + ["circular"] * self.circular + [f"OUTSIDE {self.outside}"] * bool(self.outside)
        act = self.activation or "none"
        return (
            f"SurfaceCase({self.op}/{self.addressing} D{self.dim} W{self.width} {self.dtype} bias={self.bias} "
            f"act={act} S{self.num_slots} {' '.join(extras)} rows=[{rows}] seed={self.seed})"
        )


def _row_short(r: Row) -> str:
    if r.read is None:
        return f"{r.tokens}:pad"
    s = f"{r.tokens}:{r.read}>{r.write}{'' if r.has_state else 'f'}"
    if r.window is not None:
        s += f"w{r.window}"
    if r.accepted != 1:
        s += f"a{r.accepted}"
    if r.blocks is not None:
        s += f"b{list(r.blocks)}t{list(r.table)}c{r.computed}"
    if r.seqlen is not None:
        s += f"s{r.seqlen}"
    return s


# ---- the reference ------------------------------------------------------------------------------------------


def tensors(case: SurfaceCase, reserved: int) -> dict[str, Any]:
    """The call's tensors (seeded): ``x [T, D]`` packed rows, ``pool [reserved + S, D, W-1+extra]``, draft
    ``windows [num_windows, k, D, W-1]``, ``weight``, ``bias``."""
    g = torch.Generator().manual_seed(case.seed)
    dtype = getattr(torch, case.dtype)
    L = case.width - 1 + case.extra
    pool = torch.randn(reserved + case.num_slots, case.dim, L, generator=g).to(dtype)
    x = torch.randn(sum(r.tokens for r in case.rows), case.dim, generator=g).to(dtype)
    weight = (torch.randn(case.dim, case.width, generator=g) * 0.5).to(dtype)
    bias = torch.randn(case.dim, generator=g).to(dtype) if case.bias else None
    windows = torch.randn(case.num_windows, case.k, case.dim, case.width - 1, generator=g).to(dtype)
    return {"x": x, "pool": pool, "windows": windows, "weight": weight, "bias": bias}


def _starts(case: SurfaceCase) -> list[int]:
    out = [0]
    for r in case.rows:
        out.append(out[-1] + r.tokens)
    return out


def _conv(window: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None) -> Tensor:
    """``x [n, D]`` continuing ``window [D, W-1]`` -> ``y [n, D]`` through the torch backend (the ground truth)."""
    state = torch.cat([window.new_zeros(window.shape[0], 1), window], dim=-1)[None]
    y, _ = tb.forward(x[None], weight, bias, activation, state, False, None)
    return y[0]


def _locations(case: SurfaceCase, row: Row, reserved: int) -> tuple[int, int]:
    """The pool rows a row reads and writes (block tables resolved)."""
    assert row.read is not None and row.write is not None
    if case.addressing == BLOCK_TABLE:
        assert row.blocks is not None
        return reserved + row.table[row.blocks[0]], reserved + row.table[row.blocks[2]]
    return reserved + row.read, reserved + row.write


def expected(case: SurfaceCase, t: dict[str, Any], reserved: int, layout: str = WINDOW_FIRST) -> dict[str, Tensor]:
    """The reference of one call: ``y [T, D]`` (pad rows zero, never compared), and ``pool``/``windows`` as they
    must be after it: a copy of the tensors before, with exactly the locations the call writes changed."""
    pool, windows = t["pool"].clone(), t["windows"].clone()
    before = t["pool"]
    w, b, act = t["weight"], t["bias"], t["activation"]
    W = case.width
    y = torch.zeros_like(t["x"])
    starts = _starts(case)
    for i, row in enumerate(case.rows):
        lo, hi = starts[i], starts[i + 1]
        if row.read is None or hi == lo:
            continue
        x = t["x"][lo:hi]
        src, dst = _locations(case, row, reserved)
        state = before[src]
        if case.circular:
            L = state.shape[-1]
            order = [((row.seqlen or 0) + j) % L for j in range(L)]  # oldest first
            window = state[:, order][:, L - (W - 1) :]
        elif layout == SHIFT_REGISTER:
            window = state[:, state.shape[-1] - (W - 1) :]
        else:
            off = row.accepted - 1 if case.spec else 0
            window = state[:, off : off + W - 1]
        if not row.has_state:
            window = torch.zeros_like(window)
        y[lo:hi] = _conv(window, x, w, b, act)
        seq = torch.cat([window, x.T.to(window.dtype)], dim=-1)  # [D, W-1+n], inputs in time order
        n = hi - lo
        if case.circular:
            L = state.shape[-1]
            for j in range(n):
                pool[dst][:, ((row.seqlen or 0) + j) % L] = x[j].to(pool.dtype)
        elif layout == SHIFT_REGISTER:
            L = state.shape[-1]
            pool[dst] = torch.cat([state, x.T.to(state.dtype)], dim=-1)[:, -L:]
        elif case.op == "update" and case.spec:
            pool[dst][:, : W - 2 + n] = seq[:, 1:]
        else:
            pool[dst][:, : W - 1] = seq[:, -(W - 1) :]
        if case.addressing == WINDOWS and row.window is not None:
            for j in range(n):
                windows[row.window, j] = seq[:, j + 1 : j + W]
        if case.addressing == BLOCK_TABLE and case.op == "prefill":
            assert row.blocks is not None
            _, first, _ = row.blocks
            bounds = [m for m in range(1, n) if (row.computed + m) % case.block_size == 0]
            for j, m in enumerate(bounds):
                pool[reserved + row.table[first + j]][:, : W - 1] = seq[:, m : m + W - 1]
    return {"y": y, "pool": pool, "windows": windows}


# ---- the ops behind one interface -----------------------------------------------------------------------------


class SurfaceOp:
    """One op entry point on its declared surface: :meth:`call` runs a case through it (the engine's function, or
    the reference for the in-house and planted ones) and returns ``y [T, D]``, mutating ``t["pool"]`` and
    ``t["windows"]`` as the engine's tensors."""

    def __init__(self, surface: OpSurface, resolve: Callable[[], Any] | None = None) -> None:
        self.surface = surface
        self._resolve = resolve

    def function(self) -> Any:
        return None if self._resolve is None else self._resolve()

    def call(self, case: SurfaceCase, t: dict[str, Any]) -> Tensor:
        """The reference as an engine: what the in-house engine and the planted ones (subclasses) run."""
        out = expected(case, t, self.surface.reserved, self.surface.layout)
        t["pool"].copy_(out["pool"])
        t["windows"].copy_(out["windows"])
        return out["y"]


def check_s0_surface(adapter: Any, case: SurfaceCase) -> None:
    """S0 over the whole surface: one call drawn on the op's declared surface = the reference: outputs of the
    rows that are not pads within §6; every slot, block, column and draft window bitwise (the locations the
    reference writes as it says, every other one unchanged); the caller's x, weight and bias unchanged."""

    op = surface_ops(adapter).get(case.op + "/" + case.addressing)
    if op is None:
        raise NotExercised(
            f"{getattr(adapter, 'name', adapter)} declares no {case.op} op addressed by {case.addressing}"
        )
    t = tensors(case, op.surface.reserved)
    t["activation"] = case.activation
    inputs = {k: t[k].clone() for k in ("x", "weight") if isinstance(t[k], Tensor)}
    y = op.call(case, t)
    _judge(adapter, op, case, t, y, inputs)


def _judge(adapter: Any, op: SurfaceOp, case: SurfaceCase, t: dict[str, Any], y: Tensor, inputs: dict) -> None:
    """The call ``op`` made on ``t`` (its output ``y``, the pool and windows it left) against the reference of the
    same call from the tensors before it (``inputs`` the caller's x and weight as they were)."""
    reserved, layout = op.surface.reserved, op.surface.layout
    before = tensors(case, reserved)
    before["activation"] = case.activation
    want = expected(case, before, reserved, layout)
    ctx = f"{getattr(adapter, 'name', '?')} {op.surface.key}: {case.short()}"
    paths = ("engine", "reference")
    starts = _starts(case)
    for i, row in enumerate(case.rows):
        if row.read is not None and row.tokens:
            rows = slice(starts[i], starts[i + 1])
            assert_equivalent(y[rows], want["y"][rows], name=f"y of row {i}", paths=paths, exact=False, context=ctx)
    for name in ("pool", "windows"):
        got, ref = t[name], want[name]
        if not torch.equal(got, ref):
            diff = (got != ref).reshape(got.shape[0], -1).any(-1).nonzero().flatten().tolist()
            written = [_row_short(r) for r in case.rows]
            assert_equivalent(
                got, ref, name=f"{name} (rows that differ: {diff}; the call's rows {written})", paths=paths,
                context=ctx,
            )  # fmt: skip
    for k, v in inputs.items():
        assert_equivalent(t[k], v, name=f"input {k}", paths=("after the call", "before"), context=ctx)


class Silent(Mismatch):
    """An op answered a call outside its declared surface without raising, and wrongly (or where no answer is
    right)."""


def check_s0_outside(adapter: Any, case: SurfaceCase) -> None:
    """Outside the surface: an op handed a width, count, state shape or index its version declares outside must
    raise (any exception with a message) or answer right (the reference, where one is defined: a wider kernel);
    a silent answer where none is right, or a wrong one, is a finding."""
    assert case.outside is not None

    op = surface_ops(adapter).get(case.op + "/" + case.addressing)
    if op is None:
        raise NotExercised(
            f"{getattr(adapter, 'name', adapter)} declares no {case.op} op addressed by {case.addressing}"
        )
    t = tensors(case, op.surface.reserved)
    t["activation"] = case.activation
    ctx = f"{getattr(adapter, 'name', '?')} {op.surface.key}: {case.short()}"
    inputs = {k: t[k].clone() for k in ("x", "weight") if isinstance(t[k], Tensor)}
    try:
        y = op.call(case, t)
    except Exception as exc:  # a refusal: it must say something
        if not str(exc).strip():
            raise Silent(f"{ctx}: raised {type(exc).__name__} with no message", _report(ctx)) from exc
        return
    if case.outside not in ANSWERABLE:
        raise Silent(f"{ctx}: answered a call outside its surface ({case.outside}) without raising", _report(ctx))
    _judge(adapter, op, replace(case, outside=None), t, y, inputs)  # the answer it gave, against the right one


def _report(ctx: str) -> Any:

    return compare(torch.zeros(1), torch.ones(1), name=ctx)


# ---- the engines' ops ----------------------------------------------------------------------------------------


def _vllm_cpu_prefill(fn: Any, s: OpSurface, case: SurfaceCase, t: dict[str, Any]) -> Tensor:
    """``causal_conv1d_fn_cpu(x [D, T], weight, bias, conv_states, query_start_loc, cache_indices,
    has_initial_state, activation, pad_slot_id)``: positional when ``cache_indices`` is None."""
    starts = torch.tensor(_starts(case), dtype=torch.int32)
    idx = None
    if case.addressing == SLOTS:
        idx = torch.tensor([s.pad_id if r.read is None else s.reserved + r.read for r in case.rows], dtype=torch.int32)
    has = torch.tensor([r.has_state for r in case.rows])
    y = fn(t["x"].T, t["weight"], t["bias"], t["pool"], starts, idx, has, t["activation"])
    return y.T


def _vllm_cpu_update(fn: Any, s: OpSurface, case: SurfaceCase, t: dict[str, Any]) -> Tensor:
    """``causal_conv1d_update_torch(x [N, D, k], conv_state [N, D, L], weight, bias, activation)``: the batch's
    states, positional (its caller gathers them)."""
    N, k = len(case.rows), case.k
    x = t["x"].reshape(N, k, -1).transpose(1, 2).contiguous()
    y = fn(x, t["pool"], t["weight"], t["bias"], t["activation"])
    return y.transpose(1, 2).reshape(N * k, -1).to(t["x"].dtype)


def _index(s: OpSurface, case: SurfaceCase, r: Row, device: str) -> list[int]:
    pad = s.pad_id if s.pad_id is not None else -1
    if case.addressing == BLOCK_TABLE:
        return [s.reserved + b for b in r.table] if r.read is not None else [pad] * len(r.table)
    return [pad if r.read is None else s.reserved + r.read]


def _table(s: OpSurface, case: SurfaceCase, device: str) -> Tensor:
    rows = [_index(s, case, r, device) for r in case.rows]
    width = max(len(r) for r in rows)
    pad = s.pad_id if s.pad_id is not None else -1
    table = torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.int32, device=device)
    return table if case.addressing == BLOCK_TABLE else table[:, 0].contiguous()


def _apc(case: SurfaceCase, device: str) -> dict[str, Any]:
    def col(j: int) -> Tensor:
        return torch.tensor(
            [0 if r.blocks is None else r.blocks[j] for r in case.rows], dtype=torch.int32, device=device
        )

    return {"initial_state_idx": col(0), "block_idx_first_scheduled_token": col(1),
            "block_idx_last_scheduled_token": col(2)}  # fmt: skip


#: where the Triton ops run (their ``gpu`` path; tests hand the drivers a stand-in op on the CPU)
_DEVICE = "cuda"


def _triton_prefill(fn: Any, s: OpSurface, case: SurfaceCase, t: dict[str, Any]) -> Tensor:
    """``causal_conv1d_fn(x [D, T] channels last, weight, bias, conv_states, query_start_loc, [seq_lens_cpu],
    cache_indices, has_initial_state, activation, ...)`` with its version's prefix-cache arguments where drawn."""
    dev = _DEVICE
    pool = t["pool"].to(dev)
    starts = torch.tensor(_starts(case), dtype=torch.int32, device=dev)
    kwargs: dict[str, Any] = {
        "cache_indices": _table(s, case, dev),
        "has_initial_state": torch.tensor([r.has_state for r in case.rows], device=dev),
        "activation": t["activation"],
    }
    if "seq_lens_cpu" in s.args:
        kwargs["seq_lens_cpu"] = [r.tokens for r in case.rows]
    if case.addressing == BLOCK_TABLE:
        kwargs.update(_apc(case, dev))
        kwargs["num_computed_tokens"] = torch.tensor([r.computed for r in case.rows], dtype=torch.int32, device=dev)
        kwargs["block_size_to_align"] = case.block_size
    b = None if t["bias"] is None else t["bias"].to(dev)
    x = t["x"].to(dev).T  # [T, D] -> [D, T], channels last in memory, as the layers pass it
    y = fn(x, t["weight"].to(dev), b, pool, starts, **kwargs)
    t["pool"].copy_(pool.cpu())
    return y.T.cpu()


def _triton_update(fn: Any, s: OpSurface, case: SurfaceCase, t: dict[str, Any]) -> Tensor:
    """``causal_conv1d_update``: x ``[N, D, k]`` (vLLM with counts: varlen ``[tokens, D]`` with ``query_start_loc``
    and ``max_query_len``); ``conv_state_indices`` (a 2-D table with its APC arguments); sglang's
    ``intermediate_conv_window``/``intermediate_state_indices`` and ``cache_seqlens`` where drawn."""
    dev = _DEVICE
    pool, windows = t["pool"].to(dev), t["windows"].to(dev)
    N, k = len(case.rows), case.k
    kwargs: dict[str, Any] = {"conv_state_indices": _table(s, case, dev)}
    b = None if t["bias"] is None else t["bias"].to(dev)
    counts = torch.tensor([r.accepted for r in case.rows], dtype=torch.int32, device=dev)
    if s.engine == "vllm" and case.spec:
        x = t["x"].to(dev).clone()
        kwargs.update(num_accepted_tokens=counts, max_query_len=k,
                      query_start_loc=torch.tensor(_starts(case), dtype=torch.int32, device=dev))  # fmt: skip
    else:
        x = t["x"].to(dev).reshape(N, k, -1).transpose(1, 2).clone()
        if case.spec:
            kwargs["num_accept_tokens"] = counts
    if case.addressing == BLOCK_TABLE:
        apc = _apc(case, dev)
        kwargs.update(initial_state_idx=apc["initial_state_idx"],
                      block_idx_last_scheduled_token=apc["block_idx_last_scheduled_token"])  # fmt: skip
    if case.addressing == WINDOWS:
        pad = s.pad_id if s.pad_id is not None else -1
        kwargs["intermediate_conv_window"] = windows
        kwargs["intermediate_state_indices"] = torch.tensor(
            [pad if r.window is None else r.window for r in case.rows], dtype=torch.int32, device=dev
        )
    if case.circular:
        kwargs["cache_seqlens"] = torch.tensor([r.seqlen or 0 for r in case.rows], dtype=torch.int32, device=dev)
    y = fn(x, pool, t["weight"].to(dev), b, t["activation"], **kwargs)
    t["pool"].copy_(pool.cpu())
    t["windows"].copy_(windows.cpu())
    if not (s.engine == "vllm" and case.spec):
        y = y.transpose(1, 2).reshape(N * k, -1)
    return y.cpu()


_DRIVERS = {
    ("cpu-torch", "prefill"): _vllm_cpu_prefill,
    ("cpu-torch", "update"): _vllm_cpu_update,
    ("gpu", "prefill"): _triton_prefill,
    ("gpu", "update"): _triton_update,
}


class EngineSurfaceOp(SurfaceOp):
    """An engine's op, resolved lazily from its release (:func:`gdn_equiv.serving.engines.load_ops_file`)."""

    def call(self, case: SurfaceCase, t: dict[str, Any]) -> Tensor:
        return _DRIVERS[(self.surface.path, self.surface.op)](self.function(), self.surface, case, t)


# ---- the declared surfaces, per engine version -------------------------------------------------------------------

VLLM_OPS = "vllm/model_executor/layers/mamba/ops"
_VLLM_FN = ("x", "weight", "bias", "conv_states", "query_start_loc", "cache_indices", "has_initial_state",
            "activation", "pad_slot_id", "null_block_id")  # fmt: skip
_VLLM_APC = ("block_idx_first_scheduled_token", "block_idx_last_scheduled_token", "initial_state_idx",
             "num_computed_tokens", "block_size_to_align")  # fmt: skip
_VLLM_UPD = ("x", "conv_state", "weight", "bias", "activation", "conv_state_indices", "num_accepted_tokens",
             "query_start_loc", "max_query_len")  # fmt: skip
_MIXER = "vllm/model_executor/layers/mamba/mamba_mixer2.py:MambaMixer2.forward_cuda ('all' prefix caching)"
_GDN = "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:QwenGatedDeltaNetAttention"


def _vllm_surfaces(version: str) -> list[OpSurface]:
    """vLLM's ops: 0.28.0-0.32.0 take the prefix-cache (APC) arguments (2-D block tables); 0.33.0 dropped them;
    0.34.0 declares widths 2-7 (a ValueError outside); 0.28.0-0.33.0 check none (taps up to 5 in the prefill, 6
    in the update; wider ones drawn as outside). The CPU ops: the torch prefill (one index tensor or none,
    pads by ``pad_slot_id`` compared with the slot, any width) and the torch update (the batch's states)."""
    apc = version in ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
    refuses_width = version == "0.34.0"
    # 0.28.0-0.33.0 check no width: their prefill kernel has taps for widths up to 5, their update up to 6
    fn_widths, upd_widths = ((2, 7), (2, 7)) if refuses_width else ((2, 5), (2, 6))
    tail = ("metadata", "validate_data")
    fn_args = _VLLM_FN + (_VLLM_APC if apc else ()) + tail
    upd_args = _VLLM_UPD + (("block_idx_last_scheduled_token", "initial_state_idx") if apc else ())
    upd_args += ("null_block_id", "validate_data", "out")
    gpu_addr = (SLOTS, BLOCK_TABLE) if apc else (SLOTS,)
    cpu = f"{VLLM_OPS}/cpu/causal_conv1d.py"
    tri = f"{VLLM_OPS}/causal_conv1d.py"
    return [
        OpSurface("vllm", version, "cpu-torch", "prefill", f"{cpu}:causal_conv1d_fn_cpu",
                  f"{_GDN}._forward_core (a CPU build binds causal_conv1d_fn to it)",
                  ("x", "weight", "bias", "conv_states", "query_start_loc", "cache_indices", "has_initial_state",
                   "activation", "pad_slot_id", "kwargs"),
                  (SLOTS, POSITIONAL), (2, 8), max_extra=3, pad_id=-1, outside=("narrow-state", "index"),
                  notes=("takes **kwargs: the prefix-cache arguments are accepted and ignored",)),
        OpSurface("vllm", version, "cpu-torch", "update", f"{cpu}:causal_conv1d_update_torch",
                  f"{cpu}:causal_conv1d_update_torch (the aarch64 fallback; its caller gathers the batch's states)",
                  ("x", "conv_state", "weight", "bias", "activation"), (POSITIONAL,), (2, 8), max_extra=3,
                  layout=SHIFT_REGISTER, outside=("narrow-state",)),
        OpSurface("vllm", version, "gpu", "prefill", f"{tri}:causal_conv1d_fn",
                  f"{_GDN}._forward_core; {_MIXER}" if apc else f"{_GDN}._forward_core", fn_args, gpu_addr, fn_widths,
                  block_n=256, max_extra=3, pad_id=0, reserved=1, block_sizes=(8, 16) if apc else (),
                  outside=("width",)),
        OpSurface("vllm", version, "gpu", "update", f"{tri}:causal_conv1d_update",
                  f"{_GDN}._forward_core_decode_spec_fused_norm / _forward_core_decode_non_spec", upd_args, gpu_addr,
                  upd_widths, block_n=256, max_extra=3, accepted=True, pad_id=0, reserved=1,
                  outside=("width", "count-0", "count-k+1")),
    ]  # fmt: skip


SGLANG_OPS = "sglang/kernels/ops/mamba/causal_conv1d_triton.py"
_SGLANG_GDN = "sglang/srt/layers/attention/linear/gdn_backend.py:GDNAttnBackend"


def _sglang_surfaces(version: str) -> list[OpSurface]:
    """sglang's Triton ops: the prefill (``seq_lens_cpu``; 0.5.22-0.5.23's ``block_table`` unused by its callers), the
    update with draft windows (``intermediate_state_indices`` apart from ``conv_state_indices``), counts
    (``num_accept_tokens``), and ``cache_seqlens`` outside (documented as a circular buffer, but its
    ``validate_data`` says "not implemented yet": drawn outside, where the documented answer or a raise is
    required; the kernel never reads it). Its update computes widths
    2-4 and says nothing about wider ones (the kernel loads a fifth column and never uses it); its prefill has
    taps up to width 5. Neither checks a width: wider ones are drawn as outside (raise or answer right)."""
    fn_args: tuple[str, ...] = (
        "x",
        "weight",
        "bias",
        "conv_states",
        "query_start_loc",
        "seq_lens_cpu",
        "cache_indices",
        "has_initial_state",
        "activation",
        "pad_slot_id",
        "validate_data",
        "kwargs",
    )
    # block_table (unused by its callers): in 0.5.22 and 0.5.23, not in 0.5.17-0.5.21 (their signatures, checked)
    fn_args += ("block_table",) if version in ("0.5.22", "0.5.23") else ()
    upd_args = (
        "x",
        "conv_state",
        "weight",
        "bias",
        "activation",
        "cache_seqlens",
        "conv_state_indices",
        "num_accept_tokens",
        "intermediate_conv_window",
        "intermediate_state_indices",
        "retrieve_next_token",
        "retrieve_next_sibling",
        "retrieve_parent_token",
        "pad_slot_id",
        "metadata",
        "validate_data",
    )
    return [
        OpSurface("sglang", version, "gpu", "prefill", f"{SGLANG_OPS}:causal_conv1d_fn",
                  f"{_SGLANG_GDN}._forward_mis_segments", fn_args, (SLOTS,), (2, 5), block_n=256, max_extra=3,
                  pad_id=-1, outside=("width",)),
        OpSurface("sglang", version, "gpu", "update", f"{SGLANG_OPS}:causal_conv1d_update",
                  f"{_SGLANG_GDN}.forward_extend (is_target_verify) / forward_decode", upd_args, (SLOTS, WINDOWS),
                  (2, 4), block_n=256, max_extra=3, accepted=True, pad_id=-1,
                  outside=("width", "count-0", "count-k+1", "circular"),
                  notes=("retrieve_* (EAGLE tree masks) not drawn: tree verification is not a conv-window contract",)),
    ]  # fmt: skip


@functools.cache
def surfaces() -> dict[tuple[str, str], list[OpSurface]]:
    """(engine, version) -> its op surfaces, for every version of the engines' tables (built on first use: the
    tables live in :mod:`gdn_equiv.serving.engines`, which imports the properties this module's checks join)."""
    out = {("vllm", v): _vllm_surfaces(v) for v in VLLM_VERSIONS}
    out.update({("sglang", v): _sglang_surfaces(v) for v in SGLANG_VERSIONS})
    return out


#: the in-house reference's surface: everything any engine declares, so every strategy branch is reachable on it
REFERENCE_SURFACES: list[OpSurface] = [
    OpSurface("reference", "in-house", "cpu-torch", "prefill", "gdn_equiv/serving/surface.py:expected", "-",
              (), (SLOTS, POSITIONAL, BLOCK_TABLE), (2, 8), block_n=256, max_extra=3, pad_id=-1,
              block_sizes=(2, 4), outside=("narrow-state", "index")),
    OpSurface("reference", "in-house", "cpu-torch", "update", "gdn_equiv/serving/surface.py:expected", "-",
              (), (SLOTS, BLOCK_TABLE, WINDOWS), (2, 8), block_n=256, max_extra=3, accepted=True, circular=True,
              pad_id=-1, outside=("count-0", "count-k+1", "narrow-state", "index")),
    OpSurface("reference", "in-house", "cpu-torch", "update", "gdn_equiv/serving/surface.py:expected", "-",
              (), (POSITIONAL,), (2, 8), block_n=256, max_extra=3, layout=SHIFT_REGISTER),
]  # fmt: skip


class _RefusingReference(SurfaceOp):
    """The reference as an engine that refuses, with a message, every call outside its surface."""

    def call(self, case: SurfaceCase, t: dict[str, Any]) -> Tensor:
        if case.outside is not None and case.outside not in ANSWERABLE:
            raise ValueError(f"{case.outside}: outside the surface of {self.surface.key}")
        return super().call(case, t)


def surface_ops(adapter: Any) -> dict[str, SurfaceOp]:
    """``op/addressing`` -> the op an adapter declares for it: an engine path's from its version's
    :func:`surfaces` (``interpret`` runs the ``gpu`` surface's ops where the interpreter can), an adapter's own
    ``surface_ops()`` (planted engines), else the in-house reference's."""
    own = getattr(adapter, "surface_ops", None)
    if callable(own):
        return own()
    engine, version, path = (
        getattr(adapter, "engine", None),
        getattr(adapter, "version", ""),
        getattr(adapter, "path", ""),
    )
    if engine is None:
        return {f"{s.op}/{a}": _RefusingReference(s) for s in REFERENCE_SURFACES for a in s.addressing}
    kind = "cpu-torch" if path.startswith("cpu") else "gpu"
    out: dict[str, SurfaceOp] = {}
    for s in surfaces().get((engine, version), []):
        if s.path != kind or (path.endswith("-ds") or path.endswith("-short-conv")):
            continue
        relpath, _, attr = s.function.partition(":")

        def resolve(relpath: str = relpath, attr: str = attr) -> Any:
            return getattr(load_ops_file(engine, version, relpath, adapter.root), attr)

        for a in s.addressing:
            out[f"{s.op}/{a}"] = EngineSurfaceOp(s, resolve)
    return out


def declared(adapter: Any) -> list[OpSurface]:
    """The distinct surfaces an adapter declares (each once)."""
    seen: dict[str, OpSurface] = {}
    for op in surface_ops(adapter).values():
        seen.setdefault(op.surface.key + op.surface.layout, op.surface)
    return list(seen.values())


def signature_args(op: SurfaceOp) -> tuple[str, ...]:
    """The parameters of the engine function behind ``op`` (its release's source), to hold the declaration to."""
    return tuple(inspect.signature(op.function()).parameters)
