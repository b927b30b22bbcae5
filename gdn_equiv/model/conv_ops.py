"""The open registry of what a short conv may do besides its taps: activations and per-conv facts.

Upstream's prologue semantics grow by branch (SPEC §8): ``relu``/``relu2`` conv activations
(branch ``conv-relu``), an L2 norm folded into the short conv (branch ``fuse-conv-l2``: ``norm``,
``head_dim``, ``norm_eps`` on the conv). Each is a *registration* here, not an edit of the guard:

- :func:`register_activation` adds an activation: its reference maths (pure torch, elementwise,
  applied in the compute dtype, fp32 for fp16/bf16/fp32 operands, like ``silu``) and the backends
  that implement it. The guard compares activations by :func:`canonical_activation` (G6), so a new
  activation needs no new condition; ``same_as`` declares an alias (``swish`` is ``silu``).
- :func:`register_conv_fact` adds a per-conv fact with named parameters (the conv module's
  attributes), its reference maths (applied to the conv's output, after the activation) and the
  guard condition it needs ("the convs agree on ..."). The guard iterates registered facts
  (:func:`conv_facts`), and :class:`gdn_equiv.model.guard.Condition` lists their conditions after G1–G9,
  so the condition registry, the oracle tests, the necessity searches and the strategies pick
  them up.

Built in: ``silu`` (``swish``), ``None`` (identity), ``relu``, ``relu2`` (relu squared) and the
``norm`` fact (``norm='l2'``: per-head ``y / sqrt(sum(y^2) + norm_eps)``, condition G10). Plug-ins
register theirs at import, or under the ``gdn_equiv.conv_ops`` entry point group (a module or a
callable, loaded on first use of the registry).

Why the maths is written out rather than ``F.silu`` / ``F.relu`` / ``tensor.norm``: the fused
prologue is bitwise the separate one only if every channel's bits do not depend on how many
channels share the call. ``exp``, ``add``, ``mul``, ``div``, ``sqrt`` and ``where`` give the same
bits at every offset on CPU; ``F.silu``'s vector body and scalar tail do not (torch_backend), and a
library reduction may tile its sum differently by row count, so the L2 norm sums a head's channels
one at a time in a fixed order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.model.choices import Choices

Tensor = torch.Tensor

#: The activations every backend must run (SPEC §3): a backend without a declared activation list
#: is assumed to run exactly these.
CORE_ACTIVATIONS: tuple[str | None, ...] = ("silu", "swish", None)


# ---- activations --------------------------------------------------------------------------------


class _Silu(torch.autograd.Function):
    """``x / (exp(-x) + 1)`` with the derivative written out, ``g * (s * (1 + x * (1 - s)))``, ``s = 1 / (exp(-x) + 1)``
    (the Triton kernels' spelling). Autograd's own derivative of the quotient divides ``x * exp(-x)`` by
    ``(exp(-x) + 1)^2``: ``inf / inf``, NaN, wherever ``exp(-x)`` overflows (fp32 pre-activations below
    about -88.7), where silu's derivative is 0 (found by the extreme values of issue #52)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return x / (torch.exp(-x) + 1)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        s = 1 / (torch.exp(-x) + 1)
        return g * (s * (1 + x * (1 - s)))


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` as ``x / (exp(-x) + 1)``: offset-independent (see the module docstring); its
    derivative stays finite where ``exp(-x)`` overflows (:class:`_Silu`)."""
    return _Silu.apply(x)


def relu(x: Tensor) -> Tensor:
    """``0`` where ``x < 0``, else ``x``: NaN propagates and ``-0.0`` stays ``-0.0`` (``tl.where`` spells
    it the same way, so the Triton kernel gives the same bits)."""
    return torch.where(x < 0, torch.zeros_like(x), x)


def relu2(x: Tensor) -> Tensor:
    """``relu(x) ** 2`` as one product (its gradient, ``2 * g * relu(x)``, is exact in every dtype)."""
    r = relu(x)
    return r * r


def _identity(x: Tensor) -> Tensor:
    return x


@dataclass(frozen=True)
class Activation:
    """A conv activation: ``fn`` maps the pre-activation (compute dtype) to the output, elementwise."""

    name: str | None
    fn: Callable[[Tensor], Tensor]
    #: the canonical name this one is an alias of (``swish`` -> ``silu``); the guard compares that
    same_as: str | None
    #: backend names known to run it; ``None``: every backend (the SPEC §3 set)
    backends: frozenset[str] | None
    description: str = ""

    @property
    def canonical(self) -> str | None:
        return self.same_as if self.same_as is not None else self.name


_ACTIVATIONS: dict[str | None, Activation] = {}


def register_activation(
    name: str,
    fn: Callable[[Tensor], Tensor] | None = None,
    *,
    same_as: str | None = None,
    backends: Sequence[str] | None = ("torch", "triton"),
    description: str = "",
    replace: bool = False,
) -> Activation:
    """Register conv activation ``name`` with its reference maths ``fn`` (elementwise, pure torch; the
    backends call it on the compute-dtype pre-activation and cast the result to ``x.dtype``).

    ``same_as`` makes ``name`` an alias of a registered activation (``fn`` defaults to its maths; the
    guard then fuses a mix of the two). ``backends`` names the backends that run it: the torch
    backend and the project's Triton backend run every registered activation; others (causal-conv1d,
    fla's kernels) are not sent one they do not declare. Re-registering a name needs ``replace=True``.
    """
    _load_entry_points()
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"an activation name must be a non-empty string, got {name!r}")
    if name in _ACTIVATIONS and not replace:
        raise InvalidArgument(f"conv activation {name!r} is already registered (pass replace=True to replace it)")
    if same_as is not None:
        if same_as not in _ACTIVATIONS:
            raise InvalidArgument(f"same_as must name a registered activation, got {same_as!r}")
        target = _ACTIVATIONS[same_as]
        same_as = target.canonical
        fn = target.fn if fn is None else fn
    if fn is None or not callable(fn):
        raise InvalidArgument(f"conv activation {name!r} needs its reference maths fn(tensor) -> tensor, got {fn!r}")
    act = Activation(name, fn, same_as, None if backends is None else frozenset(backends), description)
    _ACTIVATIONS[name] = act
    return act


def unregister_activation(name: str) -> None:
    """Remove a registered (non-core) activation; for tests and plug-ins that registered one for a while."""
    if name in CORE_ACTIVATIONS:
        raise InvalidArgument(f"{name!r} is a core activation (SPEC §3) and cannot be removed")
    _ACTIVATIONS.pop(name, None)


def get_activation(name: str | None) -> Activation:
    _load_entry_points()
    try:
        return _ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise InvalidArgument(f"conv activation must be one of {activation_names()}, got {name!r}") from None


def activation_names() -> tuple[str | None, ...]:
    """Every registered activation, the core ones first (``silu`` first: strategies shrink to it)."""
    _load_entry_points()
    return tuple(_ACTIVATIONS)


def canonical_activation(activation: str | None) -> str | None:
    """The activation's canonical name (``swish`` -> ``silu``); the guard and the backends compare this."""
    return get_activation(activation).canonical


def apply_activation(y: Tensor, activation: str | None) -> Tensor:
    """The registered reference maths of ``activation`` on ``y`` (no dtype change)."""
    return get_activation(activation).fn(y)


class ActivationNames(Sequence):
    """A live, read-only view of the registered activation names: ``CONV_ACTIVATIONS`` in
    :mod:`gdn_equiv.model.config` is one, so ``a in CONV_ACTIVATIONS`` and messages naming it follow the
    registry (``tuple(...)`` takes a snapshot)."""

    def __getitem__(self, i: Any) -> Any:
        return activation_names()[i]

    def __len__(self) -> int:
        return len(activation_names())

    def __iter__(self) -> Iterator[str | None]:
        return iter(activation_names())

    def __contains__(self, name: object) -> bool:
        return name in activation_names()

    def __repr__(self) -> str:
        return repr(activation_names())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, ActivationNames)) else other)

    def __hash__(self) -> int:
        return hash(activation_names())

    def __add__(self, other: Any) -> tuple:
        return activation_names() + tuple(other)


# ---- per-conv facts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvFact:
    """A registered per-conv fact: parameters on the conv module, reference maths, a guard condition.

    ``params``: ``(name, default)`` pairs; a conv with every parameter at its default does not have
    the fact (``apply`` is not called). ``key(values)`` is what must be equal across the convs for
    fusion to be exact (e.g. ``head_dim`` does not matter while ``norm`` is off). ``apply(y, values)``
    maps the conv's output ``[..., D]`` (after the activation, ``y.dtype`` kept). ``validate(values,
    channels)`` raises :class:`InvalidArgument` for a conv that cannot have these values.
    ``draw(choices, channels)`` chooses values for convs of these channel counts, shrinking to the
    defaults; ``violate(choices, values, channels)`` values whose ``key`` differs from ``values``' (each
    asks a :class:`~gdn_equiv.model.choices.Choices`, which the strategies answer with draws).
    """

    name: str
    params: tuple[tuple[str, Any], ...]
    condition_id: str
    condition_short: str
    condition_rule: str
    key: Callable[[dict[str, Any]], Any]
    apply: Callable[[Tensor, dict[str, Any]], Tensor]
    validate: Callable[[dict[str, Any], int], None]
    draw: Callable[[Choices, Sequence[int]], dict[str, Any]]
    violate: Callable[[Choices, dict[str, Any], Sequence[int]], dict[str, Any]]
    description: str = ""

    @property
    def defaults(self) -> dict[str, Any]:
        return dict(self.params)

    def values(self, extras: dict[str, Any] | Sequence[tuple[str, Any]]) -> dict[str, Any]:
        """This fact's parameters from a conv's ``extras`` (missing ones at their defaults)."""
        given = dict(extras)
        return {p: given.get(p, d) for p, d in self.params}

    def active(self, values: dict[str, Any]) -> bool:
        return any(values[p] != d for p, d in self.params)


_FACTS: dict[str, ConvFact] = {}


def register_conv_fact(fact: ConvFact, *, replace: bool = False) -> ConvFact:
    """Register a per-conv fact; its condition joins the guard after G1–G9 (in registration order)."""
    _load_entry_points()
    if fact.name in _FACTS and not replace:
        raise InvalidArgument(f"conv fact {fact.name!r} is already registered (pass replace=True to replace it)")
    taken = {p for f in _FACTS.values() if f.name != fact.name for p, _ in f.params}
    clash = taken & {p for p, _ in fact.params}
    if clash:
        raise InvalidArgument(f"conv fact {fact.name!r}: parameters {sorted(clash)} belong to another fact")
    ids = {f.condition_id for f in _FACTS.values() if f.name != fact.name}
    if fact.condition_id in ids or fact.condition_id in {f"G{i}" for i in range(1, 10)}:
        raise InvalidArgument(f"conv fact {fact.name!r}: condition id {fact.condition_id!r} is taken")
    _FACTS[fact.name] = fact
    return fact


def unregister_conv_fact(name: str) -> None:
    _FACTS.pop(name, None)


def conv_facts() -> tuple[ConvFact, ...]:
    """The registered per-conv facts, in registration order (the guard's order)."""
    _load_entry_points()
    return tuple(_FACTS.values())


def fact_params() -> dict[str, Any]:
    """Every registered fact parameter with its default: the extra attributes a conv module has."""
    return {p: d for f in conv_facts() for p, d in f.params}


def normalize_extras(extras: Any, owner: str = "conv") -> tuple[tuple[str, Any], ...]:
    """``extras`` (a mapping or ``(name, value)`` pairs, as JSON gives them back) as sorted pairs,
    parameters at their default dropped; unknown names are refused."""
    if extras is None:
        return ()
    try:
        items = dict(extras.items() if hasattr(extras, "items") else (tuple(kv) for kv in extras))
    except (TypeError, ValueError):
        raise InvalidArgument(f"{owner}.extras must be (name, value) pairs, got {extras!r}") from None
    known = fact_params()
    unknown = sorted(set(items) - set(known))
    if unknown:
        raise InvalidArgument(f"{owner}.extras has unknown parameters {unknown}; registered: {sorted(known)}")
    return tuple(sorted((k, v) for k, v in items.items() if v != known[k]))


def validate_extras(extras: Sequence[tuple[str, Any]], channels: int | None, owner: str = "conv") -> None:
    for fact in conv_facts():
        values = fact.values(extras)
        if fact.active(values):
            fact.validate(values, channels if channels is not None else 0)


def apply_conv_facts(y: Tensor, extras: Sequence[tuple[str, Any]]) -> Tensor:
    """Every active registered fact's maths on a conv's output ``y [..., D]``, in registration order."""
    for fact in conv_facts():
        values = fact.values(extras)
        if fact.active(values):
            y = fact.apply(y, values)
    return y


# ---- the built-in L2-norm fact (branch fuse-conv-l2) -----------------------------------------------

NORMS = (None, "l2")


def l2_norm_heads(y: Tensor, head_dim: int, eps: float) -> Tensor:
    """``y [..., H*d] -> y / sqrt(sum_d y^2 + eps)`` per head, in the compute dtype (fp32, fp64 for
    fp64), cast back. The sum runs over a head's channels one at a time, in order, and so do the
    backward's: autograd's own backward of the division reduces the broadcast denominator's gradient
    with a library sum whose order follows the incoming gradient's memory layout, and the fused
    prologue hands the norm a contiguous gradient where a separate conv may get a strided one (found
    as a one-ulp ``grad.x`` difference under fusion; a transposed incoming gradient changed the bits in
    199 of 200 random ``[2, 6, 7]`` fp64 cases)."""
    D = y.shape[-1]
    if D % head_dim:
        raise InvalidArgument(f"conv norm: {D} channels are not a whole number of heads of head_dim={head_dim}")
    return _L2NormHeads.apply(y, head_dim, eps)


def _sum_of_products(a: Tensor, b: Tensor) -> Tensor:
    """``sum_j a[..., j] * b[..., j]`` one channel at a time, in order (no library reduction)."""
    total = a[..., 0] * b[..., 0]
    for j in range(1, a.shape[-1]):
        total = total + a[..., j] * b[..., j]
    return total


class _L2NormHeads(torch.autograd.Function):
    """The L2 norm per head with a backward written out elementwise (see :func:`l2_norm_heads`)."""

    @staticmethod
    def forward(ctx: Any, y: Tensor, head_dim: int, eps: float) -> Tensor:
        cdt = torch.float64 if y.dtype == torch.float64 else torch.float32
        h = y.to(cdt).unflatten(-1, (y.shape[-1] // head_dim, head_dim))  # [..., D] -> [..., H, d]
        r = torch.sqrt(_sum_of_products(h, h) + eps).unsqueeze(-1)  # [..., H, 1]
        ctx.save_for_backward(h, r)
        ctx.dtype = y.dtype
        return (h / r).flatten(-2).to(y.dtype)  # [..., H, d] -> [..., D]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        h, r = ctx.saved_tensors
        g = grad.to(h.dtype).reshape(h.shape)
        # out = h / r, r = sqrt(sum h^2 + eps): dh = g / r + h * (d r / r) with d r = -sum(g h) / r^2
        dr = -_sum_of_products(g, h).unsqueeze(-1) / (r * r)
        dh = g / r + h * (dr / r)
        return dh.flatten(-2).to(ctx.dtype), None, None


def _norm_key(v: dict[str, Any]) -> Any:
    return (None,) if v["norm"] is None else (v["norm"], v["head_dim"], float(v["norm_eps"]))


def _norm_apply(y: Tensor, v: dict[str, Any]) -> Tensor:
    if v["norm"] is None:
        return y
    return l2_norm_heads(y, v["head_dim"], v["norm_eps"])


def _norm_validate(v: dict[str, Any], channels: int) -> None:
    if v["norm"] not in NORMS:
        raise InvalidArgument(f"conv norm must be one of {NORMS}, got {v['norm']!r}")
    eps = v["norm_eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise InvalidArgument(f"conv norm_eps must be a finite number >= 0, got {eps!r}")
    if v["norm"] is None:
        return
    hd = v["head_dim"]
    if isinstance(hd, bool) or not isinstance(hd, int) or hd < 1:
        raise InvalidArgument(f"conv norm='l2' needs head_dim, a positive integer, got {hd!r}")
    if channels and channels % hd:
        raise InvalidArgument(f"conv norm='l2': {channels} channels are not a whole number of heads of head_dim={hd}")


_EPSILONS = (1e-5, 1e-6, 1e-3)


def _divisors(channels: Sequence[int]) -> list[int]:
    g = 0
    for c in channels:
        g = math.gcd(g, c)
    return [d for d in range(1, g + 1) if g % d == 0] or [1]


def _norm_draw(pick: Choices, channels: Sequence[int]) -> dict[str, Any]:
    if pick.integer(0, 3) != 3:  # off three times in four; shrinks to off
        return {"norm": None, "head_dim": None, "norm_eps": 1e-5}
    return {
        "norm": "l2",
        "head_dim": pick.one(_divisors(channels)[::-1]),  # the whole gcd first
        "norm_eps": pick.one(_EPSILONS),
    }


def _norm_violate(pick: Choices, values: dict[str, Any], channels: Sequence[int]) -> dict[str, Any]:
    if values["norm"] is None:
        return {"norm": "l2", "head_dim": pick.one(_divisors(channels)[::-1]), "norm_eps": 1e-5}
    options = ["norm", "norm_eps"] + (["head_dim"] if len(_divisors(channels)) > 1 else [])
    what = pick.one(options)
    if what == "norm":
        return {"norm": None, "head_dim": None, "norm_eps": 1e-5}
    if what == "norm_eps":
        eps = pick.one(e for e in _EPSILONS if e != values["norm_eps"])
        return {**values, "norm_eps": eps}
    return {**values, "head_dim": pick.one(d for d in _divisors(channels) if d != values["head_dim"])}


NORM = ConvFact(
    name="norm",
    params=(("norm", None), ("head_dim", None), ("norm_eps", 1e-5)),
    condition_id="G10",
    condition_short="conv_norm",
    condition_rule="q/k/v convs must agree on norm, head_dim and norm_eps (a fused conv applies one norm to all)",
    key=_norm_key,
    apply=_norm_apply,
    validate=_norm_validate,
    draw=_norm_draw,
    violate=_norm_violate,
    description="an L2 norm over each head_dim channels of the conv output, y / sqrt(sum y^2 + norm_eps) "
    "(fla branch fuse-conv-l2's kernel)",
)


# ---- entry points and the built-ins ------------------------------------------------------------------

ENTRY_POINT_GROUP = "gdn_equiv.conv_ops"
_ENTRY_POINTS_LOADED = False


def _load_entry_points() -> None:
    """Import each ``gdn_equiv.conv_ops`` entry point once (a module registers at import; a callable
    is called). A broken plug-in is reported, naming it, rather than silently skipped."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if callable(obj):
                obj()
        except Exception as exc:
            raise InvalidArgument(f"conv_ops entry point {ep.name!r} ({ep.value}) failed to load: {exc}") from exc


def _builtins() -> None:
    core = {"silu": silu, None: _identity}
    for name, fn in core.items():
        _ACTIVATIONS[name] = Activation(name, fn, None, None, "core (SPEC §3)")
    _ACTIVATIONS["swish"] = Activation("swish", silu, "silu", None, "core (SPEC §3): silu")
    # keep the SPEC order silu, swish, None: strategies shrink to the first
    _ACTIVATIONS.update({k: _ACTIVATIONS.pop(k) for k in ("swish", None)})
    for name, fn, what in (
        ("relu", relu, "max(x, 0) (fla branch conv-relu)"),
        ("relu2", relu2, "relu(x)^2 (fla branch conv-relu)"),
    ):
        _ACTIVATIONS[name] = Activation(name, fn, None, frozenset(("torch", "triton")), what)
    _FACTS[NORM.name] = NORM


_builtins()
