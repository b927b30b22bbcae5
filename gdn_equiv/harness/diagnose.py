"""Why the fused and separate prologues differ: the conv backend re-run on one example's conv inputs.

The fused prologue is exact only because a depthwise kernel computes each channel from that channel
alone: where its channels sit in the call (the offset) and how many channels share the call (the
count) must not change a bit. When P3 or P4 find the fused and separate paths of the in-house layer
apart, :func:`diagnose` re-runs the backend through the registry on the failing example's conv inputs
and says which promise broke:

- each slot's channels alone (what the separate path computes; at T = 1 without autograd the separate
  path runs the step kernel, and so does the diagnosis);
- the same channels where the fused call had them (its offset, inside the full width);
- the same channels first (offset 0) in a call as wide, and in calls of every width in between,
  the other channels filled with the example's other channels.

Verdicts: "depends on channel offset" (the slot first in a call as wide equals the slot alone, at its
own offset it does not), "depends on channel count" (even first, a wider call changes it; the
smallest width found is named), both, "the step kernel differs" (the full and the step kernel
disagree on the same channels alone), or "the kernel is offset- and count-independent: a real
difference in the layer's fused path". Each kernel verdict says whether the difference stays within
the dtype's tolerance (§6; a rounding difference) or goes past it (wrong values).

The comparisons here use :func:`gdn_equiv.harness.compare.compare`, never the asserting functions, so a
diagnosis adds nothing to what ``gdn-equiv check`` observes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness.compare import compare, tolerance
from gdn_equiv.model.backends import causal_conv1d, causal_conv1d_update

Tensor = torch.Tensor

#: Diagnosis kinds (coarse on purpose: they become part of a mismatch's identity, see
#: :func:`gdn_equiv.harness.compare.mismatch_kind`).
OFFSET = "channel offset"
COUNT = "channel count"
OFFSET_AND_COUNT = "channel offset and count"
STEP = "step kernel"
FUSED_PATH = "fused path"
UNDIAGNOSED = "undiagnosed"
INDEPENDENT = "the kernel is offset- and count-independent: a real difference in the layer's fused path"

#: Most call widths the count probe tries one by one (beyond it, a coarse pass first).
_MAX_WIDTH_PROBES = 24


@dataclass(frozen=True)
class Difference:
    """One probe against its reference, restricted to the slot's channels."""

    tensors: tuple[str, ...]  # which of y, dx, dweight, dbias differ
    channels: tuple[int, ...]  # slot-local channels that differ in any of them
    max_abs: float
    within_tolerance: bool  # every difference is within the dtype's §6 tolerance

    def describe(self, start: int = 0) -> str:
        where = _channels_named([start + c for c in self.channels])
        tol = "within" if self.within_tolerance else "past"
        verb = "differ" if len(self.tensors) > 1 else "differs"
        return f"{'/'.join(self.tensors)} {verb} at {where}, by up to {self.max_abs:.3g} ({tol} tolerance)"


@dataclass(frozen=True)
class SlotFinding:
    """What the probes found for one slot (``start``: its first channel in the fused call)."""

    name: str
    start: int
    size: int
    fused: Difference | None = None  # fused slice vs what the separate path computed (None: bitwise)
    offset: Difference | None = None  # fused slice vs the slot first in a call as wide
    count: Difference | None = None  # the slot first in a call as wide vs the slot alone
    first_width: int | None = None  # smallest call width found where the slot, first, differs
    step: Difference | None = None  # full kernel alone vs step kernel alone

    @property
    def channels(self) -> str:
        return _channels_named(range(self.start, self.start + self.size))


