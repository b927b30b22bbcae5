"""How many same-dtype reference runs the accuracy bar needs, and what they must jitter (the figures in
gdn_equiv/harness/compare.py).

Two correct stand-ins for another implementation are judged: ``conv``, our layer with its convs on
``F.conv1d`` (from tests/test_accuracy.py), and ``norm``, our layer with its output RMSNorm written
``x / sqrt(mean x^2 + eps)`` instead of ``x * rsqrt(...)``, so that its backward rounds in another order
(as fla's norm kernel does). Each is judged against the least accurate of the plain reference and K
jittered runs, for two jitters: ``fwd+wgrad`` (module outputs and parameter gradients,
:func:`gdn_equiv.model.example.ulp_jitter` with ``input_grads=False``, the bar before 2026-12-07) and
``+dgrad`` (also each module's input gradient, the bar now). Per stand-in, jitter and K it prints the
worst ratio ``|stand-in - fp64| / (bar + eps * max|fp64|)`` over output, dx and every parameter gradient.
A ratio above ``ACCURACY_FACTOR`` (2) on a correct stand-in is a false alarm; ``over 1`` counts the
examples that a bar half as wide would fail (how tight the bar is). The examples are derandomized, so
every run judges the same ones. CPU, about two minutes per 40 examples::

    python tools/accuracy_spread.py float32 [EXAMPLES] [SEQ_LEN_MAX]
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
from hypothesis import given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_accuracy as A

from gdn_equiv.model.backends import Backend, register_backend
from gdn_equiv.model.example import Example, accuracy_runs, build_layer, materialize, run_layer, unit_cotangent_backward
from gdn_equiv.model.families.gated_deltanet import GatedDeltaNet
from gdn_equiv.model.reference import RMSNorm, ShortConv

KS = (0, 8, 16)
EXAMPLES = 40
STAND_INS = ("conv", "norm")
JITTERS = {"fwd+wgrad": False, "+dgrad": True}


class _DividingNorm(RMSNorm):
    """Our RMSNorm's maths with a division by the root instead of a product with its reciprocal."""

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        xf = x.float() if x.dtype != torch.float64 else x
        y = xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.to(xf.dtype)
        if gate is not None:
            gf = gate.to(xf.dtype)
            y = y * gf * torch.sigmoid(gf) if self.gate_activation in ("swish", "silu") else y * torch.sigmoid(gf)
        return y.to(x.dtype)


def _stand_in(reference: torch.nn.Module, kind: str) -> torch.nn.Module:
    other = copy.deepcopy(reference)
    for module in other.modules():
        if isinstance(module, ShortConv) and kind == "conv":
            module.backend = "acc_fconv"
        if isinstance(module, RMSNorm) and kind == "norm":
            module.__class__ = _DividingNorm
    return other


def main(dtype: str, examples: int = EXAMPLES, seq_len_max: int = 24) -> None:
    register_backend(Backend("acc_fconv", forward=A._f_conv1d), replace=True)
    worst: dict[tuple[str, str, int], list[float]] = {(s, j, k): [] for s in STAND_INS for j in JITTERS for k in KS}

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True)
    @given(A._examples(dtype))
    def measure(example: Example) -> None:
        if example.seq_len > seq_len_max:
            example = Example(**{**example.__dict__, "seq_len": 1 + example.seq_len % seq_len_max})
        reference = build_layer(example, GatedDeltaNet)
        backward = unit_cotangent_backward(example.seed)
        outs = {
            s: flat(run_layer(_stand_in(reference, s), materialize(example, reference), backward)) for s in STAND_INS
        }
        eps = torch.finfo(getattr(torch, dtype)).eps
        for jitter, input_grads in JITTERS.items():
            refs, truth = accuracy_runs(
                reference, lambda: materialize(example, reference), backward, seed=example.seed,
                variants=max(KS), input_grads=input_grads,
            )  # fmt: skip
            t_all, r_all = flat(truth), [flat(r) for r in refs]
            for s in STAND_INS:
                for k in KS:
                    ratio = 0.0
                    for i, t in enumerate(t_all):
                        if t is None:
                            continue
                        t = t.detach().double()
                        floor = eps * float(t.abs().max())
                        err = float((outs[s][i].detach().double() - t).abs().max())
                        bar = max(float((r_all[j][i].detach().double() - t).abs().max()) for j in range(k + 1))
                        ratio = max(ratio, err / (bar + floor) if bar + floor > 0 else 0.0)
                    worst[(s, jitter, k)].append(ratio)

    def flat(run: tuple) -> list:
        return [run[0], run[1], *run[2].values()]

    measure()
    for (s, jitter, k), w in worst.items():
        w = sorted(w)
        print(f"{dtype} {s:4s} {jitter:9s} K={k:>2}: worst ratio {w[-1]:.2f}, 90th percentile "
              f"{w[int(0.9 * len(w))]:.2f}, examples over 2: {sum(x > 2 for x in w)}/{len(w)}, "
              f"over 1: {sum(x > 1 for x in w)}")  # fmt: skip


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "float32",
        int(sys.argv[2]) if len(sys.argv) > 2 else EXAMPLES,
        int(sys.argv[3]) if len(sys.argv) > 3 else 24,
    )
