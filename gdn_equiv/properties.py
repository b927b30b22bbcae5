"""The suite's properties as plain functions of one :class:`Example` (SPEC §5).

Tests wrap them in ``@given``; ``gdn-equiv check/fuzz`` runs them from the command line; ``repro``
replays one from JSON; the planted-defect tests run them against broken layer classes. Each raises
:class:`~gdn_equiv.compare.Mismatch` (an ``AssertionError``) with a report naming the two paths
and the example, or :class:`NotApplicable` when the example does not meet its premise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch

from gdn_equiv.backends import LaunchCounter, count_launches
from gdn_equiv.cache import Cache
from gdn_equiv.compare import Mismatch, Report, assert_equivalent, compare
from gdn_equiv.config import CallFacts
from gdn_equiv.example import Example, Inputs, build_layer, materialize
from gdn_equiv.fused import FusedGatedDeltaNet
from gdn_equiv.guard import Condition, Decision
from gdn_equiv.reference import GatedDeltaNet

Tensor = torch.Tensor
CONV_PARAM_SUFFIXES = ("_conv1d.weight", "_conv1d.bias")


class NotApplicable(Exception):
    """The example does not meet the property's premise (e.g. P3 on a state the guard refuses)."""


@dataclass
class Outcome:
    """One forward (and backward) run: output, gradients by name, the cache written, launches."""

    y: Tensor | None
    error: BaseException | None
    grads: dict[str, Tensor | None]
    cache: Cache | None
    launches: LaunchCounter


def decision_of(layer: FusedGatedDeltaNet, inputs: Inputs) -> Decision:
    facts: CallFacts = layer.call_facts(
        inputs.x, inputs.attention_mask, inputs.cache, inputs.use_cache, inputs.cu_seqlens
    )
    return layer.decide(facts)


def run(layer: torch.nn.Module, inputs: Inputs, example: Example, prologue: str | None) -> Outcome:
    """Run ``layer`` on a private copy of ``inputs``; backward with a seeded upstream gradient."""
    cache = None if inputs.cache is None else inputs.cache.clone()
    x = inputs.x.detach().clone().requires_grad_(example.grad)
    kwargs = dataclasses.replace(inputs, cache=cache).kwargs()
    if prologue is not None:
        kwargs["prologue"] = prologue
    grads: dict[str, Tensor | None] = {}
    with count_launches() as launches:
        try:
            with torch.set_grad_enabled(example.grad):
                y, _, cache_out = layer(x, **kwargs)
                if example.grad:
                    gen = torch.Generator().manual_seed(example.seed + 2)
                    dy = torch.randn(y.shape, generator=gen).to(y.dtype).to(y.device)
                    names = ["x", *(n for n, _ in layer.named_parameters())]
                    tensors = [x, *(p for _, p in layer.named_parameters())]
                    got = torch.autograd.grad(y, tensors, dy, allow_unused=True)
                    grads = dict(zip(names, got, strict=True))
        except Exception as exc:  # a crash is an outcome the properties compare too
            return Outcome(None, exc, {}, None, launches)
    return Outcome(y.detach(), None, grads, cache_out, launches)


def _raise_error(outcome: Outcome, path: str, example: Example) -> None:
    if outcome.error is not None:
        raise Mismatch(
            f"{path} path raised {type(outcome.error).__name__}: {outcome.error}\nExample: {example.short()}",
            Report("error", (path, "-"), False, 0, problem=str(outcome.error)),
        ) from outcome.error


def _setup(example: Example, device: str, layer_cls: type | None) -> tuple[FusedGatedDeltaNet, Inputs, Decision]:
    layer = cast(FusedGatedDeltaNet, build_layer(example, layer_cls or FusedGatedDeltaNet, device))
    inputs = materialize(example, layer, device)
    return layer, inputs, decision_of(layer, inputs)


