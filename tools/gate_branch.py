"""Gate a CPU build of an upstream fla branch against the registered conv semantics (gdn_equiv.model.conv_ops).

Builds nothing: give it the ``site`` dir a wheel was installed into (``pip install --no-deps --target``)::

    PYTHONPATH=/tmp/fla-builds/conv-relu/site:/work/main TRITON_INTERPRET=1 \\
        /tmp/venv977/bin/python tools/gate_branch.py /tmp/fla-builds/conv-relu/site

It asks the branch's ``ShortConvolution`` (Triton kernels under the interpreter, autotuning pinned to one
config) for each registered activation it accepts and for the L2-norm conv (``norm='l2'``, ``head_dim``,
``norm_eps``) when it has one, on small CPU inputs, sequence and step paths, and compares with our
reference maths (torch backend + registered activation / fact). Then it looks for the branch's fusion
guard (``can_fuse_qkv_short_conv``, ``GatedDeltaNet._use_fused_qkv_conv``) and, where there is one,
compares it with our guard (SPEC decision) over generated layer states, shrinking a disagreement.
Prints one line per check; exit 1 if any semantic check disagrees, 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import warnings


def _pin_autotuned(module) -> None:
    """One config per autotuned kernel: the interpreter cannot benchmark ("0 active drivers"). Also
    answers fla's ``get_multiprocessor_count`` (a driver query; it only picks the time tile) with 8."""
    from triton.runtime.autotuner import Autotuner

    if hasattr(module, "get_multiprocessor_count"):
        module.get_multiprocessor_count = lambda *a, **k: 8

    for obj in vars(module).values():
        k = obj
        for _ in range(5):
            if isinstance(k, Autotuner):
                k.configs = k.configs[:1]
                break
            k = getattr(k, "fn", None)
            if k is None:
                break


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", help="the site dir the branch's wheels were installed into")
    ap.add_argument("--states", type=int, default=500, help="generated layer states for the guard comparison")
    args = ap.parse_args(argv)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, args.site)
    warnings.simplefilter("ignore")
    import contextlib

    import torch

    if not hasattr(torch.cpu, "device"):
        # fla < 0.6's input_guard enters torch.<device>.device(index); torch has no torch.cpu.device.
        # A CPU-only shim (no device to switch to), not a change to fla's maths.
        torch.cpu.device = lambda index: contextlib.nullcontext()  # type: ignore[attr-defined]
    import fla

    from gdn_equiv.model.backends import causal_conv1d
    from gdn_equiv.model.conv_ops import activation_names, apply_conv_facts, conv_facts

    print(f"fla {fla.__version__} from {os.path.dirname(fla.__file__)}")
    conv_mod = importlib.import_module("fla.modules.convolution")
    _pin_autotuned(conv_mod)
    for sub in ("fla.ops.convolution.fused_short_conv",):
        with contextlib.suppress(ImportError):
            _pin_autotuned(importlib.import_module(sub))
    SC = conv_mod.ShortConvolution
    ctor = inspect.signature(SC.__init__).parameters
    fwd = inspect.signature(SC.forward).parameters
    bad = 0

    def make(D: int, W: int, **kw):
        torch.manual_seed(0)
        m = SC(hidden_size=D, kernel_size=W, bias=True, backend="triton", **kw)
        with torch.no_grad():
            m.weight.uniform_(-1, 1)
            m.bias.uniform_(-1, 1)
        return m

    def ours(m, x, extras=()):
        y, _ = causal_conv1d(x, m.weight[:, 0].detach(), m.bias.detach(), m.activation, backend="torch")
        return apply_conv_facts(y, extras)

    def report(what: str, got, exp) -> None:
        nonlocal bad
        diff = (got.float() - exp.float()).abs().max().item()
        ok = diff <= 1e-5
        bad += not ok
        print(f"{'ok  ' if ok else 'DIFF'} {what}: max |fla - ours| = {diff:.3g}")

    # ---- activations ------------------------------------------------------------------------
    B, T, D, W = 2, 9, 8, 4
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, D, generator=gen)
    for act in [a for a in activation_names() if a is not None]:
        try:
            m = make(D, W, activation=act)
        except (AssertionError, ValueError) as exc:
            print(f"n/a  activation {act!r}: the branch's ShortConvolution refuses it ({exc})")
            continue
        with torch.no_grad():
            try:
                y = m(x)[0]
            except Exception as exc:
                bad += 1
                print(f"DIFF activation {act!r}: sequence path raises {type(exc).__name__}: {exc}")
                continue
            report(f"activation {act!r}, sequence kernel", y, ours(m, x))
            # the step path: prefill T-1 tokens with a cache, then one token
            cache = x.new_zeros(B, D, W)
            _, cache = m(x[:, :-1], cache=cache, output_final_state=True)
            ys = m(x[:, -1:], cache=cache, output_final_state=True)[0]
            report(f"activation {act!r}, step after prefill", ys[:, -1], ours(m, x)[:, -1])
        if act in ("relu", "relu2"):
            xg = x.clone().requires_grad_(True)
            (m(xg)[0] * torch.linspace(-1, 1, x.numel()).view_as(x)).sum().backward()
            xr = x.clone().requires_grad_(True)
            (ours(m, xr) * torch.linspace(-1, 1, x.numel()).view_as(x)).sum().backward()
            report(f"activation {act!r}, dx", xg.grad, xr.grad)

    # ---- registered per-conv facts (the L2 norm) ---------------------------------------------
    for fact in conv_facts():
        params = [p for p, _ in fact.params]
        on_module = [p for p in params if p in ctor]
        if not on_module:
            print(f"n/a  conv fact {fact.name!r} ({', '.join(params)}): not a ShortConvolution argument in this branch")
            continue
        for D_, hd, eps in ((8, 4, 1e-5), (8, 8, 1e-3), (6, 3, 1e-5), (12, 6, 1e-5)):
            m = make(D_, W, activation="silu", norm="l2", norm_eps=eps)
            xx = torch.randn(B, T, D_, generator=gen)
            extras = (("head_dim", hd), ("norm", "l2"), ("norm_eps", eps))
            kw = {"head_dim": hd} if "head_dim" in fwd else {}
            with torch.no_grad():
                try:
                    y = m(xx, **kw)[0]
                except Exception as exc:
                    bad += 1
                    print(
                        f"DIFF norm l2 D={D_} head_dim={hd} eps={eps}: sequence path raises {type(exc).__name__}: {exc}"
                    )
                    continue
                report(f"norm l2 D={D_} head_dim={hd} eps={eps}, sequence kernel", y, ours(m, xx, extras))
                try:
                    out = m(xx, cache=xx.new_zeros(B, D_, W), output_final_state=True, **kw)
                    if out[1] is None:
                        bad += 1
                        print(f"DIFF norm l2 D={D_} head_dim={hd}: output_final_state=True returned no final state")
                    else:
                        ys = m(xx[:, -1:], cache=out[1], output_final_state=True, **kw)[0]
                        report(f"norm l2 D={D_} head_dim={hd} eps={eps}, step", ys[:, -1], ours(m, xx, extras)[:, -1])
                except Exception as exc:
                    bad += 1
                    print(f"DIFF norm l2 D={D_} head_dim={hd}: cache path raises {type(exc).__name__}: {exc}")

    # ---- the branch's fusion guard -------------------------------------------------------------
    guard = getattr(conv_mod, "can_fuse_qkv_short_conv", None)
    gdn = importlib.import_module("fla.layers.gated_deltanet").GatedDeltaNet
    method = getattr(gdn, "_use_fused_qkv_conv", None)
    if guard is None and method is None:
        print(
            "n/a  fusion guard: neither can_fuse_qkv_short_conv nor GatedDeltaNet._use_fused_qkv_conv exists in this "
            "branch (it predates PR #972's fused prologue); a rebase onto >= 0.6.0 must add the registered conditions"
        )
    elif guard is not None:
        from hypothesis import HealthCheck, find, settings

        from gdn_equiv.model.config import CallFacts
        from gdn_equiv.model.guard import decide
        from gdn_equiv.strategies import layer_facts

        plain = CallFacts(False, False, False)

        def branch_says(layer) -> bool:
            mods = []
            for c in layer.convs:
                e = dict(c.extras)
                kw = {k: e.get(k, d) for k, d in (("norm", None), ("norm_eps", 1e-5)) if k in ctor}
                m = SC(hidden_size=8, kernel_size=c.kernel_size, bias=c.has_bias, activation="silu", **kw)
                m.backend, m.activation = c.backend, c.activation
                if "head_dim" in e:
                    m.head_dim = e["head_dim"]
                mods.append(m)
            return bool(guard(*mods))

        def disagree(layer) -> bool:
            spec = decide(layer, plain)
            ours_conv = [c for c in spec.failed if c.id in ("G5", "G6", "G7") or c.fact is not None]
            return branch_says(layer) == bool(ours_conv)  # fuses although a conv condition fails, or v.v.

        strat = layer_facts(use_short_conv=True, dtypes=("float32",), devices=("cpu",), backends=("triton",))
        try:
            found = find(
                strat,
                disagree,
                settings=settings(max_examples=args.states, database=None, suppress_health_check=list(HealthCheck)),
            )
            print(f"DIFF fusion guard vs spec (conv conditions): shrunk {found}; spec: {decide(found, plain)}")
        except Exception as exc:
            print(f"ok   fusion guard vs spec on {args.states} states ({type(exc).__name__})")
    else:
        print(
            "info fusion guard: GatedDeltaNet._use_fused_qkv_conv (0.6.0's rule); compare with gdn-equiv's fla target"
        )
    print(f"{bad} disagreement(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
