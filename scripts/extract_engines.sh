#!/bin/sh
# The serving engines' conv ops, extracted from their wheels into .engines/ (ignored): the files
# gdn_equiv/serving/engines.py loads (each alone, its top-level imports stubbed) and each wheel's
# METADATA, so importlib.metadata finds the version with PYTHONPATH=.engines. A wheel is not installed:
# vLLM 0.34.0's pins torch 2.14 and ~100 packages this project does not need to run its convs.
#   sh scripts/extract_engines.sh /tmp/vllm-wheel/vllm-0.34.0-*.whl /tmp/sglang-wheel/sglang-0.5.23-*.whl
set -eu
mkdir -p .engines
for wheel in "$@"; do
    case "$(basename "$wheel")" in
        vllm-*) files='vllm/model_executor/layers/mamba/ops/causal_conv1d.py vllm/model_executor/layers/mamba/ops/cpu/causal_conv1d.py' ;;
        sglang-*) files='sglang/kernels/ops/mamba/causal_conv1d_triton.py' ;;
        *) echo "extract_engines.sh: $wheel is not a vllm or sglang wheel" >&2; exit 2 ;;
    esac
    dist=$(basename "$wheel" | cut -d- -f1-2).dist-info
    unzip -q -o "$wheel" $files "$dist/METADATA" -d .engines
done
du -sh .engines
