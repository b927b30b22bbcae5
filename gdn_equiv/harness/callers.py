"""A caller's generation loops through a stack of layers sharing one cache object, and the cache they leave
measured from the inputs alone (the checks of ``gdn_equiv.suite.test_callers`` that drive a caller's
``fla.models.utils.Cache``, and their teeth). fla is an optional extra: it is imported inside."""

from __future__ import annotations

import itertools

import torch

from gdn_equiv.harness.compare import assert_equivalent, assert_tree_equivalent
from gdn_equiv.harness.testing import randn
from gdn_equiv.model.cache import Cache
from gdn_equiv.model.config import CallFacts
from gdn_equiv.model.example import Example, build_layer
from gdn_equiv.model.families import get_family
from gdn_equiv.targets.fla_target import from_fla_cache, to_fla_cache

F64 = torch.float64


def _quiet(text: str) -> None:
    """The default ``note``: the suite passes Hypothesis' own, so a failing example prints its context."""


def last_inputs(tokens: torch.Tensor, W: int) -> torch.Tensor:
    """The last ``W`` rows of ``tokens [n, D]`` as a conv state ``[D, W]``, zeros in front where ``n < W``."""
    padded = torch.cat([tokens.new_zeros(W, tokens.shape[1]), tokens], dim=0)
    return padded[-W:].t()


def row_mask(B: int, T: int, valid: tuple[int, ...], side: str) -> torch.Tensor:
    """A ``[B, T]`` attention mask with ``valid[b]`` ones in row ``b``, at its ``left`` or ``right`` end."""
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(valid):
        if n:
            mask[b, slice(T - n, T) if side == "left" else slice(0, n)] = 1
    return mask


#: (name, class attribute, forward arguments): the reference layer and both prologues of the fused one
PATHS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("reference", "layer_cls", {}),
    ("separate", "fused_cls", {"prologue": "separate"}),
    ("fused", "fused_cls", {"prologue": "fused"}),
)


def fla_cache():
    """A fresh ``fla.models.utils.Cache``, as a caller makes one."""
    from fla.models.utils import Cache as FlaCache

    return FlaCache()


def stack(family: str, configs, seed: int, cls: str, planted: type | None = None) -> list:
    """The stack's layers of class ``cls`` (``planted`` mixed in front), layer ``k`` from ``seed + k``;
    a ``fused_cls`` layer has the parameters of the ``layer_cls`` one."""
    layers = []
    for k, config in enumerate(configs):
        example = Example(config=config, family=family, dtype="float64", seed=seed + k)
        base = getattr(get_family(family), cls)
        layers.append(build_layer(example, base if planted is None else type("Planted", (planted, base), {})))
    return layers


def layer_tensors(state: dict) -> list[torch.Tensor]:
    """The tensors of a layer state, conv slots included."""
    values = [c for v in state.values() for c in (v if isinstance(v, tuple) else (v,))]
    return [v for v in values if isinstance(v, torch.Tensor)]


def read_state(cache, layer_idx: int) -> dict:
    """Layer ``layer_idx``'s state as a caller reads it, copied: our Cache's dict; fla's dict (its
    unset extras dropped: ``attn_state``/``ffn_state``, and PR #977's ``A_state``, are ``None``) with
    ``offset = get_seq_length(layer_idx)``."""
    if isinstance(cache, Cache):
        state = dict(cache[layer_idx])
    else:
        kinds = ("recurrent_state", "conv_state")
        state = {k: v for k, v in cache[layer_idx].items() if k in kinds or v is not None}
        state["offset"] = cache.get_seq_length(layer_idx)

    def copy(v):
        return v.detach().clone() if isinstance(v, torch.Tensor) else v

    return {k: tuple(copy(c) for c in v) if isinstance(v, tuple) else copy(v) for k, v in state.items()}


def generate(layers, kw: dict, cache, calls) -> tuple[torch.Tensor, list[dict], list[list[torch.Tensor]]]:
    """A caller's loop: each ``(x, mask)`` of ``calls`` through the stack with the one ``cache`` object and
    ``use_cache``; every layer must hand back that object. Returns the last layer's outputs side by side,
    each call's layer states (read as the caller reads them) and each call's inputs to each layer."""
    outs, states, fed = [], [], []
    for x, mask in calls:
        h, inputs = x, []
        for layer in layers:
            inputs.append(h.detach())
            h, _, returned = layer(h, attention_mask=mask, past_key_values=cache, use_cache=True, **kw)
            assert returned is cache, (
                f"{type(layer).__name__} returned {type(returned).__name__}, not the caller's cache"
            )
        outs.append(h)
        fed.append(inputs)
        states.append({layer.layer_idx: read_state(cache, layer.layer_idx) for layer in layers})
    return torch.cat(outs, 1), states, fed