@dataclass(frozen=True)
class Diagnosis:
    """The verdict (one line for a failure message), its coarse ``kind`` and the per-slot findings."""

    kind: str
    verdict: str
    details: tuple[str, ...]
    slots: tuple[SlotFinding, ...] = ()
    within_tolerance: bool | None = None  # kernel verdicts: whether the fused slices stay within §6
    backend: str = ""

    @property
    def kind_name(self) -> str:
        """``kind`` with the severity for kernel verdicts (``"channel offset, within tolerance"``)."""
        if self.within_tolerance is None:
            return self.kind
        return f"{self.kind}, {'within' if self.within_tolerance else 'beyond'} tolerance"


def diagnose(
    backend: str,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str | None,
    sizes: Sequence[int],
    *,
    names: Sequence[str] | None = None,
    grad: bool = False,
    step: bool = False,
    seed: int = 0,
) -> Diagnosis:
    """Re-run ``backend`` on the fused call ``x [B, T, sum(sizes)]``, ``weight [D, W]``, ``bias [D]`` and
    on each slot (``sizes``, in order) alone, at other offsets and at other widths; say which it is.

    ``grad``: also compare ``dx`` (bitwise) and ``dweight``/``dbias`` (within §6, as P4 does) for a
    seeded upstream gradient. ``step``: the separate path ran the single-step ``update`` (T = 1, autograd
    off), so each slot alone runs it too. Nothing is modified; calls go through the registry.
    """
    D = x.shape[-1]
    if sum(sizes) != D or any(n < 1 for n in sizes):
        raise InvalidArgument(f"slot sizes {tuple(sizes)} must be positive and add up to x's {D} channels")
    names = tuple(names) if names is not None else tuple(f"slot {i}" for i in range(len(sizes)))
    if step and x.shape[1] != 1:
        raise InvalidArgument(f"step=True needs one token per sequence (T = 1), got T = {x.shape[1]}")
    probe = _Prober(backend, x, weight, bias, activation, grad and not step, seed)
    fused = probe.call(x, weight, bias, probe.dy)
    findings = []
    start = 0
    for name, n in zip(names, sizes, strict=True):
        findings.append(_probe_slot(probe, fused, name, start, n, step))
        start += n
    return dataclasses.replace(_verdict(tuple(findings), D, x.dtype), backend=backend)


def _probe_slot(probe: _Prober, fused: dict[str, Tensor], name: str, start: int, n: int, step: bool) -> SlotFinding:
    s = slice(start, start + n)
    alone = probe.call(probe.x[..., s], probe.weight[s], _part(probe.bias, s), probe.dy[..., s])
    in_fused = _slot(fused, start, n)
    separate = probe.step(s) if step else alone
    found = SlotFinding(name, start, n, fused=probe.differ(in_fused, separate))
    if found.fused is None:
        return found
    step_diff = probe.differ(alone, separate) if step else None
    if probe.differ(in_fused, alone) is None:
        return SlotFinding(name, start, n, fused=found.fused, step=step_diff)
    D = probe.x.shape[-1]
    first = _slot(probe.call(*probe.placed(start, n, 0, D)), 0, n)
    offset = probe.differ(in_fused, first)
    count = probe.differ(first, alone)
    width = _first_differing_width(probe, start, n, alone, D) if count is not None else None
    return SlotFinding(name, start, n, found.fused, offset, count, width, step_diff)


