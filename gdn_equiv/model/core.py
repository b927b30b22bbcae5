"""The gated delta rule in two torch forms: ``recurrent`` (the definition) and ``chunked``.

State layout is "v first": ``S [N, H, Dv, Dk]``. Per head and token, in fp32 (fp64 for fp64
inputs)::

    S <- exp(g) S;   u = beta (v - S k);   S <- S + u k^T;   o = S (scale q)

Inputs arrive already prepared by the layer: ``q, k [B, T, H, Dk]`` (L2-normalised where the
family does so) and expanded to the value heads, ``v [B, T, H, Dv]``, ``g`` (log decay, per head
``[B, T, H]`` or per key channel ``[B, T, H, Dk]``, which decays the state's columns:
``S <- S diag(exp(g))``), ``beta [B, T, H]`` (``None``: the plain gated update ``S <- S + v k^T``). With
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


def _recurrent_one(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor | None, scale: float, state: Tensor
) -> tuple[Tensor, Tensor]:
    """One run ``[B, T, H, *]`` from ``state [B, H, Dv, Dk]``; returns ``o [B, T, H, Dv]`` and the state.

    ``g [B, T, H, 1 | Dk]`` decays the state's key columns; ``beta=None`` is the plain (GLA) update."""
    outs = []
    for t in range(q.shape[1]):
        state = state * torch.exp(g[:, t])[..., None, :]
        kt = k[:, t]
        if beta is None:
            u = v[:, t]
        else:
            u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhvk,bhk->bhv", state, kt))
        state = state + u[..., :, None] * kt[..., None, :]
        outs.append(torch.einsum("bhvk,bhk->bhv", state, q[:, t] * scale))
    o = torch.stack(outs, dim=1) if outs else v.new_zeros(v.shape)
    return o, state


def _chunked_one(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor | None, scale: float, state: Tensor
) -> tuple[Tensor, Tensor]:
    """The same maths per chunk of :data:`CHUNK_SIZE` tokens, in matmul (WY) form.

    Within a chunk with cumulative log decay ``G [C, Dk]`` (per key channel; a scalar gate is
    broadcast) and the decayed key products ``KK_ij = sum_c k_ic k_jc exp(G_ic - G_jc)``,
    ``QK_ij = sum_c qs_ic k_jc exp(G_ic - G_jc)`` (j <= i):
    delta rule: ``(I + beta o KK_strict) U = beta V - beta (K o exp(G)) S0^T``; plain: ``U = V``;
    ``O = (Qs o exp(G)) S0^T + QK U``; ``S = S0 o exp(G_C) + U^T (K o exp(G_C - G))``.
    """
    T, Dk = q.shape[1], q.shape[-1]
    outs = []
    for start in range(0, T, CHUNK_SIZE):
        stop = min(start + CHUNK_SIZE, T)
        C = stop - start
        # [B, C, H, *] -> [B, H, C, *]
        qc, kc, vc = (t[:, start:stop].transpose(1, 2) for t in (q, k, v))
        G = torch.cumsum(g[:, start:stop].transpose(1, 2), dim=2).expand(*qc.shape[:3], Dk)  # [B, H, C, Dk]
        lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        diff = G[..., :, None, :] - G[..., None, :, :]  # [B, H, C, C, Dk]: G_i - G_j
        decay = torch.exp(torch.where(lower[..., None], diff, torch.full_like(diff, float("-inf"))))
        qs = qc * scale
        QK = torch.einsum("bhic,bhjc,bhijc->bhij", qs, kc, decay)  # zero above the diagonal
        gamma = torch.exp(G)  # [B, H, C, Dk]
        if beta is None:
            U = vc
        else:
            bc = beta[:, start:stop].transpose(1, 2)  # [B, H, C]
            strict = lower & ~torch.eye(C, dtype=torch.bool, device=q.device)
            KK = torch.einsum("bhic,bhjc,bhijc->bhij", kc, kc, decay) * strict
            eye = torch.eye(C, dtype=q.dtype, device=q.device)
            rhs = bc[..., None] * vc - bc[..., None] * ((kc * gamma) @ state.transpose(-1, -2))
            U = torch.linalg.solve_triangular(eye + bc[..., None] * KK, rhs, upper=False)  # [B, H, C, Dv]
        o = (qs * gamma) @ state.transpose(-1, -2) + QK @ U
        outs.append(o.transpose(1, 2))  # [B, H, C, Dv] -> [B, C, H, Dv]
        G_end = G[..., -1:, :]  # [B, H, 1, Dk]
        state = state * torch.exp(G_end) + U.transpose(-1, -2) @ (torch.exp(G_end - G) * kc)
    o = torch.cat(outs, dim=1) if outs else v.new_zeros(v.shape)
    return o, state


_FORMS = {"recurrent": _recurrent_one, "chunk": _chunked_one}


def gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor | None,
    *,
    scale: float,
    initial_state: Tensor | None = None,
    cu_seqlens: Tensor | None = None,
    mode: str = "chunk",
) -> tuple[Tensor, Tensor]:
    """Run the recurrence; returns ``o [B, T, H, Dv]`` (compute dtype) and the final state ``[N, H, Dv, Dk]``.

    ``g`` is the log decay, ``[B, T, H]`` (one per head: GDN) or ``[B, T, H, Dk]`` (one per key
    channel: KDA, GLA); ``beta [B, T, H]`` the delta rule's step size, ``None`` for the plain gated
    linear update (GLA, LightNet)."""
    form = _FORMS[mode]
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    q, k, v, g = (t.to(cdt) for t in (q, k, v, g))
    beta = None if beta is None else beta.to(cdt)
    if g.dim() == 3:
        g = g.unsqueeze(-1)  # [B, T, H] -> [B, T, H, 1]: one decay for all key channels
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
        b_s = None if beta is None else beta[:, sl]
        o_s, state_s = form(q[:, sl], k[:, sl], v[:, sl], g[:, sl], b_s, scale, state[s : s + 1])
        outs.append(o_s)
        finals.append(state_s)
    return torch.cat(outs, dim=1), torch.cat(finals, dim=0)
