"""``gdn-equiv bench compare OLD.json NEW.json``: is NEW slower than OLD, measurement by measurement?

Two ``bench layer`` (or two ``bench prologue``) reports of format ``gdn-equiv-bench/2`` keep every timed
call's milliseconds. Their rows are matched by what was measured (family, implementation, backend,
B, T, dtype; ``--pair OLD=NEW`` matches a backend of OLD with another name in NEW, a kernel under review
against the one it replaces), and each matched row's timings (separate/fused x fwd/fwd+bwd) are
compared by a one-sided Mann-Whitney U test of "NEW's calls take longer than OLD's calls times
``1 + max_slowdown``": a slowdown is flagged only when it is past the allowed margin *and* significant,
at ``alpha`` over all the measurements compared (Holm's step-down correction, so a report of many
rows does not flag one by chance more often than a report of one).

The test is written here (no scipy): the exact null distribution of U by counting (the coefficients
of the Gaussian binomial ``[m+n choose m]_q``) where there are no ties and the samples are small, else
the normal approximation with the tie correction and a continuity correction. Effect sizes beside
it: the ratio of the medians (NEW / OLD), Cliff's delta and the common-language effect size
(P(a NEW call is slower than an OLD one), ties counted half), on the raw samples.

Two reports are comparable only when they come from the same machine and software: the device name,
torch, CUDA, triton, gdn-equiv, fla and causal-conv1d versions, Triton's interpreter, the command and
the timing method must be equal; any difference is refused by name before anything is compared
(exit 2). A row in one report but not the other, a row that errored in either, or a measurement with
too few samples to ever reach ``alpha`` is *not compared* and listed: the comparison is then not a pass
(exit 1), as the SPEC's ledger has it for an asked row that did not run.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.run.bench import FORMAT, PASSES, PATHS

#: what must be equal in both reports' ``machine`` for their times to be comparable
SAME_MACHINE = ("device_name", "torch", "cuda", "triton", "gdn_equiv", "fla", "causal_conv1d", "triton_interpret")
#: a row's identity (besides the backend, which ``--pair`` may map)
ROW_KEY = ("family", "impl", "backend", "B", "T", "dtype")
DEFAULT_MAX_SLOWDOWN = 0.05
DEFAULT_ALPHA = 0.05
#: the exact null distribution is counted up to this many pairs (m * n) when nothing is tied
EXACT_PAIRS = 4000


# ---- the statistics ------------------------------------------------------------------------------


def pair_counts(a: Sequence[float], b: Sequence[float]) -> tuple[int, int, int]:
    """``(greater, equal, less)``: how many of the ``len(a) * len(b)`` pairs have ``a_i >`` / ``==`` / ``< b_j``."""
    ordered = sorted(b)
    greater = equal = 0
    for x in a:
        lo, hi = bisect.bisect_left(ordered, x), bisect.bisect_right(ordered, x)
        greater += lo
        equal += hi - lo
    return greater, equal, len(a) * len(b) - greater - equal


def u_statistic(a: Sequence[float], b: Sequence[float]) -> float:
    """Mann-Whitney's U of ``a``: the pairs where ``a`` is larger, ties counted half."""
    greater, equal, _ = pair_counts(a, b)
    return greater + equal / 2


def u_distribution(m: int, n: int) -> list[int]:
    """``counts[u]``: how many of the ``C(m+n, m)`` orderings of two untied samples of sizes ``m`` and
    ``n`` give ``U = u`` (the coefficients of the Gaussian binomial ``[m+n choose m]_q``, built as
    ``prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i)``, each division exact)."""
    poly = [1]
    for i in range(1, min(m, n) + 1):
        big = max(m, n)
        grown = poly + [0] * (big + i)  # times (1 - q^(big+i))
        for k in range(len(grown) - 1, big + i - 1, -1):
            grown[k] -= grown[k - big - i]
        for k in range(i, len(grown)):  # divided by (1 - q^i)
            grown[k] += grown[k - i]
        poly = grown[: len(grown) - i]  # the quotient's degree is i lower
    return poly


def _ties(values: Sequence[float]) -> list[int]:
    sizes: dict[float, int] = {}
    for v in values:
        sizes[v] = sizes.get(v, 0) + 1
    return [t for t in sizes.values() if t > 1]