def compare_caches(a: Cache | None, b: Cache | None, paths: tuple[str, str], context: str) -> None:
    """Bitwise equality of everything a call wrote into its cache."""
    if (a is None) != (b is None):
        raise Mismatch(
            f"cache: one path returned none ({paths})\nExample: {context}",
            Report("cache", paths, False, 0, problem="cache missing"),
        )
    if a is None or b is None:
        return
    if len(a) != len(b):
        raise Mismatch(
            f"cache: {len(a)} vs {len(b)} layers ({paths})\nExample: {context}",
            Report("cache", paths, False, 0, problem="layer count"),
        )
    for i, (sa, sb) in enumerate(zip(a.states, b.states, strict=True)):
        if (sa is None) != (sb is None):
            raise Mismatch(
                f"cache layer {i}: state written by one path only ({paths})\nExample: {context}",
                Report("cache", paths, False, 0, problem="state presence"),
            )
        if sa is None or sb is None:
            continue
        if sa["offset"] != sb["offset"]:
            raise Mismatch(
                f"cache offset {sa['offset']} vs {sb['offset']} ({paths})\nExample: {context}",
                Report("cache.offset", paths, False, 1, problem="offset"),
            )
        assert_equivalent(
            sa["recurrent_state"], sb["recurrent_state"], name="cache.recurrent_state", paths=paths, context=context
        )
        ca, cb = sa["conv_state"], sb["conv_state"]
        if (ca is None) != (cb is None):
            raise Mismatch(
                f"cache conv_state written by one path only ({paths})\nExample: {context}",
                Report("cache.conv_state", paths, False, 0, problem="conv_state presence"),
            )
        if ca is not None and cb is not None:
            for name, ta, tb in zip("qkv", ca, cb, strict=True):
                assert_equivalent(ta, tb, name=f"cache.conv_state.{name}", paths=paths, context=context)


def check_path_taken(example: Example, *, device: str = "cpu", layer_cls: type | None = None) -> Decision:
    """P2: ``auto`` launches one conv when the guard fuses, three when not; the forced paths 1 and 3."""
    layer, inputs, decision = _setup(example, device, layer_cls)
    convs = 3 if example.config.use_short_conv else 0
    for prologue, expected in (("auto", 1 if decision.fuse else convs), ("separate", convs)):
        outcome = run(layer, inputs, example, prologue)
        _raise_error(outcome, prologue, example)
        got = outcome.launches.total()
        if got != expected:
            raise Mismatch(
                f"P2 path taken: prologue={prologue!r} made {got} conv launches, expected {expected} "
                f"(guard: {decision})\nLaunches: {outcome.launches}\nExample: {example.short()}",
                Report("launches", (prologue, "expected"), False, 1, problem=f"{got} != {expected}"),
            )
    if example.config.use_short_conv:
        outcome = run(layer, inputs, example, "fused")
        if outcome.error is None and outcome.launches.total() != 1:
            raise Mismatch(
                f"P2 path taken: prologue='fused' made {outcome.launches.total()} conv launches, expected 1\n"
                f"Example: {example.short()}",
                Report("launches", ("fused", "expected"), False, 1, problem="fused launches"),
            )
    return decision


def _compare_grads(a: Outcome, b: Outcome, paths: tuple[str, str], context: str, *, conv_exact: bool) -> None:
    if set(a.grads) != set(b.grads):
        raise Mismatch(
            f"gradients for different tensors: {sorted(a.grads)} vs {sorted(b.grads)}\nExample: {context}",
            Report("grads", paths, False, 0, problem="names"),
        )
    for name in a.grads:
        ga, gb = a.grads[name], b.grads[name]
        if (ga is None) != (gb is None):
            raise Mismatch(
                f"P4: {name} gets a gradient on the {paths[0] if ga is not None else paths[1]} path only\n"
                f"Example: {context}",
                Report(f"grad.{name}", paths, False, 0, problem="gradient presence"),
            )
        exact = conv_exact or not name.endswith(CONV_PARAM_SUFFIXES)
        assert_equivalent(ga, gb, name=f"grad.{name}", paths=paths, exact=exact, context=context)


def _fused_and_separate(example: Example, device: str, layer_cls: type | None) -> tuple[Outcome, Outcome, Decision]:
    """Both forced paths on one layer and one set of inputs, where the guard fuses."""
    layer, inputs, decision = _setup(example, device, layer_cls)
    if not decision.fuse:
        raise NotApplicable(f"guard does not fuse: {decision}")
    fused = run(layer, inputs, example, "fused")
    separate = run(layer, inputs, example, "separate")
    _raise_error(separate, "separate", example)
    _raise_error(fused, "fused", example)
    return fused, separate, decision


def check_forward_exact(example: Example, *, device: str = "cpu", layer_cls: type | None = None) -> Decision:
    """P3: where the guard fuses, fused and separate outputs are bitwise equal (NaNs by position)."""
    fused, separate, decision = _fused_and_separate(example, device, layer_cls)
    assert_equivalent(fused.y, separate.y, name="output", paths=("fused", "separate"), context=example.short())
    return decision


def check_gradients(example: Example, *, device: str = "cpu", layer_cls: type | None = None) -> Decision:
    """P4: same tensors get gradients; ``dx`` and non-conv gradients bitwise; conv ones within §6."""
    if not example.grad:
        raise NotApplicable("gradients need grad=True")
    fused, separate, decision = _fused_and_separate(example, device, layer_cls)
    _compare_grads(fused, separate, ("fused", "separate"), example.short(), conv_exact=False)
    return decision


