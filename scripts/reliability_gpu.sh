#!/usr/bin/env bash
# Issue 29's GPU proofs (and issue 30's single-GPU dry run) in stages, on the H200 machine, from the
# repo root. Every stage has its own time limit and writes its logs / JSON / PNG under $WORK; all of
# it is packed into ONE file, $OUT/reliability.tgz, after each stage (a stage cut short keeps the
# rest). A summary of every stage is printed last.
#
#   STAGES="build captured failure sanitize dist" bash scripts/reliability_gpu.sh   # call 1
#   STAGES="beyond" bash scripts/reliability_gpu.sh                                 # call 2 (warm)
#   STAGES="long" bash scripts/reliability_gpu.sh                                   # call 3, alone
#
# Stages run in the order given; each has a time limit (*_TIMEOUT, seconds) so that a call's stages
# fit the device's 10 minutes (typical: build 2-4 min, captured ~1, failure ~0.5, sanitize ~2-3 (four
# tools at once), dist ~1, beyond ~3, long ~7 and at most LONG_BUDGET + 30 s):
#   build     python3 setup.py build_ext --inplace (sm_90a; TORCH_CUDA_ARCH_LIST overrides)
#   sanitize  compute-sanitizer $SANITIZE_TOOLS (default all four, run at once, each tool's cases
#             over $SANITIZE_SHARDS=3 processes) over scripts/gpu_sanitize.py, through
#             scripts/gpu_check.sh's SANITIZE mode
#   captured  benchmarks/captured_step.py: the "1b" Llama's training step and a DPO step, eager under
#             sync debug "error", then captured in a CUDA graph and replayed (bitwise comparison)
#   failure   tests/test_failure_behaviour.py (CUDA rows), test_captured_step.py, test_fsdp.py
#   dist      benchmarks/bench_distributed.py on 1 GPU: Llama-3-8B, FSDP1 and FSDP2 with lm_head its
#             own unit (the DTensor path), liger_cpp, 4K context, batch 1, 2 steps
#   beyond    tests/test_beyond_2_31.py, alone (LIGER_CPP_LARGE_MEMORY_TESTS=1, no xdist)
#   long      benchmarks/long_run.py: HF, liger_cpp and HF-eager-attention, $LONG_STEPS steps (2000) of
#             the "1b" Llama at batch $LONG_BATCH x $LONG_SEQ (2 x 512), bf16: ~150 + 100 + 153 s on the
#             H200 (2026-12-02's step times, ~20 s of start-up each), so in a call of its own. The runs
#             and their reports get $LONG_BUDGET s (500); each run a deadline, its share of the time
#             left by its cost, so none can starve the next; results, summary and PNG are written and
#             packed after each run; LONG_TIMEOUT (budget + 30) only kills a run that hangs
# Export LIGER_CPP_COMMIT=<sha> for the record (git's HEAD on the device machine may be stale).
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
W=${WORK:-/tmp/reliability_work}
rm -rf "$W" && mkdir -p "$W"
pack() { tar czf "$OUT/reliability.tgz" -C "$W" . 2>/dev/null; }
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then  # a carried Liger-Kernel wheel (bench_distributed's 'liger')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:$PWD/benchmarks:${PYTHONPATH:-}
STAGES=${STAGES:-"build captured failure sanitize dist beyond long"}
has() { [[ " $STAGES " == *" $1 "* ]]; }
T0=$(date +%s)
stamp() { echo "== $1 at +$(($(date +%s) - T0)) s" | tee -a "$W/timeline.txt"; }
echo "commit ${LIGER_CPP_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, stages: $STAGES" | tee "$W/timeline.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$W/gpu.txt" 2>&1