def loop_calls(
    seed: int, B: int, P: int, H: int, steps: int, valid, chunk: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Prefill a ``[B, P]`` prompt with a left-padded mask (``valid`` tokens a row), in one call, or with
    ``0 < chunk < P`` in two (a chunked prefill: the second call's mask, ``[B, P]``, is longer than its
    ``P - chunk`` tokens); then ``steps`` tokens, the mask grown by a column each."""
    mask = row_mask(B, P, tuple(valid), "left")
    prompt = randn(seed, B, P, H, dtype=F64)
    cuts = [0, chunk, P] if 0 < chunk < P else [0, P]
    calls = [(prompt[:, a:b], mask[:, :b]) for a, b in itertools.pairwise(cuts)]
    tokens = randn(seed + 1, B, steps, H, dtype=F64)
    for t in range(steps):
        mask = torch.cat([mask, torch.ones(B, 1, dtype=mask.dtype)], dim=1)
        calls.append((tokens[:, t : t + 1], mask))
    return calls


def expected_conv_states(layer, fed: list[list[torch.Tensor]], calls, position: int, upto: int) -> list:
    """Per conv slot ``[B, D, W]``: each row's last ``W`` conv inputs (``_project`` of what the layer was
    fed, before the conv) at the mask's ones over calls ``0..upto``, zeros in front where fewer. A dense
    family multiplies the mask in instead of dropping positions; left padding puts those zeros in front,
    where the state's zero fill is anyway."""
    with torch.no_grad():
        projected = [layer._project(fed[j][position]).conv_inputs for j in range(upto + 1)]
    out = []
    for i, conv in enumerate(layer.convs()):
        rows = []
        for b in range(calls[0][0].shape[0]):
            parts = []
            for j in range(upto + 1):
                inp, mask = projected[j][i], calls[j][1]
                parts.append(inp[b][mask[b, -inp.shape[1] :].bool()])
            rows.append(last_inputs(torch.cat(parts, dim=0), conv.kernel_size))
        out.append(torch.stack(rows))
    return out


def check_fla_cache_loop(
    family: str, configs, seed: int, P: int, steps: int, valid, grad: bool, chunk: int = 0, planted=None, note=_quiet
) -> None:
    """The generation loop with a caller's fla Cache against the same loop with ours, on every path
    (``fused`` where the guard allows the layer's convs: with a cache it refuses every call, G2/G3).

    Outputs and every call's layer states bitwise equal; the fla Cache is the object each layer hands
    back, holds the stack's layers only, and, measured from the inputs: ``offset`` = the mask's columns
    (tokens fed, padding included: fla's ``q_len`` per call), each conv slot = the last ``W`` inputs at
    the mask's ones (``None`` per slot on the fused path, which writes no conv cache); the caller's
    tensors are untouched. ``planted`` is mixed in front of every layer (a defect, for the teeth tests);
    ``note`` gets the example's context (the suite passes Hypothesis' ``note``)."""
    B, H = len(valid), configs[0].hidden_size
    valid = [min(v, P) for v in valid]
    calls = loop_calls(seed, B, P, H, steps, valid, chunk)
    originals = [(x.clone(), mask.clone()) for x, mask in calls]
    indices = [c.layer_idx for c in configs]
    ctx = f"{family}: layers {indices}, B={B} prompt {P} (chunk {chunk}) valid={valid} steps={steps} grad={grad}"
    note(ctx)
    ref = stack(family, configs, seed, "layer_cls", planted)
    fused = stack(family, configs, seed, "fused_cls", planted)
    allowed = all(layer.decide(CallFacts(False, False, False)).fuse for layer in fused)
    with torch.set_grad_enabled(grad):
        for path, cls, kw in PATHS:
            if path == "fused" and not allowed:
                continue
            layers = ref if cls == "layer_cls" else fused
            theirs = fla_cache()
            y_fla, s_fla, fed = generate(layers, kw, theirs, calls)
            y_ours, s_ours, _ = generate(layers, kw, Cache(), calls)
            where = f"{ctx}, path {path}"
            assert_equivalent(y_fla, y_ours, name="output", paths=("fla Cache", "our Cache"), context=where)
            for k, (a, b) in enumerate(zip(s_fla, s_ours, strict=True)):
                assert_tree_equivalent(a, b, name=f"layer states after call {k}", paths=("fla Cache", "our Cache"),
                                       context=where)  # fmt: skip
            assert len(theirs) == indices[-1] + 1, (
                f"fla Cache holds {len(theirs)} layers, the stack {indices} ({where})"
            )
            for idx in set(range(len(theirs))) - set(indices):
                assert theirs[idx] is None and theirs.get_seq_length(idx) == 0, f"layer {idx} was written ({where})"
            for k, states in enumerate(s_fla):
                for position, layer in enumerate(layers):
                    state = states[layer.layer_idx]
                    fed_tokens = calls[k][1].shape[1]
                    assert state["offset"] == fed_tokens, (
                        f"layer {layer.layer_idx} offset {state['offset']} after call {k}, fed {fed_tokens} ({where})"
                    )
                    if path == "fused":
                        assert state["conv_state"] == (None,) * len(layer.slots), f"fused path cached convs ({where})"
                        continue
                    expected = expected_conv_states(layer, fed, calls, position, k)
                    for slot, got, want in zip(layer.slots, state["conv_state"], expected, strict=True):
                        assert_equivalent(got, want, name=f"layer {layer.layer_idx} {slot} conv_state after call {k}",
                                          paths=("fla Cache", "inputs"), exact=False, context=where)  # fmt: skip
    for (x, mask), (x0, mask0) in zip(calls, originals, strict=True):
        assert torch.equal(x, x0) and torch.equal(mask, mask0), f"a caller's input was written ({ctx})"


