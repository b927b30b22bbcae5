"""vLLM's and sglang's short-conv ops behind the §11 protocol, one version table per engine (SPEC §9, §11).

Engines are optional extras, imported lazily (only when an adapter is asked to run) and matched by exact
version: a version the table does not know is refused by name (``unavailable()``), never guessed at. Each
engine appears once per path it can run on: ``cpu-torch`` (its plain-torch ops), ``interpret`` (its Triton
kernels under ``TRITON_INTERPRET=1``) and ``gpu``; ``unavailable()`` says why a path cannot run here.

How vLLM's names map onto §11 (0.34.0, ``vllm/model_executor/layers/mamba/ops/causal_conv1d.py``):
``x [D, T]`` (channels first: §11's ``x.T``), ``conv_states [S, D, W-1+k-1]`` (wider than §11's pool when a
verify step of ``k`` tokens is to come), ``query_start_loc`` = starts, ``cache_indices`` = slots,
``has_initial_state`` = has_state, ``pad_slot_id=-1`` for prefill and ``null_block_id=0`` for decode (slot 0 is
the null block: never named, so ``first_slot = 1``). A verify step writes ``[state[1:], drafts]`` and the
accepted count is passed to the *next* call as ``num_accepted_tokens`` (offset ``count - 1`` into the buffer),
so the adapter keeps the count with the pool and :meth:`states` reads the window at that offset; vLLM counts
the verify step's first token as always accepted (``min_accepted = 1``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gdn_equiv.serving.adapters import EngineAdapter, NotExercised, ReferenceAdapter

Tensor = torch.Tensor

__all__ = ["ENGINES", "SGLANG_VERSIONS", "VLLM_VERSIONS", "EngineVersion", "engine_adapters", "installed_version"]


@dataclass(frozen=True)
class EngineVersion:
    """One row of an engine's version table: where its ops live and the conventions of that version."""

    engine: str
    version: str
    #: path -> (prefill "file:function", step "file:function"), files as paths inside the installed distribution
    ops: dict[str, tuple[str, str]]
    pad_slot: int = -1
    first_slot: int = 0
    min_accepted: int = 0
    #: paths whose step takes a verify step's accepted count (S4); others say why not
    speculative: dict[str, str | None] = field(default_factory=dict)
    #: the modules an ops file imports at its top that are not the conv (platform probes, constants), given
    #: as the values this version defines: the ops file is loaded alone, so the engine's whole import chain
    #: (vLLM 0.34.0: its torch 2.14 C++ extensions and ~100 packages) is not needed to run its convs
    shims: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: path -> call kind (prefill, decode, verify, packed, snapshots) -> the engine's own caller each adapter call
    #: mirrors ("file:Class.function: its argument conventions"), reported with every row
    callers: dict[str, dict[str, str]] = field(default_factory=dict)
    #: vLLM's ShortConv caller passes accepted counts to its verify steps (vLLM #50272, 0.29.0 on)
    short_conv_fixed: bool = True
    notes: tuple[str, ...] = field(default=())


#: every path an engine may list; ``-ds`` runs the same ops on vLLM's DS conv-state layout (dim first) instead of its
#: default SD (state_len first, dim contiguous: what ``conv_state.transpose(-1, -2)`` hands the kernels)
#: ``-short-conv`` runs vLLM's Triton ops the way its ShortConv layer (LFM2) calls them: the caller vLLM #50272
#: fixed (0.29.0): before it, a verify step kept every draft in the conv window
PATHS = (
    "cpu-torch", "cpu-torch-ds", "interpret", "interpret-ds", "interpret-short-conv", "gpu", "gpu-ds",
    "gpu-short-conv",
)  # fmt: skip

