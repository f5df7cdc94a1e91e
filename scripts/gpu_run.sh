#!/usr/bin/env bash
# One call on the GPU machine: install the wheels built by scripts/build_wheels.sh, then run
# what SECTIONS names and leave results under $OUT (device tool) or out/gpu: run.log (devices,
# benchmark tables and logs), pytest_*.log, memcheck.log, *.json, w1.png, w3.md and soak.md (at
# most 8 files: the device tool returns no more; the default sections write 7, bench-w3 adds w3.md
# and w3.json, soak adds soak.json and soak.md, so name fewer sections next to them: e.g.
# SECTIONS="gpu-tests bench-w3"; first-block adds first_block.json and first_block.md). Prints a
# short summary last.
#   SECTIONS="gpu-tests tests bench-w1 bench-w2 profile sanitizer" bash scripts/gpu_run.sh
#   SECTIONS="host-jitter bench-w3" bash scripts/gpu_run.sh     # host stalls, then W3
#   SECTIONS=bench-w3 BLOCKS_W3=500 PERIOD_MS_W3=1 bash scripts/gpu_run.sh     # a quick W3 (~15 s)
#   SECTIONS=soak SOAK_MIN=5 bash scripts/gpu_run.sh    # W1 on cuda at its clock, memory sampled (a command's
#                                                       # 10-minute limit: keep the soak alone or short)
#   SECTIONS="multi-gpu gpu-tests" GK_REQUIRE_MULTI_GPU=1 bash scripts/gpu_run.sh   # several GPUs: W1 streams
#       placed with device: auto + W2 per GPU (benchmarks/multi_gpu.py -> multi_gpu.json, multi_gpu.md; ~1 min),
#       then pytest -m gpu with the multi_gpu tests required to run (fewer than 2 GPUs is then an error)
#   MULTI_GPU_ARGS="--streams 16 --seconds 30" adds arguments to benchmarks/multi_gpu.py
#   SECTIONS="first-block gpu-tests" bash scripts/gpu_run.sh   # W1/W2 first block cold/warm in fresh processes;
#       with .wheels-before/ (BEFORE_REF=main scripts/build_wheels.sh) that build is measured as "before"
#   SECTIONS=cadence bash scripts/gpu_run.sh    # the paced measurements in one call (~8 min on one H100): the GPU tests of
#       the ops' new units, paced blocks and the capacity sweep (pytest_cadence.log), then benchmarks/cadence.py within what is
#       left of CADENCE_TOTAL_S (default 470 s): W1 paced at 256 and 64 samples with every baseline paced the
#       same way and back to back, the host settings compared, the capacity sweep of pygpukit-dsp and
#       PyTorch + graph (coarse, then 30 s confirmations near the knee), W3 and host_jitter if time is left.
#       Writes cadence.md, cadence.json, capacity.png (+ run.log, pytest_cadence.log: 5 files). Knobs:
#       CADENCE_TOTAL_S, CADENCE_PARTS (w1,w1_64,settings,capacity,w3), CADENCE_BLOCKS (1000), SETTINGS_BLOCKS
#       (400), CAPACITY_COARSE_S (2), CAPACITY_CONFIRM_S (30), CAPACITY_LADDER, CAPACITY_TORCH_LADDER,
#       W3_BLOCKS (3000, fewer when the budget is short), CADENCE_TESTS=0 (no tests)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
mkdir -p "$OUT"
SECTIONS="${SECTIONS:-gpu-tests tests bench-w1 bench-w2}"
BLOCKS_W1="${BLOCKS_W1:-5000}"
BLOCKS_W2="${BLOCKS_W2:-200}"
BLOCKS_W3="${BLOCKS_W3:-}"          # default: benchmarks/w3.yaml's (3000 after 300 warm-up)
PERIOD_MS_W3="${PERIOD_MS_W3:-}"
QUANTA_W3="${QUANTA_W3:-}"          # e.g. "250000 30000": one W3 run per scheduler quantum (ns)    # default: W1's block period, 5.33 ms (the full run takes ~2 min)
SOAK_MIN="${SOAK_MIN:-5}"           # soak: minutes of W1 at 187.5 blocks/s on the cuda backend
RUNS_FIRST_BLOCK="${RUNS_FIRST_BLOCK:-3}"  # first-block: cold+warm pairs per workload and build
LOG="$OUT/run.log"
source scripts/gpu_install.sh || exit 1
export PYTHONUNBUFFERED=1 GK_REQUIRE_GPU=1 GK_CACHE_DIR="${GK_CACHE_DIR:-/tmp/gk-cache}"
GK="python3 -m pygpukit_dsp.cli"
PYTEST="python3 -m pytest -q -p no:cacheprovider -o addopts=--import-mode=importlib -rfE"
summary=()
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
section() { echo "== $*" >> "$LOG"; }

