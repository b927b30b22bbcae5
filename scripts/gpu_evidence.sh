#!/usr/bin/env bash
# GPU evidence on the H200 in one call, most important first; each stage has a hard timeout so a slow
# (cold-compiling) stage cannot eat the others, and each writes its log to $OUT as it goes.
# Run from the repo root after DEVICE.md's pip line (PYTHONPATH=/tmp/site:$PWD).
#   1 bench      gdn-equiv bench prologue (triton, cuda, fla), eager and device timings
#   2 tiles      backward tile candidates of the triton backend (scripts/bwd_tiles.py)
#   3 fla-fuzz   gdn-equiv fuzz --target fla: fla's guard gaps found and shown on the GPU
#   4 suites     conformance + fused-vs-separate properties under the triton and cuda backends
#   5 fla-tests  fla's differential properties (reference core)
set -u
OUT=${OUT:-/tmp/gpu_evidence}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=gpu
W=${WORKERS:-12}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"

status=0
stage() {  # stage NAME SECONDS CMD...
    local name=$1 limit=$2; shift 2
    echo "=== $name: $*" | tee "$OUT/$name.log"
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$OUT/$name.log" 2>&1
    local rc=$?
    echo "=== $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/$name.log" "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || status=1
}

stage bench 150 python3 -m gdn_equiv bench prologue --backend triton,cuda,fla --iters 30 --warmup 5
stage tiles 60 python3 scripts/bwd_tiles.py
stage fla-fuzz 90 python3 -m gdn_equiv fuzz --target fla --fla-core reference --device cuda --seconds 60 \
    --report "$OUT/fla-fuzz-report"
stage suites 150 python3 -m pytest -n "$W" -q -p no:cacheprovider -rfE --gdn-backend triton,cuda \
    tests/test_conformance.py tests/test_fused_equivalence.py tests/test_backends_cuda.py tests/test_backends_triton.py
stage fla-tests 100 python3 -m pytest -n "$W" -q -p no:cacheprovider -rfE --fla-core reference tests/test_fla_target.py
cat "$OUT/summary.txt"
exit $status
