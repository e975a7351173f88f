set -u
export LIGER_CPP_COMMIT=$(cat .commit) PYTHONUNBUFFERED=1
TESTS=0 BENCHES=none timeout 200 bash scripts/gpu_check.sh > /tmp/build.out 2>&1; tail -1 /tmp/build.out
export PYTHONPATH=$PWD:$PWD/benchmarks:/tmp/site
W=/tmp/gpu_check_work
timeout 120 python3 -m pytest tests/test_rms_norm.py tests/test_layer_norm.py tests/test_fused_add_rms_norm.py -q -n 16 -p no:cacheprovider -k cuda > $W/tests.log 2>&1; tail -1 $W/tests.log; grep -E "^(FAILED|ERROR)" $W/tests.log | head
tar czf $OUT/results.tgz -C $W .
timeout 110 python3 benchmarks/bench_rms_norm.py --tma --out $W/rms_norm-tma.json > $W/rms_norm-tma.log 2>&1; grep -v -i warn $W/rms_norm-tma.log | grep -E "^16384x4096|^32768|^16384x8192|^RMS" 
tar czf $OUT/results.tgz -C $W .
timeout 200 python3 benchmarks/bench_rms_norm.py --wide --out $W/rms_norm-wide.json > $W/rms_norm-wide.log 2>&1; grep -v -i warn $W/rms_norm-wide.log | tail -30
tar czf $OUT/results.tgz -C $W .
