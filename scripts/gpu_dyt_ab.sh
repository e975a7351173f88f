#!/usr/bin/env bash
# One device call: DyT's forward layouts (scripts/probes/dyt_fwd_layouts.cu, the binary carried in
# .probe/ or built here), an A/B of DyT between the build carried in .ab_base/ (before the change)
# and this tree's, two alternating rounds (scripts/probes/dyt_ab.py), then the CUDA tests named in
# $TEST_FILES (default: DyT / PolyNorm's and the compat entry points') on this tree's build.
#   [BENCH=1: and benchmarks/bench_dyt_poly_norm.py] bash scripts/gpu_dyt_ab.sh
#     -> $OUT/dyt_ab.txt, $OUT/tests.log (, $OUT/dyt_poly_norm.{json,txt})
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1
. scripts/ab_rounds.sh
R="$OUT/dyt_ab.txt"
ab_start "$R"
if [ "${PROBE:-1}" = 1 ]; then
  P=.probe/dyt_fwd_layouts
  [ -x "$P" ] || { nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/dytp \
    scripts/probes/dyt_fwd_layouts.cu && P=/tmp/dytp; }
  echo "== dyt_fwd_layouts" | tee -a "$R"
  timeout 120 "$P" 2>&1 | tee -a "$R"
fi
ab_rounds scripts/probes/dyt_ab.py "$R"
if [ "${TESTS:-1}" = 1 ]; then
  PYTHONPATH=$PWD timeout "${TEST_TIMEOUT:-240}" python3 -m pytest -q -n 8 -p no:cacheprovider -k cuda \
    ${TEST_FILES:-tests/test_dyt_poly_norm.py tests/test_compat_entry_points.py} >"$OUT/tests.log" 2>&1
  echo "tests rc=$?" | tee -a "$R"
  tail -3 "$OUT/tests.log"
fi
if [ "${BENCH:-0}" = 1 ]; then  # the bench of record (Liger, torch.compile, eager) on this tree's build
  PYTHONPATH=$PWD:$PWD/benchmarks:/tmp/site timeout 240 python3 benchmarks/bench_dyt_poly_norm.py \
    --out "$OUT/dyt_poly_norm.json" 2>&1 | tail -60 >"$OUT/dyt_poly_norm.txt"
  cat "$OUT/dyt_poly_norm.txt" >>"$R"
fi
