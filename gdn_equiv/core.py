"""The gated delta rule in two torch forms: ``recurrent`` (the definition) and ``chunked``.

State layout is "v first": ``S [N, H, Dv, Dk]``. Per head and token, in fp32 (fp64 for fp64
inputs)::

    S <- exp(g) S;   u = beta (v - S k);   S <- S + u k^T;   o = S (scale q)

Inputs arrive already prepared by the layer: ``q, k [B, T, H, Dk]`` L2-normalised and expanded to
the value heads, ``v [B, T, H, Dv]``, ``g [B, T, H]`` (log decay), ``beta [B, T, H]``. With
``cu_seqlens`` (``B == 1``) every sequence starts from its own state and nothing crosses a boundary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Tensor = torch.Tensor
CHUNK_SIZE = 64

CoreFn = Callable[..., tuple[Tensor, Tensor]]


def l2norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(sum x^2 + eps)`` over the last dim, as fla's in-kernel normalisation."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def _recurrent_one(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float, state: Tensor):
    """One run ``[B, T, H, *]`` from ``state [B, H, Dv, Dk]``; returns ``o [B, T, H, Dv]`` and the state."""
    outs = []
    for t in range(q.shape[1]):
        state = state * torch.exp(g[:, t])[..., None, None]
        kt = k[:, t]
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhvk,bhk->bhv", state, kt))
        state = state + u[..., :, None] * kt[..., None, :]
        outs.append(torch.einsum("bhvk,bhk->bhv", state, q[:, t] * scale))
    o = torch.stack(outs, dim=1) if outs else v.new_zeros(v.shape)
    return o, state


def _chunked_one(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float, state: Tensor):
    """The same maths per chunk of :data:`CHUNK_SIZE` tokens, in matmul (WY) form.

    Within a chunk with cumulative log decay ``G`` and ``A_ij = beta_i exp(G_i - G_j) k_i.k_j`` (i > j):
    ``(I + A) U = beta V - beta exp(G) K S0^T``; ``O = exp(G) Qs S0^T + (M o Qs K^T) U`` with
    ``M_ij = exp(G_i - G_j)`` for j <= i; ``S = exp(G_C) S0 + U^T (exp(G_C - G) K)``.
    """
    T = q.shape[1]
    outs = []
    for start in range(0, T, CHUNK_SIZE):
        stop = min(start + CHUNK_SIZE, T)
        C = stop - start
        # [B, C, H, *] -> [B, H, C, *]
        qc, kc, vc = (t[:, start:stop].transpose(1, 2) for t in (q, k, v))
        bc = beta[:, start:stop].transpose(1, 2)  # [B, H, C]
        G = torch.cumsum(g[:, start:stop].transpose(1, 2), dim=-1)  # [B, H, C]
        diff = G[..., :, None] - G[..., None, :]  # [B, H, C, C]: G_i - G_j
        lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp(torch.where(lower, diff, torch.full_like(diff, float("-inf"))))
        strict = decay * (~torch.eye(C, dtype=torch.bool, device=q.device))
        A = bc[..., :, None] * strict * (kc @ kc.transpose(-1, -2))
        eye = torch.eye(C, dtype=q.dtype, device=q.device)
        gamma = torch.exp(G)  # [B, H, C]
        rhs = bc[..., None] * vc - (bc * gamma)[..., None] * (kc @ state.transpose(-1, -2))
        U = torch.linalg.solve_triangular(eye + A, rhs, upper=False)  # [B, H, C, Dv]
        qs = qc * scale
        o = gamma[..., None] * (qs @ state.transpose(-1, -2)) + (decay * (qs @ kc.transpose(-1, -2))) @ U
        outs.append(o.transpose(1, 2))  # [B, H, C, Dv] -> [B, C, H, Dv]
        tail = torch.exp(G[..., -1:] - G)  # [B, H, C]
        state = torch.exp(G[..., -1])[..., None, None] * state + U.transpose(-1, -2) @ (tail[..., None] * kc)
    o = torch.cat(outs, dim=1) if outs else v.new_zeros(v.shape)
    return o, state


_FORMS = {"recurrent": _recurrent_one, "chunk": _chunked_one}


def gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    scale: float,
    initial_state: Tensor | None = None,
    cu_seqlens: Tensor | None = None,
    mode: str = "chunk",
) -> tuple[Tensor, Tensor]:
    """Run the recurrence; returns ``o [B, T, H, Dv]`` (compute dtype) and the final state ``[N, H, Dv, Dk]``."""
    form = _FORMS[mode]
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    q, k, v, g, beta = (t.to(cdt) for t in (q, k, v, g, beta))
    B, _, H, Dk = q.shape
    Dv = v.shape[-1]
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    state = q.new_zeros(N, H, Dv, Dk) if initial_state is None else initial_state.to(cdt)
    if cu_seqlens is None:
        return form(q, k, v, g, beta, scale, state)
    bounds = cu_seqlens.tolist()
    outs, finals = [], []
    for s in range(N):
        sl = slice(bounds[s], bounds[s + 1])
        o_s, state_s = form(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], scale, state[s : s + 1])
        outs.append(o_s)
        finals.append(state_s)
    return torch.cat(outs, dim=1), torch.cat(finals, dim=0)
