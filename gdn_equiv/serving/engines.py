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

from gdn_equiv.serving.adapters import EngineAdapter, ReferenceAdapter
from gdn_equiv.serving.properties import NotExercised

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
    notes: tuple[str, ...] = field(default=())


VLLM_OPS = "vllm/model_executor/layers/mamba/ops"
_VLLM_CONSTANTS = {"NULL_BLOCK_ID": 0, "PAD_SLOT_ID": -1}  # vllm/v1/attention/backends/utils.py of 0.34.0
VLLM_VERSIONS: dict[str, EngineVersion] = {
    "0.34.0": EngineVersion(
        "vllm",
        "0.34.0",
        {
            "cpu-torch": (
                f"{VLLM_OPS}/cpu/causal_conv1d.py:causal_conv1d_fn_cpu",
                f"{VLLM_OPS}/cpu/causal_conv1d.py:causal_conv1d_update_torch",
            ),
            "interpret": (
                f"{VLLM_OPS}/causal_conv1d.py:causal_conv1d_fn",
                f"{VLLM_OPS}/causal_conv1d.py:causal_conv1d_update",
            ),
            "gpu": (
                f"{VLLM_OPS}/causal_conv1d.py:causal_conv1d_fn",
                f"{VLLM_OPS}/causal_conv1d.py:causal_conv1d_update",
            ),
        },
        pad_slot=0,  # NULL_BLOCK_ID: both kernels skip it (PAD_SLOT_ID=-1 is skipped by the prefill kernel only)
        first_slot=1,
        min_accepted=1,
        speculative={
            "cpu-torch": "vLLM 0.34.0's CPU speculative conv update is a C++ op (vllm._C, built for torch 2.14); "
            "its torch update (causal_conv1d_update_torch) takes no accepted count",
        },
        shims={
            "vllm.v1.attention.backends.utils": _VLLM_CONSTANTS,
            "vllm._cpu_ops": {"causal_conv1d_update_cpu_vec": None},  # the C++ decode op; the torch one is run
            "vllm.platforms": {"current_platform": "platform"},
            "vllm.triton_utils": {"tl": "triton.language", "triton": "triton"},
        },
        notes=("wheel pins torch==2.14.0",),
    ),
}

SGLANG_OPS = "sglang/kernels/ops/mamba/causal_conv1d_triton.py"
SGLANG_VERSIONS: dict[str, EngineVersion] = {
    "0.5.23": EngineVersion(
        "sglang",
        "0.5.23",
        {
            "interpret": (f"{SGLANG_OPS}:causal_conv1d_fn", f"{SGLANG_OPS}:causal_conv1d_update"),
            "gpu": (f"{SGLANG_OPS}:causal_conv1d_fn", f"{SGLANG_OPS}:causal_conv1d_update"),
        },
        pad_slot=-1,
        min_accepted=1,
        speculative={
            "interpret": "sglang keeps draft windows in intermediate_conv_window buffers: not mapped yet",
            "gpu": "sglang keeps draft windows in intermediate_conv_window buffers: not mapped yet",
        },
        shims={"sglang.kernels.jit.utils": {"is_arch_support_pdl": "false"}},
    ),
}

ENGINES: dict[str, dict[str, EngineVersion]] = {"vllm": VLLM_VERSIONS, "sglang": SGLANG_VERSIONS}
PATHS = ("cpu-torch", "interpret", "gpu")


def installed_version(engine: str) -> str | None:
    try:
        return importlib.metadata.version(engine)
    except importlib.metadata.PackageNotFoundError:
        return None


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
def _load(engine: str, version: str, relpath: str) -> Any:
    """An ops file of the installed engine, loaded alone under a private name with its version's shims in
    ``sys.modules`` for the duration (restored after). The engine's code is read from its installed
    distribution, never copied."""
    row = ENGINES[engine][version]
    path = Path(str(importlib.metadata.distribution(engine).locate_file(relpath)))
    if not path.is_file():
        raise FileNotFoundError(f"{relpath} is not in the installed {engine} {version}")
    shims = {}
    for name, attrs in row.shims.items():
        module = types.ModuleType(name)
        for attr, value in attrs.items():
            setattr(module, attr, _shim_value(value))
        shims[name] = module
    saved = {name: sys.modules.get(name) for name in shims}
    sys.modules.update(shims)
    try:
        spec = importlib.util.spec_from_file_location(f"_gdn_equiv_{engine}_{path.stem}", path)
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


