"""The suite's properties as plain functions of one :class:`Example` (SPEC §5).

Tests wrap them in ``@given``; ``gdn-equiv check/fuzz`` runs them from the command line; ``repro``
replays one from JSON; the planted-defect tests run them on a target with a planted defect
(``get_target("gdn_equiv", defect=...)``). Every property runs on any target (``target=``). Each raises
:class:`~gdn_equiv.harness.compare.Mismatch` (an ``AssertionError``) with a report naming the two paths
and the example, or :class:`NotApplicable` when the example does not meet its premise.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.bad_input import names, prepare
from gdn_equiv.harness.cells import check_example_in_every_cell
from gdn_equiv.harness.compare import (
    Mismatch,
    Report,
    assert_equivalent,
    assert_tree_equivalent,
    compare,
    mismatch_kind,
)
from gdn_equiv.harness.conformance import NotAConvCall, check_layer_conv_call, close_to_torch, conv_call_of
from gdn_equiv.harness.diagnose import UNDIAGNOSED, diagnose_layer
from gdn_equiv.harness.ground_truth import check_forward as truth_forward
from gdn_equiv.harness.ground_truth import check_gradients as truth_gradients
from gdn_equiv.harness.ground_truth import check_update as truth_update
from gdn_equiv.harness.guard_oracle import difference, oracle
from gdn_equiv.harness.premise import NotApplicable
from gdn_equiv.model.backends import count_launches
from gdn_equiv.model.cache import Cache
from gdn_equiv.model.example import Example, Inputs, build_layer, fp64_twin, run_layer
from gdn_equiv.model.families import get_family
from gdn_equiv.model.guard import Condition, Decision, decide
from gdn_equiv.model.reference import ShortConv
from gdn_equiv.targets import UpstreamRefused, get_target, known_targets
from gdn_equiv.targets.fla_target import version_row
from gdn_equiv.targets.gdn_equiv_target import GdnEquivHandle

if TYPE_CHECKING:
    from gdn_equiv.harness.bad_input import BadCall
    from gdn_equiv.targets import Target

Tensor = torch.Tensor
CONV_PARAM_SUFFIXES = ("_conv1d.weight", "_conv1d.bias")


class ProductionPathFailed(Mismatch):
    """The separate path (what the layer runs where the guard refuses) failed where a P6 search forced
    the fused one: a finding about the layer or kernel, never a counterexample for the condition."""


@dataclass
class Outcome:
    """One forward (and backward) run: output, gradients by name, the cache written, the path."""

    y: Tensor | None
    error: BaseException | None
    grads: dict[str, Tensor | None]
    cache: Cache | None
    path: str | None
    launches: int
    #: launches of the single-step kernel among ``launches`` (``None``: the target does not tell)
    steps: int | None = None


TargetLike = Union["Target", str, None]


def _target(target: TargetLike) -> Target:
    if target is None or isinstance(target, str):
        return get_target(target or "gdn_equiv")
    return target


def run(handle: Any, inputs: Inputs, example: Example, prologue: str) -> Outcome:
    """Run the target's layer on a private copy of ``inputs`` with ``prologue``; backward with a seeded
    upstream gradient when the example asks for gradients."""
    x = inputs.x.detach().clone().requires_grad_(example.grad)
    private = dataclasses.replace(inputs, x=x)
    grads: dict[str, Tensor | None] = {}
    try:
        with torch.set_grad_enabled(example.grad):
            y, cache_out = handle.run(private, prologue)
            if example.grad:
                gen = torch.Generator().manual_seed(example.seed + 2)
                dy = torch.randn(y.shape, generator=gen).to(y.dtype).to(y.device)
                named = [("x", x), *handle.layer.named_parameters()]
                got = torch.autograd.grad(y, [t for _, t in named], dy, allow_unused=True)
                grads = dict(zip([n for n, _ in named], got, strict=True))
    except Exception as exc:  # a crash is an outcome the properties compare too
        return Outcome(None, exc, {}, None, handle.path_taken(), handle.launches(), _steps(handle))
    return Outcome(y.detach(), None, grads, cache_out, handle.path_taken(), handle.launches(), _steps(handle))


def _steps(handle: Any) -> int | None:
    steps = getattr(handle, "step_launches", None)
    return None if steps is None else steps()


def _expects_step(example: Example) -> bool | None:
    """SPEC §2: the separate path takes the single-step kernel when autograd is off and every sequence
    has exactly one new token. Read from the example alone (not from the layer's own rule); ``None``
    where a mask decides what a sequence is after unpadding."""
    if example.grad:
        return False
    if example.varlen == "none":
        return example.seq_len == 1
    if example.varlen == "cu_seqlens":
        return all(n == 1 for n in example.seq_lens)
    return None


def _raise_error(outcome: Outcome, path: str, example: Example, *, other: tuple[str, Outcome] | None = None) -> None:
    """A finding if ``outcome`` is an error; ``other`` (the path it was compared with, and its outcome)
    is said in the message, so a report shows whether that path ran, or raised something else."""
    if outcome.error is None:
        return
    also = ""
    if other is not None:
        name, theirs = other
        said = "ran" if theirs.error is None else f"raised {type(theirs.error).__name__}: {theirs.error}"
        also = f"\n{name} path {said}"
    raise Mismatch(
        f"{path} path raised {type(outcome.error).__name__}: {outcome.error}{also}\nExample: {example.short()}",
        Report("error", (path, other[0] if other is not None else "-"), False, 0, problem=str(outcome.error)),
    ) from outcome.error


def _setup(example: Example, device: str, target: TargetLike) -> tuple[Any, Inputs, Decision]:
    """The target's layer for ``example``, its inputs, and the spec's decision on them (``fuse`` is the
    target's own guard's answer for targets that give no :class:`Decision`)."""
    handle = _target(target).build(example, device)
    inputs = handle.inputs()
    if hasattr(handle, "decision"):
        return handle, inputs, handle.decision(inputs)
    facts = handle.call_facts(inputs)
    fuses, _ = handle.decide(facts)
    spec = decide(handle.layer_facts(), facts)
    return handle, inputs, spec if spec.fuse == fuses else Decision(fuses, () if fuses else spec.failed)


def _conv_leaf(path: str) -> bool:
    return path.endswith(CONV_PARAM_SUFFIXES)


def compare_caches(a: Cache | None, b: Cache | None, paths: tuple[str, str], context: str) -> None:
    """Bitwise equality of everything a call wrote into its cache (states, offsets, every slot)."""
    assert_tree_equivalent(a, b, name="cache", paths=paths, exact=True, context=context)


def _compare_grads(a: Outcome, b: Outcome, paths: tuple[str, str], context: str, *, conv_exact: bool) -> None:
    """Same tensors get gradients; conv weight/bias gradients within §6 unless ``conv_exact``."""
    exact = True if conv_exact else (lambda path: not _conv_leaf(path))
    assert_tree_equivalent(a.grads, b.grads, name="grad", paths=paths, exact=exact, context=context)


def check_path_taken(example: Example, *, device: str = "cpu", target: TargetLike = None) -> Decision:
    """P2: ``auto`` takes the fused path exactly when the guard fuses (in-house: one conv launch vs one
    per slot, counted through the backend registry; fla: conv-module calls); the forced paths are
    the ones asked for. For a target whose guard gives a :class:`Decision` (ours), that guard must also
    be the spec's: otherwise a guard that never fuses would pass P3/P4 vacuously (found by mutation
    testing of the installed suite, docs/mutation.md)."""
    handle, inputs, decision = _setup(example, device, target)
    if hasattr(handle, "decision"):
        _check_layer_facts(handle, example)
        spec = decide(handle.layer_facts(), handle.call_facts(inputs))
        if spec.fuse != decision.fuse:
            raise Mismatch(
                f"P1 guard = spec: the layer's guard says fuse={decision.fuse} ({decision}), the spec "
                f"fuse={spec.fuse} ({spec})\nExample: {example.short()}",
                Report("guard", ("layer", "spec"), False, 1, problem=f"{decision.fuse} != {spec.fuse}"),
            )
    short = example.config.use_short_conv
    expected = {"auto": ("fused" if decision.fuse else "separate") if short else "none"}
    expected["separate"] = "separate" if short else "none"
    step = _expects_step(example)
    for prologue, want in expected.items():
        outcome = run(handle, inputs, example, prologue)
        _raise_error(outcome, prologue, example)
        if outcome.path != want:
            raise Mismatch(
                f"P2 path taken: prologue={prologue!r} took {outcome.path} ({outcome.launches} conv launches or "
                f"calls), expected {want} (guard: {decision})\nExample: {example.short()}",
                Report("path", (prologue, "expected"), False, 1, problem=f"{outcome.path} != {want}"),
            )
        if outcome.path == "separate" and outcome.steps is not None and step is not None:
            want_steps = outcome.launches if step else 0
            if outcome.steps != want_steps:
                raise Mismatch(
                    f"P2 step kernel: prologue={prologue!r} made {outcome.steps} of {outcome.launches} separate conv "
                    f"launches with the step kernel, expected {want_steps} (the step kernel exactly when autograd is "
                    f"off and every sequence has one new token)\nExample: {example.short()}",
                    Report("path", (prologue, "expected"), False, 1, problem=f"{outcome.steps} != {want_steps} steps"),
                )
    if short:
        # a target whose layer keeps part of its decision out of reach of forcing says so (fla PR #977)
        forceable = getattr(handle, "forceable", None)
        want = "fused" if forceable is None or forceable(handle.call_facts(inputs)) else "separate"
        outcome = run(handle, inputs, example, "fused")
        if outcome.error is None and outcome.path != want:
            raise Mismatch(
                f"P2 path taken: prologue='fused' took {outcome.path}, expected {want}\nExample: {example.short()}",
                Report("path", ("fused", "expected"), False, 1, problem=f"{outcome.path} != {want}"),
            )
    return decision


def _check_layer_facts(handle: Any, example: Example) -> None:
    """What the guard and the spec decide from describes the layer as built, read here from the example
    and the conv modules themselves rather than through the layer's facts code: a facts reader that
    inverts a conv's bias, forgets the layer's flag or misreads a width would make guard and spec agree
    on another layer than the one that runs (found by mutation testing of the installed suite)."""
    facts = handle.layer_facts()
    seen: dict[str, Any] = {
        "use_short_conv": bool(example.config.use_short_conv),
        "conv_bias": bool(example.config.conv_bias),
    }
    told: dict[str, Any] = {"use_short_conv": facts.use_short_conv, "conv_bias": facts.conv_bias}
    # every conv module the layer holds (none without short convs), counted by type, not through convs()
    told["conv modules"] = len(facts.convs or ())
    seen["conv modules"] = sum(isinstance(m, ShortConv) for m in handle.layer.modules())
    if facts.use_short_conv:
        convs = list(handle.layer.convs())
        for name, fact, conv in zip(facts.names, facts.convs or (), convs, strict=False):
            bias = conv.bias
            module = {
                "has_bias": bias is not None,
                "kernel_size": int(conv.weight.shape[-1]),
                "activation": conv.activation,
                "backend": str(conv.backend),
                "weight_dtype": str(conv.weight.dtype).split(".")[-1],
                "bias_dtype": None if bias is None else str(bias.dtype).split(".")[-1],
                "device": str(conv.weight.device),
            }
            for key, value in module.items():
                seen[f"{name}.{key}"] = value
                told[f"{name}.{key}"] = getattr(fact, key)
    wrong = {k: (told[k], seen[k]) for k in seen if told[k] != seen[k]}
    if wrong:
        detail = ", ".join(f"{k}: facts say {t!r}, the layer has {v!r}" for k, (t, v) in wrong.items())
        raise Mismatch(
            f"P1 facts: the facts the guard decides from are not the layer's ({detail})\nExample: {example.short()}",
            Report("facts", ("layer_facts", "layer"), False, len(seen), len(wrong), problem=detail),
        )


def _fused_and_separate(example: Example, device: str, target: TargetLike) -> tuple[Outcome, Outcome, Decision]:
    """Both forced paths on one layer and one set of inputs, where the guard fuses."""
    handle, inputs, decision = _setup(example, device, target)
    if not decision.fuse:
        raise NotApplicable(f"guard does not fuse: {decision}")
    fused = run(handle, inputs, example, "fused")
    separate = run(handle, inputs, example, "separate")
    _raise_error(separate, "separate", example)
    _raise_error(fused, "fused", example)
    return fused, separate, decision


def check_forward_exact(example: Example, *, device: str = "cpu", target: TargetLike = None) -> Decision:
    """P3: where the guard fuses, fused and separate outputs are bitwise equal (NaNs by position).

    A mismatch is raised as its kind (:func:`_diagnosed`), its message ending in the diagnosis."""
    fused, separate, decision = _fused_and_separate(example, device, target)
    try:
        assert_equivalent(fused.y, separate.y, name="output", paths=("fused", "separate"), context=example.short())
    except Mismatch as exc:
        raise _diagnosed(exc, "P3", example, device, target) from None
    return decision


def check_gradients(example: Example, *, device: str = "cpu", target: TargetLike = None) -> Decision:
    """P4: same tensors get gradients; ``dx`` and non-conv gradients bitwise; conv ones within §6.

    A mismatch is raised as its kind (:func:`_diagnosed`), its message ending in the diagnosis."""
    if not example.grad:
        raise NotApplicable("gradients need grad=True")
    fused, separate, decision = _fused_and_separate(example, device, target)
    try:
        _compare_grads(fused, separate, ("fused", "separate"), example.short(), conv_exact=False)
    except Mismatch as exc:
        raise _diagnosed(exc, "P4", example, device, target) from None
    return decision


def _diagnosed(mismatch: Mismatch, prop: str, example: Example, device: str, target: TargetLike) -> Mismatch:
    """``mismatch`` as a :func:`~gdn_equiv.harness.compare.mismatch_kind` of its own, so that Hypothesis keeps and
    shrinks each kind apart (SPEC §10): the property, the tensor (``output``, ``grad.x``, a parameter's
    gradient) and, on the in-house target, the diagnosis of the conv backend re-run on this example's
    conv inputs (:mod:`gdn_equiv.harness.diagnose`: channel offset or count, within tolerance or past it, or the
    layer's fused path), whose verdict ends the message. The report is kept; ``.diagnosis`` holds the
    details. A diagnosis that fails says so and never hides the finding."""

    kind, line, diagnosis = f"{prop} {mismatch.report.name}", "", None
    try:
        handle = _target(target).build(example, device)
        diagnosis = diagnose_layer(
            getattr(handle, "layer", None),
            handle.inputs(),
            grad=example.grad,
            probe_grad=prop == "P4",
            seed=example.seed,
        )
    except Exception as exc:  # the finding stands whatever the diagnosis does
        kind, line = f"{kind}: {UNDIAGNOSED}", f"\nDiagnosis failed: {type(exc).__name__}: {exc}"
    if diagnosis is not None:
        kind += f": {diagnosis.kind_name}"
        line = f"\nDiagnosis ({diagnosis.backend!r} kernel re-run on the conv inputs): {diagnosis.verdict}"
    raised = mismatch_kind(kind)(f"{mismatch}{line}", mismatch.report)
    raised.diagnosis = diagnosis  # type: ignore[attr-defined]
    return raised


def reference_handle(example: Example, state: dict[str, Tensor], device: str) -> Any:
    """The family's reference layer (separate convs only) with ``state``, run like a target."""

    class _Reference(GdnEquivHandle):
        def run(self, inputs: Inputs, prologue: str = "auto") -> tuple[Tensor, Any]:
            cache = inputs.cache.clone() if inputs.cache is not None else None
            with count_launches() as launches:
                out, _, cache = self.layer(inputs.x, **(inputs.kwargs() | {"past_key_values": cache}))
            self._launches, self._path = launches.total(), "separate"
            return out, cache

    layer = build_layer(example, get_family(example.family).layer_cls, device)
    layer.load_state_dict(state, strict=True)
    return _Reference(example, layer, device)


def check_fallback_exact(example: Example, *, device: str = "cpu", target: TargetLike = None) -> Decision:
    """P5: where the guard refuses, ``auto`` is the unfused layer: output, gradients, cache, bitwise.

    The unfused layer is the family's reference layer for the in-house target; for an upstream target
    (fla) it is the target's own forced separate path, the only one bitwise comparable with its ``auto``
    (fla's kernels are another implementation than our reference). Refusing the input is agreement only
    when both raise :class:`InvalidArgument` for the same rule, and then the example compared nothing: not
    applicable, never a pass; any other error on either path, or two different errors, is a finding (SPEC
    §10: no crash counts as agreement)."""
    handle, inputs, decision = _setup(example, device, target)
    if decision.fuse:
        raise NotApplicable("guard fuses")
    if hasattr(handle, "decision"):
        reference, name = reference_handle(example, handle.state_dict(), device), "reference"
    else:
        reference, name = handle, "separate"
    auto = run(handle, inputs, example, "auto")
    ref = run(reference, inputs, example, "separate")
    if auto.error is not None or ref.error is not None:
        # the same rule: both InvalidArgument with the same first line (the rule and the value it names)
        refused = [str(e).partition("\n")[0] for e in (auto.error, ref.error) if isinstance(e, InvalidArgument)]
        if len(refused) == 2 and refused[0] == refused[1]:
            # both refuse the input alike: they agree, and nothing was compared (issue #49: a kernel refusing
            # every call passed P5 so); never a pass, and a failure where the example was built to meet P5
            raise NotApplicable(f"both paths refuse the input alike, nothing compared: {refused[0]}")
        _raise_error(auto, "auto", example, other=(name, ref))
        _raise_error(ref, name, example, other=("auto", auto))
    context = example.short()
    paths = ("auto", name)
    assert_equivalent(auto.y, ref.y, name="output", paths=paths, context=context)
    _compare_grads(auto, ref, paths, context, conv_exact=True)
    compare_caches(auto.cache, ref.cache, paths, context)
    return decision


def check_separate_path(example: Example, *, device: str = "cpu", target: TargetLike = None) -> Decision:
    """The separate path alone runs on ``example`` (:class:`ProductionPathFailed` if it raises): what a
    P6 search asks, in a fresh worker, when forcing fusion killed one, to tell which path did."""
    handle, inputs, decision = _setup(example, device, target)
    separate = run(handle, inputs, example, "separate")
    if separate.error is not None:
        raise ProductionPathFailed(
            f"the separate (production) path raised {type(separate.error).__name__}: {separate.error}\n"
            f"Example: {example.short()}",
            Report("error", ("separate", "-"), False, 0, problem=str(separate.error)),
        ) from separate.error
    return decision


def forced_fusion_error(example: Example, *, device: str = "cpu", target: TargetLike = None) -> str | None:
    """P6: what goes wrong when ``fused`` is forced where the guard says no (``None``: nothing).

    Wrong means a different output, a crash where the separate path works, different gradients, or
    a different cache (lost conv states).
    """
    handle, inputs, decision = _setup(example, device, target)
    if decision.fuse:
        raise NotApplicable("guard fuses")
    forced = run(handle, inputs, example, "fused")
    separate = run(handle, inputs, example, "separate")
    if separate.error is not None:  # the production path broke: a finding, never evidence of necessity
        raise ProductionPathFailed(
            f"P6: the separate (production) path raised {type(separate.error).__name__}: {separate.error} on a "
            f"state the guard refuses\nExample: {example.short()}",
            Report("error", ("separate", "-"), False, 0, problem=str(separate.error)),
        ) from separate.error
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


#: runs of each path :func:`run_to_run_difference` compares: two agreed by chance on a CI run (a jittered kernel
#: whose one-ulp changes an fp16 layer rounded away twice in a row), a third makes that a chance of its square
STABILITY_RUNS = 3


def run_to_run_difference(example: Example, *, device: str = "cpu", target: TargetLike = None) -> str | None:
    """Whether a P6 verdict on ``example`` is a fact of the code: each path (fused, then separate) run
    :data:`STABILITY_RUNS` times on the same inputs must give the same bits (output, gradients, cache) or the same
    error every time. ``None`` when both are stable; else which path differs from itself and where (a backend with
    run-to-run nondeterminism, e.g. atomics in a backward, whose comparison of the two paths one run cannot decide)."""
    handle, inputs, _ = _setup(example, device, target)
    for path in ("fused", "separate"):
        first = run(handle, inputs, example, path)
        for _ in range(STABILITY_RUNS - 1):
            again = run(handle, inputs, example, path)
            if (first.error is None) != (again.error is None):
                errors = [f"{type(o.error).__name__}" if o.error is not None else "no error" for o in (first, again)]
                return f"the {path} path raised in one run and not in the other ({errors[0]}, then {errors[1]})"
            if first.error is not None:
                continue
            paths = (path, f"{path} again")
            try:
                assert_tree_equivalent(first.y, again.y, name="output", paths=paths, exact=True)
                assert_tree_equivalent(first.grads, again.grads, name="grad", paths=paths, exact=True)
                compare_caches(first.cache, again.cache, paths, "")
            except Mismatch as exc:
                return f"the {path} path differs from itself run to run: " + str(exc).splitlines()[0]
    return None


def _cache_tensors(cache: Cache | None) -> dict[str, Tensor]:
    found: dict[str, Tensor] = {}
    for i, state in enumerate(cache.states if cache is not None else ()):
        if not isinstance(state, dict):
            continue
        for key, value in state.items():
            items = value if isinstance(value, (tuple, list)) else (value,)
            for j, t in enumerate(items):
                if isinstance(t, Tensor):
                    found[f"cache[{i}].{key}" + (f"[{j}]" if isinstance(value, (tuple, list)) else "")] = t
    return found


def _p8_failure(problem: str, paths: tuple[str, str], bad: BadCall) -> Mismatch:
    return Mismatch(f"P8: {problem}\n{bad.short()}", Report("bad-input", paths, False, 0, problem=problem))


def check_refuses_bad_input(bad: BadCall, *, device: str = "cpu") -> None:
    """P8: a call with one thing wrong (:mod:`gdn_equiv.harness.bad_input`) raises :class:`InvalidArgument`
    whose message names the argument and the offending value, and leaves everything the caller holds
    as it was: each tensor's values (bitwise), storage and version counter, and the cache's states."""
    prepared = prepare(bad, device)
    tracked = {**prepared.tracked, **_cache_tensors(prepared.cache)}
    before = {
        name: (None if t.is_meta else t.detach().clone(), t.data_ptr(), t._version) for name, t in tracked.items()
    }
    states = [] if prepared.cache is None else list(prepared.cache.states)
    contents = [dict(s) if isinstance(s, dict) else s for s in states]
    failure: tuple[str, tuple[str, str]] | None = None
    try:
        prepared.call()
    except InvalidArgument as exc:
        missing = [n for n in prepared.needles if not names(str(exc), n)]
        if missing:
            failure = (f"the refusal does not name {missing}: {exc}", ("refusal", "needles"))
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        problem = f"raised {type(exc).__name__} instead of InvalidArgument: {exc} (at {where.filename}:{where.lineno})"
        failure = (f"{bad.kind}: {problem}", ("raised", "InvalidArgument"))
    else:
        failure = (f"{bad.kind}: accepted, no InvalidArgument", ("accepted", "InvalidArgument"))
    if failure is not None:
        # raised outside the except block (no exception context): one failure however deep the wrong
        # exception came from, so Hypothesis shrinks one bug instead of one per raising line
        raise _p8_failure(*failure, bad)
    for name, t in tracked.items():
        value, ptr, version = before[name]
        if t.data_ptr() != ptr or t._version != version:
            problem = f"the refused call modified {name} in place (version {version} -> {t._version})"
            raise _p8_failure(problem, ("after", "before"), bad)
        if value is not None:
            assert_equivalent(
                t.detach(), value, name=name, paths=("after the refused call", "before"), context=bad.short()
            )
    after = [] if prepared.cache is None else list(prepared.cache.states)
    same = len(after) == len(states) and all(a is b for a, b in zip(after, states, strict=False))
    same = same and all(
        not isinstance(c, dict) or (isinstance(s, dict) and c.keys() == s.keys() and all(c[k] is s[k] for k in c))
        for c, s in zip(contents, after, strict=False)
    )
    if not same:
        raise _p8_failure("the refused call changed the cache's states", ("after", "before"), bad)


def cross_backend(example: Example, backend: str, *, device: str = "cpu") -> None:
    """P7 across backends: the layer on ``backend`` vs on ``torch``, within the §6 table; past it, each side's
    error against the fp64 layer decides, as at the conv (:func:`close_to_torch`). A layer amplifies a conv's
    last-bit difference (on the H100, causal-conv1d under LightNet at scale 1e4 in fp32: 1 of 84 outputs
    2.1e-5 relative from torch's); a backend further from the truth than torch still fails."""
    ex_b = _with_backend(example, backend)
    ex_t = _with_backend(example, "torch")
    handle_b, inputs, _ = _setup(ex_b, device, None)
    handle_t = _target(None).build(ex_t, device)
    handle_t.layer.load_state_dict(handle_b.state_dict(), strict=True)
    out_b = run(handle_b, inputs, example, "auto")
    out_t = run(handle_t, inputs, example, "auto")
    _raise_error(out_t, "torch", example)
    _raise_error(out_b, backend, example)

    def truth() -> Tensor:  # the fp64 layer, run only where the outputs differ past the table
        return run_layer(fp64_twin(handle_t.layer), inputs.in_fp64())[0]

    close_to_torch(out_b.y, out_t.y, "output", backend, example.short(), truth=truth)


def check_backend_matches_torch(example: Example, *, device: str = "cpu", target: TargetLike = None) -> Decision:
    """P7 across backends, as a property of one example: :func:`cross_backend` for the example's conv backend."""
    _, _, decision = _setup(example, device, target)
    cross_backend(example, example.config.conv_backend, device=device)
    return decision


def check_conv_conformance(example: Example, *, device: str = "cpu", target: TargetLike = None) -> Decision:
    """P7 at the conv, as a property of one example: every conformance check of the pytest suite
    (:mod:`gdn_equiv.harness.conformance`: forward and final state, gradients, the step kernel, continuation
    from a final state, decoding after a prefill, slot slices bitwise) on the conv call the example's
    fused prologue makes, on its conv backend against torch. Not applicable where the layer makes no
    such call (no short convs; a width or activation the backend does not run)."""
    _, _, decision = _setup(example, device, target)
    try:
        call, dims, impl = conv_call_of(example)
    except NotAConvCall as exc:
        raise NotApplicable(str(exc)) from None
    check_layer_conv_call(call, dims, impl, seed=example.seed, grad=example.grad, device=device)
    return decision


def check_conv_ground_truth(example: Example, *, device: str = "cpu", target: TargetLike = None) -> Decision:
    """P7 against the ground truth, as a property of one example: the conv call the example's fused
    prologue makes, on its conv backend (torch included), against an independently written fp64
    ``F.conv1d`` (:mod:`gdn_equiv.harness.ground_truth`), within the §6 table: forward and final state,
    gradients (``grad``) and the step kernel. The row that checks torch itself."""

    _, _, decision = _setup(example, device, target)
    try:
        call, _, impl = conv_call_of(example)
    except NotAConvCall as exc:
        raise NotApplicable(str(exc)) from None
    truth_forward(call, impl, device)
    if example.grad:
        truth_gradients(call, impl, device)
    truth_update(dataclasses.replace(call, seq_lens=(), B=max(call.B, 1), initial_state=True), impl, device)
    return decision


def check_conv_combinations(
    example: Example, *, device: str = "cpu", target: TargetLike = None, part: int | None = None, of: int = 1
) -> Decision:
    """P7 where regions meet, as a property of one example: the conv call the example's fused prologue
    makes, moved into every feasible cell of T against W x initial state x final state x packing x
    gradients (:func:`gdn_equiv.harness.cells.check_example_in_every_cell`), on its conv backend against torch
    within §6. A kernel wrong only at one such combination is reached by every example. Not applicable
    where the layer makes no such call. ``part`` of ``of``: that share of the cells (the gate's parts)."""
    _, _, decision = _setup(example, device, target)
    check_example_in_every_cell(example, device=device, part=part, of=of)
    return decision


def _with_backend(example: Example, backend: str) -> Example:
    from dataclasses import replace

    c = example.config
    convs = {
        f"{n}_conv": replace(c.conv_spec(n), backend=None) if c.conv_spec(n).backend else c.conv_spec(n)
        for n in c.SLOTS
    }
    return replace(example, config=c.replace(conv_backend=backend, **convs))


__all__ = [
    "Condition",
    "NotApplicable",
    "Outcome",
    "check_backend_matches_torch",
    "check_conv_combinations",
    "check_conv_conformance",
    "check_conv_ground_truth",
    "check_fallback_exact",
    "check_forward_exact",
    "check_gradients",
    "check_guard_matches_spec",
    "check_path_taken",
    "check_separate_path",
    "check_target_guard",
    "compare",
    "compare_caches",
    "cross_backend",
    "forced_fusion_error",
    "run",
]


# --- P1: the target's guard against the spec's decision table --------------------------------


class GuardVsSpec(Mismatch):
    """P1: a guard's decision differs from the spec's (:mod:`gdn_equiv.harness.guard_oracle`)."""


class UnsafeFusion(GuardVsSpec):
    """The guard fuses where the spec refuses: a wrong result or a crash waits on the fused path."""


class MissedFusion(GuardVsSpec):
    """The guard falls back where fusion is exact: a finding of its own kind (speed, not correctness), which
    the ledger reports as ``missed fusion`` so a team may let it pass, but never miss it."""


class WrongReasons(GuardVsSpec):
    """Guard and spec both refuse, for different conditions (reports count the guard's reasons)."""


def check_guard_matches_spec(
    example: Example,
    *,
    device: str = "cpu",
    target: TargetLike = None,
    tolerate_known: bool = False,
    allow_missed: bool = False,
) -> Decision | None:
    """P1 on a drawn state: the target's guard decides as the spec's decision table on the facts of the layer
    the target built for ``example`` (and, for a guard that gives them, for the same conditions).

    Ours is asked through the layer (its facts, its ``guard``); an upstream target's guard through
    :func:`check_target_guard` (no run), whose gap kinds name what a disagreement costs; kinds in
    the target's ``known_gaps`` for the family (fla: its version row's), with ``tolerate_known`` (the gate: its
    decision-table test reports them as strict xfails), return ``None`` instead of raising; so does a missed
    fusion with ``allow_missed`` (``--gdn-allow-missed-fusion``: the table test reports it). Raises
    :class:`UnsafeFusion`, :class:`MissedFusion` (an upstream gap is also one of these) or :class:`WrongReasons`."""
    t = _target(target)
    if t.name != "gdn_equiv":
        try:
            return check_target_guard(example, device=device, target=t.name, demonstrate=False, **_options(t))
        except UpstreamGap as gap:
            known = t.known_gaps(example.family) if tolerate_known and hasattr(t, "known_gaps") else ()
            if type(gap).__name__.removeprefix("Gap") in known or (allow_missed and isinstance(gap, MissedFusion)):
                return None  # a known gap, or an allowed missed fusion: the gate's table test reports it
            raise
        except UpstreamRefused as exc:
            raise NotApplicable(f"upstream refused the config: {exc}") from exc
    handle: Any = t.build(example, device)
    facts, call = handle.layer_facts(), example.call_facts()
    decision = handle.layer.decide(call)
    diff = difference(facts, call, decision.fuse, [c.id for c in decision.failed])
    if diff is None or (allow_missed and diff.direction == "missed"):
        return decision
    # a guard that errs strict (refuses here, or names a condition that holds) is a missed fusion, whichever state
    # shows it first; one that errs lax is unsafe (with reasons only: it misses a condition the spec fails)
    cls = MissedFusion if diff.direction == "missed" else UnsafeFusion if diff.kind == "unsafe" else WrongReasons
    report = Report("guard", ("guard", "spec"), False, 1, problem=f"{diff.kind}: {', '.join(diff.conditions)}")
    raise cls(f"P1 guard = spec: {diff.describe()}\nExample: {example.short()}", report)


def _options(t: Any) -> dict[str, Any]:
    return {"core": t.core} if hasattr(t, "core") else {}


def _spec_decision(failed: list[str], example: Example) -> Decision:
    return Decision(fuse=not failed, failed=tuple(Condition[c] for c in failed))


# --- upstream targets: their guard against the spec -----------------------------------------


class UpstreamGap(Mismatch):
    """A target's guard disagrees with the spec; subclasses name what that costs (and which way: an
    unsafe fusion or a missed one)."""


class GapBiasDropped(UpstreamGap, UnsafeFusion):
    """The guard fuses with the layer flag off while a conv has a bias: the fused path drops it."""


class GapMissingBias(UpstreamGap, UnsafeFusion):
    """The guard fuses where the fused path concatenates the convs' biases and one conv has none.

    Raised as predicted from the facts when the guards alone decide (no run), and when a run of the
    fused path did not raise the ``TypeError`` of concatenating a ``None`` (the message says what it
    did instead); :class:`GapMissingBiasCrash` when it did."""


class GapMissingBiasCrash(GapMissingBias):
    """:class:`GapMissingBias`, run: the fused path was seen to raise the ``TypeError`` of
    concatenating a missing bias."""


class GapOtherRefusal(UpstreamGap, UnsafeFusion):
    """The guard fuses where the spec refuses for another reason."""


class GapNeedlessFallback(UpstreamGap, MissedFusion):
    """The guard falls back where fusion is exact (incomplete; costs speed, not correctness)."""


class GapNoFusedPrologue(UpstreamGap, MissedFusion):
    """The target version has no fused prologue for this family at all (it never fuses; speed only)."""


def upstream_example_pins(target: str, **options: Any) -> dict[str, Any]:
    """The example-strategy arguments under which ``target``'s constructors accept what is drawn (fla:
    its version, see ``FlaTarget.example_pins``); ``{}`` for a target that asks nothing, or a name that
    is no registered target (a search's stand-in)."""
    if target not in known_targets():
        return {}
    pins = getattr(get_target(target, **options), "example_pins", None)
    return {} if pins is None else dict(pins())


def families_with_fusion(target: Any, families: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """The ``families`` whose layers on ``target`` (a name, or a target) have a fused prologue at all (an fla
    version's table row says which), and why none does when none does."""
    if (target if isinstance(target, str) else target.name) == "gdn_equiv":
        return families, None
    row = version_row()
    fusing = tuple(f for f in families if row.fuses(f))
    why = None if fusing else f"fla {row.version} has no fused prologue for {', '.join(families)}"
    return fusing, why


def check_target_guard(
    example: Example,
    *,
    device: str = "cpu",
    target: str = "fla",
    demonstrate: bool = True,
    **options: Any,
) -> Decision:
    """P1 on an upstream target: its own guard's answer vs the spec's, and the cost of a gap.

    Runs on CPU: a crash of the fused path is shown for real when it happens before any kernel
    (fla's ``torch.cat`` of a ``None`` bias); a dropped bias is shown by running both paths on a
    GPU and inferred from the facts on a CPU (the message says which). ``demonstrate=False`` decides
    the gap from the guards alone, running no layer: what a search does while it shrinks (on a GPU
    every shrink step would otherwise compile the target's kernels for a new shape); a missing bias
    is then :class:`GapMissingBias`, predicted, and only a run that raises the ``TypeError`` makes it
    :class:`GapMissingBiasCrash`. A constructor of the target's that refuses the example's config
    raises :class:`UpstreamRefused`.
    """

    handle: Any = get_target(target, **options).build(example, device)
    # deciding from the guards alone needs no inputs (a populated cache would run our layer to fill)
    inputs = handle.inputs() if demonstrate else None
    call = handle.call_facts(inputs) if inputs is not None else example.call_facts()
    facts = handle.layer_facts()
    # the spec's decision table (guard_oracle), never our guard: a wrong edit of ours cannot hide fla's gaps
    spec = _spec_decision(oracle(facts, call), example)
    fuses, _ = handle.decide(call)
    context = f"{example.short()}\nspec: {spec}"
    if fuses == spec.fuse:
        return spec
    report = Report("guard", (target, "spec"), False, 1, problem=f"{target} fuses={fuses}, spec fuses={spec.fuse}")
    if not fuses and "fused" not in getattr(handle, "prologues", ("fused",)):
        raise GapNoFusedPrologue(
            f"{target} has no fused prologue for {example.family!r} in this version: it runs the separate "
            f"convs where fusion is exact\nExample: {context}",
            report,
        )
    if not fuses:
        raise GapNeedlessFallback(f"{target}'s guard falls back where fusion is exact\nExample: {context}", report)
    if Condition.G8 in spec.failed and facts.convs is not None:
        pairs = zip(facts.names, facts.convs, strict=True)
        biases = ", ".join(f"{n}={'bias' if c.has_bias else 'none'}" for n, c in pairs)
        who = f"conv_bias={facts.conv_bias}, convs {biases}"
        gap = _bias_gap(handle, facts)
        if gap == "crash":
            _missing_bias(handle, inputs if demonstrate else None, target, who, device, context, report)
        if gap == "dropped":
            how = "inferred from the facts (the fused path concatenates no bias here)"
            if not demonstrate:
                how = "decided from the guards; not run"
            elif str(device).startswith("cuda"):
                how = _fused_vs_separate(handle, inputs, device)
            raise GapBiasDropped(
                f"{target} fuses with {who}: a bias is dropped ({how})\nExample: {context}",
                report,
            )
    how = "decided from the guards; not run"
    if demonstrate and str(device).startswith("cuda"):
        how = _fused_vs_separate(handle, inputs, device)
    raise GapOtherRefusal(f"{target} fuses where the spec refuses ({how})\nExample: {context}", report)


def _missing_bias(handle: Any, inputs: Any, target: str, who: str, device: str, context: str, report: Report) -> None:
    """Raise the missing-bias gap for what was seen: predicted (``inputs`` ``None``: no run), the crash
    (the fused path raised ``TypeError``), or what the run did instead (another error, or nothing)."""
    predicted = "the fused path would concatenate a missing bias (predicted from the facts; not run)"
    if inputs is None:
        raise GapMissingBias(f"{target} fuses with {who}: {predicted}\nExample: {context}", report)
    try:
        handle.run(inputs, "auto")
    except TypeError as exc:
        raise GapMissingBiasCrash(
            f"{target} fuses with {who}; its fused path concatenates the biases and raises "
            f"TypeError: {exc}\nExample: {context}",
            report,
        ) from exc
    except Exception as exc:
        raise GapMissingBias(
            f"{target} fuses with {who}; run on {device} it raised {type(exc).__name__}: {exc} (not the TypeError "
            f"of concatenating a missing bias)\nExample: {context}",
            report,
        ) from exc
    raise GapMissingBias(
        f"{target} fuses with {who}; run on {device} it raised nothing (path taken: {handle.path_taken()}): not a "
        f"crash, although the facts predicted one\nExample: {context}",
        report,
    )


def _bias_gap(handle: Any, facts: Any) -> str | None:
    """What the target's fused path does with these biases (``"crash"``, ``"dropped"`` or ``None``):
    the target's own rule where it has one (fla: by version), else PR #972's (the layer flag decides)."""
    if hasattr(handle, "bias_gap"):
        return handle.bias_gap()
    has = [c.has_bias for c in facts.convs]
    if facts.conv_bias and not all(has):
        return "crash"
    return "dropped" if not facts.conv_bias and any(has) else None


def _fused_vs_separate(handle: Any, inputs: Any, device: str) -> str:
    """What forcing the target's fused path costs on this example, in words: the largest output
    difference from its separate path (0 means the gap is harmless here), or the error it raises; an
    error the separate path raises too is the layer's, not the fusion's, and is said so."""
    runs: dict[str, Any] = {}
    for path in ("fused", "separate"):
        try:
            runs[path] = handle.run(inputs, path)[0]
        except Exception as exc:  # a crash is the demonstration
            runs[path] = exc
    fused, separate = runs["fused"], runs["separate"]
    if isinstance(fused, Exception) and isinstance(separate, Exception):
        return (
            f"run on {device}: both paths raise, so not the fusion's doing: fused {type(fused).__name__}: "
            f"{fused}; separate {type(separate).__name__}: {separate}"
        )
    if isinstance(fused, Exception):
        return f"run on {device}: {type(fused).__name__}: {fused}"
    if isinstance(separate, Exception):
        return f"run on {device}: only the separate path raises: {type(separate).__name__}: {separate}"
    if fused.dtype != separate.dtype:
        return f"run on {device}: fused output is {fused.dtype}, separate {separate.dtype}"
    diff = compare(fused, separate, name="output", paths=("fused", "separate"))
    return f"run on {device}: fused vs separate differ by up to {diff.max_abs:.3g}"