def check_round_trip(
    family: str, configs, seed: int, P: int, steps: int, valid, chunk: int = 0, to_fla=None, from_fla=None, note=_quiet
) -> None:
    """The fla target's cache seam (``FlaHandle.run``: ``to_fla_cache`` before fla's layer, ``from_fla_cache``
    after) on caches a caller filled (a stack's generation loop, fla's Cache and our twin):

    - ``to_fla(fla Cache)`` is a new fla Cache with the same layers, states and counts, sharing no
      storage; the caller's is untouched, even after a layer writes the copy;
    - ``from_fla(to_fla(fla Cache))`` is the twin, and ``from_fla(to_fla(twin))`` is the twin.

    ``to_fla``/``from_fla`` default to the target's (a planted defect passes others); ``note`` gets the
    example's context."""
    to_fla, from_fla = to_fla or to_fla_cache, from_fla or from_fla_cache
    B, H = len(valid), configs[0].hidden_size
    calls = loop_calls(seed, B, P, H, steps, [min(v, P) for v in valid], chunk)
    layers = stack(family, configs, seed, "layer_cls")
    ctx = f"{family}: layers {[c.layer_idx for c in configs]}, B={B} prompt {P} steps={steps}"
    note(ctx)
    with torch.no_grad():
        caller, twin = fla_cache(), Cache()
        generate(layers, {}, caller, calls)
        generate(layers, {}, twin, calls)
        held = [i for i in range(len(caller)) if caller[i] is not None]
        before = {i: read_state(caller, i) for i in held}
        copy = to_fla(caller)
        assert copy is not caller, f"the fla target hands fla's layer the caller's own cache ({ctx})"
        assert type(copy) is type(caller) and len(copy) == len(caller), (
            f"copy: {type(copy).__name__}, {len(copy)} layers; caller's: {type(caller).__name__}, {len(caller)} ({ctx})"
        )
        for i in range(len(caller)):
            if i not in held:
                assert copy[i] is None and copy.get_seq_length(i) == 0, f"layer {i} gained a state ({ctx})"
                continue
            assert_tree_equivalent(
                read_state(copy, i), before[i], name=f"layer {i}", paths=("copy", "caller's"), context=ctx
            )
            theirs = {t.untyped_storage().data_ptr() for t in layer_tensors(caller[i])}
            shared = [t for t in layer_tensors(copy[i]) if t.untyped_storage().data_ptr() in theirs]
            assert not shared, f"layer {i}: the copy shares {len(shared)} tensors' storage with the caller's ({ctx})"
        x, mask = calls[-1][0], torch.cat([calls[-1][1], torch.ones(B, 1, dtype=calls[-1][1].dtype)], dim=1)
        generate(layers, {}, copy, [(x, mask)])  # a layer writes into the copy, as fla's does in FlaHandle.run
        for i in held:
            assert_tree_equivalent(
                read_state(caller, i), before[i], name=f"caller's layer {i}", paths=("after", "before"), context=ctx
            )
        back = from_fla(to_fla(caller))
        assert_tree_equivalent(back, twin, name="fla Cache there and back", paths=("round trip", "our Cache"),
                               context=ctx)  # fmt: skip
        assert_tree_equivalent(from_fla(to_fla(twin)), twin, name="our Cache there and back",
                               paths=("round trip", "our Cache"), context=ctx)  # fmt: skip
