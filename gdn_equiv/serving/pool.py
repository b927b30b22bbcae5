"""The §11 serving call and step, written once in our words: the pure-torch reference of a state pool.

State layout (decided here; every engine adapter maps its own onto it): ``pool [S, D, W-1]``, one slot per
sequence, the last ``W-1`` inputs of that sequence in time order (column ``W-2`` is the newest), in the pool's
dtype. This is vLLM's and sglang's ``conv_states[slot, :, :W-1]``. The torch conv backend keeps ``W`` columns
([B, D, W], the oldest never read by an output); the reference pads a zero column in front on the way in and
drops it on the way out, so every number comes from :mod:`gdn_equiv.model.backends.torch_backend` (forward for
prefill, update for each decode token): the ground truth's arithmetic, with pool bookkeeping around it.

The accepted-token rule (S4): a step feeds ``k`` tokens per sequence and returns an output for each of them
(each from the state and the tokens before it, as decode would); with ``accepted[i] = j`` (``0 <= j <= k``)
the slot is left holding the last ``W-1`` inputs of ``(state | x[i, :j])``, exactly what feeding only those
``j`` tokens leaves: rejected drafts never reach the window. ``accepted=None`` keeps all ``k``. The count is
given with the step here; an engine that learns it only after the step (vLLM passes it to the *next* call
as ``num_accepted_tokens``) realises the same rule in its adapter, observed through its next call.

Pad slots: a sequence whose slot is :data:`PAD_SLOT` is skipped: its state is not read, nothing is written,
and its outputs are zeros here (engines leave them unspecified, so properties never compare them).
A non-pad slot named twice in one call is refused: engines run the sequences of a call concurrently, so the
result would depend on their order.
"""

from __future__ import annotations

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.backends import torch_backend as tb

Tensor = torch.Tensor
PAD_SLOT = -1

__all__ = ["PAD_SLOT", "check_batch", "prefill", "snapshots", "step"]


def _to_backend_state(state: Tensor) -> Tensor:
    """``[N, D, W-1]`` -> the torch backend's ``[N, D, W]`` (its oldest column is never read)."""
    return torch.cat([state.new_zeros(*state.shape[:-1], 1), state], dim=-1)


def check_batch(pool: Tensor, starts: Tensor, slots: Tensor, has_state: Tensor, total: int, pad_slot: int) -> None:
    """Refuse a call §11 does not define, naming the value and the rule; nothing is mutated."""
    n = slots.numel()
    if starts.numel() != n + 1:
        raise InvalidArgument(f"starts must have len(slots) + 1 = {n + 1} entries, got {starts.numel()}")
    if has_state.numel() != n:
        raise InvalidArgument(f"has_state must have len(slots) = {n} entries, got {has_state.numel()}")
    bounds = starts.tolist()
    if bounds[0] != 0 or bounds[-1] != total or any(b > a for a, b in zip(bounds[1:], bounds[:-1], strict=True)):
        raise InvalidArgument(f"starts must rise from 0 to {total} (tokens in x), got {bounds}")
    named = [s for s in slots.tolist() if s != pad_slot]
    if any(not 0 <= s < pool.shape[0] for s in named):
        raise InvalidArgument(f"slots must be in [0, {pool.shape[0]}) or the pad id {pad_slot}, got {slots.tolist()}")
    if len(set(named)) != len(named):
        raise InvalidArgument(f"a slot may be named once per call (sequences run concurrently), got {slots.tolist()}")


def prefill(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    pool: Tensor,
    starts: Tensor,
    slots: Tensor,
    has_state: Tensor,
    *,
    pad_slot: int = PAD_SLOT,
) -> Tensor:
    """§11's call: ``x [T, D]`` packed sequences -> ``y [T, D]``; ``pool [S, D, W-1]`` updated in place."""
    check_batch(pool, starts, slots, has_state, x.shape[0], pad_slot)
    y = torch.zeros_like(x)
    bounds = starts.tolist()
    for i, slot in enumerate(slots.tolist()):
        lo, hi = bounds[i], bounds[i + 1]
        if slot == pad_slot or lo == hi:
            continue
        state = pool[slot : slot + 1] if bool(has_state[i]) else torch.zeros_like(pool[:1])
        out, final = tb.forward(x[None, lo:hi], weight, bias, activation, _to_backend_state(state), True, None)
        y[lo:hi] = out[0]
        assert final is not None
        pool[slot] = final[0, :, 1:]
    return y


def step(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    pool: Tensor,
    slots: Tensor,
    accepted: Tensor | None = None,
    *,
    pad_slot: int = PAD_SLOT,
) -> Tensor:
    """§11's step: ``x [N, k, D]`` (k tokens per sequence, each continuing its slot) -> ``y [N, k, D]``;
    the slot keeps the first ``accepted[i]`` tokens (all when ``None``). Each token goes through the torch
    backend's decode ``update``, so a prefill followed by steps runs both of its kernels (S3)."""
    N, k, _ = x.shape
    if slots.numel() != N:
        raise InvalidArgument(f"slots must have one entry per sequence of x ({N}), got {slots.numel()}")
    if accepted is not None and (accepted.numel() != N or any(not 0 <= int(a) <= k for a in accepted.tolist())):
        raise InvalidArgument(
            f"accepted must hold {N} counts in [0, {k}] (k={k} tokens a step), got {accepted.tolist()}"
        )
    check_batch(pool, torch.arange(N + 1) * k, slots, torch.ones(N, dtype=torch.bool), N * k, pad_slot)
    y = torch.zeros_like(x)
    for i, slot in enumerate(slots.tolist()):
        if slot == pad_slot:
            continue
        keep = k if accepted is None else int(accepted[i])
        state = _to_backend_state(pool[slot : slot + 1])
        kept = pool[slot].clone()
        for t in range(k):
            out, state = tb.update(x[i : i + 1, t], state, weight, bias, activation)
            y[i, t] = out[0]
            if t + 1 == keep:
                kept = state[0, :, 1:]
        pool[slot] = kept
    return y


def snapshots(
    x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, state: Tensor, block_size: int
) -> Tensor:
    """Prefix caching: ``x [T, D]`` continuing ``state [D, W-1]`` -> ``[T // block_size, D, W-1]``, the
    state after each whole block (snapshot ``b`` = the state after ``(b + 1) * block_size`` tokens)."""
    if block_size < 1:
        raise InvalidArgument(f"block_size must be at least 1, got {block_size}")
    out = []
    for b in range(x.shape[0] // block_size):
        _, final = tb.forward(
            x[None, : (b + 1) * block_size], weight, None, None, _to_backend_state(state[None]), True, None
        )
        assert final is not None
        out.append(final[0, :, 1:])
    return torch.stack(out) if out else state.new_zeros(0, *state.shape)
