#!/usr/bin/env bash
# One device call in named stages (H200 machine, repo root), for a session whose device minutes are
# few: a carried sm_90a build (SKIP_BUILD=1, the default here) and only the stages named, each with
# its own time limit, everything packed into ONE file, $OUT/stages.tgz, after each stage, a summary
# of every stage last.
#
#   STAGES="tests host_cost rl e2e_b1" bash scripts/gpu_stages.sh
#   STAGES="moe_tests moe_bench captured failure" bash scripts/gpu_stages.sh
#
#   build      python3 setup.py build_ext --inplace (sm_90a) when SKIP_BUILD=0
#   tests      pytest $TEST_FILES -k "cuda" -n $NPROC (default: the CUDA cases of every test file); what
#              failed runs again with one worker (tests_alone: out of memory beside 15 others on an H100)
#   host_cost  benchmarks/bench_host_cost.py (CPU and CUDA, each op against PyTorch's, 1 x 64)
#   rl         benchmarks/bench_rl_losses.py (GRPO, JSD distillation: x floor, first call, memory)
#   logits     benchmarks/bench_logits_losses.py (CE + TVD and GRPO on given logits: x copy floor, memory)
#   e2e_b1     benchmarks/bench_e2e.py 1B Llama at batch 1 x 1024 (host-bound): hf, liger_cpp, liger,
#              with --breakdown (one profiled step: GPU time by category and the host-time profile)
#   e2e_b1_ab  the same batch-1 step, alternating twice between the package in .ab_base/ (a build before
#              the change under test, carried) and this one: hf and liger_cpp each time
#   e2e_1b     bench_e2e.py 1B Llama at 8 x 2048 (the GPU-bound bench of record): hf, liger_cpp, liger
#   e2e_families  bench_e2e.py --family $E2E_FAMILIES (default olmo3 hunyuan_v1_moe qwen3_vl), 1b-b8t2048
#   e2e_moe    bench_e2e.py --preset moe-b8t2048 --family qwen3_moe --breakdown (issue 28: the routed
#              experts' GPU time and share of the step in each variant)
#   moe_tests  pytest tests/test_moe*.py -k cuda
#   moe_bench  benchmarks/bench_moe.py (experts layer fwd+bwd, two shapes)
#   sanitize_only  compute-sanitizer $SANITIZE_TOOLS (memcheck initcheck) over gpu_sanitize.py's $SANITIZE_ONLY
#   dyt_poly   benchmarks/bench_dyt_poly_norm.py (DyT and PolyNorm: liger_cpp, eager, compile, Liger)
#   ce_bench   benchmarks/bench_cross_entropy.py --ours-only (the CE kernels' bench of record shapes)
#   flce       benchmarks/bench_fused_linear_cross_entropy.py $FLCE_ARGS (e.g. --shapes M,H,V ... --only ...)
#   first_call scripts/probes/first_call.py: a fresh process's first GRPO call, twice each with nothing, a
#              tiny PyTorch-only fwd+bwd and a tiny liger_cpp RMSNorm first; then after the PyTorch one with
#              CUDA_MODULE_LOADING=EAGER, and profiled
#   selective  scripts/probes/selective_logprobs.py 0.9 (against Liger's Triton kernel and eager)
#   captured / failure / beyond / long / sanitize: scripts/reliability_gpu.sh's stages of those names
#              (sanitize: all four compute-sanitizer tools at once, each over 3 processes, ~2 min)
# Export LIGER_CPP_COMMIT=<sha> for the record (git's HEAD on the device machine may be stale).
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
W=${WORK:-/tmp/stages_work}
rm -rf "$W" && mkdir -p "$W"
pack() { tar czf "$OUT/stages.tgz" -C "$W" . 2>/dev/null; }
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then  # the carried Liger-Kernel wheel: the baseline
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:$PWD/benchmarks:${PYTHONPATH:-}
T0=$(date +%s)
stamp() { echo "== $1 at +$(($(date +%s) - T0)) s" | tee -a "$W/timeline.txt"; }
echo "commit ${LIGER_CPP_COMMIT:-unknown}, stages: ${STAGES:-}" | tee "$W/timeline.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv >"$W/gpu.txt" 2>&1
if [ "${SKIP_BUILD:-1}" != 1 ]; then
  TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=16 python3 setup.py build_ext --inplace >"$W/build.log" 2>&1 \
    || { tail -40 "$W/build.log"; pack; exit 1; }
