#!/usr/bin/env bash
# One device call for the tiled MLP (H100 / H200, repo root, a carried sm_90a build): its tests (CUDA and
# CPU), bench_tiled_mlp.py, and a 1B Llama training step at batch 1 x 32768 tokens with and without tiled
# MLPs (bench_e2e.py, liger_cpp and Liger, then HF). Everything under $OUT. Export LIGER_CPP_COMMIT=<sha>.
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONPATH=$PWD:$PWD/benchmarks:${PYTHONPATH:-}
timeout 120 python3 -m pytest tests/test_tiled_mlp.py tests/test_glu_mlp.py -q -p no:cacheprovider -n 4 > $OUT/tiled_tests.txt 2>&1; echo "tests rc=$?" >> $OUT/tiled_tests.txt; tail -3 $OUT/tiled_tests.txt
timeout 150 python3 benchmarks/bench_tiled_mlp.py --out $OUT/tiled_mlp.json > $OUT/tiled_bench.txt 2>&1; echo "bench rc=$?" >> $OUT/tiled_bench.txt; tail -12 $OUT/tiled_bench.txt
timeout 260 python3 benchmarks/bench_e2e.py --preset 1b-b8t2048 --batch 1 --seq 32768 --variants ${E2E_VARIANTS:-liger_cpp,liger_cpp_tiled,liger,liger_tiled,hf} --quick --timeout 80 --out $OUT/e2e_t32k.json > $OUT/e2e_t32k.txt 2>&1; echo "e2e rc=$?" >> $OUT/e2e_t32k.txt; sed -n '/^End-to-end/,$p' $OUT/e2e_t32k.txt | head -12; tail -2 $OUT/e2e_t32k.txt