stage_build() {
  TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16} \
    python3 setup.py build_ext --inplace >"$W/build.log" 2>&1 || { tail -40 "$W/build.log"; pack; exit 1; }
}
stage_sanitize() {
  OUT=/tmp/reliability_gc_out WORK="$W/sanitize" SKIP_BUILD=1 TESTS=0 BENCHES=none SANITIZE=1 \
    SANITIZE_TOOLS="${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}" SANITIZE_SHARDS=${SANITIZE_SHARDS:-3} \
    SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-180} \
    bash scripts/gpu_check.sh >"$W/sanitize.log" 2>&1
}
stage_captured() {
  timeout ${CAPTURED_TIMEOUT:-150} python3 benchmarks/captured_step.py ${CAPTURED_ARGS:-} \
    --out "$W/captured_step.json" >"$W/captured_step.log" 2>&1
  echo "captured_step rc=$?" >>"$W/captured_step.log"
}
stage_failure() {
  timeout ${FAILURE_TIMEOUT:-120} python3 -m pytest tests/test_failure_behaviour.py tests/test_captured_step.py \
    tests/test_fsdp.py -q -p no:cacheprovider -rs >"$W/failure_tests.log" 2>&1
}
stage_dist() {
  timeout ${DIST_TIMEOUT:-150} python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
    benchmarks/bench_distributed.py --stacks liger_cpp --kinds fsdp1,fsdp2 --lm-head-unit --contexts 4096 \
    --batch 1 --steps 2 --warmup 1 --out-dir "$W/dist" >"$W/dist.log" 2>&1
  echo "bench_distributed rc=$?" >>"$W/dist.log"
}
stage_beyond() {
  LIGER_CPP_LARGE_MEMORY_TESTS=1 timeout ${BEYOND_TIMEOUT:-240} python3 -m pytest tests/test_beyond_2_31.py \
    -p no:xdist -q -p no:cacheprovider --durations=0 ${BEYOND_ARGS:-} >"$W/beyond_2_31.log" 2>&1
}
LONG=(--steps "${LONG_STEPS:-2000}" --batch "${LONG_BATCH:-2}" --seq "${LONG_SEQ:-512}" --out-dir "$W/long_run")
stage_long() {
  local budget=${LONG_BUDGET:-500} packcmd rc
  printf -v packcmd 'tar czf %q -C %q .' "$OUT/reliability.tgz" "$W"
  timeout "${LONG_TIMEOUT:-$((budget + 30))}" python3 benchmarks/long_run.py "${LONG[@]}" --budget "$budget" \
    --after-each "$packcmd" >"$W/long_run.log" 2>&1
  rc=$?
  echo "long_run rc=$rc" >>"$W/long_run.log"
  # killed (a run that hung): analyse what its workers wrote (every 100 steps)
  if [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ ! -f "$W/long_run/summary.txt" ]; then
    timeout 30 python3 benchmarks/long_run.py --report-only "${LONG[@]}" >>"$W/long_run.log" 2>&1
  fi
}

python3 -m liger_cpp.env >"$W/env.txt" 2>&1
for st in $STAGES; do  # in the order given
  case $st in
    build | sanitize | captured | failure | dist | beyond | long) ;;
    *) echo "unknown stage '$st'"; exit 2 ;;
  esac
  stamp "$st"
  "stage_$st"
  [ "$st" = build ] && python3 -m liger_cpp.env >"$W/env.txt" 2>&1
  pack
done
stamp "done"

echo
echo "==================== summary ===================="
cat "$W/timeline.txt"
if has sanitize; then
  echo "-- sanitizers"
  cat "$W/sanitize/sanitize-summary.txt" 2>/dev/null || tail -5 "$W/sanitize.log"
fi
if has captured; then
  echo "-- captured step"
  grep -E "^ *(lm|dpo):|first-call|nondeterministic|rc=" "$W/captured_step.log" | head -20
fi
for f in failure_tests beyond_2_31; do
  [ -f "$W/$f.log" ] || continue
  echo "-- $f"
  grep -E "^(FAILED|ERROR)" "$W/$f.log" | head -20
  tail -1 "$W/$f.log"
done
if has dist; then
  echo "-- bench_distributed (1 GPU)"
  grep -E "tok/s/GPU|rc=|Error" "$W/dist.log" | head -10
fi
if has long; then
  echo "-- long run"
  cat "$W/long_run/summary.txt" 2>/dev/null || tail -20 "$W/long_run.log"
fi
pack
