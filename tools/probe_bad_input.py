"""Probe gdn-equiv with bad input the way a new user would, and count how each probe ends.

Each probe is a command line (``python -m gdn_equiv ...``) or a few lines of Python against the public
API, run in a fresh interpreter from the current directory (so pointing ``cwd`` at an old checkout
measures that checkout). An outcome is one of:

- ``refused``: a clean refusal. A command exits 2 or 3 with a message and no traceback; the API raises
  ``InvalidArgument`` (or another ``ValueError``) whose message names the value.
- ``traceback``: a Python traceback reaches the user (any exception type for the API probes other than
  the above, or a command's stderr with ``Traceback``).
- ``accepted``: the bad value was taken: a command exits 0, or the API call returns.
- ``wrong status``: a command refused with a status other than 2/3 (e.g. 1, "properties failed").
- ``hang``: still running after the probe's time limit.

    python tools/probe_bad_input.py                 # this checkout
    python tools/probe_bad_input.py --cwd OLD_TREE  # another checkout (git worktree add OLD_TREE REV)

Prints one line per probe and the counts; ``--json FILE`` keeps them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

TMP = Path(tempfile.mkdtemp(prefix="gdn-probe-"))
(TMP / "empty.json").write_text("")
(TMP / "obj.json").write_text("{}")
(TMP / "list.json").write_text("[1, 2]")
(TMP / "garbage.json").write_text("not json at all")
(TMP / "version.json").write_text(json.dumps({"format": 999, "property": "P3"}))
(TMP / "falsey.json").write_text(json.dumps({"format": 1, "property": "P3", "example": {"grad": "false"}}))

FAST = ["--examples", "1", "--skip-necessity", "--property", "P3-forward-exact", "--family", "gated_deltanet"]

# (name, argv after "python -m gdn_equiv", env overrides)
CLI: list[tuple[str, list[str], dict[str, str]]] = [
    ("no subcommand", [], {}),
    ("unknown subcommand", ["nosuch"], {}),
    ("fuzz --seconds -1", ["fuzz", "--seconds", "-1"], {}),
    ("fuzz --seconds nan", ["fuzz", "--seconds", "nan"], {}),
    ("fuzz --seconds inf", ["fuzz", "--seconds", "inf"], {}),
    ("fuzz --seconds 0", ["fuzz", "--seconds", "0"], {}),
    ("fuzz --seconds abc", ["fuzz", "--seconds", "abc"], {}),
    ("fuzz --seconds ''", ["fuzz", "--seconds", ""], {}),
    ("check --examples 0", ["check", "--examples", "0"], {}),
    ("check --examples -3", ["check", "--examples", "-3"], {}),
    ("check --examples 1.5", ["check", "--examples", "1.5"], {}),
    ("check --necessity-examples 0", ["check", "--necessity-examples", "0"], {}),
    ("check --backend troch", ["check", "--backend", "troch"], {}),
    ("check --backend ''", ["check", "--backend", ""], {}),
    ("check --backend torch,,triton", ["check", "--backend", "torch,,triton"], {}),
    ("check --backend nomodule:attr", ["check", "--backend", "nomodule_xyz:attr"], {}),
    ("check --backend os:getcwd", ["check", "--backend", "os:getcwd"], {}),
    ("check --backend json:dumps", ["check", "--backend", "json:dumps"], {}),
    ("check --property P99", ["check", "--property", "P99"], {}),
    ("check --property ''", ["check", "--property", ""], {}),
    ("check --property P6-necessity-G99", ["check", "--property", "P6-necessity-G99"], {}),
    ("check --family nosuch", ["check", "--family", "nosuch"], {}),
    ("check --family ''", ["check", "--family", ""], {}),
    ("check --family gated_deltanet,,kda", ["check", "--family", "gated_deltanet,,kda"], {}),
    ("check --target nosuch", ["check", "--target", "nosuch"], {}),
    ("check --profile nosuch", ["check", "--profile", "nosuch"], {}),
    ("HYPOTHESIS_PROFILE=nosuch check", ["check", *FAST], {"HYPOTHESIS_PROFILE": "nosuch"}),
    ("check --dtype float8", ["check", "--dtype", "float8"], {}),
    ("check --device tpu", ["check", "--device", "tpu"], {}),
    ("check --device ''", ["check", "--device", ""], {}),
    ("check --device cuda (none here)", ["check", "--device", "cuda", *FAST], {}),
    ("check --device cuda:-1", ["check", "--device", "cuda:-1"], {}),
    ("check --max-seq-len 0", ["check", "--max-seq-len", "0"], {}),
    ("check --max-seq-len -5", ["check", "--max-seq-len", "-5"], {}),
    ("check --example-timeout 0", ["check", "--example-timeout", "0"], {}),
    ("check --example-timeout nan", ["check", "--example-timeout", "nan"], {}),
    ("check --fla-core reference --target gdn_equiv", ["check", "--fla-core", "reference", *FAST], {}),
    ("check --fla-core nosuch", ["check", "--fla-core", "nosuch"], {}),
    (
        "check --target fla --fla-core reference --family kda",
        ["check", "--target", "fla", "--fla-core", "reference", "--family", "kda"],
        {},
    ),
    ("check --report into a file", ["check", "--report", str(TMP / "empty.json"), *FAST], {}),
    ("check --report /proc/x", ["check", "--report", "/proc/gdn-probe/x", *FAST], {}),
    ("check --junit-xml into a directory", ["check", "--junit-xml", str(TMP), *FAST], {}),
    ("check --json /proc/x", ["check", "--json", "/proc/gdn-probe/x.json", *FAST], {}),
    ("check --database nosuch://x", ["check", "--database", "nosuch://x", *FAST], {}),
    ("check --database redis://127.0.0.1:1/0", ["check", "--database", "redis://127.0.0.1:1/0", *FAST], {}),
    ("fuzz --examples 0", ["fuzz", "--examples", "0", "--seconds", "1"], {}),
    ("bench nosuch", ["bench", "nosuch"], {}),
    ("bench prologue --iters 0", ["bench", "prologue", "--iters", "0", "--quick"], {}),
    ("bench prologue --iters -1", ["bench", "prologue", "--iters", "-1", "--quick"], {}),
    ("bench prologue --warmup -1", ["bench", "prologue", "--warmup", "-1", "--quick"], {}),
    ("bench prologue --backend troch", ["bench", "prologue", "--backend", "troch", "--quick"], {}),
    ("bench prologue --family nosuch", ["bench", "prologue", "--family", "nosuch", "--quick"], {}),
    ("bench prologue --dtype int8", ["bench", "prologue", "--dtype", "int8", "--quick"], {}),
    ("repro (no file)", ["repro"], {}),
    ("repro missing.json", ["repro", str(TMP / "missing.json")], {}),
    ("repro empty file", ["repro", str(TMP / "empty.json")], {}),
    ("repro {}", ["repro", str(TMP / "obj.json")], {}),
    ("repro [1, 2]", ["repro", str(TMP / "list.json")], {}),
    ("repro not json", ["repro", str(TMP / "garbage.json")], {}),
    ("repro unknown format version", ["repro", str(TMP / "version.json")], {}),
    ("repro 'false' as a boolean", ["repro", str(TMP / "falsey.json")], {}),
    ("repro a directory", ["repro", str(TMP)], {}),
]

_API_PRELUDE = """
import torch
try:
    from gdn_equiv.model.families.gated_deltanet import GDNConfig, FusedGatedDeltaNet
