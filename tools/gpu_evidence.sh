#!/usr/bin/env bash
# GPU evidence on the H200 in one call, most important first; each stage has a hard timeout so a slow
# (cold-compiling) stage cannot eat the others, and each writes its log to $OUT as it goes; pytest
# stages also write each failure the moment it happens (--gdn-failure-log), so a stage cut off by its
# timeout still says what failed.
# Run from the repo root after DEVICE.md's pip line (PYTHONPATH=/tmp/site:$PWD).
#   1 bench      gdn-equiv bench prologue (triton, cuda, fla), eager timings (host work included)
#   bench-graph  the same with --timing graph (CUDA graphs: the kernels' device time, host work left out)
#   2 tiles      backward tile candidates of the triton backend (tools/bwd_tiles.py)
#   3 fla-fuzz   gdn-equiv fuzz --target fla: fla's guard gaps found and shown on the GPU
#   4 suites     conformance + fused-vs-separate properties under the triton and cuda backends
#   5 fla-tests  fla's differential properties (reference core)
#   6 ncu        Nsight Compute on one fused forward+backward of the triton backend (tools/ncu_prologue.py)
#   fla-suite    the installed gating suite over fla's own conv kernels (FLA_BACKENDS, default all three; FLA_SUITE_ARGS)
#   layout-hunt  the conformance gradients against causal-conv1d with the layout guard off (fuzz profile):
#                the strategies must find repro/causal_conv1d_dfinal_states.py by themselves
#   fla-fuzz-own fuzz --target fla with fla's own cores (FUZZ_FAMILIES, FUZZ_SECONDS; fla pinned: FLA_AUTOTUNE=first)
#   bench-layer  gdn-equiv bench layer (BENCH_BACKENDS, BENCH_ARGS; FLA_AUTOTUNE=full unless set)
#   fla-grad-probe  tools/fla_grad_probe.py (PR #977's fused-vs-separate grad.x on the layer and the conv)
#   onepass-suite  the triton backend's tests, conformance and fused-vs-separate with GDN_EQUIV_TRITON_BACKWARD=one-pass
#   ncu-onepass  the ncu stage with the one-pass backward
#   serial-suite, ncu-serial  the same two for GDN_EQUIV_TRITON_BACKWARD=serial (W <= 4)
#   rows-tiles   the rows forward's and the serial backward's row-group candidates timed (tools/bwd_tiles.py,
#                FWD_ROWS_TILES, SERIAL_TILES; after torch's copy and silu over the same tensor, the bandwidth
#                ceiling, and the tiles forward), then tools/serial_stages_probe.py (exact dx per group)
#   rows-suite, ncu-rows  the triton tests and ncu with GDN_EQUIV_TRITON_FORWARD=rows
#   cold-suite, warm-suite  the layer properties under the triton backend, first run then again (gpu profile;
#                one test per family: SUITE_SPLIT="" runs them across families)
#   gate         the whole installed gate (GATE_BACKENDS, default triton), one test per family as above
#   kernels      how many compiled kernels the Triton cache holds
# TILES_ARGS="--pass2 64x128x8" and FLA_TEST_ARGS="-v -x" pass arguments on; SUITE_BACKENDS=cuda narrows the suites stage; STAGES="fla-fuzz suites" picks and orders stages; LIMIT_fla_fuzz=120 overrides a stage's time limit.
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