def _first_differing_width(probe: _Prober, start: int, n: int, alone: dict[str, Tensor], hi: int) -> int:
    """The smallest width in ``(n, hi]`` where the slot, first in the call, differs from it alone
    (``hi`` is known to): one by one, or a coarse pass first when there are many widths."""

    def differs(width: int) -> bool:
        return probe.differ(_slot(probe.call(*probe.placed(start, n, 0, width)), 0, n), alone) is not None

    lo, step = n, max(1, -(-(hi - n) // _MAX_WIDTH_PROBES))
    if step > 1:
        for width in range(n + step, hi, step):
            if differs(width):
                hi = width
                break
            lo = width
    for width in range(lo + 1, hi):
        if differs(width):
            return width
    return hi


def _verdict(slots: tuple[SlotFinding, ...], D: int, dtype: torch.dtype) -> Diagnosis:
    details = tuple(_detail(f, D) for f in slots)
    bad = [f for f in slots if f.fused is not None]
    if not bad:
        return Diagnosis(FUSED_PATH, INDEPENDENT, details, slots)
    within = all(f.fused is not None and f.fused.within_tolerance for f in bad)
    offset = [f for f in bad if f.offset is not None]
    count = [f for f in bad if f.count is not None]
    steps = [f for f in bad if f.step is not None]
    parts = []
    if offset:
        f = offset[0]
        assert f.offset is not None
        channels = [f.start + c for c in f.offset.channels]
        verb = "differs when it sits" if len(channels) == 1 else "differ when they sit"
        parts.append(
            f"{_channels_named(channels)} {verb} at offset {f.start}"
            + ("" if f.count else f" (first in a call of {D} channels, {f.name} is bitwise {f.name} alone)")
        )
    if count:
        widths = [f.first_width for f in count if f.first_width is not None]
        parts.append(f"differs once a call has more than {min(widths) - 1} channels")
    if offset or count:
        kind = OFFSET_AND_COUNT if offset and count else OFFSET if offset else COUNT
        head = {OFFSET: "depends on channel offset", COUNT: "depends on channel count"}.get(
            kind, "depends on channel offset and on channel count"
        )
        verdict = f"{head}: {'; '.join(parts)}"
    else:  # a fused slice equal to the slot alone differs from the separate path: only the step kernel does that
        f = steps[0]
        assert f.step is not None
        kind = STEP
        verdict = (
            f"the step kernel (update) and the full-sequence kernel differ on {f.name} alone "
            f"({_channels_named([f.start + c for c in f.step.channels])}; the separate path ran the step kernel "
            "at T = 1): not a channel offset or count effect"
        )
    name = str(dtype).removeprefix("torch.")
    severity = f"within the {name} tolerance (a rounding difference)" if within else f"past the {name} tolerance"
    worst = max(f.fused.max_abs for f in bad if f.fused is not None)
    return Diagnosis(kind, f"{verdict}; up to {worst:.3g}, {severity}", details, slots, within)


def _detail(f: SlotFinding, D: int) -> str:
    head = f"{f.name} ({f.channels} of {D})"
    if f.fused is None:
        return f"{head}: fused slice bitwise what the separate path computes"
    lines = [f"fused slice vs separate: {f.fused.describe(f.start)}"]
    if f.step is not None:
        lines.append(f"full vs step kernel alone: {f.step.describe(f.start)}")
    if f.offset is not None:
        lines.append(f"at offset {f.start} vs first in a call of {D} channels: {f.offset.describe(f.start)}")
    elif f.count is not None:
        lines.append(f"at offset {f.start} bitwise what it is first in a call of {D} channels")
    if f.count is not None:
        lines.append(f"first in a call of {D} channels vs alone: {f.count.describe(f.start)}")
        lines.append(f"first differs in a call of {f.first_width} channels ({f.size} alone)")
    elif f.offset is not None:
        lines.append(f"first in a call of {D} channels: bitwise what it is alone")
    return f"{head}: " + "; ".join(lines)


class _Prober:
    """Runs the backend on full calls, slot calls and constructed wide calls, with gradients if asked."""

    def __init__(
        self,
        backend: str,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        activation: str | None,
        grad: bool,
        seed: int,
    ) -> None:
        self.backend, self.activation, self.grad = backend, activation, grad
        self.x, self.weight, self.bias = x.detach(), weight.detach(), None if bias is None else bias.detach()
        gen = torch.Generator().manual_seed(seed)
        self.dy = torch.randn(x.shape, generator=gen).to(x.dtype).to(x.device)
        self.rtol_atol = tolerance(x.dtype) if x.dtype in _TOLERANT else (0.0, 0.0)

    def call(self, x: Tensor, weight: Tensor, bias: Tensor | None, dy: Tensor) -> dict[str, Tensor]:
        """y (and dx, dweight, dbias) of one call; ``x`` keeps its strides (a slot's view stays a view)."""
        leaves = {"x": x.detach(), "weight": weight.detach()}
        if bias is not None:
            leaves["bias"] = bias.detach()
        with torch.enable_grad() if self.grad else torch.no_grad():
            if self.grad:
                leaves = {k: v.requires_grad_() for k, v in leaves.items()}
            y, _ = causal_conv1d(
                leaves["x"], leaves["weight"], leaves.get("bias"), self.activation, backend=self.backend
            )
            out = {"y": y.detach()}
            if self.grad and y.requires_grad:
                got = torch.autograd.grad(y, list(leaves.values()), dy, allow_unused=True)
                for name, g in zip(leaves, got, strict=True):
                    if g is not None:
                        out[f"d{name}"] = g
        return out

    def step(self, s: slice) -> dict[str, Tensor]:
        """The slot alone through the step kernel, as the separate path runs it at T = 1 (zero state)."""
        x = self.x[:, 0, s]  # [B, 1, D] -> [B, n]
        state = x.new_zeros(x.shape[0], x.shape[1], self.weight.shape[1])
        with torch.no_grad():
            y, _ = causal_conv1d_update(
                x, state, self.weight[s], _part(self.bias, s), self.activation, backend=self.backend
            )
        return {"y": y.unsqueeze(1)}

    def placed(self, start: int, n: int, offset: int, width: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
        """A ``width``-channel call with the slot's channels at ``offset``; the rest are the example's
        other channels, repeated as needed (a correct kernel cannot tell them apart from any others)."""
        D = self.x.shape[-1]
        others = [c for c in range(D) if not start <= c < start + n] or list(range(start, start + n))
        fill = [others[i % len(others)] for i in range(width - n)]
        order = torch.tensor([*fill[:offset], *range(start, start + n), *fill[offset:]], device=self.x.device)
        x = self.x.index_select(-1, order)
        return x, self.weight.index_select(0, order), _pick(self.bias, order), self.dy.index_select(-1, order)

    def differ(self, a: dict[str, Tensor], b: dict[str, Tensor]) -> Difference | None:
        """Bitwise for y and dx, within §6 for dweight/dbias (P4's rules); ``None`` when they agree."""
        tensors, channels, worst, within = [], set(), 0.0, True
        rtol, atol = self.rtol_atol
        for name in sorted(set(a) & set(b), key=_ORDER.index):
            exact = name in ("y", "dx")
            r = compare(a[name], b[name], rtol=0.0 if exact else rtol, atol=0.0 if exact else atol)
            if r.ok:
                continue
            tensors.append(name)
            worst = max(worst, r.max_abs)
            within = within and exact and compare(a[name], b[name], rtol=rtol, atol=atol).ok
            channels |= _channels(a[name], b[name], name, rtol if not exact else 0.0, atol if not exact else 0.0)
        if not tensors:
            return None
        return Difference(tuple(tensors), tuple(sorted(channels)), worst, within)


_ORDER = ("y", "dx", "dweight", "dbias")
_TOLERANT = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _channels(a: Tensor, b: Tensor, name: str, rtol: float, atol: float) -> set[int]:
    """Slot-local channels where ``a`` and ``b`` differ (channels are the last dim of y/dx, the first of
    dweight/dbias); NaNs at the same position agree."""
    a64, b64 = a.detach().cpu().double(), b.detach().cpu().double()
    close = torch.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True) | (a64 == b64)
    bad = ~close
    per_channel = bad.flatten(0, -2).any(0) if name in ("y", "dx") else bad.reshape(bad.shape[0], -1).any(-1)
    return {int(i) for i in torch.nonzero(per_channel).flatten()}


def _slot(out: dict[str, Tensor], start: int, n: int) -> dict[str, Tensor]:
    s = slice(start, start + n)
    return {k: (v[..., s] if k in ("y", "dx") else v[s]) for k, v in out.items()}


def _part(t: Tensor | None, s: slice) -> Tensor | None:
    return None if t is None else t[s]


def _pick(t: Tensor | None, order: Tensor) -> Tensor | None:
    return None if t is None else t.index_select(0, order)


def _channels_named(channels: Sequence[int] | range) -> str:
    """``[8, 9, 10, 11, 14]`` -> ``"channels 8–11, 14"``; ``[8]`` -> ``"channel 8"``."""
    return f"channel {channels[0]}" if len(channels) == 1 else f"channels {_ranges(channels)}"


def _ranges(channels: Sequence[int] | range) -> str:
    """``[8, 9, 10, 11, 14]`` -> ``"8–11, 14"``."""
    out: list[str] = []
    values = sorted(channels)
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}–{values[j]}")
        i = j + 1
    return ", ".join(out)


# --- the in-house layer's fused conv call, recomputed from an example ------------------------


@dataclass(frozen=True)
class FusedConvCall:
    """What the fused prologue hands the backend for one call, and how the separate path runs."""

    backend: str
    x: Tensor
    weight: Tensor
    bias: Tensor | None
    activation: str | None
    sizes: tuple[int, ...]
    names: tuple[str, ...]
    step: bool


def fused_conv_call(layer: Any, inputs: Any, *, grad: bool) -> FusedConvCall | None:
    """The conv inputs of ``layer``'s fused prologue on ``inputs`` (:class:`gdn_equiv.model.example.Inputs`),
    recomputed through the layer's own unpadding and projection (``None`` for a layer that is not the
    in-house family layer, e.g. fla's). ``grad``: whether the call runs with autograd on (else, at one
    token per sequence, the separate path runs the step kernel)."""
    if not all(hasattr(layer, a) for a in ("_prepare", "_project", "convs", "slots")) or not layer.use_short_conv:
        return None
    with torch.no_grad():
        call = layer._prepare(inputs.x, inputs.attention_mask, inputs.cache, inputs.use_cache, inputs.cu_seqlens)
        x = layer._project(call.x).conv_in  # [B, T, sum D_i], a channel view of the projection
        if call.conv_mask is not None:
            x = x * call.conv_mask.unsqueeze(-1)
    convs = layer.convs()
    weight = torch.cat([c.depthwise_weight().detach() for c in convs], dim=0)  # [sum D_i, W]
    biases = [c.bias for c in convs]
    bias = torch.cat([b.detach() for b in biases]) if layer.conv_bias and all(b is not None for b in biases) else None
    return FusedConvCall(
        backend=str(convs[0].backend),
        x=x,
        weight=weight,
        bias=bias,
        activation=convs[0].activation,
        sizes=tuple(c.channels for c in convs),
        names=tuple(layer.slots),
        step=not grad and call.one_token_per_sequence(),
    )


def diagnose_layer(layer: Any, inputs: Any, *, grad: bool, probe_grad: bool = False, seed: int = 0) -> Diagnosis | None:
    """:func:`diagnose` on ``layer``'s fused conv call (``None`` where :func:`fused_conv_call` has none);
    ``probe_grad`` compares the backward too (P4)."""
    call = fused_conv_call(layer, inputs, grad=grad)
    if call is None:
        return None
    return diagnose(
        call.backend,
        call.x,
        call.weight,
        call.bias,
        call.activation,
        call.sizes,
        names=call.names,
        grad=probe_grad,
        step=call.step,
        seed=seed,
    )


__all__ = [
    "COUNT",
    "FUSED_PATH",
    "INDEPENDENT",
    "OFFSET",
    "OFFSET_AND_COUNT",
    "STEP",
    "UNDIAGNOSED",
    "Diagnosis",
    "Difference",
    "FusedConvCall",
    "SlotFinding",
    "diagnose",
    "diagnose_layer",
    "fused_conv_call",
]