def check_fallback_exact(example: Example, *, device: str = "cpu", layer_cls: type | None = None) -> Decision:
    """P5: where the guard refuses, ``auto`` is the reference layer: output, gradients, cache, bitwise."""
    layer, inputs, decision = _setup(example, device, layer_cls)
    if decision.fuse:
        raise NotApplicable("guard fuses")
    reference = build_layer(example, GatedDeltaNet, device)
    reference.load_state_dict(layer.state_dict(), strict=True)
    auto = run(layer, inputs, example, "auto")
    ref = run(reference, inputs, example, None)
    if (auto.error is None) != (ref.error is None):
        _raise_error(auto, "auto", example)
        _raise_error(ref, "reference", example)
    if auto.error is not None:
        return decision  # both refuse the input alike
    context = example.short()
    paths = ("auto", "reference")
    assert_equivalent(auto.y, ref.y, name="output", paths=paths, context=context)
    _compare_grads(auto, ref, paths, context, conv_exact=True)
    compare_caches(auto.cache, ref.cache, paths, context)
    return decision


def forced_fusion_error(example: Example, *, device: str = "cpu", layer_cls: type | None = None) -> str | None:
    """P6: what goes wrong when ``fused`` is forced where the guard says no (``None``: nothing).

    Wrong means a different output, a crash where the separate path works, different gradients, or
    a different cache (lost conv states).
    """
    layer, inputs, decision = _setup(example, device, layer_cls)
    if decision.fuse:
        raise NotApplicable("guard fuses")
    forced = run(layer, inputs, example, "fused")
    separate = run(layer, inputs, example, "separate")
    if separate.error is not None:
        raise NotApplicable(f"separate path raises too: {separate.error!r}")
    if forced.error is not None:
        return f"crash: {type(forced.error).__name__}: {forced.error}"
    checks: list[Callable[[], Any]] = [
        lambda: assert_equivalent(forced.y, separate.y, name="output", paths=("fused", "separate")),
        lambda: _compare_grads(forced, separate, ("fused", "separate"), "", conv_exact=False),
        lambda: compare_caches(forced.cache, separate.cache, ("fused", "separate"), ""),
    ]
    for check in checks:
        try:
            check()
        except Mismatch as exc:
            return str(exc).splitlines()[0] + " / " + " ".join(str(exc).splitlines()[1:2])
    return None


def cross_backend(example: Example, backend: str, *, device: str = "cpu") -> Report:
    """P7 across backends: the layer on ``backend`` vs on ``torch``, within the §6 table."""
    ex_b = _with_backend(example, backend)
    ex_t = _with_backend(example, "torch")
    layer_b, inputs, _ = _setup(ex_b, device, None)
    layer_t = build_layer(ex_t, FusedGatedDeltaNet, device)
    layer_t.load_state_dict(layer_b.state_dict(), strict=True)
    out_b = run(layer_b, inputs, example, "auto")
    out_t = run(layer_t, inputs, example, "auto")
    _raise_error(out_t, "torch", example)
    _raise_error(out_b, backend, example)
    return assert_equivalent(
        out_b.y, out_t.y, name="output", paths=(backend, "torch"), exact=False, context=example.short()
    )


def check_backend_matches_torch(example: Example, *, device: str = "cpu", layer_cls: type | None = None) -> Decision:
    """P7 across backends, as a property of one example: :func:`cross_backend` for the example's conv backend."""
    _, _, decision = _setup(example, device, layer_cls)
    cross_backend(example, example.config.conv_backend, device=device)
    return decision


def _with_backend(example: Example, backend: str) -> Example:
    from dataclasses import replace

    c = example.config
    convs = {
        f"{n}_conv": replace(c.conv_spec(n), backend=None) if c.conv_spec(n).backend else c.conv_spec(n) for n in "qkv"
    }
    return replace(example, config=c.replace(conv_backend=backend, **convs))


#: name -> (property, premise description) for the command line.
PROPERTIES: dict[str, Callable[..., Any]] = {
    "P2-path-taken": check_path_taken,
    "P3-forward-exact": check_forward_exact,
    "P4-gradients": check_gradients,
    "P5-fallback-exact": check_fallback_exact,
    "P7-backend-vs-torch": check_backend_matches_torch,
}

