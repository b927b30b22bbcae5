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

import importlib
import importlib.metadata
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from gdn_equiv.serving.adapters import EngineAdapter, ReferenceAdapter, uniform_decode

Tensor = torch.Tensor

__all__ = ["ENGINES", "SGLANG_VERSIONS", "VLLM_VERSIONS", "EngineVersion", "engine_adapters", "installed_version"]


@dataclass(frozen=True)
class EngineVersion:
    """One row of an engine's version table: where its ops live and the conventions of that version."""

    engine: str
    version: str
    #: path -> (prefill "module:function", step "module:function")
    ops: dict[str, tuple[str, str]]
    pad_slot: int = -1
    first_slot: int = 0
    min_accepted: int = 0
    notes: tuple[str, ...] = field(default=())


VLLM_OPS = "vllm.model_executor.layers.mamba.ops"
VLLM_VERSIONS: dict[str, EngineVersion] = {
    "0.34.0": EngineVersion(
        "vllm",
        "0.34.0",
        {
            "cpu-torch": (
                f"{VLLM_OPS}.cpu.causal_conv1d:causal_conv1d_fn_cpu",
                f"{VLLM_OPS}.cpu.causal_conv1d:causal_conv1d_update_torch",
            ),
            "interpret": (
                f"{VLLM_OPS}.causal_conv1d:causal_conv1d_fn",
                f"{VLLM_OPS}.causal_conv1d:causal_conv1d_update",
            ),
            "gpu": (f"{VLLM_OPS}.causal_conv1d:causal_conv1d_fn", f"{VLLM_OPS}.causal_conv1d:causal_conv1d_update"),
        },
        pad_slot=-1,
        first_slot=1,
        min_accepted=1,
        notes=("wheel pins torch==2.14.0",),
    ),
}

SGLANG_OPS = "sglang.kernels.ops.mamba.causal_conv1d_triton"
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
    ),
}

ENGINES: dict[str, dict[str, EngineVersion]] = {"vllm": VLLM_VERSIONS, "sglang": SGLANG_VERSIONS}
PATHS = ("cpu-torch", "interpret", "gpu")


def installed_version(engine: str) -> str | None:
    try:
        return importlib.metadata.version(engine)
    except importlib.metadata.PackageNotFoundError:
        return None


def _resolve(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


class EngineOps(ReferenceAdapter):
    """An engine's ops on one path. Until an engine's mapping is written for a path, ``unavailable()`` says so;
    the reference's bookkeeping methods are inherited only as the protocol's shape, never run for an engine
    (``unavailable()`` is checked first by every driver)."""

    def __init__(self, engine: str, path: str) -> None:
        self.engine = engine
        self.path = path
        self.name = f"{engine}-{path}"
        self.version = installed_version(engine) or "not installed"

    def row(self) -> EngineVersion | None:
        return ENGINES[self.engine].get(self.version)

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
            _resolve(row.ops[self.path][0])
            _resolve(row.ops[self.path][1])
        except Exception as exc:  # an engine's import chain fails in many ways; the reason is the report
            return f"{self.engine} {version} {self.path} ops do not import here: {type(exc).__name__}: {exc}"
        return None


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


_ = uniform_decode
