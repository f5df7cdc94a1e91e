#!/usr/bin/env bash
# One call on the GPU machine: install the wheels built by scripts/build_wheels.sh, then run
# what SECTIONS names (default: all) and leave logs and results under $OUT (device tool) or
# out/gpu. Prints a short summary last.
#   SECTIONS="gpu-tests tests bench-w1 bench-w2 sanitizer" bash scripts/gpu_run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
mkdir -p "$OUT"
SECTIONS="${SECTIONS:-gpu-tests tests bench-w1 bench-w2}"
BLOCKS_W1="${BLOCKS_W1:-5000}"
BLOCKS_W2="${BLOCKS_W2:-200}"
source scripts/gpu_install.sh || exit 1
export PYTHONUNBUFFERED=1 GK_REQUIRE_GPU=1 GK_CACHE_DIR="${GK_CACHE_DIR:-/tmp/gk-cache}"
GK="python3 -m pygpukit_dsp.cli"
summary=()
has() { [[ " $SECTIONS " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv > "$OUT/gpu.csv" 2>&1
$GK devices > "$OUT/devices.txt" 2>&1

if has gpu-tests; then
    python3 -m pytest -q -m gpu tests -p no:cacheprovider -o addopts="--import-mode=importlib" -rfE \
        > "$OUT/pytest_gpu.log" 2>&1
    summary+=("pytest -m gpu: $(tail -1 "$OUT/pytest_gpu.log")")
fi
if has tests; then
    python3 -m pytest -q tests -p no:cacheprovider -o addopts="--import-mode=importlib" -rfE \
        > "$OUT/pytest_all.log" 2>&1
    summary+=("pytest (all): $(tail -1 "$OUT/pytest_all.log")")
fi
if has bench-w1; then
    $GK bench benchmarks/w1.yaml --backend cuda --compare numpy,cupy,torch,torch-graph \
        --blocks "$BLOCKS_W1" --warmup 500 --json "$OUT/w1.json" --markdown "$OUT/w1.md" \
        --plot "$OUT/w1.png" > "$OUT/w1.log" 2>&1
    summary+=("W1: rc=$? (see w1.md)")
fi
if has bench-w2; then
    $GK bench benchmarks/w2.yaml --backend cuda --mode resident --compare cupy,torch \
        --blocks "$BLOCKS_W2" --warmup 20 --json "$OUT/w2_resident.json" --markdown "$OUT/w2_resident.md" \
        > "$OUT/w2_resident.log" 2>&1
    summary+=("W2 resident: rc=$?")
    $GK bench benchmarks/w2.yaml --backend cuda --mode streamed --compare cupy \
        --blocks "$BLOCKS_W2" --warmup 4 --json "$OUT/w2_streamed.json" --markdown "$OUT/w2_streamed.md" \
        > "$OUT/w2_streamed.log" 2>&1
    summary+=("W2 streamed: rc=$?")
fi
if has sanitizer; then
    timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool memcheck --error-exitcode 9 \
        python3 -m pytest -q -m gpu ${SANITIZE_TESTS:-tests/backends} -x \
        -p no:cacheprovider -o addopts="--import-mode=importlib" > "$OUT/memcheck.log" 2>&1
    summary+=("compute-sanitizer memcheck: rc=$? $(grep -c 'ERROR SUMMARY' "$OUT/memcheck.log") summaries")
fi

echo "== summary ($(head -2 "$OUT/gpu.csv" | tail -1))"
printf '%s\n' "${summary[@]}"
for f in "$OUT"/w1.md "$OUT"/w2_resident.md "$OUT"/w2_streamed.md; do [ -f "$f" ] && cat "$f"; done
grep -E "^(FAILED|ERROR)" "$OUT"/pytest_*.log 2>/dev/null | head -40
