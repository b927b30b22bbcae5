"""How close fla's layer comes to the faithfulness bar (gdn_equiv.harness.faithful), for both jitters of the
bar (see tools/accuracy_spread.py): per generated example of the gate's own strategy, the worst ratio
``|fla - fp64| / (ACCURACY_FACTOR * bar + eps * max|fp64|)`` over output, dx and every parameter gradient
(1 = at the bar, over 1 = the gate fails), and at the end the worst examples and how many were over 1.
fla's convs and norms run in Triton's interpreter: about 5 s an example on a CPU. Derandomized: every
run judges the same examples::

    python tools/faithful_spread.py gated_deltanet [EXAMPLES] [defaults|facts]
"""

from __future__ import annotations

import os
import sys
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch
from hypothesis import given, settings

from gdn_equiv.harness.compare import ACCURACY_FACTOR
from gdn_equiv.harness.faithful import _fla_layer, naive_cores
from gdn_equiv.model.example import Example, accuracy_runs, materialize, run_layer, unit_cotangent_backward
from gdn_equiv.strategies.faithful import faithful_examples

JITTERS = {"fwd+wgrad": False, "+dgrad": True}


def main(family: str, examples: int = 40, defaults: bool = True) -> None:
    warnings.filterwarnings("ignore")
    rows: list[tuple[str, dict[str, tuple[float, str]]]] = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True)
    @given(faithful_examples(family))
    def measure(example: Example) -> None:
        if example.varlen != "none" or example.cache != "none" or example.use_cache:
            return
        ours, theirs = _fla_layer(example, defaults, None, "cpu")
        backward = unit_cotangent_backward(example.seed + 11) if example.grad else None

        def inputs() -> object:
            return materialize(example, ours, "cpu")

        with naive_cores(family):
            got = flat(run_layer(theirs, inputs(), backward))
        worst: dict[str, tuple[float, str]] = {}
        for jitter, input_grads in JITTERS.items():
            refs, truth = accuracy_runs(ours, inputs, backward, seed=example.seed, input_grads=input_grads)
            t_all, r_all = flat(truth), [flat(r) for r in refs]
            ratio, where = 0.0, ""
            for name, t in t_all.items():
                if t is None or got[name] is None:
                    continue
                t = t.detach().double()
                unit = torch.finfo(example.torch_dtype).eps * float(t.abs().max())
                err = float((got[name].detach().double() - t).abs().max())
                bar = ACCURACY_FACTOR * max(float((r[name].detach().double() - t).abs().max()) for r in r_all) + unit
                r = err / bar if bar > 0 else (0.0 if err == 0 else float("inf"))
                if r > ratio:
                    ratio, where = r, name
            worst[jitter] = (ratio, where)
        rows.append((example.short(), worst))

    def flat(run: tuple) -> dict[str, torch.Tensor | None]:
        return {"output": run[0], "dx": run[1], **{f"d{n}": g for n, g in run[2].items()}}

    measure()
    for jitter in JITTERS:
        ratios = sorted((w[jitter][0], w[jitter][1], short) for short, w in rows)
        print(f"{family} {'fla defaults' if defaults else 'our conv facts'} {jitter}: {len(ratios)} examples, "
              f"over the bar: {sum(r > 1 for r, _, _ in ratios)}, median {ratios[len(ratios) // 2][0]:.2f}, "
              f"worst {', '.join(f'{r:.2f} ({n})' for r, n, _ in ratios[-3:][::-1])}")  # fmt: skip
        print(f"  worst example: {ratios[-1][2]}")


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "gated_deltanet",
        int(sys.argv[2]) if len(sys.argv) > 2 else 40,
        (sys.argv[3] if len(sys.argv) > 3 else "defaults") == "defaults",
    )