section "gpu"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv >> "$LOG" 2>&1
$GK devices >> "$LOG" 2>&1

if has host-jitter; then
    # the host's own stalls, no GPU involved (benchmarks/host_jitter.py): the floor under W1/W3 tails
    section "host jitter"
    python3 benchmarks/host_jitter.py --seconds "${JITTER_S:-4}" >> "$LOG" 2>&1
    summary+=("host jitter: rc=$?")
fi
if has first-block; then
    # W1 and W2 from engine open to the first output, each in a fresh process: cold (empty kernel
    # cache) and warm (the second run), with the shipped kernels, without them (GK_SHIPPED_KERNELS=0),
    # and the .wheels-before/ build when there is one (docs/benchmarks.md, "First block")
    section "first block"
    fb_args=()
    if ls .wheels-before/pygpukit_dsp-*.whl >/dev/null 2>&1; then
        rm -rf /tmp/site-before
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-before \
            .wheels-before/pygpukit_dsp-*.whl >> "$LOG" 2>&1 && fb_args+=(--before-site /tmp/site-before)
    fi
    python3 benchmarks/first_block.py --runs "$RUNS_FIRST_BLOCK" ${fb_args[@]+"${fb_args[@]}"} \
        --json "$OUT/first_block.json" --markdown "$OUT/first_block.md" >> "$LOG" 2>&1
    summary+=("first block: rc=$?")
    [[ -f "$OUT/first_block.md" ]] && while IFS= read -r line; do summary+=("  $line"); done \
        < <(grep -E '^\| (W[12]|workload|---)' "$OUT/first_block.md" | head -9)
fi
if has gpu-tests; then
    $PYTEST -m gpu tests > "$OUT/pytest_gpu.log" 2>&1
    summary+=("pytest -m gpu: $(tail -1 "$OUT/pytest_gpu.log")")
fi
if has tests; then
    $PYTEST tests > "$OUT/pytest_all.log" 2>&1
    summary+=("pytest (all): $(tail -1 "$OUT/pytest_all.log")")
fi
if has bench-w1; then
    section "bench W1"
    $GK bench benchmarks/w1.yaml --backend cuda --compare numpy,cupy,torch,torch-graph \
        --blocks "$BLOCKS_W1" --warmup 500 --json "$OUT/w1.json" --plot "$OUT/w1.png" >> "$LOG" 2>&1
    summary+=("W1: rc=$?")
fi
if has bench-w2; then
    section "bench W2 resident"
    $GK bench benchmarks/w2.yaml --backend cuda --mode resident --compare cupy,torch \
        --blocks "$BLOCKS_W2" --warmup 20 --json "$OUT/w2_resident.json" >> "$LOG" 2>&1
    summary+=("W2 resident: rc=$?")
    section "bench W2 streamed"
    GK_DEBUG=1 $GK bench benchmarks/w2.yaml --backend cuda --mode streamed --compare cupy \
        --blocks "$BLOCKS_W2" --warmup 4 --json "$OUT/w2_streamed.json" >> "$LOG" 2>&1
    summary+=("W2 streamed: rc=$?")
