"""The engines' own routing (SPEC §11, "where the engine decides routing ... its own metadata code is driven"):
scheduler batches of mixed prefill, decode and verify rows through an engine's metadata builder, the conv calls
its layer makes from that metadata, against what our pool semantics say those rows must do.

A :class:`RoutingCase` is a few scheduler steps in a row over one pool of state blocks. Each :class:`SchedRow` is
one request of a step: its query tokens, its state block (the block table's first column), tokens already
computed, its drafts (``-1``: not a verify row; a verify row carries ``drafts + 1`` tokens) and the previous
verify's accepted count; rows of 0 tokens are pads. What the rows must do is the pool's contract, written from
the rows alone (:func:`reference_plan`): a verify row continues its block from the window after ``accepted`` of
the previous verify's tokens; any other row continues its block when it has computed tokens, else starts from
zeros. An engine's :meth:`RoutingEngine.route` turns the same rows into the calls its layer would make
(:class:`Call`: which conv entry point, which tokens of the packed batch, which block, with or without state,
which count), from the metadata its own builder forms.

Both plans run on a symbolic pool (:class:`Pool`): a state is the token ids it holds, an output the window of
token ids it saw, so a token routed to the wrong call, block, state flag or count shows as a different window,
exactly, with no arithmetic between (the ops' arithmetic is S0-surface's). :func:`check_routing` compares the
two after every step: every token's window, every block of the pool.

The vLLM builder (:class:`VllmGdnRouting`) is loaded from the release's whole Python source
(``GDN_EQUIV_ENGINE_SOURCES/<engine>-<version>/``: the unpacked wheel, :doc:`docs/serving-routing.md`) with its
pure-Python dependencies on ``sys.path``; its ``__init__`` needs a ``VllmConfig`` (which asks for a device
platform this CPU machine cannot give), so the builder object is made without it and given the attributes its
``build`` reads (:data:`VLLM_BUILDER_ATTRS`, said in every row). Where a caller cannot be loaded,
:func:`unavailable` says which and why, and the row is never a pass.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import torch

from gdn_equiv.harness.compare import Mismatch, compare
from gdn_equiv.serving.adapters import NotExercised, ReferenceAdapter

__all__ = [
    "VLLM_ROUTING",
    "Call",
    "Misrouted",
    "Pool",
    "RoutingCase",
    "RoutingEngine",
    "SchedRow",
    "VllmGdnRouting",
    "VllmShortConvRouting",
    "check_routing",
    "check_s6_routing",
    "reference_plan",
    "routing_engine",
    "unavailable",
]

#: the conv width of the symbolic pool (a state holds ``W-1`` token ids)
W = 4
#: vLLM's null block (never a request's); block ids of a case start at 1
NULL_BLOCK = 0
#: where the releases' whole Python sources are unpacked (``<engine>-<version>/vllm/...``)
SOURCES_ENV = "GDN_EQUIV_ENGINE_SOURCES"


@dataclass(frozen=True)
class SchedRow:
    """One request of a scheduler step (see the module's docstring); ``spare`` are a verify row's other block
    columns (vLLM's speculative blocks), never the conv state's."""

    tokens: int
    block: int
    computed: int = 0
    drafts: int = -1
    accepted: int = 1
    spare: tuple[int, ...] = ()

    def short(self) -> str:
        if self.tokens == 0:
            return "pad"
        kind = f"v{self.drafts}a{self.accepted}" if self.drafts >= 0 else ("p" if self.computed == 0 else "c")
        return f"{self.tokens}{kind}@{self.block}c{self.computed}"


@dataclass(frozen=True)
class RoutingCase:
    """Scheduler steps in a row over one pool: ``num_spec`` drafts at most per verify row (0: no speculative
    decoding), ``num_blocks`` state blocks (1..num_blocks; 0 is the null block), ``full_cudagraph``: the builder
    stages its metadata in its persistent buffers where it would for a full CUDA graph."""

    num_spec: int
    steps: tuple[tuple[SchedRow, ...], ...]
    num_blocks: int
    full_cudagraph: bool = False
    #: per block 1..num_blocks, the tokens of the verify call that left its state (1: a plain call's window)
    held: tuple[int, ...] = ()

    def short(self) -> str:
        steps = " | ".join(" ".join(r.short() for r in step) for step in self.steps)
        cg = " full-cudagraph" if self.full_cudagraph else ""
        held = f" held={list(self.held)}" if any(h > 1 for h in self.held) else ""
        return f"RoutingCase(k={self.num_spec} blocks={self.num_blocks}{cg}{held} steps=[{steps}])"


@dataclass(frozen=True)
class Call:
    """One conv call of a layer: ``kind`` (``prefill``: causal_conv1d_fn; ``decode``: the update, one token;
    ``verify``: the update with counts), the packed batch's token indices it takes, the block it reads and
    writes, whether it starts from the block's state, the count it applies (verify)."""

    kind: str
    tokens: tuple[int, ...]
    block: int
    has_state: bool
    accepted: int | None = None


# ---- the symbolic pool ------------------------------------------------------------------------------------------

Token = str | None  # None: a zero column


class Pool:
    """Blocks of token ids as the engines' wide conv states hold them: a plain call leaves the last ``W-1``
    inputs; a verify call of ``n`` tokens leaves ``W-2+n`` (the window after each of its tokens, a count of
    ``a`` reads the one after ``a`` of them: columns ``a-1 .. a+W-3``, as the Triton updates do). A read
    without a count is a count of 1."""

    def __init__(self, num_blocks: int, held: tuple[int, ...] = ()) -> None:
        wide = dict(enumerate(held, start=1))
        self.blocks: dict[int, tuple[Token, ...]] = {
            b: tuple(f"init{b}.{j}" for j in range(W - 2 + wide.get(b, 1))) for b in range(num_blocks + 1)
        }

    def window(self, block: int, accepted: int | None) -> tuple[Token, ...]:
        stored = self.blocks[block]
        off = (1 if accepted is None else accepted) - 1
        if off < 0 or off + W - 1 > len(stored):
            raise Misrouted(
                f"block {block}: a count of {accepted} where it holds windows for counts 1..{len(stored) - W + 2}",
                misrouted_report(),
            )
        return stored[off : off + W - 1]

    def run(self, call: Call, ids: list[str], outputs: dict[int, tuple[Token, ...]]) -> None:
        if call.block == NULL_BLOCK or call.block not in self.blocks or not call.tokens:
            return
        window = self.window(call.block, call.accepted) if call.has_state else (None,) * (W - 1)
        seq = list(window)
        for i in call.tokens:
            if i in outputs:
                raise Misrouted(f"token {i} ({ids[i]}) reaches two conv calls", misrouted_report())
            seq.append(ids[i])
            outputs[i] = tuple(seq[-W:])
        self.blocks[call.block] = tuple(seq[1:]) if call.kind == "verify" else tuple(seq[-(W - 1) :])


class Misrouted(Mismatch):
    """A step's tokens reached the wrong conv call, block, state or count (or none, or two)."""


def misrouted_report() -> Any:
    return compare(torch.zeros(1), torch.ones(1), name="routing")


def _starts(rows: tuple[SchedRow, ...]) -> list[int]:
    out = [0]
    for r in rows:
        out.append(out[-1] + r.tokens)
    return out


def reference_plan(rows: tuple[SchedRow, ...], num_spec: int) -> list[Call]:
    """What the rows must do, from the rows alone (the pool's contract)."""
    starts = _starts(rows)
    plan = []
    for i, r in enumerate(rows):
        toks = tuple(range(starts[i], starts[i + 1]))
        if not toks:
            continue
        if r.drafts >= 0:
            plan.append(Call("verify", toks, r.block, True, r.accepted))
        else:
            plan.append(Call("prefill", toks, r.block, r.computed > 0))
    return plan


class RoutingEngine(Protocol):
    #: the caller this routing is the engine's (file:function), said in every row
    caller: str

    def route(self, rows: tuple[SchedRow, ...], case: RoutingCase) -> list[Call]: ...


class ReferenceRouting:
    caller = "gdn_equiv/serving/routing.py:reference_plan"

    def route(self, rows: tuple[SchedRow, ...], case: RoutingCase) -> list[Call]:
        return reference_plan(rows, case.num_spec)


def check_routing(engine: RoutingEngine, case: RoutingCase, ctx: str = "") -> None:
    """Every step of ``case`` through ``engine``'s routing and through the reference plan, each on its own pool:
    every token's window and every block after each step equal (token ids, exactly)."""
    mine, ref = Pool(case.num_blocks, case.held), Pool(case.num_blocks, case.held)
    where = f"{ctx}{engine.caller}: {case.short()}"
    for s, rows in enumerate(case.steps):
        ids = [f"s{s}t{j}" for j in range(sum(r.tokens for r in rows))]
        got: dict[int, tuple[Token, ...]] = {}
        want: dict[int, tuple[Token, ...]] = {}
        for call in engine.route(rows, case):
            mine.run(call, ids, got)
        for call in reference_plan(rows, case.num_spec):
            ref.run(call, ids, want)
        rows_said = [f"{i} ({r.short()})" for i, r in enumerate(rows)]
        assert_step_routed(f"{where}: step {s}", _starts(rows), rows_said, got, want, mine.blocks, ref.blocks)


def assert_step_routed(
    where: str,
    starts: list[int],
    rows: list[str],
    got: dict[int, Any],
    want: dict[int, Any],
    blocks: dict[int, Any],
    contract: dict[int, Any],
    *,
    ids: list[str] | None = None,
    says: str = "the pool's contract says",
) -> None:
    """One step judged: every token ``t`` of row ``i`` (``starts[i] <= t < starts[i + 1]``, the row said as
    ``rows[i]``; with ``ids``, each token said with its id too) saw the window ``want[t]``, and every block of
    ``contract`` holds what it says after the step (``blocks``: the engine's pool). A difference is
    :class:`Misrouted`, naming the step, row, token or block."""
    for i, said in enumerate(rows):
        for t in range(starts[i], starts[i + 1]):
            if got.get(t) != want[t]:
                token = f"{t} ({ids[t]})" if ids else str(t)
                raise Misrouted(
                    f"{where}, row {said}, token {token}: its conv saw {got.get(t)}, {says} {want[t]}",
                    misrouted_report(),
                )
    for b in contract:
        if blocks[b] != contract[b]:
            where_after = where.replace(": step ", ": after step ", 1)
            raise Misrouted(
                f"{where_after}, block {b} holds {blocks[b]}, the contract says {contract[b]}", misrouted_report()
            )


# ---- vLLM's GDN metadata builder ------------------------------------------------------------------------------

GDN_BUILDER = "vllm/v1/attention/backends/gdn_attn.py:GDNAttentionMetadataBuilder.build"
GDN_LAYER = "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:_forward_core (its conv calls)"
#: what the driver gives the builder object in place of its ``__init__`` (which needs a ``VllmConfig``)
VLLM_BUILDER_ATTRS = (
    "vllm_config.cache_config.mamba_cache_mode='none'", "kv_cache_spec (a MambaSpec)", "num_spec",
    "use_spec_decode", "use_full_cuda_graph", "decode_cudagraph_max_bs", "its persistent index buffers",
    "gdn_prefill_backend='triton'", "checkpoint_builder (none: mamba_cache_mode 'none')",
    "PIN_MEMORY / is_pin_memory_available() False in its modules (no accelerator platform: no pinned memory)",
)  # fmt: skip


def _no_pinned_memory() -> bool:
    return False


_LOADED: dict[str, Any] = {}
_FAILED: dict[tuple[str, str], str] = {}


def _unpin_vllm() -> None:
    """No accelerator platform here: host tensors are not staged in pinned memory (said in every row), in each
    vLLM module imported so far."""
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and hasattr(module, "PIN_MEMORY"):
            setattr(module, "PIN_MEMORY", False)  # noqa: B010
        if name.startswith("vllm") and hasattr(module, "is_pin_memory_available"):
            setattr(module, "is_pin_memory_available", _no_pinned_memory)  # noqa: B010


def load_vllm(version: str) -> Any:
    """The release's ``gdn_attn`` module (one vLLM release per process: torch keeps the first one's registered
    custom ops and types)."""
    key = ("vllm", version)
    if key in _FAILED:
        raise ImportError(_FAILED[key])
    if _LOADED.get("vllm-version") == version:
        return _LOADED["vllm"]
    if "vllm-version" in _LOADED:  # its custom ops and opaque types stay registered with torch
        raise ImportError(
            f"vllm {_LOADED['vllm-version']} is loaded in this process and torch keeps its registered types: one "
            "release's builder per process"
        )
    root = os.environ.get(SOURCES_ENV)
    src = os.path.join(root, f"vllm-{version}") if root else None
    if src is None or not os.path.isfile(os.path.join(src, "vllm", "v1", "attention", "backends", "gdn_attn.py")):
        src = None
        try:
            installed = importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            why = (f"the release's whole source is not here (set {SOURCES_ENV} to a folder of unpacked wheels; "
                   f"installed: {installed or 'none'})")  # fmt: skip
            _FAILED[key] = why
            raise ImportError(why)
    if src is not None:
        sys.path.insert(0, src)
    try:
        mod = importlib.import_module("vllm.v1.attention.backends.gdn_attn")
        backend = importlib.import_module("vllm.v1.attention.backend")
        kv = importlib.import_module("vllm.v1.kv_cache_interface")
        _unpin_vllm()
    except Exception as exc:  # the exact import that fails is the row's reason
        _FAILED[key] = f"{type(exc).__name__}: {exc}"
        raise ImportError(_FAILED[key]) from exc
    finally:
        if src is not None:
            sys.path.remove(src)
    _LOADED.update({"vllm-version": version, "vllm": (mod, backend, kv)})
    return _LOADED["vllm"]


def runner_metadata(backend: Any, rows: tuple[SchedRow, ...], k: int, table: torch.Tensor | None = None) -> Any:
    """The runner's ``CommonAttentionMetadata`` of one step's rows (block table: the conv block, then ``k``
    speculative columns; or ``table``, a 2-D one), with the fields the release's dataclass has."""
    starts = torch.tensor(_starts(rows), dtype=torch.int32)
    seq = torch.tensor([r.computed + r.tokens for r in rows], dtype=torch.int32)
    if table is None:
        table = torch.tensor(
            [[r.block, *(list(r.spare) + [NULL_BLOCK] * k)[:k]] for r in rows], dtype=torch.int32
        ).reshape(len(rows), k + 1)
    computed = torch.tensor([r.computed for r in rows], dtype=torch.int32)
    known = {
        "query_start_loc": starts, "query_start_loc_cpu": starts.clone(), "seq_lens": seq,
        "seq_lens_cpu": seq.clone(), "num_computed_tokens_cpu": computed, "num_reqs": len(rows),
        "num_actual_tokens": int(starts[-1]), "max_query_len": max([r.tokens for r in rows] + [0]),
        "max_seq_len": int(seq.max()) if len(rows) else 0, "block_table_tensor": table,
        "slot_mapping": torch.zeros(int(starts[-1]), dtype=torch.int64), "causal": True,
        "is_prefilling": torch.tensor([r.drafts < 0 and (r.tokens > 1 or r.computed == 0) for r in rows]),
        "seq_lens_cpu_upper_bound": seq.clone(), "_seq_lens_cpu": seq.clone(),
        "_num_computed_tokens_cpu": computed.clone(), "_num_computed_tokens_cache": None,
    }  # fmt: skip
    fields = {f.name for f in dataclasses.fields(backend.CommonAttentionMetadata)}
    return backend.CommonAttentionMetadata(**{n: v for n, v in known.items() if n in fields})


class VllmGdnRouting:
    """vLLM's ``GDNAttentionMetadataBuilder.build`` on a :class:`RoutingCase`'s rows, and the conv calls the GDN
    layer's ``_forward_core`` makes from its metadata: the verify rows through ``causal_conv1d_update`` with
    ``spec_state_indices_tensor[:, 0]``, ``num_accepted_tokens`` and ``spec_query_start_loc`` over the
    ``spec_token_indx`` tokens; the rest through ``causal_conv1d_fn`` (``non_spec_state_indices_tensor``,
    ``has_initial_state``, ``non_spec_query_start_loc``) when it counts prefills, else one-token updates."""

    caller = f"{GDN_BUILDER} + {GDN_LAYER}"

    def __init__(self, version: str) -> None:
        self.version = version

    def unavailable(self) -> str | None:
        try:
            load_vllm(self.version)
        except ImportError as exc:
            return f"not reached: {GDN_BUILDER} (vllm {self.version}) cannot be loaded: {exc}"
        return None

    def _builder(self, case: RoutingCase) -> Any:
        mod, _, kv = load_vllm(self.version)
        cls = mod.GDNAttentionMetadataBuilder
        b = cls.__new__(cls)
        k = case.num_spec
        max_bs = 16 * (k + 1)
        spec = kv.MambaSpec(block_size=16, shapes=((1, W - 1),), dtypes=(torch.float32,), num_speculative_blocks=k)
        cfg = SimpleNamespace(cache_config=SimpleNamespace(mamba_cache_mode="none"), speculative_config=None)
        attrs = {
            "vllm_config": cfg, "kv_cache_spec": spec, "num_spec": k, "use_spec_decode": k > 0,
            "use_full_cuda_graph": case.full_cudagraph, "decode_cudagraph_max_bs": max_bs,
            "_adaptive_verification": False, "gdn_prefill_backend": "triton", "plan_flashinfer_checkpoints": False,
            "mamba_aligned_state_indices": None, "device": torch.device("cpu"),
            "checkpoint_builder": SimpleNamespace(build=lambda m, rows: None),
            "spec_state_indices_tensor": torch.empty((max_bs, k + 1), dtype=torch.int32),
            "non_spec_state_indices_tensor": torch.empty((max_bs,), dtype=torch.int32),
            "spec_sequence_masks": torch.empty((max_bs,), dtype=torch.bool),
            "spec_token_indx": torch.empty((max_bs * (k + 1),), dtype=torch.int32),
            "non_spec_token_indx": torch.empty((max_bs * (k + 1),), dtype=torch.int32),
            "spec_query_start_loc": torch.empty((max_bs + 1,), dtype=torch.int32),
            "non_spec_query_start_loc": torch.empty((max_bs + 1,), dtype=torch.int32),
            "num_accepted_tokens": torch.empty((max_bs,), dtype=torch.int32),
        }  # fmt: skip
        for name, value in attrs.items():
            setattr(b, name, value)
        return b

    def metadata(self, rows: tuple[SchedRow, ...], case: RoutingCase) -> Any:
        """The builder's metadata for one step's rows (the runner's ``CommonAttentionMetadata`` of them)."""
        _, backend, _ = load_vllm(self.version)
        k = case.num_spec
        m = runner_metadata(backend, rows, k)
        accepted = torch.tensor([r.accepted for r in rows], dtype=torch.int32)
        drafts = torch.tensor([r.drafts for r in rows], dtype=torch.int32)
        b = self._builder(case)
        return b.build(0, m, num_accepted_tokens=accepted if k else None,
                       num_decode_draft_tokens_cpu=drafts if k else None)  # fmt: skip

    def route(self, rows: tuple[SchedRow, ...], case: RoutingCase) -> list[Call]:
        md = self.metadata(rows, case)
        total = sum(r.tokens for r in rows)
        calls: list[Call] = []
        spec = md.spec_sequence_masks is not None
        only_spec = spec and md.num_prefills == 0 and md.num_decodes == 0
        if spec:
            toks = list(range(total)) if only_spec else md.spec_token_indx.tolist()
            bounds = md.spec_query_start_loc.tolist()
            blocks = md.spec_state_indices_tensor[:, 0][: md.num_spec_decodes].tolist()
            counts = md.num_accepted_tokens.tolist()
            for i, block in enumerate(blocks):
                seq = tuple(toks[bounds[i] : bounds[i + 1]])
                calls.append(Call("verify", seq, int(block), True, int(counts[i])))
        if only_spec:
            return calls
        toks = md.non_spec_token_indx.tolist() if spec else list(range(total))
        blocks = md.non_spec_state_indices_tensor.tolist()
        if md.num_prefills > 0:
            bounds = md.non_spec_query_start_loc.tolist()
            has = md.has_initial_state.tolist()
            for i in range(len(bounds) - 1):
                seq = tuple(toks[bounds[i] : bounds[i + 1]])
                calls.append(Call("prefill", seq, int(blocks[i]), bool(has[i])))
        elif md.num_decodes > 0:
            for j, t in enumerate(toks[: md.num_actual_tokens]):
                calls.append(Call("decode", (t,), int(blocks[j]), True))
        return calls


# ---- vLLM's short-conv metadata builder (LFM2's ShortConv layer) ------------------------------------------------

SHORT_CONV_BUILDER = (
    "vllm/v1/attention/backends/short_conv_attn.py:ShortConvAttentionMetadataBuilder.build "
    "(mamba_attn.py:BaseMambaAttentionMetadataBuilder._compute_common_metadata)"
)
SHORT_CONV_LAYER = "vllm/model_executor/layers/mamba/short_conv.py:ShortConv.forward_cuda (its conv calls)"
#: what the driver gives the short-conv builder object in place of its ``__init__`` (which needs a ``VllmConfig``)
VLLM_SHORT_CONV_BUILDER_ATTRS = (
    "vllm_config.cache_config.mamba_cache_mode='none'", "kv_cache_spec (a MambaSpec)", "num_spec_tokens",
    "use_spec_decode", "reorder_batch_threshold=1+k (what _init_reorder_batch_threshold sets for k drafts)",
    "compilation_config (full CUDA graphs on or off, no capture-size cap)", "decode_cudagraph_max_bs",
    "its persistent decode buffers", "ReplaySSM off",
    "PIN_MEMORY / is_pin_memory_available() False in its modules (no accelerator platform: no pinned memory)",
)  # fmt: skip


def vllm_module(version: str, dotted: str) -> Any:
    """One more module of the release :func:`load_vllm` loaded (its failure is the row's reason), imported and
    unpinned once per process."""
    key = ("vllm", f"{version}:{dotted}")
    if key in _FAILED:
        raise ImportError(_FAILED[key])
    load_vllm(version)
    loaded = f"vllm:{version}:{dotted}"
    if loaded in _LOADED:
        return _LOADED[loaded]
    try:
        mod = importlib.import_module(dotted)
    except Exception as exc:  # the exact import that fails is the row's reason
        _FAILED[key] = f"{type(exc).__name__}: {exc}"
        raise ImportError(_FAILED[key]) from exc
    _unpin_vllm()
    _LOADED[loaded] = mod
    return mod


def mamba_builder(cls: Any, *, spec: Any, cache: Any, k: int, max_bs: int, full_cudagraph: bool, **extra: Any) -> Any:
    """A vLLM Mamba-family metadata builder (``cls``) made with ``__new__`` and given what its ``build`` reads (its
    ``__init__`` needs a whole ``VllmConfig``): the KV-cache ``spec``, the ``cache`` config, ``k`` draft tokens, a
    decode CUDA-graph batch of ``max_bs``, whether full CUDA graphs are on, then the builder's own ``extra``."""
    b = cls.__new__(cls)
    cfg = SimpleNamespace(cache_config=cache, speculative_config=None, use_flashinfer_replayssm=False)
    compilation = SimpleNamespace(
        cudagraph_mode=SimpleNamespace(has_full_cudagraphs=lambda: full_cudagraph), max_cudagraph_capture_size=None
    )
    attrs = {
        "vllm_config": cfg, "kv_cache_spec": spec, "num_spec_tokens": k, "use_spec_decode": k > 0,
        "reorder_batch_threshold": 1 + k, "compilation_config": compilation, "speculative_config": None,
        "decode_cudagraph_max_bs": max_bs, "device": torch.device("cpu"), "layer_names": [],
        "use_replayssm": False, "use_flashinfer_replayssm": False, "replayssm_buffer_len": 0,
        "decode_bc_pre_scratch": None, "decode_replayssm_scratch": None, "supports_update_block_table": k == 0,
        "decode_num_accepted_tokens": torch.empty((max_bs,), dtype=torch.int32),
        **extra,
    }  # fmt: skip
    for name, value in attrs.items():
        setattr(b, name, value)
    return b


class VllmShortConvRouting:
    """vLLM's ``ShortConvAttentionMetadataBuilder.build`` (the Mamba family's common builder) on a
    :class:`RoutingCase`'s rows, and the conv calls the ShortConv layer's ``forward_cuda`` makes from its
    metadata: the first ``num_decode_tokens`` tokens through ``causal_conv1d_update`` (with
    ``num_accepted_tokens`` when the metadata has them and the layer passes them: per decode row,
    ``state_indices_tensor_d`` column 0, ``query_start_loc_d``; else one token a row, each token reading row
    ``j`` of ``state_indices_tensor_d``), the rest through ``causal_conv1d_fn`` (``state_indices_tensor_p``,
    ``has_initial_states_p``, ``query_start_loc_p``). The runner hands the builder counts and drafts where its
    layer takes them (vLLM #50272, 0.29.0 on: read from the release's ``short_conv.py``)."""

    caller = f"{SHORT_CONV_BUILDER} + {SHORT_CONV_LAYER}"

    def __init__(self, version: str) -> None:
        self.version = version
        self._layer_counts: bool | None = None

    def _modules(self) -> tuple[Any, Any, Any]:
        _, backend, kv = load_vllm(self.version)
        mod = vllm_module(self.version, "vllm.v1.attention.backends.short_conv_attn")
        return mod, backend, kv

    def unavailable(self) -> str | None:
        try:
            self._modules()
        except ImportError as exc:
            return f"not reached: {SHORT_CONV_BUILDER} (vllm {self.version}) cannot be loaded: {exc}"
        return None

    def layer_counts(self) -> bool:
        """Whether the release's ShortConv layer passes ``num_accepted_tokens`` to its update (vLLM #50272)."""
        if self._layer_counts is None:
            spec = importlib.util.find_spec("vllm.model_executor.layers.mamba.short_conv")
            text = open(spec.origin).read() if spec is not None and spec.origin else ""  # noqa: SIM115
            layer = text[text.find("def forward_cuda") :]
            self._layer_counts = "num_accepted_tokens=num_accepted_tokens" in layer
        return self._layer_counts

    def _builder(self, case: RoutingCase) -> Any:
        mod, _, kv = self._modules()
        k = case.num_spec
        max_bs = 16 * (k + 1)
        spec = kv.MambaSpec(block_size=16, shapes=((1, W - 1),), dtypes=(torch.float32,), num_speculative_blocks=k)
        cache = SimpleNamespace(mamba_cache_mode="none", use_replayssm=False, replayssm_buffer_len=0)
        return mamba_builder(
            mod.ShortConvAttentionMetadataBuilder, spec=spec, cache=cache, k=k, max_bs=max_bs,
            full_cudagraph=case.full_cudagraph, decode_replayssm_state_indices_d=None,
            state_indices_tensor_d=torch.empty((max_bs, 1 + k), dtype=torch.int32),
            state_indices_tensor=torch.empty((max_bs, 1 + k), dtype=torch.int32),
        )  # fmt: skip

    def metadata(self, rows: tuple[SchedRow, ...], case: RoutingCase) -> Any:
        _, backend, _ = self._modules()
        k = case.num_spec
        m = runner_metadata(backend, rows, k)
        extra: dict[str, Any] = {}
        if k and self.layer_counts():  # the runner's extra arguments for the builders that take them
            extra = {
                "num_accepted_tokens": torch.tensor([r.accepted for r in rows], dtype=torch.int32),
                "num_decode_draft_tokens_cpu": torch.tensor([r.drafts for r in rows], dtype=torch.int32),
            }
        return self._builder(case).build(0, m, **extra)

    def route(self, rows: tuple[SchedRow, ...], case: RoutingCase) -> list[Call]:
        md = self.metadata(rows, case)
        calls: list[Call] = []
        n_dec = int(md.num_decode_tokens)
        if md.num_prefills > 0:
            bounds = md.query_start_loc_p.tolist()
            blocks = md.state_indices_tensor_p.tolist()
            has = md.has_initial_states_p.tolist()
            for i in range(len(bounds) - 1):
                seq = tuple(range(n_dec + bounds[i], n_dec + bounds[i + 1]))
                calls.append(Call("prefill", seq, int(blocks[i]), bool(has[i])))
        if n_dec > 0:
            table = md.state_indices_tensor_d
            if md.num_accepted_tokens is not None and self.layer_counts():
                bounds = md.query_start_loc_d.tolist()
                counts = md.num_accepted_tokens.tolist()
                for i in range(table.shape[0]):  # the kernel returns on the null block before it reads the bounds
                    if int(table[i, 0]) == NULL_BLOCK:
                        continue
                    seq = tuple(range(bounds[i], bounds[i + 1]))
                    calls.append(Call("verify", seq, int(table[i, 0]), True, int(counts[i])))
            else:  # x [num_decode_tokens, D]: token j is batch row j, its state index row j's first column
                for j in range(n_dec):
                    block = int(table[j, 0]) if j < table.shape[0] else -1  # past the table: no state of ours
                    calls.append(Call("decode", (j,), block, True))
        return calls


#: the layers whose routing S6-routing drives: the adapter's own planted routing is its method of that name
LAYERS = {"gdn": "routing", "short-conv": "short_conv_routing"}
#: each layer's caller in a vLLM release
VLLM_ROUTING: dict[str, type[VllmGdnRouting] | type[VllmShortConvRouting]] = {
    "gdn": VllmGdnRouting,
    "short-conv": VllmShortConvRouting,
}


def routing_engine(adapter: Any, layer: str = "gdn") -> RoutingEngine | str:
    """The routing an adapter declares for ``layer`` (its own ``routing()`` / ``short_conv_routing()``: planted
    ones), else its engine version's loaded caller; a string says why none can be loaded (the row's reason,
    never a pass)."""
    own = getattr(adapter, LAYERS[layer], None)
    if callable(own):
        return own()
    engine, version = getattr(adapter, "engine", None), getattr(adapter, "version", "")
    if engine is None:
        if routes_as_reference(adapter) or any(callable(getattr(adapter, m, None)) for m in LAYERS.values()):
            return ReferenceRouting()  # the reference itself, or a plug-in routing some layers (the rest as ours)
        return no_routing_of_its_own(adapter)
    if engine == "vllm":
        r = VLLM_ROUTING[layer](version)
        why = r.unavailable()
        return r if why is None else why
    if engine == "sglang":
        return SGLANG_NOT_REACHED.format(version=version)
    return f"not reached: no routing caller known for engine {engine!r}"


def routes_as_reference(adapter: Any) -> bool:
    """Whether ``adapter`` is the in-house reference engine itself, whose routing the reference routings are (a
    plug-in or planted engine subclassing it is not: its rows must drive a routing of its own)."""
    return type(adapter) is ReferenceAdapter


def no_routing_of_its_own(adapter: Any) -> str:
    """The routing rows' reason for a plug-in engine that declares no routing caller of its own: driving the
    in-house reference's routing in its name would check nothing of it (a vacuous pass)."""
    name = getattr(adapter, "name", type(adapter).__name__)
    return (
        f"n/a: {name} declares no routing of its own (no routing(), short_conv_routing() or apc_routing()): its "
        "routing rows would drive the in-house reference's builders, nothing of this engine"
    )


#: sglang's verify path and its post-verify scatter, and why neither is driven here (see docs/serving-routing.md)
SGLANG_NOT_REACHED = (
    "not reached: sglang {version}'s verify routing (srt/layers/attention/hybrid_linear_attn_backend.py:"
    "HybridLinearAttnBackend.update_mamba_state_after_mtp_verify, GDNAttnBackend.forward_extend) cannot be loaded: "
    "its module imports sglang.srt.model_executor.model_runner (the whole server: torchvision, built against the "
    "wheel's torch 2.14 with CUDA, sentencepiece, compressed_tensors, ... on the CPU machine), and the post-verify "
    "scatter is a Triton kernel (fused_conv_window_scatter_with_mask) with no CPU path"
)


def unavailable(adapter: Any) -> str | None:
    """Why the routing row of ``adapter`` cannot run: a caller of one of its :data:`LAYERS` cannot be loaded, or
    (a vLLM path other than ``cpu-torch``) the same device-independent builders are the release's ``cpu-torch``
    row."""
    path = getattr(adapter, "path", "")
    if getattr(adapter, "engine", None) == "vllm" and path != "cpu-torch":
        return "the metadata builder is device-independent Python: its row is the release's cpu-torch path's"
    why = [r for r in (routing_engine(adapter, layer) for layer in LAYERS) if isinstance(r, str)]
    return "; ".join(dict.fromkeys(why)) or None


def check_s6_routing(adapter: Any, case: RoutingCase) -> None:
    """S6-routing: the engine's own routing of every step of ``case`` through each of its :data:`LAYERS` (the GDN
    layer's and the short-conv layer's metadata builder, and that layer's conv calls from the metadata) = the
    pool's contract for those rows (:func:`check_routing`; the mismatch names the caller). An engine version
    whose caller cannot be loaded is never a pass: its row says which caller and why."""
    for layer in LAYERS:
        r = routing_engine(adapter, layer)
        if isinstance(r, str):
            raise NotExercised(r)
        check_routing(r, case, ctx=f"{getattr(adapter, 'name', '?')} {getattr(adapter, 'version', '')}: ")