VLLM_OPS = "vllm/model_executor/layers/mamba/ops"
VLLM_GDN = "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:QwenGatedDeltaNetAttention"
_VLLM_CONSTANTS = {"NULL_BLOCK_ID": 0, "PAD_SLOT_ID": -1}  # vllm/v1/attention/backends/utils.py, 0.30.0-0.34.0
_VLLM_SHIMS: dict[str, dict[str, Any]] = {
    "vllm.v1.attention.backends.utils": _VLLM_CONSTANTS,
    # the C++ decode op (0.34.0 imports it from vllm._cpu_ops, 0.28.0-0.33.0 from vllm._custom_ops): the torch one
    # is run
    "vllm._cpu_ops": {"causal_conv1d_update_cpu_vec": None},
    "vllm._custom_ops": {"causal_conv1d_update_cpu_vec": None},
    "vllm.platforms": {"current_platform": "platform"},
    "vllm.triton_utils": {"tl": "triton.language", "triton": "triton"},
}
_VLLM_TRITON = (f"{VLLM_OPS}/causal_conv1d.py:causal_conv1d_fn", f"{VLLM_OPS}/causal_conv1d.py:causal_conv1d_update")
_VLLM_CPU = (
    f"{VLLM_OPS}/cpu/causal_conv1d.py:causal_conv1d_fn_cpu",
    f"{VLLM_OPS}/cpu/causal_conv1d.py:causal_conv1d_update_torch",
)
#: the vLLM callers each adapter call mirrors (the same in 0.30.0-0.34.0; on a CPU build causal_conv1d.py binds
#: its two names to the cpu/ functions, so the same callers reach them)
VLLM_CALLERS: dict[str, str] = {
    "prefill": f"{VLLM_GDN}._forward_core: causal_conv1d_fn(x.T [D, T], conv_weights, bias, activation=..., "
    "conv_states=kv_cache[0] (SD: .transpose(-1, -2)), has_initial_state=..., cache_indices=state indices, "
    "query_start_loc=..., metadata=...): pad_slot_id never passed (default PAD_SLOT_ID=-1, compared with the "
    "sequence's index in the batch); pad entries of cache_indices are NULL_BLOCK_ID=0, caught by null_block_id",
    "decode": f"{VLLM_GDN}._forward_core_decode_non_spec: causal_conv1d_update(x [N, D], conv_state, "
    "conv_weights, bias, activation, conv_state_indices=state indices [N]): one token per sequence",
    "verify": f"{VLLM_GDN}._forward_core_decode_spec_fused_norm: causal_conv1d_update(x [tokens, D], conv_state, "
    "conv_weights, bias, activation, conv_state_indices=spec_state_indices[:, 0], num_accepted_tokens=the "
    "previous step's counts, query_start_loc=..., max_query_len=k): conv state W-1+num_spec wide "
    "(mamba_utils.MambaStateShapeCalculator.gated_delta_net_state_shape)",
    "packed": f"{VLLM_GDN}._forward_core: one causal_conv1d_fn over mixed_qkv (q|k|v channels, one conv1d weight)",
    "snapshots": "vllm/v1/core/single_type_kv_cache_manager.py:MambaManager ('align' prefix caching: chunks end at "
    "block boundaries, the state copied into the next block's slot before each chunk)",
}
VLLM_SHORT_CONV = "vllm/model_executor/layers/mamba/short_conv.py:ShortConv.forward_cuda"
#: vLLM's ShortConv before #50272 (0.28.0 and older): conv state W-1 wide (mamba_utils.short_conv_state_shape
#: without num_spec), and the decode branch's causal_conv1d_update never given num_accepted_tokens
VLLM_SHORT_CONV_UNFIXED = {
    **VLLM_CALLERS,
    "prefill": f"{VLLM_SHORT_CONV}: causal_conv1d_fn(Bx.T, conv_weights, bias, activation=None, conv_states=..., "
    "has_initial_state=..., cache_indices=..., metadata=attn_metadata, query_start_loc=...): no pad_slot_id",
    "decode": f"{VLLM_SHORT_CONV}: causal_conv1d_update(Bx_d, conv_state, conv_weights, bias, activation=None, "
    "conv_state_indices=state_indices_tensor_d)",
    "verify": f"{VLLM_SHORT_CONV}: the decode branch's call for a verify step too (no num_accepted_tokens, conv "
    "state W-1 wide: every draft stays in the window)",
}
#: after #50272 (0.29.0 on): conv state W-1+num_spec wide, num_accepted_tokens passed on verify steps
VLLM_SHORT_CONV_FIXED = {
    **VLLM_CALLERS,
    "prefill": VLLM_SHORT_CONV_UNFIXED["prefill"],
    "decode": VLLM_SHORT_CONV_UNFIXED["decode"],
    "verify": f"{VLLM_SHORT_CONV}: causal_conv1d_update(Bx_d, conv_state, ..., conv_state_indices=..., "
    "num_accepted_tokens=..., query_start_loc=query_start_loc_d, max_query_len=...)",
}
VLLM_CPU_CALLERS = {
    **VLLM_CALLERS,
    "decode": f"{VLLM_OPS}/cpu/causal_conv1d.py:causal_conv1d_update_torch, as its docstring's aarch64 fallback "
    "takes it: x [N, D, k] and the states of the batch (gathered from the named slots, written back)",
}