__all__ = [
    "PROPERTIES",
    "Condition",
    "NotApplicable",
    "Outcome",
    "check_backend_matches_torch",
    "check_fallback_exact",
    "check_forward_exact",
    "check_gradients",
    "check_path_taken",
    "check_target_guard",
    "compare",
    "compare_caches",
    "cross_backend",
    "forced_fusion_error",
    "run",
]


# --- upstream targets: their guard against the spec -----------------------------------------


class UpstreamGap(Mismatch):
    """A target's guard disagrees with the spec; subclasses name what that costs."""


class GapBiasDropped(UpstreamGap):
    """The guard fuses with the layer flag off while a conv has a bias: the fused path drops it."""


class GapMissingBiasCrash(UpstreamGap):
    """The guard fuses with the layer flag on while a conv has no bias: the fused path raises."""


class GapOtherRefusal(UpstreamGap):
    """The guard fuses where the spec refuses for another reason."""


class GapNeedlessFallback(UpstreamGap):
    """The guard falls back where fusion is exact (incomplete; costs speed, not correctness)."""


def check_target_guard(
    example: Example,
    *,
    device: str = "cpu",
    layer_cls: type | None = None,
    target: str = "fla",
    demonstrate: bool = True,
    **options: Any,
) -> Decision:
    """P1 on an upstream target: its own guard's answer vs the spec's, and the cost of a gap.

    Runs on CPU: a crash of the fused path is shown for real when it happens before any kernel
    (fla's ``torch.cat`` of a ``None`` bias); a dropped bias is shown by running both paths on a
    GPU and inferred from the facts on a CPU (the message says which). ``demonstrate=False`` decides
    the gap from the guards alone, running no layer: what a search does while it shrinks (on a GPU
    every shrink step would otherwise compile the target's kernels for a new shape).
    """
    from gdn_equiv.guard import decide
    from gdn_equiv.targets import get_target

    handle: Any = get_target(target, **options).build(example, device)
    inputs = handle.inputs()
    call = handle.reference.call_facts(
        inputs.x, inputs.attention_mask, inputs.cache, inputs.use_cache, inputs.cu_seqlens
    )
    facts = handle.layer_facts()
    spec = decide(facts, call)
    fuses, _ = handle.decide(call)
    context = f"{example.short()}\nspec: {spec}"
    if fuses == spec.fuse:
        return spec
    report = Report("guard", (target, "spec"), False, 1, problem=f"{target} fuses={fuses}, spec fuses={spec.fuse}")
    if not fuses:
        raise GapNeedlessFallback(f"{target}'s guard falls back where fusion is exact\nExample: {context}", report)
    if Condition.G8 in spec.failed and facts.convs is not None:
        has = [c.has_bias for c in facts.convs]
        if facts.conv_bias and not all(has):
            try:
                if demonstrate:
                    handle.run(inputs, "auto")
            except TypeError as exc:
                raise GapMissingBiasCrash(
                    f"{target} fuses with conv_bias=True and a conv without bias; its fused path raises "
                    f"TypeError: {exc}\nExample: {context}",
                    report,
                ) from exc
            except Exception:  # the kernel itself cannot run here; the facts already show the gap
                pass
            raise GapMissingBiasCrash(
                f"{target} fuses with conv_bias=True and a conv without bias\nExample: {context}", report
            )
        if not facts.conv_bias and any(has):
            how = "inferred from the facts (the fused path concatenates no bias when the flag is off)"
            if not demonstrate:
                how = "decided from the guards; not run"
            elif str(device).startswith("cuda"):
                how = _fused_vs_separate(handle, inputs, device)
            raise GapBiasDropped(
                f"{target} fuses with conv_bias=False and a conv with a bias: the bias is dropped ({how})"
                f"\nExample: {context}",
                report,
            )
    how = "decided from the guards; not run"
    if demonstrate and str(device).startswith("cuda"):
        how = _fused_vs_separate(handle, inputs, device)
    raise GapOtherRefusal(f"{target} fuses where the spec refuses ({how})\nExample: {context}", report)


def _fused_vs_separate(handle: Any, inputs: Any, device: str) -> str:
    """What forcing the target's fused path costs on this example, in words: the largest output
    difference from its separate path (0 means the gap is harmless here), or the error it raises."""
    try:
        fused, _ = handle.run(inputs, "fused")
        separate, _ = handle.run(inputs, "separate")
    except Exception as exc:  # a crash is the demonstration
        return f"run on {device}: {type(exc).__name__}: {exc}"
    if fused.dtype != separate.dtype:
        return f"run on {device}: fused output is {fused.dtype}, separate {separate.dtype}"
    diff = compare(fused, separate, name="output", paths=("fused", "separate"))
    return f"run on {device}: fused vs separate differ by up to {diff.max_abs:.3g}"
