#!/bin/sh
# S1-S7 on vLLM 0.34.0's and sglang 0.5.23's Triton conv kernels on a GPU (prefill causal_conv1d_fn, decode
# causal_conv1d_update with num_accepted_tokens): one process per engine path x property, in parallel (Triton
# compiles on the CPU; the kernel cache is shared), a fixed number of derandomized cases each, each row cut
# off as "not reached" after SECONDS. Rows as JSON in OUT/serving_gpu.json, each process's log beside it.
# Needs .engines/ (scripts/extract_engines.sh); on the device machine, carry it:
#   run(command='timeout 530 sh scripts/serving_gpu.sh 60 330 "$OUT"', carry=['.engines'], timeout_s=580)
# (a cold machine compiles every kernel specialisation a row draws: 330 s a row is the cap that still brings
# back every row's JSON inside one 600 s call; 40 cases and 240 s fit a call of about 300 s). Not yet run on
# a device: 2026-12-06 01:00-01:42 UTC no machine could be started (six tries).
# ENGINES="reference" tries it on a CPU. Exit status: 1 when a row is not green, else the worst of the rows' (3: cannot run).
N=${1:-50}
SECONDS_PER_ROW=${2:-400}
OUT=${3:-serving-gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/.engines:$PWD"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/triton-serving}"
export N SECONDS_PER_ROW OUT
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || echo "no nvidia-smi") > "$OUT/device.txt"
for engine in ${ENGINES:-vllm-gpu sglang-gpu}; do
    for prop in S1 S2 S3 S4 S5 S6 S7; do echo "$engine $prop"; done
done | xargs -P 14 -n 2 sh -c '
    python3 scripts/serving_search.py "$0" "$N" --properties "$1" --seconds "$SECONDS_PER_ROW" \
        --json "$OUT/$0-$1.json" > "$OUT/$0-$1.log" 2>&1
    echo "$0 $1 exit $?" | tee -a "$OUT/exits.txt"'
python3 - "$OUT" <<'PY'
import glob, json, sys
out = sys.argv[1]
parts = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/*-S[1-7].json"))]
rows = [r for p in parts for r in p["rows"]]
meta = {k: v for k, v in (parts[0] if parts else {}).items() if k not in ("rows", "seconds")}
meta["device_line"] = open(f"{out}/device.txt").read().strip()
json.dump({**meta, "rows": rows}, open(f"{out}/serving_gpu.json", "w"), indent=1)
for r in rows:
    detail = r.get("shrunk") or r.get("why") or r.get("error") or ""
    print(f"{r['engine']:<11} {r['version']:<7} {r['property']:<16} {r['result']:<15} {r['cases']:>4} cases "
          f"{r['seconds']:7.1f} s  {detail[:300]}")
PY
worst=$(sed "s/.* exit //" "$OUT/exits.txt" | sort -n | awk '$1 == 1 {one = 1} {last = $1} END {print one ? 1 : last}')
exit "${worst:-4}"
