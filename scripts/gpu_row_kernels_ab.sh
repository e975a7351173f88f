#!/usr/bin/env bash
# One device call: A/B of the RL / distillation row kernels between builds carried as packages
# (.ab_base/: before the change, .ab_a/: an intermediate step; "new": this tree), two alternating
# rounds each (scripts/probes/row_kernels_ab.py), the layout probe scripts/probes/logprob_layouts.cu,
# the CUDA tests of the ops that use those kernels, and the selective log-probs probe against Liger.
#   SIDES="base a new" bash scripts/gpu_row_kernels_ab.sh     -> $OUT/row_ab.txt, $OUT/tests.log
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1
. scripts/ab_rounds.sh
R="$OUT/row_ab.txt"
ab_start "$R"
if [ "${PROBE:-1}" = 1 ]; then
  echo "== logprob_layouts.cu" | tee -a "$R"
  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/lp scripts/probes/logprob_layouts.cu \
    && timeout 120 /tmp/lp 2>&1 | tee -a "$R"
fi
ab_rounds scripts/probes/row_kernels_ab.py "$R"
echo "== selective probe (new)" | tee -a "$R"
PYTHONPATH=$PWD:$PWD/benchmarks:/tmp/site timeout 60 python3 scripts/probes/selective_logprobs.py 0.9 2>&1 | tail -3 | tee -a "$R"
if [ "${TESTS:-1}" = 1 ]; then
  PYTHONPATH=$PWD timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -x -n 8 -p no:cacheprovider -k cuda \
    tests/test_token_logprobs.py tests/test_ce_tvd.py tests/test_logits_divergence.py tests/test_grpo.py \
    tests/test_grpo_logits.py tests/test_distillation.py tests/test_fused_linear_kl_div.py \
    tests/test_distillation_base.py >"$OUT/tests.log" 2>&1
  echo "tests rc=$?" | tee -a "$R"
  tail -3 "$OUT/tests.log"
fi
