"""P2-P5: the path taken, fused == separate (forward bitwise, gradients), and exact fallback.

Each test draws whole examples (config, dtype, shapes, cache and varlen state, grad/train) and
runs one property from :mod:`gdn_equiv.harness.properties` on the backend chosen by ``--gdn-backend``, on the
layers of the target chosen by ``--gdn-target``: ours (``gdn_equiv``), or fla's (``fla``, its own
guard deciding and its own separate path as the unfused layer; ``--fla-core`` picks its core).

A test none of whose examples met its property's premise fails ("not exercised", SPEC §10): a
property that compared nothing has not passed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from gdn_equiv.harness import isolation, ledger, registry
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.cells import parts
from gdn_equiv.harness.registry import Draw
from gdn_equiv.model.example import Example
from gdn_equiv.strategies import premises
from gdn_equiv.targets import Target, get_target

# first: cheap on a CPU (a fraction of a second per example) and broad, so a defect shows within seconds;
# slow: on a GPU each is tens of seconds cold (Triton compiles). Both start them first under xdist
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow, pytest.mark.first(0)]


#: the event of an example that did not meet its property's premise (the ledger's; HypoFuzz's ledger reads it)
NOT_APPLICABLE = ledger.NOT_APPLICABLE_EVENT
#: the gate's row verdict: a test none of whose examples met its premise fails, "not exercised"
exercised = ledger.exercised


@pytest.fixture(scope="session")
def layer_target(gdn_target: str, fla_core: str) -> str | Target:
    """What the properties' ``target=`` gets: the name of ``--gdn-target``, fla's target with ``--fla-core``."""
    return get_target("fla", core=fla_core) if gdn_target == "fla" else gdn_target


def _name(target: str | Target) -> str:
    return target if isinstance(target, str) else target.name


def _upstream(target: str | Target) -> bool:
    return _name(target) != "gdn_equiv"


def run_example(
    prop,
    example: Example,
    device: str,
    target: str | Target = "gdn_equiv",
    *,
    may_not_apply: bool = False,
    **kwargs: Any,
):
    """One example through the ledger (:func:`gdn_equiv.harness.ledger.judge`): counted and labelled once it
    compared something; one that did not meet the premise compared nothing. An upstream target's own guard
    decides, so where it disagrees with the spec the states built from the spec's conditions need not meet
    the premise (that gap is P1's: ``gdn-equiv check --target fla``); built to apply otherwise, a miss is a
    failure (a strategy bug, or P1 guard = spec failing)."""
    note(example.short())
    return ledger.judge(
        lambda: isolation.call(prop, example, device=device, target=target, **kwargs),  # a worker under --gdn-isolate
        example,
        must_apply=not (may_not_apply or _upstream(target)),
        count=True,
        # read from Hypothesis' observability output by `gdn-equiv fuzz --engine hypofuzz`: HypoFuzz calls
        # the test inside @given, never exercised()'s tally, so a row of such examples only is told by this
        on_missed=lambda reason: event(NOT_APPLICABLE),
    )


# The strategies are drawn with data.draw (their arguments are fixtures): built once per arguments (the
# registry caches each premise), so Hypothesis validates them once and examples() builds its config
# strategies once (plug-ins register their activations and facts before the tests start).
@functools.cache
def premise(name: str, backend: str, families: tuple[str, ...], target: str = "gdn_equiv") -> st.SearchStrategy[Draw]:
    """The draws of the property ``name``: its record's premise (:mod:`gdn_equiv.harness.registry`, what
    ``gdn-equiv check`` draws too), over the gate's families, any dtype; on an upstream target, only what fla
    trains (:func:`gdn_equiv.strategies.premises.trainable_upstream`)."""
    drawn = registry.get_record(name).strategy(backend, families)
    return premises.trainable_upstream(drawn) if _upstream(target) else drawn


@pytest.fixture(scope="session")
def fusing_families(layer_target: str | Target, gdn_families: tuple[str, ...]) -> tuple[str, ...]:
    """The families P3/P4 draw from: those with a fused prologue on the target. With none, P3/P4 are
    "n/a" with that reason (a skip), not "not exercised"."""
    fusing, why = P.families_with_fusion(layer_target, gdn_families)
    if why is not None:
        pytest.skip(f"n/a: {why}")
    return fusing


def _gate_test(record: registry.PropertyRecord) -> Callable[..., None]:
    """The gate's test of one property record: examples from its premise, its check on the layers of
    ``--gdn-target`` with the backend of ``--gdn-backend``; P3/P4 (``needs_fusion``) draw from the families
    the target fuses. Named by the record (``gate_test``), its database key the record's name."""
    of = parts(record.gate_parts) if record.gate_parts is not None else 1  # the test's parts here (1: one test)

    def run(
        data: st.DataObject,
        backend: str,
        families: tuple[str, ...],
        device: str,
        target: str | Target,
        allow_missed_fusion: bool,
        part: int | None = None,
    ) -> None:
        reason = record.not_applicable(backend)  # a row that cannot be asked here (a backend against itself)
        if ledger.asked(reason) is not None:
            pytest.skip(f"{ledger.Outcome.NOT_APPLICABLE}: {reason}")
        example, must_apply = data.draw(premise(record.name, backend, families, _name(target)))
        kwargs = dict(record.upstream_gate_kwargs) if _upstream(target) else {}
        if record.allows_missed_fusion and allow_missed_fusion:
            kwargs["allow_missed"] = True
        if part is not None:
            kwargs.update(part=part, of=of)
        run_example(record.check, example, device, target, may_not_apply=not must_apply, **kwargs)

    # the fixtures pytest passes, by name in the signature
    test: Callable[..., None]
    if of > 1:  # the cells in parts (a GPU): each part its share of every example's cells
        assert not record.needs_fusion, record.name

        def parted(data, gdn_backend, gdn_families, device, layer_target, allow_missed_fusion, part):
            run(data, gdn_backend, gdn_families, device, layer_target, allow_missed_fusion, part)

        test = parted
    elif record.needs_fusion:

        def fusing(data, gdn_backend, fusing_families, device, layer_target, allow_missed_fusion):
            run(data, gdn_backend, fusing_families, device, layer_target, allow_missed_fusion)

        test = fusing
    else:

        def plain(data, gdn_backend, gdn_families, device, layer_target, allow_missed_fusion):
            run(data, gdn_backend, gdn_families, device, layer_target, allow_missed_fusion)

        test = plain

    assert record.gate_test is not None
    test.__name__ = test.__qualname__ = record.gate_test
    test.__doc__ = f"{record.name}: {record.summary}."
    budget: dict[str, Any] = {}
    if record.gate_cost != 1:
        budget["max_examples"] = max(2, settings().max_examples // record.gate_cost)
    wrapped = given(data=st.data())(settings(deadline=None, **budget)(test))
    wrapped.hypothesis.inner_test._hypothesis_internal_add_digest = record.name.encode()  # type: ignore[attr-defined]
    gate = exercised(wrapped)
    return pytest.mark.parametrize("part", range(of))(gate) if of > 1 else gate


# one test per record the gate runs here, named for its property (test_fused_forward_is_bitwise_equal, ...)
for _record in registry.property_records():
    if _record.gate_test is not None and _record.gate_module == __name__.rsplit(".", 1)[-1]:
        globals()[_record.gate_test] = _gate_test(_record)