def _callers(path: str, short_conv_fixed: bool) -> dict[str, str]:
    if path.endswith("-short-conv"):
        return VLLM_SHORT_CONV_FIXED if short_conv_fixed else VLLM_SHORT_CONV_UNFIXED
    return VLLM_CPU_CALLERS if path.startswith("cpu") else VLLM_CALLERS


def _vllm(version: str, notes: tuple[str, ...] = (), *, short_conv_fixed: bool = True) -> EngineVersion:
    return EngineVersion(
        "vllm",
        version,
        {
            "cpu-torch": _VLLM_CPU,
            "cpu-torch-ds": _VLLM_CPU,
            "interpret": _VLLM_TRITON,
            "interpret-ds": _VLLM_TRITON,
            "interpret-short-conv": _VLLM_TRITON,
            "gpu": _VLLM_TRITON,
            "gpu-ds": _VLLM_TRITON,
            "gpu-short-conv": _VLLM_TRITON,
        },
        pad_slot=0,  # NULL_BLOCK_ID: what vLLM puts in cache_indices for a pad; both Triton kernels skip it
        first_slot=1,
        min_accepted=1,
        speculative={
            p: f"vLLM {version}'s CPU speculative conv update is a C++ op (vllm._C); its torch update "
            "(causal_conv1d_update_torch) takes no accepted count"
            for p in ("cpu-torch", "cpu-torch-ds")
        },
        shims=_VLLM_SHIMS,
        callers={p: _callers(p, short_conv_fixed) for p in PATHS},
        short_conv_fixed=short_conv_fixed,
        notes=notes,
    )


VLLM_VERSIONS: dict[str, EngineVersion] = {
    "0.28.0": _vllm("0.28.0", ("causal_conv1d.py = 0.30.0's; ShortConv before vLLM #50272",), short_conv_fixed=False),
    "0.29.0": _vllm("0.29.0", ("causal_conv1d.py = 0.30.0's; ShortConv with vLLM #50272's fix",)),
    "0.30.0": _vllm("0.30.0", ("causal_conv1d_fn writes prefix-cache block states itself (APC args, unused here)",)),
    "0.31.0": _vllm("0.31.0", ("causal_conv1d.py = 0.30.0's but for two docstrings",)),
    "0.32.0": _vllm("0.32.0", ("causal_conv1d.py = 0.31.0's",)),
    "0.33.0": _vllm("0.33.0", ("the in-kernel prefix-cache (APC) writes removed from causal_conv1d_fn",)),
    "0.34.0": _vllm("0.34.0", ("kernel widths 5-7 added (a ValueError outside 2-7)", "wheel pins torch==2.14.0")),
}

SGLANG_OPS = "sglang/kernels/ops/mamba/causal_conv1d_triton.py"
SGLANG_GDN = "sglang/srt/layers/attention/linear/gdn_backend.py:GDNAttnBackend"
SGLANG_CALLERS: dict[str, str] = {
    "prefill": f"{SGLANG_GDN}._forward_mis_segments: causal_conv1d_fn(mixed_qkv.T, conv_weights, bias, "
    "activation=..., conv_states=..., has_initial_state=..., cache_indices=..., query_start_loc=..., "
    "seq_lens_cpu=...): pad_slot_id never passed (default PAD_SLOT_ID=-1)",
    "decode": f"{SGLANG_GDN}.forward_decode: causal_conv1d_update(mixed_qkv [N, D], conv_states, conv_weights, "
    "bias, activation, conv_state_indices=cache_indices)",
    "verify": f"{SGLANG_GDN}.forward_extend (is_target_verify): causal_conv1d_update(x [N, D, k], conv_states, ..., "
    "conv_state_indices=..., intermediate_conv_window=..., intermediate_state_indices=...), then "
    "sglang/srt/layers/attention/hybrid_linear_attn_backend.py:update_mamba_state_after_mtp_verify copies "
    "window[accepted - 1] into conv_states",
    "packed": f"{SGLANG_GDN}._forward_mis_segments: one causal_conv1d_fn over mixed_qkv (q|k|v channels)",
    "snapshots": "none mirrored: sglang's prefix cache copies raw inputs into tracked slots "
    f"({SGLANG_GDN}.forward_extend, has_mamba_track_mask); the adapter chunks as vLLM's 'align' mode",
}