def _resolve(engine: str, version: str, spec: str) -> Any:
    relpath, _, attr = spec.partition(":")
    return getattr(_load(engine, version, relpath), attr)


@dataclass
class EnginePool:
    """An engine's pool: ``buffer [S, D, W-1 + max_step-1]`` (the engine's own tensor) and, per slot, the
    accepted count the engine's next call will be given (vLLM's ``num_accepted_tokens``; 1 = offset 0)."""

    buffer: Tensor
    width: int
    pending: Tensor
    speculative: bool


class EngineOps(ReferenceAdapter):
    """An engine's conv ops on one path, behind the protocol. The engine's functions are resolved from its
    version row only when a call runs (the import is lazy); ``unavailable()`` is checked first by every driver.
    The reference's ``fast_admits`` (uniform decode, every sequence continued) stands in for the engine's
    routing of decode requests to its update kernel; ``packed_prefill`` is the reference's: one call of the
    engine's prefill over the concatenated channels, as vLLM's and sglang's GDN layers call it."""

    def __init__(self, engine: str, path: str) -> None:
        self.engine = engine
        self.path = path
        self.name = f"{engine}-{path}"
        self.version = installed_version(engine) or "not installed"
        row = ENGINES[engine].get(self.version) or next(iter(ENGINES[engine].values()))
        self.pad_slot = row.pad_slot
        self.first_slot = row.first_slot
        self.min_accepted = row.min_accepted
        self.handoff_exact = False
        #: why this path's step takes no accepted count (S4 cannot run), or None
        self.not_speculative: str | None = row.speculative.get(path)
        self.speculative = self.not_speculative is None

    def row(self) -> EngineVersion:
        return ENGINES[self.engine][self.version]

    def unavailable(self) -> str | None:
        table = ENGINES[self.engine]
        version = installed_version(self.engine)
        if version is None:
            return (
                f"{self.engine} is not installed (optional extra; known versions: {', '.join(table)}); "
                + _WHY_NOT_HERE.get(self.engine, "")
            ).rstrip("; ")
        if version not in table:
            return f"{self.engine} {version} is not a version the adapter knows; known versions: {', '.join(table)}"
        row = table[version]
        if self.path not in row.ops:
            return f"{self.engine} {version} has no {self.path} ops"
        if self.path == "gpu" and not torch.cuda.is_available():
            return "no CUDA device here"
        if self.path == "interpret" and os.environ.get("TRITON_INTERPRET") != "1":
            return "TRITON_INTERPRET is not 1"
        try:
            self._ops()
        except Exception as exc:  # an engine's import chain fails in many ways; the reason is the report
            return f"{self.engine} {version} {self.path} ops do not import here: {type(exc).__name__}: {exc}"
        key = (self.engine, version, self.path)
        if key not in _SMOKE:  # once per process: an engine's first call may compile (GPU) or interpret for seconds
            _SMOKE[key] = self._try_smallest_call()
        return _SMOKE[key]

    def _try_smallest_call(self) -> str | None:
        """One token through prefill and step (D1, W2): a path that imports may still not run here (the
        Triton interpreter lacks what a kernel uses); the reason is what the engine raised."""
        try:
            pool = self.new_pool(torch.zeros(self.first_slot + 1, 1, 1), max_step=1)
            one, weight = torch.ones(1, 1), torch.ones(1, 2)
            slot = torch.tensor([self.first_slot], dtype=torch.int32)
            self.prefill(
                pool, one, weight, None, None, torch.tensor([0, 1], dtype=torch.int32), slot, torch.tensor([True])
            )
            self.step(pool, one[None], weight, None, None, slot)
        except Exception as exc:  # whatever the kernel raises is the reason this path cannot run here
            return (
                f"{self.engine} {self.version} {self.path} ops import but do not run here "
                f"(smallest call, D1 W2 one token): {type(exc).__name__}: {str(exc)[:200]}"
            )
        return None

    def _ops(self) -> tuple[Any, Any]:
        fwd, upd = self.row().ops[self.path]
        return _resolve(self.engine, self.version, fwd), _resolve(self.engine, self.version, upd)

    def _device(self) -> str:
        return "cuda" if self.path == "gpu" else "cpu"

    # ---- the pool -----------------------------------------------------------------------------
    def new_pool(self, states: Tensor, *, max_step: int) -> EnginePool:  # type: ignore[override]
        S, D, w1 = states.shape
        # a speculative pool is wider by the drafts a verify step may leave behind (vLLM: W-1 + k-1)
        extra = max_step - 1 if self.speculative else 0
        buffer = torch.zeros(S, D, w1 + extra, dtype=states.dtype, device=self._device())
        buffer[:, :, :w1] = states
        pending = torch.ones(S, dtype=torch.int32, device=self._device())
        return EnginePool(buffer, w1 + 1, pending, speculative=self.speculative and max_step > 1)

    def states(self, pool: EnginePool) -> Tensor:  # type: ignore[override]
        w1 = pool.width - 1
        rows = [pool.buffer[s, :, int(o) - 1 : int(o) - 1 + w1] for s, o in enumerate(pool.pending.tolist())]
        return torch.stack(rows).cpu()

    def storage(self, pool: EnginePool) -> list[Tensor]:  # type: ignore[override]
        return [pool.buffer, pool.pending]

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
        args = (xt, weight.to(dev), None if bias is None else bias.to(dev), pool.buffer, starts.to(dev, torch.int32))
        kwargs: dict[str, Any] = {
            "cache_indices": slots.to(dev, torch.int32),
            "has_initial_state": has_state.to(dev),
            "activation": activation,
            "pad_slot_id": self.pad_slot,
        }
        if self.engine == "sglang":
            kwargs["seq_lens_cpu"] = starts.diff().tolist()
        y = fwd(*args, **kwargs)
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
        dev = self._device()
        if accepted is not None and not self.speculative:
            raise NotExercised(f"{self.name}: {self.not_speculative}")
        _, upd = self._ops()
        if self.path == "cpu-torch":
            return self._torch_step(pool, x, weight, bias, activation, slots, upd)
        k = x.shape[1]
        idx = slots.to(dev, torch.int32)
        # the update kernel overwrites its input with the output (documented): the caller's x is not handed over
        xin = x.to(dev).clone().transpose(1, 2)  # [N, k, D] -> [N, D, k]
        kwargs: dict[str, Any] = {"conv_state_indices": idx}
        named = [i for i, s in enumerate(slots.tolist()) if s != self.pad_slot]
        if pool.speculative:
            counts = torch.ones_like(idx)
            counts[named] = pool.pending[idx[named].long()]
            kwargs["num_accept_tokens" if self.engine == "sglang" else "num_accepted_tokens"] = counts
        if self.engine == "sglang":
            kwargs["pad_slot_id"] = self.pad_slot
        else:
            kwargs["null_block_id"] = self.pad_slot
        b = None if bias is None else bias.to(dev)
        y = upd(xin, pool.buffer, weight.to(dev), b, activation, **kwargs)
        after = (
            torch.full((len(named),), k, dtype=torch.int32, device=dev) if accepted is None else accepted.to(dev)[named]
        )
        if pool.speculative:
            pool.pending[idx[named].long()] = after.to(torch.int32)
        return y.transpose(1, 2).cpu()

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
        states = pool.buffer[rows].clone()
        out = upd(x[named].transpose(1, 2).contiguous(), states, weight, bias, activation)
        pool.buffer[rows] = states
        y[named] = out.transpose(1, 2).to(x.dtype)
        return y

    def snapshots(
        self, x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, state: Tensor, block_size: int
    ) -> Tensor:
        """Prefix caching as vLLM's 'align' mode runs it: chunks end at block boundaries, and before each chunk
        the state is copied into that block's slot, which the chunk continues and leaves holding its snapshot."""
        blocks = x.shape[0] // block_size
        first = self.first_slot
        states = torch.zeros(first + max(blocks, 1), *state.shape, dtype=state.dtype)
        states[first] = state
        pool = self.new_pool(states, max_step=1)
        for b in range(blocks):
            if b:
                pool.buffer[first + b] = pool.buffer[first + b - 1]
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


#: (engine, version, path) -> why its smallest call failed here, or None: asked once per process
_SMOKE: dict[tuple[str, str, str], str | None] = {}

#: what the probe of this machine found (Dec 2026, 2 CPU cores, torch 2.13 in the project's venv), kept so a
#: skip says more than "not installed"
_WHY_NOT_HERE: dict[str, str] = {}


def engine_adapters() -> list[EngineAdapter]:
    """The reference first (it runs everywhere), then every engine on every path its table lists."""
    out: list[EngineAdapter] = [ReferenceAdapter()]
    for engine, table in ENGINES.items():
        paths = sorted({p for row in table.values() for p in row.ops}, key=PATHS.index)
        out += [EngineOps(engine, p) for p in paths]
    return out
