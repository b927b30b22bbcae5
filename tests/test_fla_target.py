"""The ``fla`` target: fla's own guard against the spec, and fla's layer against our reference.

CPU (fla imports there; its layer is built but not run):
- fla's ``_use_fused_qkv_conv``, called directly on layers built from generated configs with per-conv
  facts and on generated call facts, against the spec oracle below (a decision table written here,
  independently of :mod:`gdn_equiv.model.guard`). Hypothesis finds fla 0.6.0's two SPEC §1 gaps by itself:
  one property per value of the layer's ``conv_bias`` flag, nothing else pinned. Every family of SPEC §8
  the installed fla has: the five in-house ones and the seven fla-only records
  (:mod:`gdn_equiv.model.families.fla_only`, borrowed examples, few of them: same helper, cheap CPU), each with
  its version-keyed strict xfails; the fla-only records' constructor and conv mapping checked too.

GPU (fla's Triton conv and norm kernels):
- fla(auto) vs our reference (same state_dict) for output, dx and parameter gradients: fla must be as
  accurate as the reference in the same dtype, measured against the reference's fp64 twin, the bar being
  the least accurate of the plain reference and its one-ulp rounding variants
  (:func:`gdn_equiv.model.example.accuracy_runs`, :func:`gdn_equiv.harness.compare.assert_as_accurate`; an elementwise
  §6 tolerance does not fit a whole layer of another implementation, and one reference run is not a fair
  bar, see :data:`gdn_equiv.harness.compare.ACCURACY_FACTOR`);
- fla fused = fla separate, forced through the target's documented subclass, where the oracle fuses.
``--fla-core=fla|reference`` (or ``GDN_FLA_CORE``) picks fla's core for the forward properties
(default ``fla``); the gradient properties always use the reference core (fla's chunked backward does
not run on Hopper with Triton 3.6, DEVICE.md). The core used is printed with each example.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import properties as P
from gdn_equiv.harness.compare import assert_run_as_accurate
from gdn_equiv.harness.testing import MISS_BOUND
from gdn_equiv.model.config import CallFacts, ConvSpec, LayerConfig
from gdn_equiv.model.example import Example, Run, accuracy_runs, unit_cotangent_backward
from gdn_equiv.model.families import fla_only_families, get_family, is_fla_only, known_families
from gdn_equiv.model.families.gated_deltanet import GDNConfig
from gdn_equiv.model.fla_versions import CONV_0_5, fla_version, version_row
from gdn_equiv.strategies import layer_configs
from gdn_equiv.targets import get_target
from gdn_equiv.targets.fla_target import (
    build_fla_layer,
    construct_layer,
    fla_class_of,
    fla_conv_channels,
    fla_guard,
    fla_layer_facts,
)

Tensor = torch.Tensor
FLA = get_target("fla")
_REASON = FLA.unavailable()
FLA_VERSION = fla_version()
ROW = None if _REASON is not None else version_row()
FUSING = () if ROW is None else tuple(f for f in (*known_families(), *fla_only_families()) if ROW.fuses(f))
pytestmark = [
    pytest.mark.fla,
    pytest.mark.skipif(_REASON is not None, reason=f"fla target unavailable: {_REASON}"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
ON_060 = FLA_VERSION == "0.6.0"


def _class_exists(family: str) -> bool:
    try:
        fla_class_of(family)
    except (ImportError, AttributeError):
        return False
    return True


# the in-house families and the fla-only ones (gdn_equiv.model.families.fla_only) whose class the installed fla has
FAMILIES = tuple(f for f in (*known_families(), *fla_only_families()) if _REASON is None and _class_exists(f))
FLA_ONLY = tuple(f for f in FAMILIES if is_fla_only(f))


def _examples(family: str, in_house: int) -> int:
    """Search budget: an fla-only family builds fla's module per example and has no in-house layer
    whose properties would cover its layout otherwise, but its guard is the same helper as its
    borrowed family's: a few examples keep the 12-family parametrisation cheap on CPU."""
    return max(10, in_house // 6) if is_fla_only(family) else in_house


# ---- the spec oracle: SPEC §1 / P1 as a decision table ------------------------------------------
def spec_fuses(config: LayerConfig, call: CallFacts) -> tuple[bool, list[str]]:
    """Whether the spec allows the fused prologue, and every condition that forbids it."""
    why = []
    if not config.use_short_conv:
        return False, ["short conv off"]
    if call.has_cached_state:
        why.append("cached state")
    if call.use_cache:
        why.append("use_cache")
    if call.varlen:
        why.append("varlen")
    convs = [config.conv_spec(n) for n in config.SLOTS]
    backends = {("cuda" if c.backend == "cuda" else "triton") if c.backend else _fla_name(config) for c in convs}
    activations = {"silu" if c.activation == "swish" else c.activation for c in convs}
    sizes = {c.kernel_size or config.conv_size for c in convs}
    biases = [config.conv_bias if c.bias is None else c.bias for c in convs]
    if len(backends) > 1:
        why.append("backends differ")
    if len(activations) > 1:
        why.append("activations differ")
    if len(sizes) > 1:
        why.append("kernel sizes differ")
    if any(b != config.conv_bias for b in biases):
        why.append(f"bias presence {biases} != layer conv_bias={config.conv_bias}")
    if len({c.dtype for c in convs}) > 1:  # None: the layer's dtype
        why.append("parameter dtypes differ")
    return not why, why


def _fla_name(config: LayerConfig) -> str:
    return "cuda" if config.conv_backend == "cuda" else "triton"


# ---- generated layer and call states ------------------------------------------------------------
_FIELDS = {
    "backend": ["triton", "cuda"],
    "activation": ["swish", "silu", None],
    "kernel_size": [2, 3, 4],
    "bias": [False, True],
}


@st.composite
def conv_spec_overrides(draw: st.DrawFn, activation: str | None) -> ConvSpec:
    """A conv's own facts: at most one field deviates from the layer's (its value drawn freely, so it
    may still repeat the layer's). Single-field deviations are where a guard gap hides (one bias too
    many or too few); several at once would mostly be refused for other reasons. Shrinks to the
    family's own conv (``activation``)."""
    field = draw(st.sampled_from([None] * 4 + list(_FIELDS)))  # half the convs keep the layer's facts
    if field is None:
        return ConvSpec(activation=activation)
    return ConvSpec(**{"activation": activation, field: draw(st.sampled_from(_FIELDS[field]))})


@st.composite
def configs(draw: st.DrawFn, family: str, *, conv_bias: bool | None = None) -> LayerConfig:
    """Small configs of ``family`` that the installed fla's class accepts, each conv possibly with its own
    facts; shrinks to identical convs."""
    base = draw(
        layer_configs(family=family, vary_convs=0.0, use_short_conv=None, conv_bias=conv_bias, fla_version=FLA_VERSION)
    )
    # the layer's shared activation (the family's own first), or silu half the time: the silu/swish alias
    # is a gap only among convs that have an activation (LightNet's have none)
    own = draw(st.sampled_from([base.q_conv.activation, "silu"]))
    return base.replace(
        conv_backend=draw(st.sampled_from(["triton", "cuda"])),
        conv_size=draw(st.integers(2, 4)),
        **{f"{n}_conv": draw(conv_spec_overrides(own)) for n in base.SLOTS},
    )


def call_states() -> st.SearchStrategy[CallFacts]:
    """Cache, use_cache and varlen each set about one time in eight."""
    flag = st.sampled_from([False] * 7 + [True])
    return st.builds(CallFacts, flag, flag, flag)


def _fla_layer(config: LayerConfig, family: str = "gated_deltanet"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_fla_layer(config, "cpu", family=family, pinnable=False)


def _guard(config: LayerConfig, call: CallFacts, family: str) -> bool:
    return fla_guard(_fla_layer(config, family), call, ROW, family)


# ---- P1 on fla's guard (CPU), every family, the installed version -------------------------------
_BIAS_RULE = {
    "flag": "the layer's conv_bias flag decides whether the fused conv concatenates biases",
    "first": "q_conv.bias decides whether the fused conv concatenates biases (PR #977)",
}
_GAP_REASON = {
    False: "fla {v} fuses with conv_bias=False while a conv has a bias ({rule}): a bias is dropped or, with a bias "
    "on q under PR #977, the fused path raises TypeError; shrunk: conv_bias=False, one conv ConvSpec(bias=True)",
    True: "fla {v} fuses with conv_bias=True while a conv has no bias ({rule}): the fused path raises TypeError or, "
    "with q's bias removed under PR #977, drops k's and v's; shrunk: conv_bias=True, one conv ConvSpec(bias=False)",
}


def _known_gap(family: str, reason: str, *kinds: str) -> list:
    """A strict xfail where the installed version has one of these gap kinds for this family (the
    version row's ``known_gaps`` for the family)."""
    known = () if ROW is None else ROW.known_gaps(family)
    rule = _BIAS_RULE[ROW.fused_bias] if ROW is not None else ""
    expected = any(kind in known for kind in kinds)
    return [
        pytest.mark.xfail(expected, reason=reason.format(v=FLA_VERSION, rule=rule), raises=AssertionError, strict=True)
    ]


@pytest.mark.parametrize(
    ("family", "conv_bias"),
    [
        pytest.param(
            family,
            flag,
            marks=_known_gap(family, _GAP_REASON[flag], "BiasDropped", "MissingBiasCrash"),
            id=f"{family}-conv_bias={flag}",
        )
        for family in FAMILIES
        for flag in (False, True)
    ],
)
def test_fla_guard_fuses_only_where_spec_allows(family: str, conv_bias: bool) -> None:
    """Never fuses where the spec refuses: first the known gap's minimal state (one conv's bias against
    the flag: what the strict xfail documents, checked deterministically), then a search."""
    small = _small(family, conv_bias=conv_bias, k_conv=ConvSpec(activation=_own(family), bias=not conv_bias))
    _assert_never_fuses_where_spec_refuses(family, small, CallFacts(False, False, False))
    _search_fuses_only_where_spec_allows(family, conv_bias)


def _own(family: str) -> str | None:
    return get_family(family).config_cls().q_conv.activation


def _small(family: str, **changes: object) -> LayerConfig:
    fam = get_family(family)
    return fam.config_cls(**{**fam.small, **changes})


def _assert_never_fuses_where_spec_refuses(family: str, config: LayerConfig, call: CallFacts) -> None:
    layer = _fla_layer(config, family)
    spec, why = spec_fuses(config, call)
    fuses = fla_guard(layer, call, ROW, family)
    assert not fuses or spec, f"fla's guard fuses where the spec forbids it: {why}; fla facts: {fla_layer_facts(layer)}"


def _search_fuses_only_where_spec_allows(family: str, conv_bias: bool) -> None:
    @settings(deadline=None, max_examples=_examples(family, 100))
    @given(data=st.data())
    def search(data: st.DataObject) -> None:
        config = data.draw(configs(family, conv_bias=conv_bias), label="config")
        _assert_never_fuses_where_spec_refuses(family, config, data.draw(call_states(), label="call"))

    search()


@pytest.mark.parametrize("family", FAMILIES)
def test_fla_guard_agrees_with_spec_apart_from_bias_and_aliases(family: str) -> None:
    """Outside bias parity and the silu/swish alias, fla's guard is the spec (G1–G7) for every family
    the version fuses; a family it does not fuse is never fused (P2 at the decision point)."""

    @settings(deadline=None, max_examples=_examples(family, 60))
    @given(data=st.data())
    def search(data: st.DataObject) -> None:
        _agrees_apart_from_bias_and_aliases(family, data)

    search()


def _agrees_apart_from_bias_and_aliases(family: str, data: st.DataObject) -> None:
    config, call = data.draw(configs(family), label="config"), data.draw(call_states(), label="call")
    _, why = spec_fuses(config, call)
    if family not in FUSING:
        assert not _guard(config, call, family), f"fla {FLA_VERSION} has no fused prologue for {family}"
        return
    why = [w for w in why if not w.startswith("bias presence")]
    raw_activations = {config.conv_spec(n).activation for n in config.SLOTS}
    if {"silu", "swish"} <= raw_activations:
        return  # the alias case: see test_fla_guard_is_complete
    fuses = _guard(config, call, family)
    assert fuses == (not why), f"fla={fuses}, spec conditions failing: {why}"


@pytest.mark.parametrize(
    "family",
    [
        pytest.param(
            family,
            marks=_known_gap(
                family,
                "fla {v} compares activation strings: q='silu', k='swish' falls back although both are SiLU "
                "(a missed fusion, not a wrong result); shrunk: one conv ConvSpec(activation='swish'), no cache/varlen",
                "NeedlessFallback",
            ),
        )
        for family in FAMILIES
        if family in FUSING
    ],
)
def test_fla_guard_is_complete(family: str) -> None:
    """Wherever the spec fuses, fla's guard fuses too (a needless fallback is a cheaper defect): the
    known alias state first (convs silu, k's swish), then a search."""
    silu = ConvSpec(activation="silu")
    alias = _small(family, q_conv=silu, k_conv=ConvSpec(activation="swish"), v_conv=silu)
    _assert_fuses_where_spec_fuses(family, alias, CallFacts(False, False, False))

    @settings(deadline=None, max_examples=_examples(family, 100))
    @given(data=st.data())
    def search(data: st.DataObject) -> None:
        config, call = data.draw(configs(family), label="config"), data.draw(call_states(), label="call")
        _assert_fuses_where_spec_fuses(family, config, call)

    search()


def _assert_fuses_where_spec_fuses(family: str, config: LayerConfig, call: CallFacts) -> None:
    spec, _ = spec_fuses(config, call)
    if spec:
        assert _guard(config, call, family), "fla's guard falls back where fusion is exact"


@pytest.mark.parametrize(
    "family",
    [
        pytest.param(
            family,
            marks=_known_gap(
                family,
                "fla {v}'s guard ignores the convs' parameter dtypes (SPEC G9) and fuses k/v fp32 with q bf16 "
                "(torch.cat promotes); on the H200 the 0.6.0 fuzz's shrunk case gave fused = separate bitwise "
                "(fla's conv computes in fp32): the spec is stricter here than fla's kernels need; shrunk: "
                "q_conv=ConvSpec(dtype='bfloat16'), no cache/varlen",
                "OtherRefusal",
            ),
        )
        for family in FAMILIES
        if family in FUSING
    ],
)
def test_fla_guard_refuses_mixed_parameter_dtypes(family: str) -> None:
    """One conv's weight/bias in another dtype than the others' (a user's ``.to()`` on one module): the
    spec refuses (G9), and so should fla's guard. The known state first (q in bf16), then a search."""
    known = _small(family, q_conv=ConvSpec(activation=_own(family), dtype="bfloat16"))
    _assert_refuses_mixed_dtypes(family, known, CallFacts(False, False, False))

    @settings(deadline=None, max_examples=_examples(family, 100))
    @given(data=st.data())
    def search(data: st.DataObject) -> None:
        config = data.draw(configs(family), label="config")
        name = data.draw(st.sampled_from(config.SLOTS), label="conv")
        dtype = data.draw(st.sampled_from(["bfloat16", "float16"]), label="dtype")
        field = f"{name}_conv"
        config = dataclasses.replace(
            config, use_short_conv=True, **{field: dataclasses.replace(getattr(config, field), dtype=dtype)}
        )
        _assert_refuses_mixed_dtypes(family, config, data.draw(call_states(), label="call"))

    search()


def _assert_refuses_mixed_dtypes(family: str, config: LayerConfig, call: CallFacts) -> None:
    _, why = spec_fuses(config, call)
    assert "parameter dtypes differ" in why
    assert not _guard(config, call, family), f"fla's guard fuses where the spec forbids it: {why}"


@pytest.mark.parametrize("family", FAMILIES)
def test_fla_target_reports_no_fused_prologue_exactly_where_the_version_has_none(family: str) -> None:
    """A clean fusable state (the family's small config, no cache/varlen): a version without a fused
    prologue for the family reports ``GapNoFusedPrologue`` (the version row's ``known_gaps``), one
    with it fuses like the spec (no gap)."""
    example = Example(config=_small(family), family=family)
    if ROW is not None and "NoFusedPrologue" in ROW.known_gaps(family):
        with pytest.raises(P.GapNoFusedPrologue):
            P.check_target_guard(example, target="fla", demonstrate=False)
    else:
        assert P.check_target_guard(example, target="fla", demonstrate=False).fuse


@pytest.mark.parametrize("family", FLA_ONLY)
@settings(deadline=None, max_examples=4)
@given(data=st.data())
def test_fla_only_family_builds_with_the_convs_its_examples_imply(family: str, data: st.DataObject) -> None:
    """An fla-only family's record maps a borrowed example config onto its fla class: every argument
    is taken, fla builds three convs with the channels, kernel size and bias the record says (so the
    convs the target swaps in fit fla's projections), and the target's layer then carries the
    example's conv facts in its state_dict."""
    config = data.draw(
        layer_configs(family=family, vary_convs=0.0, use_short_conv=True, fla_version=FLA_VERSION), label="config"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer, dropped = construct_layer(fla_class_of(family), family, config)
    assert dropped == {}, f"{family}'s fla class does not take {sorted(dropped)}"
    for name in config.SLOTS:
        conv = getattr(layer, f"{name}_conv1d")
        want = fla_conv_channels(family, config, name)
        assert tuple(conv.weight.shape) == (want, 1, config.conv_size), (name, tuple(conv.weight.shape))
        assert (conv.bias is not None) == config.conv_bias, name
        # DeltaNet's q/k convs are silu only with qk_activation='silu' (SPEC §8), the record's choice
        # for a silu/swish example; every other conv fla builds is silu
        qk_silu = family != "delta_net" or config.conv_spec("q").activation in ("silu", "swish")
        assert conv.activation == ("silu" if name == "v" or qk_silu else None), (name, conv.activation)
    # the target: fla's layer with the example's per-conv facts (one conv's bias against the flag)
    varied = config.replace(k_conv=ConvSpec(activation=config.conv_spec("k").activation, bias=not config.conv_bias))
    handle = FLA.build(Example(config=varied, family=family, dtype="bfloat16"), "cpu")
    state = handle.state_dict()
    for name in config.SLOTS:
        channels, bias = fla_conv_channels(family, varied, name), varied.conv_spec(name).bias
        has_bias = varied.conv_bias if bias is None else bias
        assert state[f"{name}_conv1d.weight"].shape == (channels, 1, varied.conv_size)
        assert (f"{name}_conv1d.bias" in state) == has_bias and state[f"{name}_conv1d.weight"].dtype == torch.bfloat16
    assert handle.reference.slots == config.SLOTS


def test_fla_only_families_are_fla_target_names_only(capsys: pytest.CaptureFixture[str]) -> None:
    """``--family all`` means the twelve of SPEC §8 for ``--target fla`` and the in-house five
    elsewhere (every property iterates those); an fla-only name elsewhere is a usage error naming it;
    ``gdn-equiv families`` lists the seven marked fla-only."""
    from gdn_equiv.model.families import parse_families
    from gdn_equiv.run import cli
    from gdn_equiv.run.cli import common as cli_common

    assert len(parse_families("all", fla_only=True)) == 12 and parse_families("all") == known_families()
    assert parse_families("abc,gdn2", fla_only=True) == ["abc", "gdn2"]
    with pytest.raises(cli_common.UsageError, match=r"--family 'gdn2'.*fla-only.*--target fla.*gated_deltanet"):
        cli_common.families_option("gdn2")
    with pytest.raises(cli_common.UsageError, match=r"unknown family 'gdn3'.*gated_deltanet.*abc"):
        cli_common.families_option("gdn3", fla_only=True)
    assert cli.main(["families"]) == cli_common.EXIT_OK
    marked = [line.split()[0] for line in capsys.readouterr().out.splitlines() if "[fla-only" in line]
    assert marked == fla_only_families()


def test_an_unknown_fla_version_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidArgument, match=r"fla 9\.9\.9 .*0\.6\.0, 0\.5\.2\+pr977"):
        version_row("9.9.9")
    # the PR build sorts below 0.6.0: matched exactly, so both rows exist and differ
    assert version_row("0.5.2+pr977").decision != version_row("0.6.0").decision


def test_fla_target_loads_the_reference_state_dict_strictly() -> None:
    example = Example(config=GDNConfig(hidden_size=8, head_dim=4, num_heads=2, conv_bias=True, k_conv=ConvSpec(
        bias=False, kernel_size=3)), seq_len=3)  # fmt: skip
    handle = FLA.build(example, "cpu")
    ours = handle.reference.state_dict()
    theirs = handle.state_dict()
    assert ours.keys() == theirs.keys()
    for name, value in ours.items():
        assert theirs[name].dtype == value.dtype and torch.equal(theirs[name], value), name
    facts = handle.layer_facts()
    assert facts.convs is not None and facts.convs[1].kernel_size == 3 and not facts.convs[1].has_bias


def test_forced_fusion_reaches_only_what_the_version_lets_the_adapter_pin() -> None:
    """P2's forced ``"fused"`` expects the fused path only where the adapter can force it: 0.6.0 pins
    the one method that decides; PR #977 tests cache/``cu_seqlens`` in inline code before the helper the
    adapter pins (on the H200, a forced-fused ``cu_seqlens`` example took the separate path and P2 failed
    the harness, not fla)."""
    handle = FLA.build(Example(config=GDNConfig(hidden_size=8, head_dim=4, num_heads=2), seq_len=3), "cpu")
    base = CallFacts(has_cached_state=False, use_cache=False, varlen=False)
    assert handle.forceable(base)
    outer = [dataclasses.replace(base, **{name: True}) for name in ("has_cached_state", "use_cache", "varlen")]
    assert [handle.forceable(c) for c in outer] == [ROW.decision == "method"] * 3


@pytest.mark.xfail(
    ROW is not None and ROW.conv == CONV_0_5,
    strict=True,
    raises=AssertionError,
    reason="fla 0.5's ShortConvolution (fla.modules.conv: 0.5.2's and the PR #977 build's) takes its step "
    "kernel whenever every sequence has one token (B*T == N), autograd on or off, and the step kernel has no "
    "backward: y comes back without a graph and the conv's gradient is lost. Found on the H200 by "
    "test_fla_fused_equals_separate_where_spec_fuses (P4), shrunk to "
    "gated_deltanet fp32 B=2 T=1 hidden 32 conv_size 2 silu, no bias: grad.x fused vs separate 64 of 64 "
    "elements apart, up to 3.7; 0.5.2 strict-xfails here on CPU too; 0.6.0 takes the step only when not "
    "torch.is_grad_enabled()",
)
def test_fla_short_conv_keeps_autograd_at_one_token() -> None:
    """A separate conv of one token per sequence (T = 1, how P4 forces the separate path at decode shapes)
    must stay differentiable: fla's layer is trained and fine-tuned through this path. On a CPU fla's
    Triton conv runs under the interpreter."""
    from fla.modules import ShortConvolution

    from gdn_equiv.model.backends import fla_backend

    if fla_backend._interpreting():
        fla_backend.interpreter_ready(fla_backend.conv_row())
    elif not torch.cuda.is_available():
        pytest.skip("fla's Triton conv needs a GPU or TRITON_INTERPRET=1")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    conv = ShortConvolution(hidden_size=8, kernel_size=2, bias=False, activation="silu", backend="triton").to(device)
    x = torch.randn(2, 1, 8, device=device, requires_grad=True)
    y, _ = conv(x)
    assert y.requires_grad, "y of a one-token call came back without an autograd graph"
    (grad,) = torch.autograd.grad(y.sum(), x)
    a = x.detach()[:, 0] * conv.weight.detach()[:, 0, -1]  # only the newest tap sees a token at T = 1
    expected = torch.sigmoid(a) * (1 + a * (1 - torch.sigmoid(a))) * conv.weight.detach()[:, 0, -1]
    torch.testing.assert_close(grad[:, 0], expected)


# ---- GPU differential properties ----------------------------------------------------------------
gpu = pytest.mark.skipif(FLA.unavailable_to_run() is not None, reason=str(FLA.unavailable_to_run()))
DTYPES = ("float32", "bfloat16", "float16")


@st.composite
def gpu_examples(draw: st.DrawFn, *, fusable: bool | None = None, grad: bool | None = None) -> Example:
    """Small GPU cases on a fixed shape grid (few Triton specialisations); bias parity always holds
    (its violation is the known defect above). ``fusable`` pins the call to the oracle's outcome."""
    conv_bias = draw(st.booleans())
    config = GDNConfig(
        hidden_size=32, head_dim=16, num_heads=2, expand_v=draw(st.sampled_from([1, 2])),
        num_v_heads=draw(st.sampled_from([None, 4])), use_gate=draw(st.booleans()), conv_size=draw(st.integers(2, 4)),
        conv_bias=conv_bias, conv_backend="triton", allow_neg_eigval=draw(st.booleans()),
    )  # fmt: skip
    call = {"varlen": "none", "cache": "none", "use_cache": False}
    if fusable is False or (fusable is None and draw(st.booleans())):
        call = draw(st.sampled_from([
            {"varlen": "cu_seqlens", "cache": "none", "use_cache": False},
            {"varlen": "none", "cache": "none", "use_cache": True},
            {"varlen": "none", "cache": "populated", "use_cache": True},
            {"varlen": "mask", "cache": "none", "use_cache": False},
        ]))  # fmt: skip
    T = draw(st.sampled_from([1, 7, 64, 100]))
    batch = 1 if call["varlen"] == "cu_seqlens" else 2
    seq_lens: tuple[int, ...] = ()
    if call["varlen"] == "cu_seqlens":
        cut = draw(st.integers(0, T))
        seq_lens = (cut, T - cut)
    elif call["varlen"] == "mask":
        seq_lens = (T, draw(st.integers(0, T)))
    return Example(
        config=config, dtype=draw(st.sampled_from(DTYPES)), batch=batch, seq_len=T, seed=draw(st.integers(0, 999)),
        varlen=call["varlen"], seq_lens=seq_lens, cache=call["cache"], prefix_len=3, use_cache=call["use_cache"],
        grad=draw(st.booleans()) if grad is None else grad, train=False,
    )  # fmt: skip


def _run_fla(handle, example: Example, prologue: str = "auto"):
    inputs = handle.inputs()
    x = inputs.x.detach().requires_grad_(example.grad)
    inputs.x = x
    with torch.set_grad_enabled(example.grad):
        out, cache = handle.run(inputs, prologue)
    return out, x, cache


def _backward(out: Tensor, example: Example) -> None:
    unit_cotangent_backward(example.seed + 11)(out)


def _reference_runs(handle, example: Example) -> tuple[list[Run], Run]:
    """Our reference (same weights, dtype), plain and with one-ulp rounding jitter, and its fp64 twin."""
    backward = unit_cotangent_backward(example.seed + 11) if example.grad else None
    return accuracy_runs(handle.reference, handle.inputs, backward, seed=example.seed)


@gpu
@settings(deadline=None, max_examples=25)
@given(example=gpu_examples(grad=False))
def test_fla_auto_forward_is_as_accurate_as_reference(example: Example, fla_core: str) -> None:
    """fla(auto)'s output is no further from the fp64 truth than 2x the least accurate same-dtype reference run."""
    core = fla_core
    note(f"core={core} {example.short()}")
    handle = get_target("fla", core=core).build(example, "cuda")
    out, _, _ = _run_fla(handle, example)
    refs, truth = _reference_runs(handle, example)
    assert_run_as_accurate((out, None, {}), refs, truth, paths=(f"fla auto (core={core})", "reference"),
                           context=example.short())  # fmt: skip


@gpu
@settings(deadline=None, max_examples=15)
@given(example=gpu_examples(grad=True))
def test_fla_auto_gradients_are_as_accurate_as_reference(example: Example) -> None:
    """Output, dx and every parameter gradient of fla(auto), by the same accuracy criterion."""
    note(f"core=reference {example.short()}")
    handle = get_target("fla", core="reference").build(example, "cuda")
    out, x, _ = _run_fla(handle, example)
    _backward(out, example)
    refs, truth = _reference_runs(handle, example)
    grads = {name: p.grad for name, p in handle.layer.named_parameters()}
    assert_run_as_accurate((out, x.grad, grads), refs, truth, paths=("fla", "reference"), context=example.short())


@gpu
@settings(deadline=None, max_examples=20)
@given(example=gpu_examples(fusable=True))
def test_fla_fused_equals_separate_where_spec_fuses(example: Example, fla_core: str) -> None:
    """P3 and P4 on the fla target: the suite's own properties (no copy of them here), fla's paths forced
    through the adapter's version table."""
    core = fla_core if not example.grad else "reference"
    note(f"core={core} {example.short()}")
    target = get_target("fla", core=core)
    P.check_forward_exact(example, device="cuda", target=target)
    if example.grad:
        P.check_gradients(example, device="cuda", target=target)


@gpu
@settings(deadline=None, max_examples=20)
@given(example=gpu_examples())
def test_fla_auto_path_is_its_guard(example: Example) -> None:
    """P2 on the fla target: the hook-observed path is what fla's own guard says (the suite's property)."""
    P.check_path_taken(example, device="cuda", target=get_target("fla", core="reference"))


# ---- the gap search behind `gdn-equiv check/fuzz --target fla` (CPU) ------------------------------
@pytest.mark.slow
def test_gap_search_finds_both_spec_gaps_by_itself() -> None:
    """One round per new gap kind, each shrunk on the guards and then shown once: SPEC §1's two gaps
    come out with no hint where to look (the search draws from the general example strategies)."""
    from gdn_equiv.run.runner import search_gaps

    # a round that finds no new kind ends the search: MissingBiasCrash needs G8 (alone, or with G9) broken
    # with the flag on and a conv without bias. Drawn freely, it took up to ~240 examples of its round,
    # so 500 per round missed it now and then (CI, 2026-12-03); with a third of the draws breaking one
    # condition alone, 14 searches found both gaps in 137-480 guard calls (shrinking included), 4.3-13.7 s
    # here, against 136-1,093 calls and 4.9-19.2 s for 6 searches before. First hits have a heavy tail
    # (testing.MISS_BOUND), so a round may run up to MISS_BOUND. The search yields each gap as it is
    # found: the test stops at the two it needs (the other kinds and the final round of clean examples
    # cost ~3/4 of a whole search, most on the PR #977 build), so the bound costs nothing while it hits
    wanted = {"P1-fla-gap-BiasDropped", "P1-fla-gap-MissingBiasCrash"}
    failed = {}
    for check in search_gaps("fla", max_examples=MISS_BOUND, core="reference"):
        assert check.result == "FAIL", (check.name, sorted(failed))  # the summary row: the search ended
        failed[check.name] = check
        assert check.example is not None and check.example.batch == 1 and check.example.seq_len == 1  # shrunk
        if wanted <= failed.keys():
            break
    assert "TypeError" in failed["P1-fla-gap-MissingBiasCrash"].failure


def test_gap_search_stops_mid_round_when_its_budget_is_spent() -> None:
    """The budget runs out after the round has started (a clock that jumps after its second reading):
    the round ends before its first example instead of running ``max_examples`` of them."""
    from gdn_equiv.run.runner import search_gaps

    readings = iter([0.0, 0.0])
    checks = list(search_gaps("fla", max_examples=50, seconds=1.0, clock=lambda: next(readings, 1e9)))
    assert [(c.name, c.examples, c.result) for c in checks] == [("P1-fla-guard-vs-spec", 0, "not reached")]


def _missing_bias_example() -> Example:
    """A conv without the bias the version's fused path concatenates: 0.6.0 concatenates every bias when
    the layer flag is on, PR #977 when q's conv has one; k's is removed."""
    return Example(config=_small("gated_deltanet", conv_bias=True, k_conv=ConvSpec(bias=False)), seq_len=2)


def test_a_missing_bias_decided_from_the_guards_is_predicted_not_a_crash() -> None:
    with pytest.raises(P.GapMissingBias) as gap:
        P.check_target_guard(_missing_bias_example(), target="fla", demonstrate=False)
    assert type(gap.value) is P.GapMissingBias and "predicted from the facts; not run" in str(gap.value)


def test_a_missing_bias_run_on_cpu_is_the_crash_seen() -> None:
    """fla's fused path concatenates the biases before any kernel: on a CPU the ``TypeError`` is seen."""
    with pytest.raises(P.GapMissingBiasCrash, match="raises TypeError"):
        P.check_target_guard(_missing_bias_example(), target="fla", demonstrate=True, core="reference")
