#!/usr/bin/env bash
# GPU evidence on the H200: the whole suite once per conv backend, then the fla target tests.
# Run from the repo root after DEVICE.md's pip line (PYTHONPATH=/tmp/site:$PWD). Logs go to $OUT.
# Budget about 8 minutes: each stage has a hard timeout so one slow stage cannot eat the others.
set -u
OUT=${OUT:-/tmp/gpu_evidence}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=gpu
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"

status=0
stage() {  # stage NAME SECONDS CMD...
    local name=$1 limit=$2; shift 2
    echo "=== $name: $*" | tee "$OUT/$name.log"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee -a "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/$name.log" "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || status=1
}

stage torch   90 python3 -m pytest -n 2 -q --gdn-backend torch  -p no:cacheprovider
stage triton 150 python3 -m pytest -n 2 -q --gdn-backend triton -p no:cacheprovider
stage cuda   120 python3 -m pytest -n 2 -q --gdn-backend cuda   -p no:cacheprovider
# repros first: they warm fla's conv/norm kernel cache. fla tests use the reference core: fla's own
# core kernels need minutes of cold Triton compilation here (DEVICE.md).
stage repro   60 bash -c 'for s in repro/*.py; do echo "--- $s"; python3 "$s"; echo "exit $?"; done; true'
stage fla    150 env GDN_FLA_CORE=reference python3 -m pytest -n 2 -q tests/test_fla_target.py -p no:cacheprovider
cat "$OUT/summary.txt"
exit $status