fi
python3 -m liger_cpp.env >"$W/env.txt" 2>&1

run() {  # run NAME TIMEOUT CMD...: output in $W/NAME.log, rc appended
  local name=$1 limit=$2
  shift 2
  stamp "$name"
  timeout "$limit" "$@" >"$W/$name.log" 2>&1
  echo "$name rc=$?" | tee -a "$W/$name.log" "$W/timeline.txt"
  pack
}
for s in ${STAGES:-}; do
  case $s in
    tests)
      # 16 workers share one card: on an 80 GB H100 the few tests that need tens of GB (2^31-element
      # cases) run out of memory beside the others, and the driver then fails lazy kernel loads too
      # ("unknown error"). Whatever failed runs again alone (--lf, one worker): a real failure fails again.
      run tests "${TESTS_TIMEOUT:-300}" python3 -m pytest ${TEST_FILES:-tests} -q -n "${NPROC:-16}" \
        -o cache_dir="$W/.pytest_cache" -k "${TEST_K:-cuda}"
      if ! tail -1 "$W/tests.log" | grep -q "rc=0"; then
        run tests_alone "${TESTS_ALONE_TIMEOUT:-200}" python3 -m pytest ${TEST_FILES:-tests} -q -n 1 --lf \
          --lfnf=none -o cache_dir="$W/.pytest_cache" -k "${TEST_K:-cuda}"
      fi ;;
    host_cost) run host_cost "${HOST_TIMEOUT:-120}" python3 benchmarks/bench_host_cost.py --out "$W/host_cost.json" ;;
    rl) run rl "${RL_TIMEOUT:-240}" python3 benchmarks/bench_rl_losses.py ${RL_ARGS:-} --out "$W/rl_losses.json" ;;
    logits) run logits "${LOGITS_TIMEOUT:-200}" python3 benchmarks/bench_logits_losses.py ${LOGITS_ARGS:-} \
      --out "$W/logits_losses.json" ;;
    e2e_b1) run e2e_b1 "${E2E_TIMEOUT:-200}" python3 benchmarks/bench_e2e.py --preset 1b-b8t2048 --batch 1 \
      --seq 1024 --variants hf,liger_cpp,liger --quick --breakdown --timeout 90 --out "$W/e2e_b1.json" ;;
    e2e_b1_ab) for i in 1 2; do
        run "e2e_b1_base$i" "${E2E_TIMEOUT:-200}" env PYTHONPATH="$PWD/.ab_base:$PYTHONPATH" python3 \
          benchmarks/bench_e2e.py --preset 1b-b8t2048 --batch 1 --seq 1024 --variants hf,liger_cpp --quick \
          --timeout 90 --out "$W/e2e_b1_base$i.json"
        run "e2e_b1_new$i" "${E2E_TIMEOUT:-200}" python3 benchmarks/bench_e2e.py --preset 1b-b8t2048 --batch 1 \
          --seq 1024 --variants hf,liger_cpp --quick --timeout 90 --out "$W/e2e_b1_new$i.json"
      done ;;
    e2e_1b) run e2e_1b "${E2E_TIMEOUT:-300}" python3 benchmarks/bench_e2e.py --preset 1b-b8t2048 \
      --variants hf,liger_cpp,liger --quick --timeout 120 --out "$W/e2e_1b.json" ;;
    e2e_families)  # issue 27: one dense, one MoE, one multimodal family at ~1B (E2E_FAMILIES)
      for fam in ${E2E_FAMILIES:-olmo3 hunyuan_v1_moe qwen3_vl}; do
        run "e2e_$fam" "${E2E_TIMEOUT:-200}" python3 benchmarks/bench_e2e.py --preset 1b-b8t2048 --family "$fam" \
          --variants hf,liger_cpp,liger --quick --timeout 90 --out "$W/e2e_$fam.json"
      done ;;
    e2e_moe) run e2e_moe "${E2E_TIMEOUT:-240}" python3 benchmarks/bench_e2e.py --preset moe-b8t2048 --family qwen3_moe --breakdown \
      --variants hf,liger_cpp,liger --quick --timeout 110 --out "$W/e2e_moe.json" ;;
    moe_tests) run moe_tests "${MOE_TESTS_TIMEOUT:-150}" python3 -m pytest tests/test_moe*.py -q -n "${NPROC:-16}" \
      -p no:cacheprovider -k cuda ;;
    sanitize_only)  # $SANITIZE_TOOLS (default memcheck initcheck) over the cases $SANITIZE_ONLY names
      for tool in ${SANITIZE_TOOLS:-memcheck initcheck}; do
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 run "sanitize-$tool" "${SANITIZE_TIMEOUT:-150}" compute-sanitizer \
          --tool "$tool" python3 scripts/gpu_sanitize.py --only "${SANITIZE_ONLY:?name the cases}"
      done
      python3 scripts/sanitize_summary.py "$W"/sanitize-*.log | tee "$W/sanitize-only-summary.txt" ;;
    flce) run flce "${FLCE_TIMEOUT:-240}" python3 benchmarks/bench_fused_linear_cross_entropy.py ${FLCE_ARGS:-} \
      --out "$W/flce.json" ;;
    dyt_poly) run dyt_poly "${DYT_TIMEOUT:-150}" python3 benchmarks/bench_dyt_poly_norm.py --out "$W/dyt_poly_norm.json" ;;
    ce_bench) run ce_bench "${CE_TIMEOUT:-150}" python3 benchmarks/bench_cross_entropy.py --ours-only --out "$W/ce.json" ;;
    moe_bench) run moe_bench "${MOE_BENCH_TIMEOUT:-150}" python3 benchmarks/bench_moe.py --out "$W/moe.json" ;;
    first_call)
      for w in none torch rms none torch rms; do
        run "first_call_$w" 60 python3 scripts/probes/first_call.py --warm "$w"
        tail -2 "$W/first_call_$w.log" >>"$W/first_call.log"
      done
      run first_call_eager 60 env CUDA_MODULE_LOADING=EAGER python3 scripts/probes/first_call.py --warm torch
      run first_call_profile 60 python3 scripts/probes/first_call.py --warm torch --profile
      tail -2 "$W/first_call_eager.log" >>"$W/first_call.log" ;;
    selective) run selective 90 python3 scripts/probes/selective_logprobs.py 0.9 ;;
    captured | failure | beyond | long | sanitize)
      stamp "$s"
      OUT="$W/rel" WORK="$W/rel_work" STAGES="$s" bash scripts/reliability_gpu.sh >"$W/$s.log" 2>&1
      echo "$s rc=$?" | tee -a "$W/timeline.txt"
      pack ;;
    *) echo "unknown stage $s" | tee -a "$W/timeline.txt" ;;
  esac
done
stamp done
pack
echo
for s in ${STAGES:-}; do
  echo "== $s"
  case $s in
    tests | moe_tests) grep -E "^(FAILED|ERROR)" "$W/$s.log" | head -15; tail -2 "$W/$s.log"
      if [ -f "$W/${s}_alone.log" ]; then
        echo "-- again, one worker"; grep -E "^(FAILED|ERROR)" "$W/${s}_alone.log" | head -15; tail -2 "$W/${s}_alone.log"
      fi ;;
    captured | failure | beyond | long | sanitize) tail -12 "$W/$s.log" ;;
    first_call | selective) tail -20 "$W/$s.log" ;;
    e2e_families) for fam in ${E2E_FAMILIES:-olmo3 hunyuan_v1_moe qwen3_vl}; do
        sed -n '/^[A-Z].* on /,$p' "$W/e2e_$fam.log" | head -8; done ;;
    e2e_b1_ab) for r in base1 new1 base2 new2; do
        echo "-- $r"; sed -n '/^[A-Z].* on /,$p' "$W/e2e_b1_$r.log" | head -6; done ;;
    *) sed -n '/^[A-Z].* on /,$p' "$W/$s.log" | head -40; tail -3 "$W/$s.log" ;;
  esac
done