def _sglang(version: str, ops: str = SGLANG_OPS, notes: tuple[str, ...] = ()) -> EngineVersion:
    return EngineVersion(
        "sglang",
        version,
        {"interpret": (f"{ops}:causal_conv1d_fn", f"{ops}:causal_conv1d_update"),
         "gpu": (f"{ops}:causal_conv1d_fn", f"{ops}:causal_conv1d_update")},
        pad_slot=-1,
        min_accepted=1,
        shims={"sglang.kernels.jit.utils": {"is_arch_support_pdl": "false"}},
        callers={p: SGLANG_CALLERS for p in PATHS},
        notes=notes,
    )  # fmt: skip


_SPLIT = ("KDA extend: three causal_conv1d_fn calls (q, k, v)",)
_PACKED = ("KDA extend: one packed q|k|v causal_conv1d_fn call",)
SGLANG_VERSIONS: dict[str, EngineVersion] = {
    **{v: _sglang(v, notes=_SPLIT) for v in ("0.5.17", "0.5.18", "0.5.19")},
    **{v: _sglang(v, notes=_PACKED) for v in ("0.5.20", "0.5.21", "0.5.22", "0.5.23")},
}

ENGINES: dict[str, dict[str, EngineVersion]] = {"vllm": VLLM_VERSIONS, "sglang": SGLANG_VERSIONS}


def installed_version(engine: str) -> str | None:
    try:
        return importlib.metadata.version(engine)
    except importlib.metadata.PackageNotFoundError:
        return None


#: where releases sit side by side, one folder ``<engine>-<version>/`` each holding that release's ops files as
#: in its wheel (``gdn-equiv engines fetch``); default ``.engines`` in the working directory
ENGINES_DIR_ENV = "GDN_EQUIV_ENGINES"


def engines_dir() -> Path:
    return Path(os.environ.get(ENGINES_DIR_ENV, ".engines"))


def release_dirs(engine: str) -> dict[str, Path]:
    """The side-by-side releases of ``engine`` found in :func:`engines_dir`: version -> folder."""
    root = engines_dir()
    if not root.is_dir():
        return {}
    found = {d.name[len(engine) + 1 :]: d for d in root.iterdir() if d.is_dir() and d.name.startswith(f"{engine}-")}
    return dict(sorted(found.items(), key=lambda kv: [int(p) if p.isdigit() else p for p in kv[0].split(".")]))


class _Platform:
    """The platform an ops file asks about at import and call time: not a CPU build (the Triton functions stay
    bound), no programmatic dependent launch (a Hopper-only launch option the interpreter lacks)."""

    @staticmethod
    def is_cpu() -> bool:
        return False

    @staticmethod
    def is_arch_support_pdl() -> bool:
        return False


def _shim_value(value: Any) -> Any:
    if value == "platform":
        return _Platform()
    if value == "false":
        return lambda: False
    if isinstance(value, str):
        return importlib.import_module(value)
    return value


