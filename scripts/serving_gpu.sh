#!/bin/sh
# The GPU column: S0-S7 on both engines' Triton conv kernels, for every release extracted side by side in
# .engines/<engine>-<version>/ (scripts/fetch_engines.sh): vLLM's gpu (SD conv-state layout, its default) and
# gpu-ds paths, its gpu-short-conv path (S0 and S4 only: the vLLM #50272 replay, 0.28.0 unfixed, 0.29.0 on fixed),
# and sglang's gpu path. One process per engine path (its kernels compile once), 14 at a time; each row a fixed,
# derandomized N cases, cut off as "not reached" after SECONDS_PER_ROW (a path's process after PATH_SECONDS:
# the rows it did not reach are missing from its JSON, and its exit status is 124). Writes into OUT: one JSON and one log per
# path, serving_gpu.json (every row), summary.txt, and all of it as serving_gpu.tgz.
# The device has no network and needs only .engines (1.5 MB) carried; torch and triton are its own:
#   run(command='timeout 570 sh scripts/serving_gpu.sh 30 25 "$OUT"', carry=['.engines'], timeout_s=600)
# ENGINES="reference" (or any paths, comma-free, space separated) tries it on a CPU.
# The whole-surface column (issue #50): SURFACE=1 timeout 570 sh scripts/serving_gpu.sh 40 150 "$OUT" 540
# Exit status: 1 when a row is not green, else the worst of the paths' (3: nothing could run).
N=${1:-30}
SECONDS_PER_ROW=${2:-25}
OUT=${3:-serving-gpu}
PATH_SECONDS=${4:-250}  # a path's process is cut here (its JSON keeps every finished row): 2 waves fit 570 s
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
    case "$0" in *-short-conv) props=S0,S4 ;; *) props=S0-reference,S1,S2,S3,S4,S5,S6,S7 ;; esac
    [ "${SURFACE:-0}" = 1 ] && props=S0-surface,S0-outside
    timeout "$PATH_SECONDS" python3 scripts/serving_search.py "$0" "$N" --properties "$props" --seconds "$SECONDS_PER_ROW" \
        --json "$OUT/$0.json" > "$OUT/$0.log" 2>&1
    echo "$0 exit $?" >> "$OUT/exits.txt"'
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import glob, json, sys
out = sys.argv[1]
parts = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/*.json")) if not p.endswith("serving_gpu.json")]
rows = [r for p in parts for r in p["rows"]]
paths = {k: v for p in parts for k, v in p.get("paths", {}).items()}
meta = {k: v for k, v in (parts[0] if parts else {}).items() if k not in ("rows", "seconds", "paths")}
meta["device_line"] = open(f"{out}/device.txt").read().strip()
json.dump({**meta, "paths": paths, "rows": rows}, open(f"{out}/serving_gpu.json", "w"), indent=1)
print(meta["device_line"])
for name, p in paths.items():
    print(f"{name:<28} {p['runs']}")
for r in rows:
    detail = r.get("shrunk") or r.get("why") or r.get("error") or ""
    print(f"{r['engine']:<28} {r['property']:<16} {r['result']:<15} {r['cases']:>4} cases {r['seconds']:7.1f} s  {detail[:200]}")
PY
tar czf /tmp/serving_gpu.tgz -C "$OUT" . && mv /tmp/serving_gpu.tgz "$OUT/serving_gpu.tgz"
worst=$(sed "s/.* exit //" "$OUT/exits.txt" | sort -n | awk '$1 == 1 {one = 1} {last = $1} END {print one ? 1 : last}')
exit "${worst:-4}"
