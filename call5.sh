set -u
export LIGER_CPP_COMMIT=$(cat .commit) PYTHONUNBUFFERED=1
TESTS=0 BENCHES=none timeout 200 bash scripts/gpu_check.sh > /tmp/build.out 2>&1; tail -1 /tmp/build.out
export PYTHONPATH=$PWD:$PWD/benchmarks:/tmp/site
W=/tmp/gpu_check_work
bd() { timeout 60 python3 benchmarks/kernel_breakdown.py "$@" 2>&1 | grep -v -i warn; }
{ for v in v1 v2; do bd rms_norm 16384x4096 32768x4096 65536x2048 131072x1024 16384x8192 --env LIGER_CPP_RMS_TMA=$v; done; } > $W/bd5.log; cat $W/bd5.log
tar czf $OUT/results.tgz -C $W .
timeout 200 python3 -m pytest tests/test_rms_norm.py tests/test_layer_norm.py tests/test_fused_add_rms_norm.py -q -n 16 -p no:cacheprovider -k cuda > $W/tests.log 2>&1; tail -2 $W/tests.log; grep -E "^(FAILED|ERROR)" $W/tests.log | head
tar czf $OUT/results.tgz -C $W .
