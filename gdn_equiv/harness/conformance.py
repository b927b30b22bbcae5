"""Conv-backend conformance checks, one ``causal_conv1d`` call each (SPEC §3, P7), and the same checks
on the fused conv call of a layer example.

The functions ``check_*(call, backend, device)`` compare the backend under review with the ``torch``
ground truth on one :class:`~gdn_equiv.strategies.ConvCall`: forward and final state, gradients,
the step kernel, a continuation from a final state, decoding after a prefill (all within the §6
table), and a call over concatenated channels against one call per slice (bitwise: the promise the
fused prologue rests on). :mod:`gdn_equiv.suite.test_conformance` draws the calls (every layout,
block edges, the backend's reach); :func:`check_layer_conv_call` runs them on the conv call a layer
example makes (:func:`conv_call_of`), so ``gdn-equiv check`` and ``fuzz`` have the same conformance
rows as the pytest suite (``P7-conv-conformance``, replayable from a failure JSON like every other row).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import torch

from gdn_equiv.harness import isolation
from gdn_equiv.harness.compare import (
    assert_as_accurate,
    assert_equivalent,
    assert_zero_signs,
    compare,
    extreme_allowance,
    tolerance,
)
from gdn_equiv.harness.coverage import label_conv_call
from gdn_equiv.model.backends import Backend, capabilities, causal_conv1d, causal_conv1d_update, get_backend
from gdn_equiv.strategies import ConvCall, OutsideCall
from gdn_equiv.strategies.conformance import conformance_reach

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import Tensor

    from gdn_equiv.model.example import Example


def conv_forward(call: ConvCall, tensors: dict, backend: str | Backend, *, final: bool = True):
    t = tensors
    return causal_conv1d(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], final, t["cu_seqlens"], backend=backend
    )


def close_to_torch(
    actual,
    expected,
    name: str,
    backend: str,
    call: object,
    truth: Callable[[], Tensor] | None = None,
    *,
    of: ConvCall | None = None,
) -> None:
    """``actual`` (the backend's) == ``expected`` (torch's) within the tolerance table; where they differ by
    more and the fp64 ``truth`` of the same rounded inputs is given (a function: it is computed only then),
    each side's error against the truth
    decides (SPEC §6): the backend passes when it is no further from it than ``ACCURACY_FACTOR`` x torch's
    error plus one unit of the dtype. A sum that torch and a kernel round in different orders (a gradient
    summed over time tiles, two calls' gradients added in fp16) is judged as the arithmetic it is, not
    against a tolerance guessed for it; a defect further from the truth than torch is still caught.
    A call with extreme values (``of``, or ``call`` itself: issue #52) has the table's atol widened at their
    scale (:func:`~gdn_equiv.harness.compare.extreme_allowance`; the checks given a truth are the gradients,
    sums over the tokens)."""
    paths = (backend, "torch")
    rtol, atol = tolerance(expected.dtype) if expected is not None else (0.0, 0.0)
    values = getattr(of if of is not None else call, "values", "randn")
    extra = extreme_allowance(expected, summed_over_tokens=truth is not None) if values != "randn" else 0.0
    atol += extra
    if truth is None or actual is None or expected is None or compare(actual, expected, rtol=rtol, atol=atol).ok:
        assert_equivalent(actual, expected, name=name, paths=paths, exact=False, extra_atol=extra, context=call)
    else:
        assert_as_accurate(actual, expected, truth(), name=name, paths=paths, context=call)


def zero_signs_of_torch(actual, expected, name: str, backend: str, call: object) -> None:
    """A state copies inputs: its zeros keep torch's signs (``-0.0`` stays ``-0.0``), past what tolerances see."""
    assert_zero_signs(actual, expected, name=name, paths=(backend, "torch"), context=call)


def state_name(s: slice, W: int, name: str) -> str:
    """``name`` as compared: the slots ``s`` (a backend's :meth:`~gdn_equiv.model.backends.Backend.state_slots`)
    of a width-``W`` state."""
    return name if s.start == 0 else f"{name}[..., {s.start}:{W}]"


# ---- the checks, one call each (the suite draws the calls; tests/ plants defects and searches with them).
# Each takes the backend as its object, resolved by the caller (the plan, the suite's test): it hands it to
# every kernel call and names it by its name. In an isolation worker the object is the worker's own, resolved
# from its name once for the process (gdn_equiv.harness.isolation.resolved).


def check_forward(call: ConvCall, impl: Backend, device: str) -> None:
    """y and the final state's declared slots == the torch backend's, within §6."""
    backend = impl.name
    tensors = call.tensors(device)
    y, final = conv_forward(call, tensors, impl)
    y_ref, final_ref = conv_forward(call, tensors, "torch")
    close_to_torch(y, y_ref, "y", backend, call)
    s = impl.state_slots(call.W)
    close_to_torch(final[..., s], final_ref[..., s], state_name(s, call.W, "final_state"), backend, call)
    zero_signs_of_torch(final[..., s], final_ref[..., s], state_name(s, call.W, "final_state"), backend, call)


def _grads(
    call: ConvCall,
    backend: str | Backend,
    device: str,
    unused_state_slots: int,
    run: Callable[..., tuple] | None = None,
) -> tuple[Tensor, Tensor, dict[str, Tensor | None]]:
    """``run(call, tensors, backend)`` (default: one call) on fresh leaves: y, the final state, and the
    gradient of every input from ``dy`` and ``d final_state`` (zero on the ``unused_state_slots``)."""
    t = call.tensors(device, grad=True)
    names = [n for n in ("x", "weight", "bias", "initial_state") if t[n] is not None]
    y, final = (run or conv_forward)(call, t, backend)
    if not y.requires_grad:
        name = backend if isinstance(backend, str) else backend.name
        raise AssertionError(f"backend {name!r} returned y without a gradient (no backward)\nExample: {call}")
    cot = call.cotangents(device, unused_state_slots=unused_state_slots)
    # with respect to the tensors as passed (an expanded one's gradient before autograd sums its copies:
    # a sum of rounded fp16/bf16 terms that cancel would judge the summation, not the kernel)
    inputs = [t[n] for n in names]
    grads = torch.autograd.grad((y, final), inputs, (cot["dy"], cot["dfinal"]), allow_unused=True)
    return y, final, dict(zip(names, grads, strict=True))


def _truth_grads(call: ConvCall, device: str, unused: int, run=None) -> dict:
    """The gradients :func:`_grads` takes, computed by torch in fp64 from the same rounded inputs and
    cotangents (each upcast exactly): the truth both backends' gradients are judged against."""
    t = {k: v for k, v in call.tensors(device).items() if not k.startswith("leaf.")}
    names = [n for n in ("x", "weight", "bias", "initial_state") if t[n] is not None]
    wide = {k: (v.detach().double().requires_grad_() if k in names else v) for k, v in t.items()}
    y, final = (run or conv_forward)(call, wide, "torch")
    cot = {k: v.double() for k, v in call.cotangents(device, unused_state_slots=unused).items()}
    grads = torch.autograd.grad((y, final), [wide[n] for n in names], (cot["dy"], cot["dfinal"]), allow_unused=True)
    return dict(zip(names, grads, strict=True))


def _leaf(truth: Callable[[], dict], name: str) -> Tensor:
    return truth()[name]


def check_gradients(call: ConvCall, impl: Backend, device: str) -> None:
    """Gradients of every input (through its layout) from ``dy`` and ``d final_state`` (zero on the slots
    the backend declares unused) == torch's, within §6 (or, past it, as accurate as torch's against the
    fp64 truth: :func:`close_to_torch`)."""
    backend = impl.name
    unused = impl.unused_state_slots  # the reviewed backend's convention, for both
    *_, grads = _grads(call, impl, device, unused)
    *_, grads_ref = _grads(call, "torch", device, unused)
    truth = functools.cache(lambda: _truth_grads(call, device, unused))  # an fp64 pass only past the table
    for name, g in grads.items():
        close_to_torch(g, grads_ref[name], f"grad.{name}", backend, call, functools.partial(_leaf, truth, name))


def check_update(call: ConvCall, impl: Backend, device: str) -> None:
    """The single-step ``update`` on ``x[:, 0]``: y and the new state's declared slots == torch's; the
    state passed in is unchanged."""
    backend = impl.name
    t = call.tensors(device)
    x, state = t["x"][:, 0], t["initial_state"]
    before = state.clone()
    y, new_state = causal_conv1d_update(x, state, t["weight"], t["bias"], call.activation, backend=impl)
    assert_equivalent(state, before, name="state after update", paths=("after", "before"), context=call)
    y_ref, new_ref = causal_conv1d_update(x, state, t["weight"], t["bias"], call.activation, backend="torch")
    close_to_torch(y, y_ref, "update.y", backend, call)
    s = impl.state_slots(call.W)
    close_to_torch(new_state[..., s], new_ref[..., s], state_name(s, call.W, "update.new_state"), backend, call)
    zero_signs_of_torch(new_state[..., s], new_ref[..., s], state_name(s, call.W, "update.new_state"), backend, call)


def _continued(call: ConvCall, t: dict, backend: str | Backend, split: int):
    """``x[:, :split]``, then ``x[:, split:]`` from the first call's final state as the backend returned it."""
    x, w, b = t["x"], t["weight"], t["bias"]
    y1, f1 = causal_conv1d(x[:, :split], w, b, call.activation, t["initial_state"], True, None, backend=backend)
    y2, final = causal_conv1d(x[:, split:], w, b, call.activation, f1, True, None, backend=backend)
    return torch.cat([y1, y2], 1), final


def check_continuation(call: ConvCall, split: int, impl: Backend, device: str) -> None:
    """Two calls, ``x[:, :split]`` then ``x[:, split:]`` from the first call's final state (all ``W`` slots
    as the backend returned them) == the same two calls on torch: y, the gradients of every input through
    both calls, and the last final state's declared slots. (Two torch calls, not one: a gradient summed
    from two calls is rounded twice in fp16/bf16.)"""
    context = f"{call}, split at {split}"
    backend = impl.name
    unused = impl.unused_state_slots

    def continued(c: ConvCall, t: dict, on: str | Backend) -> tuple:
        return _continued(c, t, on, split)

    y, final, got = _grads(call, impl, device, unused, continued)
    y_ref, final_ref, grads_ref = _grads(call, "torch", device, unused, continued)
    truth = functools.cache(lambda: _truth_grads(call, device, unused, continued))
    close_to_torch(y, y_ref, "continued.y", backend, context, of=call)
    s = impl.state_slots(call.W)
    name = state_name(s, call.W, "continued.final_state")
    close_to_torch(final[..., s], final_ref[..., s], name, backend, context, of=call)
    for n, g in got.items():
        leaf = functools.partial(_leaf, truth, n)
        close_to_torch(g, grads_ref[n], f"continued.grad.{n}", backend, context, leaf, of=call)


def _decoded(call: ConvCall, t: dict, backend: str | Backend, split: int):
    x, w, b, h0 = t["x"], t["weight"], t["bias"], t["initial_state"]
    if split > 0:
        y_pre, state = causal_conv1d(x[:, :split], w, b, call.activation, h0, True, None, backend=backend)
        ys = [y_pre]
    else:
        state = h0 if h0 is not None else x.new_zeros(call.B, call.D, call.W)
        ys = []
    for i in range(split, call.T):
        assert state is not None  # asked for (output_final_state=True)
        y_i, state = causal_conv1d_update(x[:, i], state, w, b, call.activation, backend=backend)
        ys.append(y_i.unsqueeze(1))
    return torch.cat(ys, 1), state


def check_decode_continuation(call: ConvCall, split: int, impl: Backend, device: str) -> None:
    """A prefill of ``x[:, :split]`` (none when ``split == 0``: the initial state, or zeros), then one
    ``update`` per remaining token from the state the previous call returned == the same on torch: every
    y and the last state's declared slots."""
    context = f"{call}, prefill of {split}"
    backend = impl.name
    t = call.tensors(device)
    with torch.no_grad():
        y, state = _decoded(call, t, impl, split)
        y_ref, state_ref = _decoded(call, t, "torch", split)
    close_to_torch(y, y_ref, "decoded.y", backend, context, of=call)
    s = impl.state_slots(call.W)
    name = state_name(s, call.W, "decoded.state")
    close_to_torch(state[..., s], state_ref[..., s], name, backend, context, of=call)


def check_fused_slices(call: ConvCall, dims: list[int], impl: Backend, device: str) -> None:
    """One call over ``sum(dims)`` channels == one call per channel slice of the same (laid out) ``x``:
    y and dx bitwise."""
    D = sum(dims)
    wide = dataclasses.replace(call, D=D)
    label_conv_call(wide, grad=True, final_state=False)  # the call the kernel sees (dx, no final state)
    context = f"{wide}, slices {dims}"
    t = wide.tensors(device, grad=True)
    x = t["x"]
    w, b = t["weight"].detach(), None if t["bias"] is None else t["bias"].detach()
    dy = wide.cotangents(device)["dy"]
    y_fused, _ = causal_conv1d(x, w, b, call.activation, backend=impl)
    (dx_fused,) = torch.autograd.grad(y_fused, [x], dy)
    ys, start = [], 0
    for n in dims:
        c = slice(start, start + n)
        ys.append(causal_conv1d(x[..., c], w[c], None if b is None else b[c], call.activation, backend=impl)[0])
        start += n
    y_split = torch.cat(ys, -1)
    (dx_split,) = torch.autograd.grad(y_split, [x], dy)
    assert_equivalent(y_fused, y_split, name="y", paths=("fused", "split"), context=context)
    assert_equivalent(dx_fused, dx_split, name="dx", paths=("fused", "split"), context=context)


#: channel counts where kernels change code path (block sizes); a fused call just past one, split
#: into calls that stay at or under it, is where "fused == split" breaks for such a kernel
BLOCK_EDGES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6144)


def block_edges(backend: str) -> tuple[int, ...]:
    """The edges a backend's conformance sweeps: up to its reach (6,144 on a GPU, 1,024 on a CPU, 32 for
    kernels that run in the Triton interpreter here)."""
    reach = conformance_reach(backend).get("wide_channels", 33)
    return tuple(e for e in BLOCK_EDGES if e < reach)


#: the block-edge sweep runs as this many tests, one per part, each sweeping its share of the edges
#: (``edge_splits(...)[part::parts]``, or one pair where there are fewer than parts): on a GPU fla's convs
#: compile a kernel per channel count, and the undivided sweep did not finish in 400 s on the H100 (issue #52).
#: On a GPU it sweeps 11 edges, there one edge a part (:data:`GPU_EDGE_PARTS`), so that a cold run's compiles
#: spread over the workers: on the H100 (2026-12-07, -n 14) a part of 3 edges took 60 s cold and 4.0 s warm
#: (1.3 s an edge), and the parts a cut cold run had not reached took 50 s in the next. On a CPU, where the
#: interpreter's reach gives fewer edges, four parts. The gate's
#: ``test_backend_calls_across_each_block_edge_are_bitwise_the_split_calls`` runs each part.
EDGE_PARTS = 4
GPU_EDGE_PARTS = 11


def edge_parts() -> int:
    """How many parts the block-edge sweep runs as here: one per edge on a GPU, :data:`EDGE_PARTS` on a CPU."""
    return GPU_EDGE_PARTS if torch.cuda.is_available() else EDGE_PARTS


#: the value sweeps run as this many tests on a GPU, one per part, each example checking its share of the swept
#: calls (``swept[part::parts]``: 3 dtypes x 5 value kinds = 15 calls, one a part; a backend with fewer dtypes
#: repeats a call rather than leave a part empty). On the H100 (2026-12-07, -n 14) the undivided conformance
#: sweep took 20 s and the ground-truth one 45 s in a run that still compiled their kernels (a cut cold run had
#: not reached them): a part is at most about 1.3 s and 3 s, and its compiles spread over the workers. One
#: part on a CPU.
GPU_VALUE_PARTS = 15


def value_parts() -> int:
    """How many parts the value sweeps run as here: :data:`GPU_VALUE_PARTS` on a GPU, one on a CPU."""
    return GPU_VALUE_PARTS if torch.cuda.is_available() else 1


#: the length sweeps likewise: 3 dtypes x (3 lengths past the time tiles + 1 packed) = 12 calls, one a part on a
#: GPU. On the H100 (2026-12-07, -n 14, kernels cached) the undivided ground-truth length sweep on triton took
#: 137.0 s warm and the conformance one 77.8 s, the lane's longest tests. One part on a CPU.
GPU_LENGTH_PARTS = 12


def length_parts() -> int:
    """How many parts the length sweeps run as here: :data:`GPU_LENGTH_PARTS` on a GPU, one on a CPU."""
    return GPU_LENGTH_PARTS if torch.cuda.is_available() else 1


def sweep_share(swept: list[ConvCall], part: int, parts: int) -> list[ConvCall]:
    """The swept calls of ``part`` of ``parts``: ``swept[part::parts]``, or one call where there are fewer calls
    than parts (a part never runs none)."""
    return swept[part::parts] or [swept[part % len(swept)]]


def value_share(swept: list[ConvCall], part: int) -> list[ConvCall]:
    """The value sweep's calls of ``part`` (:func:`value_parts` parts)."""
    return sweep_share(swept, part, value_parts())


def length_share(swept: list[ConvCall], part: int) -> list[ConvCall]:
    """The length sweep's calls of ``part`` (:func:`length_parts` parts)."""
    return sweep_share(swept, part, length_parts())


def edge_splits(backend: str) -> list[tuple[int, int]]:
    """The fused calls that cross each block edge in reach, as the backend can take them: ``(a, m)`` with
    ``m`` its channel multiple (with torch's) and ``a`` the largest multiple of ``m`` at or under the edge (at
    least ``m``), so one call over ``a + m`` channels reaches past the edge and its two slices stay at or
    under it (``(E, 1)`` for an undeclared multiple: ``E + 1`` channels split at ``E``). Never empty: a
    multiple wider than every edge in reach sweeps its narrowest pair, ``(m, m)`` (a backend that takes no
    count near an edge is still compared, never passed for comparing nothing)."""
    m = capabilities([backend, "torch"]).channel_step
    return list(dict.fromkeys((max(m, edge // m * m), m) for edge in block_edges(backend))) or [(m, m)]


def check_block_edges(call: ConvCall, splits: list[tuple[int, int]], impl: Backend, device: str) -> int:
    """:func:`check_fused_slices` on ``call`` at each of ``splits`` (:func:`edge_splits`), and on its fp32 twin
    (where the backend takes fp32) with a bias and at least ``2W`` tokens: a different summation order rounds
    differently in fp32 sums of several non-zero terms, and a bf16/fp16 output or a one-token call hides it.
    Returns the number of fused calls compared (at least one: an exception on any is a failure, never
    agreement)."""
    dtype = "float32" if capabilities([impl, "torch"]).dtypes_among(["float32"]) else call.dtype
    twin = dataclasses.replace(call, dtype=dtype, param_dtype=None, bias=True, T=max(call.T, 2 * call.W))
    compared = 0
    for swept in dict.fromkeys([call, twin]):
        for split in splits:
            isolation.call(check_fused_slices, swept, list(split), impl, device)
            compared += 1
    if not compared:
        raise AssertionError(f"the block-edge sweep compared nothing on {impl.name!r} (splits {splits})")
    return compared


# ---- outside a backend's declared capabilities (SPEC §3): refused, or right -----------------------


class AnsweredOutside(AssertionError):
    """A backend answered a call outside its declared capabilities with a wrong result."""


def _answer(impl: Backend, t: dict, activation: str | None) -> tuple[Tensor, Tensor | None]:
    return impl.forward(t["x"], t["weight"], t["bias"], activation, t["initial_state"], True, t["cu_seqlens"])


def _right_answer(y: Tensor, final: Tensor | None, t: dict, call: ConvCall, impl: Backend, context: str) -> None:
    """y and the final state's declared slots == torch's on the same tensors, within §6."""
    y_ref, final_ref = causal_conv1d(
        t["x"], t["weight"], t["bias"], call.activation, t["initial_state"], True, t["cu_seqlens"], backend="torch"
    )
    close_to_torch(y, y_ref.to(y.dtype), "y", impl.name, context)
    s = impl.state_slots(call.W)
    if final is not None and final_ref is not None:
        close_to_torch(final[..., s], final_ref[..., s].to(final.dtype), "final_state", impl.name, context)


def check_outside_capabilities(outside: OutsideCall, impl: Backend, device: str) -> str:
    """The backend called as it is (its own ``forward``, not through the registry, which hands a backend only
    the layouts it declares) on a call that breaks one of its declared limits: it must refuse it with an
    exception whose message says something (its ``InvalidArgument``, or the upstream kernel's own error),
    or answer it right: y and the final state == the torch backend's within §6 (a backend may run more
    than it declares). A wrong answer is :class:`AnsweredOutside`, naming the limit only where the same call
    brought back inside it (:attr:`OutsideCall.inside`) is answered right: a kernel wrong there too (one that
    ignores the initial state, on a call outside its bias limit) is wrong inside its declaration, and the
    finding says so. Returns what happened (for the report)."""
    backend = impl.name
    t = outside.tensors(device)
    try:
        y, final = _answer(impl, t, outside.call.activation)
    except Exception as exc:  # the kernel's own refusal, whatever its type: judged by its message
        if not str(exc).strip():
            raise AnsweredOutside(
                f"backend {backend!r} refused a call outside its {outside.limit} limit with an empty "
                f"{type(exc).__name__}\nExample: {outside}"
            ) from exc
        return f"refused: {type(exc).__name__}: {exc}"
    try:
        _right_answer(y, final, t, outside.call, impl, f"{outside} (outside its {outside.limit} limit, answered)")
    except AssertionError as exc:
        wrong_outside = exc
    else:
        return "answered right"
    if outside.inside is not None:  # the same call inside every limit: is the defect the limit's?
        inside = outside.inside
        t_in = inside.tensors(device)
        context = f"{inside} (the call of {outside} brought back inside its {outside.limit} limit)"
        try:
            y_in, final_in = _answer(impl, t_in, inside.activation)
            _right_answer(y_in, final_in, t_in, inside, impl, context)
        except Exception as exc:  # wrong, or refused, inside: the finding is the kernel's, not the limit's
            raise AssertionError(
                f"backend {backend!r} answers wrongly inside its declared capabilities too (not a refusal "
                f"finding of its {outside.limit} limit): {exc}"
            ) from exc
    raise AnsweredOutside(
        f"backend {backend!r} answered a call outside its {outside.limit} limit wrongly: {wrong_outside}"
    ) from wrong_outside


# ---- the checks on a layer example's fused conv call -----------------------------------------------


class NotAConvCall(Exception):
    """The example makes no conv call these checks can run (no short convs, a width or activation the
    backend does not run): the property is not applicable, as the layer properties' premises are."""


def conv_call_of(example: Example) -> tuple[ConvCall, tuple[int, ...], Backend]:
    """The conv call the example's fused prologue would make, as plain data: every slot's channels side
    by side; the q conv's width, activation and parameter dtype; a bias where the layer's ``conv_bias``
    says so and every conv has one (upstream's rule for the fused call); the example's dtype, batch,
    length and seed; ``cu_seqlens`` varlen as packed sequences; an initial state when the example
    continues a populated cache (a padding mask only zeroes inputs: dense here). Returns the call, the
    slots' channel counts and the backend, its object: the example carries its name, looked up here once
    for every check the row runs on the call."""

    config = example.config
    if not config.use_short_conv:
        raise NotAConvCall("use_short_conv=False: the layer makes no conv call")
    first = config.SLOTS[0]
    q = config.conv_spec(first)
    impl, W = get_backend(config.slot_backend(first)), config.slot_kernel_size(first)
    caps = capabilities([impl, "torch"])
    varlen = example.varlen == "cu_seqlens"
    state = example.cache == "populated" and (not varlen or caps.varlen_initial_state)
    dims = tuple(config.conv_channels(n) for n in config.SLOTS)
    param_dtype = q.dtype if q.dtype not in (None, example.dtype) else None
    call = ConvCall(
        B=1 if varlen else example.batch,
        T=example.seq_len,
        D=sum(dims),
        W=W,
        dtype=example.dtype,
        bias=config.conv_bias and all(config.slot_bias(n) for n in config.SLOTS),
        activation=q.activation,
        initial_state=state,
        seq_lens=tuple(example.seq_lens) if varlen else (),
        seed=example.seed,
        param_dtype=param_dtype,
        values=example.conv_values,
    )
    reason = call.refusal(caps)
    if reason is not None:
        raise NotAConvCall(f"backend {impl.name!r} does not take the layer's fused conv call: {reason}")
    return call, dims, impl


def check_layer_conv_call(
    call: ConvCall, dims: tuple[int, ...], backend: Backend, *, seed: int, grad: bool, device: str = "cpu"
) -> None:
    """Every conformance check on a layer's fused conv call (:func:`conv_call_of`) on its backend:
    forward and final state; gradients (``grad``); the step kernel from a state (unchanged after);
    a continuation from the final state and decoding after a prefill, each at a split point drawn from
    ``seed`` (dense calls of two tokens or more); and the call sliced by slot (``dims``), bitwise."""
    label_conv_call(call, grad=grad, final_state=True)
    check_forward(call, backend, device)
    if grad:
        check_gradients(call, backend, device)
    # packed sequences: the checks below run on the same tokens as one sequence
    dense = dataclasses.replace(call, seq_lens=(), initial_state=call.initial_state and not call.seq_lens)
    check_update(dataclasses.replace(dense, initial_state=True), backend, device)
    if dense.T >= 2:
        check_continuation(dense, 1 + seed % (dense.T - 1), backend, device)
    check_decode_continuation(dense, seed % dense.T, backend, device)
    check_fused_slices(dataclasses.replace(dense, initial_state=False), list(dims), backend, device)