except ImportError:
    from gdn_equiv.model.config import GDNConfig
    from gdn_equiv.model.fused import FusedGatedDeltaNet
from gdn_equiv.model.backends import causal_conv1d, causal_conv1d_update
from gdn_equiv.model.cache import Cache
TINY = dict(hidden_size=8, head_dim=2, num_heads=2)
def layer(**kw):
    torch.manual_seed(0)
    return FusedGatedDeltaNet(GDNConfig(**{**TINY, **kw}))
x = torch.randn(2, 5, 8)
w = torch.randn(8, 4)
"""

FILLED = "l = layer(); c = Cache(); l(x, past_key_values=c, use_cache=True); "

# (name, code run after the prelude); the probe's outcome is the code's
API: list[tuple[str, str]] = [
    ("config hidden_size=0", "GDNConfig(**{**TINY, 'hidden_size': 0})"),
    ("config hidden_size=8.0", "GDNConfig(**{**TINY, 'hidden_size': 8.0})"),
    ("config conv_size=0", "GDNConfig(**TINY, conv_size=0)"),
    ("config num_heads=-2", "GDNConfig(**{**TINY, 'num_heads': -2})"),
    ("config norm_eps=inf", "GDNConfig(**TINY, norm_eps=float('inf'))"),
    ("config norm_eps=nan", "GDNConfig(**TINY, norm_eps=float('nan'))"),
    ("config norm_eps=-1", "GDNConfig(**TINY, norm_eps=-1.0)"),
    ("config expand_v=inf", "GDNConfig(**TINY, expand_v=float('inf'))"),
    ("config expand_v=0", "GDNConfig(**TINY, expand_v=0)"),
    ("config use_short_conv='no'", "GDNConfig(**TINY, use_short_conv='no')"),
    ("config conv_bias='false'", "GDNConfig(**TINY, conv_bias='false')"),
    ("config layer_idx=-1", "GDNConfig(**TINY, layer_idx=-1)"),
    ("config layer_idx='0'", "GDNConfig(**TINY, layer_idx='0')"),
    ("config mode='nosuch'", "GDNConfig(**TINY, mode='nosuch')"),
    ("forward x 2-D", "layer()(torch.randn(5, 8))"),
    ("forward x wrong hidden", "layer()(torch.randn(2, 5, 7))"),
    ("forward x int64", "layer()(torch.ones(2, 5, 8, dtype=torch.int64))"),
    ("forward x float64 vs fp32 layer", "layer()(torch.randn(2, 5, 8, dtype=torch.float64))"),
    ("forward mask wrong shape", "layer()(x, attention_mask=torch.ones(2, 4))"),
    ("forward mask float values 0.5", "layer()(x, attention_mask=torch.full((2, 5), 0.5))"),
    ("forward cu_seqlens with B=2", "layer()(x, cu_seqlens=torch.tensor([0, 5], dtype=torch.int32))"),
    ("forward cu_seqlens not from 0", "layer()(x[:1], cu_seqlens=torch.tensor([1, 5], dtype=torch.int32))"),
    ("forward cu_seqlens short end", "layer()(x[:1], cu_seqlens=torch.tensor([0, 4], dtype=torch.int32))"),
    ("forward cu_seqlens decreasing", "layer()(x[:1], cu_seqlens=torch.tensor([0, 3, 2, 5], dtype=torch.int32))"),
    ("forward cu_seqlens float", "layer()(x[:1], cu_seqlens=torch.tensor([0.0, 5.0]))"),
    ("forward cu_seqlens 2-D", "layer()(x[:1], cu_seqlens=torch.tensor([[0, 5]], dtype=torch.int32))"),
    ("forward mask of another batch", "layer()(x, attention_mask=torch.ones(3, 5))"),
    ("forward prologue='nosuch'", "layer()(x, prologue='nosuch')"),
    ("forward past_key_values a dict", "layer()(x, past_key_values={})"),
    ("forward past_key_values an int", "layer()(x, past_key_values=3)"),
    (
        "cache state without offset",
        FILLED + "c.states[0] = {k: v for k, v in c.states[0].items() if k != 'offset'}; l(x, past_key_values=c)",
    ),
    ("cache state of the wrong type", FILLED + "c.states[0] = [1, 2]; l(x, past_key_values=c)"),
    ("cache offset a string", FILLED + "c.states[0]['offset'] = '3'; l(x, past_key_values=c)"),
    ("cache layer_idx -1", "Cache().update(-1, recurrent_state=None, conv_state=None, offset=1)"),
    ("cache layer_idx '0'", "Cache().update('0', recurrent_state=None, conv_state=None, offset=1)"),
    ("cache of another batch size", FILLED + "l(x[:1], past_key_values=c, use_cache=True)"),
    (
        "conv weight [D, 2, W] assigned",
        "l = layer(); l.q_conv1d.weight = torch.nn.Parameter(torch.zeros(4, 2, 4)); l(x, prologue='separate')",
    ),
    ("conv activation 'gelu'", "causal_conv1d(x, w, None, 'gelu')"),
    ("conv backend 'nosuch'", "causal_conv1d(x, w, backend='nosuch')"),
    ("conv weight 3-D", "causal_conv1d(x, w[:, None])"),
    ("conv weight channels != D", "causal_conv1d(x, torch.randn(7, 4))"),
    ("conv bias wrong length", "causal_conv1d(x, w, torch.randn(7))"),
    ("conv weight int", "causal_conv1d(x, w.long())"),
    ("conv W=0", "causal_conv1d(x, torch.randn(8, 0))"),
    ("conv initial_state wrong shape", "causal_conv1d(x, w, None, None, torch.randn(2, 8, 3))"),
    ("conv initial_state wrong N", "causal_conv1d(x, w, None, None, torch.randn(3, 8, 4))"),
    ("conv cu_seqlens with B=2", "causal_conv1d(x, w, cu_seqlens=torch.tensor([0, 5], dtype=torch.int32))"),
    ("conv x on meta device", "causal_conv1d(x.to('meta'), w)"),
    ("update state wrong width", "causal_conv1d_update(torch.randn(2, 8), torch.randn(2, 8, 3), w)"),
    ("update x 3-D", "causal_conv1d_update(torch.randn(2, 1, 8), torch.randn(2, 8, 4), w)"),
    ("update state batch mismatch", "causal_conv1d_update(torch.randn(2, 8), torch.randn(3, 8, 4), w)"),
]


def run_cli(argv: list[str], env: dict[str, str], cwd: str, limit: float) -> str:
    full_env = {**os.environ, "PYTHONPATH": cwd, **env}
    full_env.pop("HYPOTHESIS_PROFILE", None) if "HYPOTHESIS_PROFILE" not in env else None
    try:
        p = subprocess.run([sys.executable, "-m", "gdn_equiv", *argv], cwd=TMP, env=full_env,
                           capture_output=True, text=True, timeout=limit)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "hang"
    if "Traceback" in p.stderr or "Traceback" in p.stdout:
        return "traceback"
    if p.returncode == 0:
        return "accepted"
    if p.returncode in (2, 3) and (p.stderr.strip() or p.stdout.strip()):
        return "refused"
    return f"wrong status ({p.returncode})"


def run_api(code: str, cwd: str, limit: float) -> str:
    script = _API_PRELUDE + textwrap.dedent(f"""
    try:
        {code}
    except ValueError as exc:
        print("REFUSED" if type(exc).__name__ == "InvalidArgument" or "must" in str(exc) else "VALUEERROR", exc)
    except Exception as exc:
        print("RAISED", type(exc).__name__, exc)
    else:
        print("ACCEPTED")
    """)
    try:
        p = subprocess.run([sys.executable, "-c", script], cwd=cwd, env={**os.environ, "PYTHONPATH": cwd},
                           capture_output=True, text=True, timeout=limit)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "hang"
    last = (p.stdout.strip().splitlines() or ["RAISED (no output) " + p.stderr[-200:]])[-1]
    if last.startswith("REFUSED"):
        return "refused"
    if last.startswith("ACCEPTED"):
        return "accepted"
    return "traceback"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cwd", default=os.getcwd(), help="checkout to probe (default: here)")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds before a probe counts as a hang")
    ap.add_argument("--json", help="write the outcomes here")
    args = ap.parse_args()
    cwd = str(Path(args.cwd).resolve())
    outcomes = {}
    for name, argv, env in CLI:
        outcomes[f"cli: {name}"] = run_cli(argv, env, cwd, args.limit)
        print(f"{outcomes[f'cli: {name}']:<18} cli: {name}", flush=True)
    for name, code in API:
        outcomes[f"api: {name}"] = run_api(code, cwd, args.limit)
        print(f"{outcomes[f'api: {name}']:<18} api: {name}", flush=True)
    counts = Counter(v.split(" (")[0] for v in outcomes.values())
    print(f"{len(outcomes)} probes: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    if args.json:
        Path(args.json).write_text(json.dumps({"cwd": cwd, "outcomes": outcomes, "counts": counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
