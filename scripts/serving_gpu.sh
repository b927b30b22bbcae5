#!/bin/sh
# The GPU column: S0-S7 on both engines' Triton conv kernels, for every release extracted side by side in
# .engines/<engine>-<version>/ (gdn-equiv engines fetch): vLLM's gpu (SD conv-state layout, its default) and
# gpu-ds paths, its gpu-short-conv path (S0 and S4 only: the vLLM #50272 replay, 0.28.0 unfixed, 0.29.0 on fixed),
# and sglang's gpu path. One `gdn-equiv check --serving-engine PATH` per engine path (its kernels compile once),
# 14 at a time; each row a fixed, derandomized N examples (--derandomize), cut after SECONDS_PER_ROW
# (--row-seconds; the ledger says what each row ran), a path's process after PATH_SECONDS (its report keeps every
# finished row, the rest stay "not reached", and its exit status is 124). Writes into OUT: one report folder and
# one log per path, serving_gpu.json (every row), summary.txt, and all of it as serving_gpu.tgz.
# The device has no network and needs only .engines (1.5 MB) carried; torch and triton are its own:
#   run(command='timeout 570 sh scripts/serving_gpu.sh 30 25 "$OUT"', carry=['.engines'], timeout_s=600)
# ENGINES="reference" (or any paths, comma-free, space separated) tries it on a CPU.
# The whole-surface column (issue #50): SURFACE=1 timeout 570 sh scripts/serving_gpu.sh 40 150 "$OUT" 540
# Exit status: 1 when a row is not green, else the worst of the paths' (3: nothing could run; 124: cut).
N=${1:-30}
SECONDS_PER_ROW=${2:-25}
OUT=${3:-serving-gpu}
PATH_SECONDS=${4:-250}  # a path's process is cut here (its report keeps every finished row): 2 waves fit 570 s
mkdir -p "$OUT"
export GDN_EQUIV_ENGINES="$PWD/.engines"
export PYTHONPATH="$PWD"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/triton-serving}"
export N SECONDS_PER_ROW OUT PATH_SECONDS
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || echo "no nvidia-smi") > "$OUT/device.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> "$OUT/device.txt"
# SURFACE=1: the whole-surface rows (S0-surface, S0-outside; issue #50) on every release's gpu path instead
if [ "${SURFACE:-0}" = 1 ] && [ -z "${ENGINES:-}" ]; then
    ENGINES=$(python3 -c '
from gdn_equiv.serving.engines import EngineOps, engine_adapters
print(" ".join(a.name for a in engine_adapters() if isinstance(a, EngineOps) and a.release and a.path == "gpu"))')
fi
export SURFACE
if [ -z "${ENGINES:-}" ]; then
    ENGINES=$(python3 -c '
from gdn_equiv.serving.engines import EngineOps, engine_adapters
print(" ".join(a.name for a in engine_adapters()
                if isinstance(a, EngineOps) and a.release and a.path in ("gpu", "gpu-ds", "gpu-short-conv")))')
fi
: > "$OUT/exits.txt"
for engine in $ENGINES; do echo "$engine"; done | xargs -P 14 -n 1 sh -c '
    case "$0" in
        *-short-conv) props="S0-reference S0-surface S0-outside S4-speculation" ;;
        *) props="S0-reference S1-pool-alone S2-untouched S3-handoff S4-speculation S5-prefix-cache S6-dispatch S7-packed-qkv" ;;
    esac
    [ "${SURFACE:-0}" = 1 ] && props="S0-surface S0-outside"
    asked=""
    for p in $props; do asked="$asked --property $p"; done
    timeout "$PATH_SECONDS" python3 -m gdn_equiv check --serving-engine "$0" $asked --examples "$N" \
        --row-seconds "$SECONDS_PER_ROW" --derandomize --report "$OUT/$0" > "$OUT/$0.log" 2>&1
    echo "$0 exit $?" >> "$OUT/exits.txt"'
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import glob, json, sys
out = sys.argv[1]
# each path's report, rewritten after every row (a process cut by its timeout keeps what finished)
parts = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/*/summary.json"))]
rows = [r for p in parts for r in p["checks"]]
paths = {k: v for p in parts for k, v in p["meta"].get("serving_paths", {}).items()}
meta = {"device_line": open(f"{out}/device.txt").read().strip()}
meta.update({k: parts[0]["meta"][k] for k in ("device", "profile", "examples") if parts and k in parts[0]["meta"]})
json.dump({**meta, "paths": paths, "rows": rows}, open(f"{out}/serving_gpu.json", "w"), indent=1)
print(meta["device_line"])
for name, p in paths.items():
    print(f"{name:<28} {p['runs']}")
for r in rows:
    case = (r.get("example") or {}).get("case")
    detail = case or next(iter((r.get("failure") or "").splitlines()), "")
    cut = " (cut by its seconds)" if r.get("budget_spent") else ""
    print(f"{r['backend']:<28} {r['property']:<16} {r['result']:<15} {r['examples']:>4} examples "
          f"{r['seconds']:7.1f} s{cut}  {detail[:200]}")
PY
tar czf /tmp/serving_gpu.tgz -C "$OUT" . && mv /tmp/serving_gpu.tgz "$OUT/serving_gpu.tgz"
worst=$(sed "s/.* exit //" "$OUT/exits.txt" | sort -n | awk '$1 == 1 {one = 1} {last = $1} END {print one ? 1 : last}')
exit "${worst:-4}"