run_stage() {  # run_stage NAME: the stage's limit is $LIMIT_<NAME> seconds (dashes as underscores)
    local var="LIMIT_${1//-/_}"
    case $1 in
    bench) stage bench "${!var:-150}" python3 -m gdn_equiv bench prologue --backend triton,cuda,fla \
        --iters 30 --warmup 5 --json "$OUT/bench-prologue.json" ;;
    bench-graph) stage bench-graph "${!var:-180}" python3 -m gdn_equiv bench prologue --backend triton,cuda,fla \
        --timing graph --iters 30 --warmup 5 --json "$OUT/bench-prologue-graph.json" --plot "$OUT/bench-prologue-graph.png" ;;
    tiles) stage tiles "${!var:-60}" python3 tools/bwd_tiles.py ${TILES_ARGS:-} ;;
    fla-fuzz) stage fla-fuzz "${!var:-90}" python3 -m gdn_equiv fuzz --target fla --fla-core reference \
        --device cuda --seconds 60 --report "$OUT/fla-fuzz-report" ;;
    suites) stage suites "${!var:-150}" python3 -m pytest -n "$W" -q -p no:cacheprovider -rfE \
        --gdn-failure-log "$OUT/suites-failures.txt" \
        --gdn-backend "${SUITE_BACKENDS:-triton,cuda}" gdn_equiv/suite/test_conformance.py gdn_equiv/suite/test_properties.py \
        tests/test_backends_cuda.py tests/test_backends_triton.py ;;
    fla-tests) stage fla-tests "${!var:-300}" python3 -m pytest -n "$W" -v -p no:cacheprovider -rfE \
        --gdn-failure-log "$OUT/fla-tests-failures.txt" \
        --fla-core reference ${FLA_TEST_ARGS:-} tests/test_fla_target.py ;;
    fla-suite) stage fla-suite "${!var:-300}" env GDN_EQUIV_FLA_AUTOTUNE="${FLA_AUTOTUNE:-first}" python3 -m pytest -n "$W" -q -p no:cacheprovider -rfE \
        --gdn-failure-log "$OUT/fla-suite-failures.txt" --hypothesis-show-statistics \
        --pyargs gdn_equiv.suite --gdn-backend "${FLA_BACKENDS:-fla-triton,fla-cuda,fla-gluon}" ${FLA_SUITE_ARGS:-} ;;
    layout-hunt) stage layout-hunt "${!var:-200}" env HYPOTHESIS_PROFILE=fuzz python3 -m pytest -q -p no:cacheprovider \
        -rfE --hypothesis-show-statistics --gdn-failure-log "$OUT/layout-hunt-failures.txt" \
        --pyargs gdn_equiv.suite.test_conformance -k gradients --gdn-backend repro.causal_conv1d_as_is:BACKEND ;;
    fla-fuzz-own) stage fla-fuzz-own "${!var:-400}" env GDN_EQUIV_FLA_AUTOTUNE="${FLA_AUTOTUNE:-first}" \
        python3 -m gdn_equiv fuzz --target fla \
        --family "${FUZZ_FAMILIES:-all}" --device cuda --seconds "${FUZZ_SECONDS:-240}" \
        --report "$OUT/fla-fuzz-own-report" ;;
    fla-grad-probe) stage fla-grad-probe "${!var:-200}" python3 tools/fla_grad_probe.py ;;
    cold-suite) stage cold-suite "${!var:-150}" python3 -m pytest -n "$W" -q -p no:cacheprovider --durations=15 \
        --pyargs gdn_equiv.suite.test_properties --gdn-backend triton ${SUITE_SPLIT---gdn-split-families} ;;
    warm-suite) stage warm-suite "${!var:-120}" python3 -m pytest -n "$W" -q -p no:cacheprovider --durations=15 \
        --pyargs gdn_equiv.suite.test_properties --gdn-backend triton ${SUITE_SPLIT---gdn-split-families} ;;
    gate) stage gate "${!var:-200}" python3 -m pytest -n "$W" -q -p no:cacheprovider --durations=30 -rfE \
        --gdn-failure-log "$OUT/gate-failures.txt" --pyargs gdn_equiv.suite --gdn-backend "${GATE_BACKENDS:-triton}" \
        ${SUITE_SPLIT---gdn-split-families} ;;
    kernels) stage kernels 30 sh -c 'find "${TRITON_CACHE_DIR:-$HOME/.triton/cache}" -name "*.cubin" | wc -l' ;;
    bench-layer) stage bench-layer "${!var:-300}" env GDN_EQUIV_FLA_AUTOTUNE="${FLA_AUTOTUNE:-full}" \
        python3 -m gdn_equiv bench layer --backend "${BENCH_BACKENDS:-triton,cuda,fla}" ${BENCH_ARGS:-} \
        --json "$OUT/bench-layer.json" --plot "$OUT/bench-layer.png" ;;
    onepass-suite) stage onepass-suite "${!var:-200}" env GDN_EQUIV_TRITON_BACKWARD=one-pass python3 -m pytest -n "$W" -q \
        -p no:cacheprovider -rfE --gdn-failure-log "$OUT/onepass-suite-failures.txt" --gdn-backend triton \
        tests/test_backends_triton.py gdn_equiv/suite/test_conformance.py gdn_equiv/suite/test_properties.py ;;
    serial-suite) stage serial-suite "${!var:-200}" env GDN_EQUIV_TRITON_BACKWARD=serial python3 -m pytest -n "$W" -q \
        -p no:cacheprovider -rfE --gdn-failure-log "$OUT/serial-suite-failures.txt" --gdn-backend triton \
        tests/test_backends_triton.py gdn_equiv/suite/test_properties.py ;;
    rows-tiles) stage rows-tiles "${!var:-240}" sh -c "python3 tools/bwd_tiles.py --forward-rows \
        ${FWD_ROWS_TILES:-64x512x4x4 64x1024x4x4 32x512x4x8 128x512x4x8} && \
        python3 tools/bwd_tiles.py --serial ${SERIAL_TILES:-128x512x4x1x8 64x512x4x1x8 128x256x4x1x8 256x512x4x1x8 128x512x8x1x8} && \
        python3 tools/serial_stages_probe.py" ;;
    rows-suite) stage rows-suite "${!var:-200}" env GDN_EQUIV_TRITON_FORWARD=rows python3 -m pytest -n "$W" -q \
        -p no:cacheprovider -rfE --gdn-failure-log "$OUT/rows-suite-failures.txt" --gdn-backend triton \
        tests/test_backends_triton.py gdn_equiv/suite/test_conformance.py gdn_equiv/suite/test_properties.py ;;
    ncu-rows) stage ncu-rows "${!var:-120}" env GDN_EQUIV_TRITON_FORWARD=rows ncu --clock-control none \
        --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats python3 tools/ncu_prologue.py ;;
    ncu-serial) stage ncu-serial "${!var:-120}" env GDN_EQUIV_TRITON_BACKWARD=serial ncu --clock-control none \
        --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats python3 tools/ncu_prologue.py ;;
    ncu-onepass) stage ncu-onepass "${!var:-120}" env GDN_EQUIV_TRITON_BACKWARD=one-pass ncu --clock-control none \
        --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats python3 tools/ncu_prologue.py ;;
    ncu) stage ncu "${!var:-120}" ncu --clock-control none --profile-from-start off --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats python3 tools/ncu_prologue.py ;;
    *) echo "unknown stage $1" >&2; status=1 ;;
    esac
}

for name in ${STAGES:-bench tiles fla-fuzz suites fla-tests}; do run_stage "$name"; done
cat "$OUT/summary.txt"
exit $status