@functools.cache
def load_ops_file(engine: str, version: str, relpath: str, root: str | None) -> Any:
    """An ops file of one release (``root``: its side-by-side folder; ``None``: the installed distribution),
    loaded alone under a private name with its version's shims in ``sys.modules`` for the duration (restored
    after). The engine's code is read where it was extracted or installed, never copied."""
    row = ENGINES[engine][version]
    base = Path(root) if root is not None else Path(str(importlib.metadata.distribution(engine).locate_file("")))
    path = base / relpath
    if not path.is_file():
        raise FileNotFoundError(f"{relpath} is not in {engine} {version} ({base})")
    shims = {}
    for name, attrs in row.shims.items():
        module = types.ModuleType(name)
        for attr, value in attrs.items():
            setattr(module, attr, _shim_value(value))
        shims[name] = module
    saved = {name: sys.modules.get(name) for name in shims}
    sys.modules.update(shims)
    try:
        tag = f"{engine}_{version}_{path.stem}".replace(".", "_").replace("-", "_")
        spec = importlib.util.spec_from_file_location(f"_gdn_equiv_{tag}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module


@dataclass
class EnginePool:
    """An engine's pool. ``buffer``: the engine's own tensor, slot first (vLLM SD ``[S, L, D]``, DS ``[S, D, L]``,
    ``L = W-1 + max_step-1`` where a verify step is to come); ``view``: ``[S, D, L]``, what the engine's layers
    hand its kernels; per slot the accepted count its next call is given (vLLM's ``num_accepted_tokens``;
    1 = offset 0); sglang's draft windows ``[S, max_step, D, W-1]`` (``intermediate_conv_window``) or None."""

    buffer: Tensor
    view: Tensor
    width: int
    pending: Tensor
    speculative: bool
    windows: Tensor | None = None


class EngineOps(ReferenceAdapter):
    """An engine's conv ops on one path of one release, behind the protocol. The release is the installed one
    (``release=None``) or a side-by-side folder (:func:`release_dirs`); its functions are resolved only when a
    call runs (the import is lazy). ``unavailable()`` says only what is missing here (package, version, ops
    file, device, interpreter); whether the path computes right is S0's question, asked like every other
    property. Each call mirrors the engine caller its version row names (:meth:`callers`)."""

    def __init__(self, engine: str, path: str, release: str | None = None) -> None:
        self.engine = engine
        self.path = path
        self.release = release
        self.root = (
            None if release is None else str(release_dirs(engine).get(release, engines_dir() / f"{engine}-{release}"))
        )
        self.name = f"{engine}-{path}" if release is None else f"{engine}-{release}-{path}"
        self.version = release or installed_version(engine) or "not installed"
        row = ENGINES[engine].get(self.version) or next(iter(ENGINES[engine].values()))
        self.pad_slot = row.pad_slot
        self.first_slot = row.first_slot
        self.min_accepted = row.min_accepted
        self.handoff_exact = False
        # vLLM's default is SD (its -ds paths the other); sglang's GDN pool keeps [D, W-1] per slot
        # (sglang/srt/configs/mamba_utils.py: the GDN conv_state_shape), so DS
        self.layout = "DS" if path.endswith("-ds") or engine == "sglang" else "SD"
        #: why this path's step takes no accepted count (S4 cannot run), or None
        self.not_speculative: str | None = row.speculative.get(path)
        self.speculative = self.not_speculative is None

    def row(self) -> EngineVersion:
        return ENGINES[self.engine][self.version]

    def callers(self) -> dict[str, str]:
        """Call kind -> the engine's own caller this adapter's call mirrors (data of the version row)."""
        row = ENGINES[self.engine].get(self.version)
        return {} if row is None else dict(row.callers.get(self.path, {}))

    def unavailable(self) -> str | None:
        table = ENGINES[self.engine]
        if self.release is None:
            version = installed_version(self.engine)
            if version is None:
                return (
                    f"{self.engine} is not installed (optional extra; known versions: {', '.join(table)}); "
                    + _WHY_NOT_HERE.get(self.engine, "")
                ).rstrip("; ")
        else:
            version = self.release
        if version not in table:
            return f"{self.engine} {version} is not a version the adapter knows; known versions: {', '.join(table)}"
        row = table[version]
        if self.path not in row.ops:
            return f"{self.engine} {version} has no {self.path} ops"
        if self.path.startswith("gpu") and not torch.cuda.is_available():
            return "no CUDA device here"
        if self.path.startswith("interpret") and os.environ.get("TRITON_INTERPRET") != "1":
            return "TRITON_INTERPRET is not 1"
        try:
            self._ops()
        except (ImportError, FileNotFoundError) as exc:  # a package or an ops file missing here; else a bug, raised
            return f"{self.engine} {version} {self.path} ops cannot be loaded here: {type(exc).__name__}: {exc}"
        if self.path.startswith("interpret"):
            key = (self.engine, version, self.path)
            if key not in _INTERPRETER:  # once per process: the interpreter runs a call for seconds
                _INTERPRETER[key] = self._interpreter_limit()
            return _INTERPRETER[key]
        return None

    def _interpreter_limit(self) -> str | None:
        """The smallest call (D1 W2, one token through prefill and step) under the Triton interpreter: where it
        stops on one of :data:`INTERPRETER_LIMITS` (what the interpreter lacks, not what the kernel computes) the
        path cannot run here. Anything else it raises is not caught: the properties meet it as a finding or an
        error, never as "cannot run here"."""
        pool = self.new_pool(torch.zeros(self.first_slot + 1, 1, 1), max_step=1)
        one, weight = torch.ones(1, 1), torch.ones(1, 2)
        slot = torch.tensor([self.first_slot], dtype=torch.int32)
        try:
            self.prefill(
                pool, one, weight, None, None, torch.tensor([0, 1], dtype=torch.int32), slot, torch.tensor([True])
            )
            self.step(pool, one[None], weight, None, None, slot)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if any(type(exc).__name__ == kind and pattern in str(exc) for kind, pattern in INTERPRETER_LIMITS):
                return (
                    f"{self.engine} {self.version} {self.path}: the Triton interpreter cannot run this kernel "
                    f"(a known interpreter limit, smallest call D1 W2 one token): {text[:200]}"
                )
        return None

    def _ops(self) -> tuple[Any, Any]:
        fwd, upd = self.row().ops[self.path]
        return self._resolve(fwd), self._resolve(upd)

    def _resolve(self, spec: str) -> Any:
        relpath, _, attr = spec.partition(":")
        return getattr(load_ops_file(self.engine, self.version, relpath, self.root), attr)

    def _keeps_every_draft(self) -> bool:
        """vLLM's ShortConv before #50272: a conv state W-1 wide, and verify steps fed as decode (no counts)."""
        row = ENGINES[self.engine].get(self.version)
        return self.path.endswith("-short-conv") and row is not None and not row.short_conv_fixed

    def _device(self) -> str:
        return "cuda" if self.path.startswith("gpu") else "cpu"

    # ---- the pool -----------------------------------------------------------------------------
    def new_pool(self, states: Tensor, *, max_step: int) -> EnginePool:  # type: ignore[override]
        S, D, w1 = states.shape
        spec = self.speculative and max_step > 1
        # vLLM's conv state is wider by the drafts a verify step may leave behind (W-1 + num_spec); sglang keeps
        # them in separate draft windows
        extra = max_step - 1 if spec and self.engine == "vllm" and not self._keeps_every_draft() else 0
        dev = self._device()
        if self.layout == "SD":
            buffer = torch.zeros(S, w1 + extra, D, dtype=states.dtype, device=dev)
            view = buffer.transpose(-1, -2)
        else:
            buffer = torch.zeros(S, D, w1 + extra, dtype=states.dtype, device=dev)
            view = buffer
        view[:, :, :w1] = states.to(dev)
        pending = torch.ones(S, dtype=torch.int32, device=dev)
        windows = None
        if spec and self.engine == "sglang":
            windows = torch.zeros(S, max_step, D, w1, dtype=states.dtype, device=dev)
        return EnginePool(buffer, view, w1 + 1, pending, speculative=spec, windows=windows)

    def states(self, pool: EnginePool) -> Tensor:  # type: ignore[override]
        w1 = pool.width - 1
        rows = [pool.view[s, :, int(o) - 1 : int(o) - 1 + w1] for s, o in enumerate(pool.pending.tolist())]
        return torch.stack(rows).cpu()

    def storage(self, pool: EnginePool) -> list[Tensor]:  # type: ignore[override]
        return [pool.buffer, pool.pending, *([] if pool.windows is None else [pool.windows])]

    # ---- the calls ----------------------------------------------------------------------------
    def prefill(  # type: ignore[override]
        self,
        pool: EnginePool,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        starts: Tensor,
        slots: Tensor,
        has_state: Tensor,
        *,
        path: str = "general",
    ) -> Tensor:
        """The ``prefill`` caller of the version row: no ``pad_slot_id`` (the engine's default), pads as the
        engine's layers put them in ``cache_indices`` (vLLM: NULL_BLOCK_ID)."""
        dev = self._device()
        if path == "fast":
            n, k = slots.numel(), int(starts[1] - starts[0])
            y = self.step(pool, x.reshape(n, k, -1), weight, bias, activation, slots)
            return y.reshape(n * k, -1)
        named = [s for s in slots.tolist() if s != self.pad_slot]
        if any(int(pool.pending[s]) != 1 for s in named):
            raise NotImplementedError("a prefill into a slot whose window sits at another offset (never scheduled)")
        fwd, _ = self._ops()
        xt = x.to(dev).T  # [T, D] -> [D, T], channels last in memory, as the engine's layers pass it
        kwargs: dict[str, Any] = {
            "activation": activation,
            "conv_states": pool.view,
            "has_initial_state": has_state.to(dev),
            "cache_indices": slots.to(dev, torch.int32),
            "query_start_loc": starts.to(dev, torch.int32),
        }
        if self.engine == "sglang":
            kwargs["seq_lens_cpu"] = starts.diff().tolist()
        elif not self.path.startswith("cpu"):
            kwargs["metadata"] = _vllm_conv_metadata(starts, dev)
        y = fwd(xt, weight.to(dev), None if bias is None else bias.to(dev), **kwargs)
        return y.T.cpu()  # [D, T] -> [T, D]

    def step(  # type: ignore[override]
        self,
        pool: EnginePool,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        slots: Tensor,
        accepted: Tensor | None = None,
    ) -> Tensor:
        """The ``decode`` caller one token at a time, or on a pool made for verify steps the ``verify`` caller
        (vLLM: varlen ``x [tokens, D]`` with the previous step's ``num_accepted_tokens``; sglang: ``x [N, D, k]``
        into draft windows, then the accepted window copied into the conv state)."""
        dev = self._device()
        if accepted is not None and not self.speculative:
            raise NotExercised(f"{self.name}: {self.not_speculative}")
        _, upd = self._ops()
        if self.path.startswith("cpu"):
            return self._torch_step(pool, x, weight, bias, activation, slots, upd)
        N, k, D = x.shape
        idx = slots.to(dev, torch.int32)
        named = [i for i, s in enumerate(slots.tolist()) if s != self.pad_slot]
        w, b = weight.to(dev), None if bias is None else bias.to(dev)
        keep = torch.full((N,), k, dtype=torch.int32) if accepted is None else accepted.to(torch.int32).cpu()
        if self._keeps_every_draft():  # the decode branch's call, [N, D, k]: the window takes all k tokens
            y = upd(x.to(dev).transpose(1, 2).clone(), pool.view, w, b, activation, conv_state_indices=idx)
            return y.transpose(1, 2).cpu()
        if pool.speculative and self.engine == "vllm":
            counts = torch.ones_like(idx)
            counts[named] = pool.pending[idx[named].long()]
            # the update kernel overwrites its input with the output (documented): the caller's x is not handed over
            flat = x.to(dev).reshape(N * k, D).clone()
            starts = (torch.arange(N + 1, device=dev) * k).to(torch.int32)
            y = upd(
                flat, pool.view, w, b, activation,
                conv_state_indices=idx, num_accepted_tokens=counts, query_start_loc=starts, max_query_len=k,
            )  # fmt: skip
            pool.pending[idx[named].long()] = keep[named].to(dev)
            return y.reshape(N, k, D).cpu()
        if pool.windows is not None and k > 1:
            xin = (
                x.to(dev).transpose(1, 2).clone()
            )  # [N, k, D] -> [N, D, k], as mixed_qkv.view(N, k, -1).transpose(1, 2)
            y = upd(
                xin, pool.view, w, b, activation,
                conv_state_indices=idx, intermediate_conv_window=pool.windows, intermediate_state_indices=idx,
            )  # fmt: skip
            for i in named:
                slot = int(slots[i])
                pool.view[slot, :, : pool.width - 1] = pool.windows[slot, int(keep[i]) - 1]
            return y.transpose(1, 2).cpu()
        if accepted is not None and bool((keep != k).any()):
            raise NotExercised(f"{self.name}: a pool made for one-token steps keeps every token")
        ys = []
        for t in range(k):  # the decode caller: x [N, D], one token per sequence
            ys.append(upd(x[:, t].to(dev).clone(), pool.view, w, b, activation, conv_state_indices=idx).cpu())
        return torch.stack(ys, dim=1)

    def _torch_step(
        self,
        pool: EnginePool,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        slots: Tensor,
        upd: Any,
    ) -> Tensor:
        """vLLM's torch decode op takes the states of the batch, not the pool: gathered from the named slots and
        written back, as its caller stages them; pad rows are not run (outputs zero)."""
        y = torch.zeros_like(x)
        named = [i for i, s in enumerate(slots.tolist()) if s != self.pad_slot]
        if not named:
            return y
        rows = slots[named].long()
        states = pool.view[rows].contiguous()
        out = upd(x[named].transpose(1, 2).contiguous(), states, weight, bias, activation)
        pool.view[rows] = states
        y[named] = out.transpose(1, 2).to(x.dtype)
        return y

    def snapshots(
        self, x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, state: Tensor, block_size: int
    ) -> Tensor:
        """Prefix caching as the ``snapshots`` caller runs it: chunks end at block boundaries, and before each
        chunk the state is copied into that block's slot, which the chunk continues and leaves holding its
        snapshot."""
        blocks = x.shape[0] // block_size
        first = self.first_slot
        states = torch.zeros(first + max(blocks, 1), *state.shape, dtype=state.dtype)
        states[first] = state
        pool = self.new_pool(states, max_step=1)
        for b in range(blocks):
            if b:
                pool.view[first + b] = pool.view[first + b - 1]
            chunk = x[b * block_size : (b + 1) * block_size]
            starts = torch.tensor([0, block_size], dtype=torch.int32)
            self.prefill(
                pool,
                chunk,
                weight,
                bias,
                activation,
                starts,
                torch.tensor([first + b], dtype=torch.int32),
                torch.tensor([True]),
            )
        return self.states(pool)[first : first + blocks]


def _vllm_conv_metadata(starts: Tensor, device: str) -> types.SimpleNamespace:
    """What vLLM's layer passes its Triton prefill as ``metadata`` (its attention metadata's ``nums_dict``,
    ``batch_ptr``, ``token_chunk_offset_ptr``), built here as vLLM's metadata builder documents it
    (``vllm/v1/attention/backends/utils.py:compute_causal_conv1d_metadata``): the kernel's programs take
    ``BLOCK_M = 8`` tokens of one sequence each; ``batch_ptr[p]`` is program ``p``'s sequence,
    ``token_chunk_offset_ptr[p]`` its chunk within it, both padded with PAD_SLOT_ID (-1) to
    ``2 * max(1024, programs)``. (Under the Triton interpreter the launch grid's callback, which stores these
    into its ``META``, hands the kernel a raw tensor: an interpreter limit, :data:`INTERPRETER_LIMITS`.)"""
    block_m, pad = 8, -1
    lens = [int(n) for n in starts.diff().tolist()]
    chunks = [-(-n // block_m) for n in lens]
    mlist = [i for i, c in enumerate(chunks) for _ in range(c)]
    offsets = [j for c in chunks for j in range(c)]
    size = 2 * max(1024, len(mlist))
    batch_ptr = torch.full((size,), pad, dtype=torch.int32)
    chunk_ptr = torch.full((size,), pad, dtype=torch.int32)
    batch_ptr[: len(mlist)] = torch.tensor(mlist, dtype=torch.int32)
    chunk_ptr[: len(offsets)] = torch.tensor(offsets, dtype=torch.int32)
    batch_ptr, chunk_ptr = batch_ptr.to(device), chunk_ptr.to(device)
    entry = {
        "nums": torch.tensor(chunks),
        "tot": sum(chunks),
        "mlist": torch.tensor(mlist, dtype=torch.int64),
        "mlist_len": len(mlist),
        "offsetlist": torch.tensor(offsets, dtype=torch.int32),
        "batch_ptr": batch_ptr,
        "token_chunk_offset_ptr": chunk_ptr,
    }
    return types.SimpleNamespace(nums_dict={block_m: entry}, batch_ptr=batch_ptr, token_chunk_offset_ptr=chunk_ptr)


#: (exception class name, message part) of what the Triton interpreter (3.9) lacks, seen on these engines'
#: kernels: a mask arriving as int32 where the GPU compiler makes it boolean; a launch-grid callback that reads a
#: tensor argument the interpreter has wrapped (vLLM's ``num_program`` calls ``.nelement()`` on it); and one that
#: stores into its ``META``, which the interpreter (unlike the GPU launcher) passes on to the kernel as a raw
#: tensor (vLLM's prefill with its layer's ``metadata``)
INTERPRETER_LIMITS: tuple[tuple[str, str], ...] = (
    ("InterpreterError", "mask has unsupported dtype"),
    ("AttributeError", "'tensor' object has no attribute 'nelement'"),
    ("InterpreterError", "'torch.dtype' object has no attribute 'is_ptr'"),
)
#: (engine, version, path) -> the interpreter limit its smallest call met, or None: asked once per process
_INTERPRETER: dict[tuple[str, str, str], str | None] = {}

#: what the probe of this machine found, kept so a skip says more than "not installed"
_WHY_NOT_HERE: dict[str, str] = {}


def engine_adapters() -> list[EngineAdapter]:
    """The reference first (it runs everywhere), then every engine on every path its table lists: the installed
    release's paths, then each side-by-side release's (:func:`release_dirs`)."""
    out: list[EngineAdapter] = [ReferenceAdapter()]
    for engine, table in ENGINES.items():
        paths = sorted({p for row in table.values() for p in row.ops}, key=PATHS.index)
        out += [EngineOps(engine, p) for p in paths]
        for version in release_dirs(engine):
            row = table.get(version)
            mine = paths if row is None else [p for p in paths if p in row.ops]
            out += [EngineOps(engine, p, release=version) for p in mine]
    return out
