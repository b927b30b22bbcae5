#!/bin/sh
# The serving engines' conv ops, extracted from their wheels into .engines/<engine>-<version>/ (ignored), one
# folder per release so several sit side by side: the files gdn_equiv/serving/engines.py loads (each alone,
# its top-level imports stubbed) and the wheel's METADATA. A wheel is not installed (vLLM's pin a torch and
# ~100 packages this project does not need to run its convs); nothing extracted is committed.
#   sh scripts/extract_engines.sh /tmp/w/vllm-0.34.0/vllm-0.34.0-*.whl /tmp/w/sglang-0.5.23/sglang-0.5.23-*.whl
set -eu
DEST=${GDN_EQUIV_ENGINES:-.engines}
mkdir -p "$DEST"
for wheel in "$@"; do
    name=$(basename "$wheel" | cut -d- -f1)
    version=$(basename "$wheel" | cut -d- -f2)
    case "$name" in
        vllm) files='vllm/model_executor/layers/mamba/ops/causal_conv1d.py vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py' ;;
        sglang) files='sglang/kernels/ops/mamba/causal_conv1d_triton.py' ;;
        *) echo "extract_engines.sh: $wheel is not a vllm or sglang wheel" >&2; exit 2 ;;
    esac
    out="$DEST/$name-$version"
    rm -rf "$out"
    mkdir -p "$out"
    # a release without one of the files (an older layout) keeps the others; the adapter says which is missing
    unzip -q -o "$wheel" $files "$name-$version.dist-info/METADATA" -d "$out" || true
done
du -sh "$DEST"/* 2>/dev/null || true