def p_greater(a: Sequence[float], b: Sequence[float]) -> tuple[float, str]:
    """One-sided p-value of "``a`` tends to be larger than ``b``" by Mann-Whitney's U, and the method:
    ``exact`` (no ties, ``m * n <= EXACT_PAIRS``) or ``normal`` (tie-corrected variance, continuity
    correction). With every value tied the p-value is 1."""
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        raise InvalidArgument(f"a rank test needs samples on both sides, got {m} and {n}")
    u = u_statistic(a, b)
    ties = _ties([*a, *b])
    if not ties and m * n <= EXACT_PAIRS:
        counts = u_distribution(m, n)
        return sum(counts[math.ceil(u) :]) / math.comb(m + n, m), "exact"
    total = m + n
    variance = m * n / 12 * ((total + 1) - sum(t**3 - t for t in ties) / (total * (total - 1)))
    if variance <= 0:
        return 1.0, "normal"
    z = (u - m * n / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2)), "normal"


def smallest_p(m: int, n: int) -> float:
    """The smallest one-sided p-value two samples of these sizes can give (all of one above all of the other)."""
    return 1 / math.comb(m + n, m)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order (reject where ``adjusted <= alpha``:
    the chance of any false rejection among them stays at most ``alpha``)."""
    k = len(pvalues)
    order = sorted(range(k), key=lambda i: pvalues[i])
    adjusted = [1.0] * k
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def cliffs_delta(a: Sequence[float], b: Sequence[float]) -> float:
    """``P(a > b) - P(a < b)`` over all pairs: +1 every ``a`` above every ``b``, 0 no tendency."""
    greater, _, less = pair_counts(a, b)
    return (greater - less) / (len(a) * len(b))


def common_language(a: Sequence[float], b: Sequence[float]) -> float:
    """``P(a > b) + P(a == b) / 2`` over all pairs (McGraw and Wong's common-language effect size)."""
    return u_statistic(a, b) / (len(a) * len(b))


# ---- two reports ---------------------------------------------------------------------------------


@dataclass
class Measurement:
    """One timing of a matched row (a path and a pass) in both reports, and its verdict."""

    row: str
    path: str
    pass_: str
    old: list[float]
    new: list[float]
    p_slower: float = 1.0
    method: str = ""
    p_holm: float = 1.0
    verdict: str = ""  # SLOWER | same | faster

    @property
    def ratio(self) -> float:
        return median(self.new) / median(self.old)


@dataclass
class Comparison:
    old: Path
    new: Path
    max_slowdown: float
    alpha: float
    machine: dict[str, Any]
    measured: list[Measurement] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)  # "row: why"

    @property
    def slower(self) -> list[Measurement]:
        return [m for m in self.measured if m.verdict == "SLOWER"]


def load_report(flag: str, path: Path) -> dict[str, Any]:
    """A bench report with samples, or :class:`InvalidArgument` naming what is wrong with it."""
    if not path.is_file():
        raise InvalidArgument(f"{flag} {str(path)!r} must name an existing bench report (.json)")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgument(f"{flag} {str(path)!r} is not a JSON file: {exc}") from exc
    kind = FORMAT.rsplit("/", 1)[0] + "/"
    if not isinstance(report, dict) or not str(report.get("format", "")).startswith(kind):
        raise InvalidArgument(f"{flag} {str(path)!r} is not a gdn-equiv bench report (no {kind!r} format)")
    if report["format"] != FORMAT:
        raise InvalidArgument(
            f"{flag} {str(path)!r} is format {report['format']!r}: compare needs {FORMAT!r}, whose rows keep every "
            "timed call (rerun the bench)"
        )
    if not isinstance(report.get("rows"), list) or not isinstance(report.get("machine"), dict):
        raise InvalidArgument(f"{flag} {str(path)!r}: a bench report needs 'rows' (a list) and 'machine'")
    return report


