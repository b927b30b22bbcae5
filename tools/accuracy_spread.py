"""How many same-dtype reference runs the accuracy bar needs (the figures in gdn_equiv/harness/compare.py).

A correct stand-in for another implementation (our layer with its convs on ``F.conv1d``, from
tests/test_accuracy.py) is judged against the least accurate of the plain reference and K one-ulp
jittered runs; per generated example this prints nothing, and at the end, per K, the worst ratio
``|stand-in - fp64| / (bar + eps * max|fp64|)`` over output, dx and every parameter gradient. A ratio above
``ACCURACY_FACTOR`` (2) on a correct stand-in would be a false alarm. CPU, about a minute per dtype::

    python tools/accuracy_spread.py float32 [EXAMPLES]
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
from gdn_equiv.model.reference import ShortConv

KS = (0, 3, 8, 16)
EXAMPLES = 40


def main(dtype: str, examples: int = EXAMPLES) -> None:
    register_backend(Backend("acc_fconv", forward=A._f_conv1d), replace=True)
    worst: dict[int, list[float]] = {k: [] for k in KS}

    @settings(max_examples=examples, deadline=None, database=None)
    @given(A._examples(dtype))
    def measure(example: Example) -> None:
        reference = build_layer(example, GatedDeltaNet)
        other = copy.deepcopy(reference)
        for module in other.modules():
            if isinstance(module, ShortConv):
                module.backend = "acc_fconv"
        backward = unit_cotangent_backward(example.seed)
        refs, truth = accuracy_runs(
            reference, lambda: materialize(example, reference), backward, seed=example.seed, variants=max(KS)
        )
        out = run_layer(other, materialize(example, reference), backward)

        def flat(run: tuple) -> list:
            return [run[0], run[1], *run[2].values()]

        t_all, o_all, r_all = flat(truth), flat(out), [flat(r) for r in refs]
        eps = torch.finfo(getattr(torch, dtype)).eps
        for k in KS:
            ratio = 0.0
            for i, t in enumerate(t_all):
                if t is None:
                    continue
                t = t.detach().double()
                floor = eps * float(t.abs().max())
                err = float((o_all[i].detach().double() - t).abs().max())
                bar = max(float((r_all[j][i].detach().double() - t).abs().max()) for j in range(k + 1))
                ratio = max(ratio, err / (bar + floor) if bar + floor > 0 else 0.0)
            worst[k].append(ratio)

    measure()
    for k in KS:
        w = sorted(worst[k])
        print(f"{dtype} K={k:>2}: worst ratio {w[-1]:.2f}, 90th percentile {w[int(0.9 * len(w))]:.2f}, "
              f"examples over 2: {sum(x > 2 for x in w)}/{len(w)}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32", int(sys.argv[2]) if len(sys.argv) > 2 else EXAMPLES)
