#!/usr/bin/env bash
# The GPU loop, in one call on the H200 machine, from the repo root:
#   builds liger_cpp against the machine's torch (sm_90a only, for time; TORCH_CUDA_ARCH_LIST
#   overrides), runs the whole test suite (CUDA cases included), runs the benchmarks, writes logs
#   and JSON under $OUT and prints a short summary table last.
# A Liger-Kernel wheel carried in .whl/ is installed (no deps) as the baseline.
# Usage: bash scripts/gpu_check.sh [pytest -k expression]
#   BENCHES="rms_norm ce_core" runs only those benchmarks (names without bench_); "none" runs none.
#   BENCH_ARGS="--quick" is passed to every benchmark.
#   PROFILE="ce_rows rms_norm" also runs Nsight Compute on those ops (benchmarks/profile_kernels.py;
#   e.g. ce_rows_151936, rms_fwd_wide, rms_fwd_wide_compile).
#   TEST_FILES="tests/test_a.py tests/test_b.py" runs those files instead of the whole suite.
#   SANITIZE=1 runs scripts/gpu_sanitize.py under compute-sanitizer (SANITIZE_TOOLS, default all four).
#   DEMO="--steps 10" also runs the training demo (python -m liger_cpp.demo) with those arguments.
# Export LIGER_CPP_COMMIT=<sha of the tree> for the results' commit field: on the device machine
# `git rev-parse HEAD` named a stale commit (2026-11-30).
# Everything is written to $WORK and packed into $OUT/results.tgz after each stage (the device
# tool brings back only a few files from $OUT, and a stage that runs out of time keeps the rest).
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
FINAL_OUT=$OUT
OUT=${WORK:-/tmp/gpu_check_work}
rm -rf "$OUT" && mkdir -p "$OUT"  # a reused machine kept an earlier run's files there
pack() { tar czf "$FINAL_OUT/results.tgz" -C "$OUT" . 2>/dev/null; }
export PYTHONUNBUFFERED=1
[ -n "${LIGER_CPP_COMMIT:-}" ] || echo "warning: LIGER_CPP_COMMIT is not set; results will name git's HEAD there"
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:$PWD/benchmarks:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"

t0=$(date +%s)
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16} \
    python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
fi
t1=$(date +%s)
python3 -m liger_cpp.env | tee "$OUT/env.txt"
pack

for op in ${PROFILE:-}; do
  timeout 240 ncu --clock-control none -k regex:"rms_|ln_|ce_|rope|glu|reduce|triton" --launch-skip 6 --launch-count 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    python3 benchmarks/profile_kernels.py "$op" 10 >"$OUT/ncu-$op.txt" 2>&1 || echo "ncu $op failed"
  pack
done
if [ "${SANITIZE:-0}" = 1 ]; then
  # compute-sanitizer over every op's default path and kept fallbacks (scripts/gpu_sanitize.py);
  # without the caching allocator so out-of-bounds accesses inside a cached block are seen.
  # SANITIZE_SHARDS=N (N > 1) splits each tool's cases over N processes and runs every tool's
  # shards at once (one call covers all four tools: the sanitizers are host-bound, 16 cores idle).
  shards=${SANITIZE_SHARDS:-1}
  sanitize_one() {  # tool shard
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout ${SANITIZE_TIMEOUT:-240} compute-sanitizer --tool "$1" \
      --print-limit 100 python3 scripts/gpu_sanitize.py --shard "$2/$shards" ${SANITIZE_ARGS:-} \
      >"$OUT/sanitize-$1-$2.log" 2>&1
    echo "sanitize $1 shard $2/$shards rc=$?"
  }
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
    for ((i = 0; i < shards; i++)); do
      if [ "$shards" -gt 1 ]; then sanitize_one "$tool" "$i" & else sanitize_one "$tool" "$i"; pack; fi
    done
  done
  wait
  pack
  python3 scripts/sanitize_summary.py "$OUT"/sanitize-*.log | tee "$OUT/sanitize-summary.txt"
fi
if [ -n "${DEMO:-}" ]; then
  timeout 420 python3 -m liger_cpp.demo $DEMO --png "$OUT/demo.png" --json "$OUT/demo.json" >"$OUT/demo.log" 2>&1 \
    || echo "demo failed"
  tail -25 "$OUT/demo.log"
  pack
fi

[ "${TESTS:-1}" = 0 ] || python3 -m pytest ${TEST_FILES:-tests} -q -n ${NPROC:-8} -p no:cacheprovider ${1:+-k "$1"} >"$OUT/tests.log" 2>&1
test_rc=$?
t2=$(date +%s)
pack

bench_rc=0
# bench_e2e and bench_max_seq (minutes each) run only when named in BENCHES.
selected() {
  if [ -z "${BENCHES:-}" ]; then [ "$1" != bench_e2e ] && [ "$1" != bench_max_seq ]
  else [[ " $BENCHES " == *" ${1#bench_} "* ]]; fi
}
for b in benchmarks/bench_*.py; do
  name=$(basename "$b" .py)
  selected "$name" || continue
  timeout 420 python3 "$b" --out "$OUT/$name.json" ${BENCH_ARGS:-} >"$OUT/$name.log" 2>&1 || { bench_rc=1; echo "$name failed"; tail -20 "$OUT/$name.log"; }
  pack
done
t3=$(date +%s)

echo
echo "== tests (rc=$test_rc): $(tail -1 "$OUT/tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
echo "== build ${t1}-${t0}=$((t1 - t0)) s, tests $((t2 - t1)) s, benchmarks $((t3 - t2)) s"
for b in benchmarks/bench_*.py; do
  name=$(basename "$b" .py)
  selected "$name" || continue
  echo "== $name"
  sed -n '/^[A-Z].* on /,$p' "$OUT/$name.log"
done
pack
exit $((test_rc != 0 || bench_rc != 0))
