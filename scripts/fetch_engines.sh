#!/bin/sh
# Download the engine releases the version tables know (PyPI, --no-deps: the wheels only) and extract their conv
# ops side by side into .engines/<engine>-<version>/ (scripts/extract_engines.sh). Wheels are kept in $WHEELS.
#   sh scripts/fetch_engines.sh                    # every release of both tables
#   sh scripts/fetch_engines.sh vllm==0.34.0 sglang==0.5.23
set -eu
WHEELS=${WHEELS:-/tmp/gdn-equiv-wheels}
if [ $# -eq 0 ]; then
    set -- $(python3 -c 'from gdn_equiv.serving.engines import ENGINES
print(" ".join(f"{e}=={v}" for e, t in ENGINES.items() for v in t))')
fi
for req in "$@"; do
    name=${req%%==*}
    version=${req#*==}
    dir="$WHEELS/$name-$version"
    ls "$dir"/*.whl > /dev/null 2>&1 || python3 -m pip download -q --no-deps "$req" -d "$dir"
    sh scripts/extract_engines.sh "$dir"/*.whl
done