fi
if has bench-w3; then
    section "bench W3"
    w3_args=()
    [[ -n "$BLOCKS_W3" ]] && w3_args+=(--blocks "$BLOCKS_W3" --warmup $(( BLOCKS_W3 / 10 )))
    [[ -n "$PERIOD_MS_W3" ]] && w3_args+=(--period-ms "$PERIOD_MS_W3")
    if [[ -z "$QUANTA_W3" ]]; then
        $GK bench benchmarks/w3.yaml ${w3_args[@]+"${w3_args[@]}"} --json "$OUT/w3.json" --markdown "$OUT/w3.md" >> "$LOG" 2>&1
        summary+=("W3: rc=$?")
    else
        # one run per scheduler quantum (a copy of w3.yaml next to it: its data paths are relative)
        for q in $QUANTA_W3; do
            sed "s/^  quantum_ns: .*/  quantum_ns: $q/" benchmarks/w3.yaml > benchmarks/.w3_q$q.yaml
            section "bench W3 quantum_ns=$q"
            $GK bench benchmarks/.w3_q$q.yaml ${w3_args[@]+"${w3_args[@]}"} --json "$OUT/w3_q$q.json" \
                --markdown "$OUT/w3_q$q.md" >> "$LOG" 2>&1
            summary+=("W3 quantum $q: rc=$?")
            rm -f benchmarks/.w3_q$q.yaml
        done
    fi
fi
if has soak; then
    # W1 at its sample clock on cuda; RSS, GPU memory and the engine pool every 10 s (docs/benchmarks.md, Soak)
    section "soak W1 cuda ($SOAK_MIN min)"
    python3 benchmarks/soak.py benchmarks/w1.yaml --backend cuda --minutes "$SOAK_MIN" \
        --json "$OUT/soak.json" --markdown "$OUT/soak.md" >> "$LOG" 2>&1
    rc=$?
    summary+=("soak W1 cuda $SOAK_MIN min: rc=$rc")
    [[ -f "$OUT/soak.md" ]] && while IFS= read -r line; do summary+=("  $line"); done < <(grep '^\* ' "$OUT/soak.md")
fi
if has multi-gpu; then
    # a Session of W1 streams with device: auto over every GPU (per-GPU p50/p99, misses), then W2 on
    # each GPU alone and on all at once (Gsamples/s per GPU, aggregate ratio); docs/multi-gpu.md
    section "bench multi-GPU"
    nvidia-smi topo -m >> "$LOG" 2>&1
    python3 benchmarks/multi_gpu.py --out "$OUT" ${MULTI_GPU_ARGS:-} >> "$LOG" 2>&1
    summary+=("multi-GPU: rc=$?")
    [[ -f "$OUT/multi_gpu.md" ]] && while IFS= read -r line; do summary+=("  $line"); done \
        < <(grep -E '^aggregate |^\* ONE GPU' "$OUT/multi_gpu.md")