def refusal(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why the two reports' times cannot be compared (a different machine, software or measurement), or ``None``."""
    if old.get("command") != new.get("command"):
        return f"command differs: OLD is {old.get('command')!r}, NEW is {new.get('command')!r}"
    for key in SAME_MACHINE:
        a, b = old["machine"].get(key), new["machine"].get(key)
        if a != b:
            return f"machine {key} differs: OLD {a!r}, NEW {b!r} (times compare only on the same device and versions)"
    a, b = old.get("timing", {}).get("method"), new.get("timing", {}).get("method")
    if a != b:
        return f"timing method differs: OLD {a!r}, NEW {b!r}"
    return None


def _label(r: dict[str, Any]) -> str:
    return f"{r['family']} {r['impl']}/{r['backend']} B{r['B']} T{r['T']} {r['dtype']}"


def _key(r: dict[str, Any], rename: dict[str, str]) -> tuple[Any, ...]:
    return tuple(rename.get(r[k], r[k]) if k == "backend" else r[k] for k in ROW_KEY)


def compare(
    old_path: Path,
    new_path: Path,
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN,
    alpha: float = DEFAULT_ALPHA,
    pairs: dict[str, str] | None = None,
) -> Comparison:
    """Every row of either report, matched (``pairs``: OLD backend -> NEW backend) and tested; the
    caller has checked :func:`refusal` first."""
    back = {n: o for o, n in (pairs or {}).items()}  # NEW's name -> OLD's
    olds = {_key(r, {}): r for r in old["rows"]}
    news = {_key(r, back): r for r in new["rows"]}
    result = Comparison(old_path, new_path, max_slowdown, alpha, dict(old["machine"]))
    for key in [*olds, *(k for k in news if k not in olds)]:
        o, n = olds.get(key), news.get(key)
        label = _label(o if o is not None else n)  # type: ignore[arg-type]
        if o is None or n is None:
            result.not_compared.append(f"{label}: only in {'NEW' if o is None else 'OLD'}")
            continue
        broken = [f"{side}: {r['error']}" for side, r in (("OLD", o), ("NEW", n)) if "error" in r]
        if broken:
            result.not_compared.append(f"{label}: did not run ({'; '.join(broken)})")
            continue
        for path in PATHS:
            for p in PASSES:
                a, b = o.get(path, {}).get(p), n.get(path, {}).get(p)
                if a is None and b is None:
                    continue  # neither report times it (a row without a backward, said in its note)
                if a is None or b is None:
                    side = "OLD" if a is None else "NEW"
                    result.not_compared.append(f"{label} {path} {p}: not timed in {side}")
                    continue
                result.measured.append(Measurement(label, path, p, list(a["samples_ms"]), list(b["samples_ms"])))
    _judge(result)
    return result


def _judge(result: Comparison) -> None:
    """Each measurement's p-values, Holm-adjusted over all of them; those that cannot reach ``alpha`` even
    with every NEW call above every OLD one are moved to ``not_compared``."""
    k = len(result.measured)
    judged = []
    for m in result.measured:
        least = smallest_p(len(m.old), len(m.new))
        if len(m.old) < 2 or len(m.new) < 2 or least * k > result.alpha:
            result.not_compared.append(
                f"{m.row} {m.path} {m.pass_}: too few samples ({len(m.old)} OLD, {len(m.new)} NEW): the smallest "
                f"p-value they can give, {least:.3g}, times {k} measurements is above alpha {result.alpha:g} "
                "(bench with more --iters)"
            )
            continue
        judged.append(m)
    result.measured = judged
    scale = 1 + result.max_slowdown
    slower = [p_greater(m.new, [t * scale for t in m.old]) for m in judged]
    faster = [p_greater(m.old, [t * scale for t in m.new])[0] for m in judged]
    for m, (p, method), q_slow, q_fast in zip(judged, slower, holm([p for p, _ in slower]), holm(faster), strict=True):
        m.p_slower, m.method, m.p_holm = p, method, q_slow
        if q_slow <= result.alpha and m.ratio > scale:
            m.verdict = "SLOWER"
        elif q_fast <= result.alpha and m.ratio < 1 / scale:
            m.verdict = "faster"
        else:
            m.verdict = "same"


def format_markdown(c: Comparison) -> str:
    """The comparison as a Markdown table for a pull request, what was not compared under it."""
    lines = [
        f"### gdn-equiv bench compare: `{c.old.name}` (OLD) vs `{c.new.name}` (NEW)",
        "",
        "| row | path | pass | OLD median ms | NEW median ms | NEW / OLD | Cliff's delta | P(NEW slower) | "
        "p (Holm) | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m in c.measured:
        verdict = f"**{m.verdict}**" if m.verdict == "SLOWER" else m.verdict
        lines.append(
            f"| {m.row} | {m.path} | {m.pass_.replace('_', '+')} | {median(m.old):.4g} (n={len(m.old)}) | "
            f"{median(m.new):.4g} (n={len(m.new)}) | {m.ratio:.3f} | {cliffs_delta(m.new, m.old):+.2f} | "
            f"{common_language(m.new, m.old):.2f} | {m.p_holm:.2g} ({m.method}) | {verdict} |"
        )
    versions = ", ".join(f"{k} {c.machine[k]}" for k in SAME_MACHINE[1:] if c.machine.get(k) not in (None, False))
    lines += [
        "",
        f"{c.machine.get('device_name')}; {versions}. SLOWER: NEW's calls take longer than OLD's times "
        f"{1 + c.max_slowdown:g} (one-sided Mann-Whitney U on every timed call, Holm-adjusted over "
        f"{len(c.measured)} measurement(s), alpha {c.alpha:g}) and NEW's median is more than "
        f"{c.max_slowdown:.0%} above OLD's. Cliff's delta and P(NEW slower) on the raw calls.",
    ]
    if c.not_compared:
        lines += ["", f"Not compared ({len(c.not_compared)}; the comparison is not a pass):", ""]
        lines += [f"- {line}" for line in c.not_compared]
    return "\n".join(lines)