fi
if has cadence; then
    # paced W1, host settings, capacity, W3 (benchmarks/cadence.py; docs/benchmarks.md)
    section "cadence"
    cadence_t0=$(date +%s)
    if [[ "${CADENCE_TESTS:-1}" == "1" ]]; then
        # the split tests of the ops that gained units, the realtime-beside-heavy-stream test, and the
        # ops' own tests (their whole-block kernels changed too)
        timeout "${CADENCE_TESTS_TIMEOUT:-200}" $PYTEST -m gpu tests/backends/test_op_units.py \
            tests/backends/test_cuda_chunked.py tests/backends/test_cuda_sos.py tests/backends/test_cuda_resample.py \
            tests/backends/test_cuda_channelizer.py tests/backends/test_cuda_fir_mix.py tests/backends/test_cuda_delay.py \
            tests/backends/test_cuda_gain.py tests/backends/test_cuda_kernel.py \
            tests/backends/test_cuda_paced.py tests/benchmarks/test_capacity.py tests/admission/test_admitting.py tests/admission/test_rehearsal.py \
            -k "not test_cuda_chunked or gain or delay or sos or resample or channelizer or custom_kernel or fir_mix" \
            > "$OUT/pytest_cadence.log" 2>&1
        summary+=("pytest cadence (units): $(tail -1 "$OUT/pytest_cadence.log")")
    fi
    left=$(( ${CADENCE_TOTAL_S:-470} - ($(date +%s) - cadence_t0) ))
    (( left < 60 )) && left=60
    CADENCE_BUDGET_S="${CADENCE_BUDGET_S:-$left}" python3 benchmarks/cadence.py --out "$OUT" >> "$LOG" 2>&1
    summary+=("cadence: rc=$? in $(( $(date +%s) - cadence_t0 )) s (budget ${CADENCE_BUDGET_S:-$left} s)")
    if [[ -f "$OUT/cadence.json" ]]; then
        while IFS= read -r line; do summary+=("  $line"); done < <(python3 - "$OUT/cadence.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def fig(part, key):
    r = next((r for r in d.get(part, {}).get("rows", []) if r["key"] == key and r.get("figures")), None)
    return f"{r['figures']['p50']:.1f} / {r['figures']['p99']:.1f} us" if r else "-"
for part in ("w1", "w1_64"):
    if part in d and "rows" in d[part]:
        print(f"{part}: paced {fig(part, 'project')}, back to back {fig(part, 'back_to_back')}, "
              f"torch-graph paced {fig(part, 'torch-graph')}; ratios " +
              ", ".join(f"{k} {v:.2f}" for k, v in d[part]["ratios"].items()))
cap = d.get("capacity", {}).get("headline", {})
for k, v in cap.items():
    print(f"capacity @ {k} ms: pygpukit-dsp {v.get('pygpukit-dsp')} (coarse {v.get('pygpukit-dsp_coarse')}), "
          f"torch-graph {v.get('torch-graph')} (coarse {v.get('torch-graph_coarse')}), ratio {v.get('ratio')}")
for t in d.get("capacity", {}).get("targets", []):
    print(f"capacity target {t['name']}: {'not measured' if t['met'] is None else 'met' if t['met'] else 'not met'} "
          f"({t['detail']})")
w3 = d.get("w3", {})
for r in w3.get("rows", []):
    if r.get("w1"):
        c = r.get("extra", {}).get("miss_causes") or {}
        why = f" ({c.get('host_stall')} host stalls, {c.get('process')} the process's)" if c else ""
        print(f"w3 {r['key']}: W1 p99 {r['w1']['p99']:.1f} us, misses {r['w1']['misses']} of {r['w1']['blocks']}{why}")
if d.get("skipped"):
    print("left out: " + "; ".join(f"{k} ({v})" for k, v in d["skipped"].items()))
PY
)
    fi
fi
if has profile; then
    section "profile W1"
    python3 benchmarks/profile_w1.py --out "$OUT/profile_w1" >> "$LOG" 2>&1
    summary+=("profile W1: rc=$?")
fi
if has ncu; then
    # Nsight Compute on W1's per-block kernels (pull, fir_mix, push), clocks left alone
    timeout "${NCU_TIMEOUT:-240}" ncu --clock-control none --kernel-name regex:'gk_(fir_mix|io)' \
        --launch-skip 60 --launch-count 6 --section SpeedOfLight --section LaunchStats \
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        python3 -c "
import numpy as np
from pygpukit_dsp import Pipeline
from pygpukit_dsp.backends import open_backend
w1 = Pipeline.from_yaml('benchmarks/w1.yaml')
e = open_backend(w1, w1.specs(), 'cuda')
x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
for _ in range(100):
    e.process(x)
e.close()
" > "$OUT/ncu_w1.txt" 2>&1
    summary+=("ncu W1: rc=$?")
fi
if has sanitizer; then
    timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool memcheck --report-api-errors no \
        --error-exitcode 9 $PYTEST -m gpu ${SANITIZE_TESTS:-tests/backends} -x > "$OUT/memcheck.log" 2>&1
    summary+=("compute-sanitizer memcheck: rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | head -1)")
fi

echo "== summary"
printf '%s\n' "${summary[@]}"
grep -E "^(FAILED|ERROR)" "$OUT"/pytest_*.log 2>/dev/null | head -40
sed -n '/^== bench/,$p' "$LOG"
