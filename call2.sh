set -u
export LIGER_CPP_COMMIT=$(cat .commit) PYTHONUNBUFFERED=1
TESTS=0 BENCHES=none timeout 200 bash scripts/gpu_check.sh > /tmp/build.out 2>&1; tail -2 /tmp/build.out
export PYTHONPATH=$PWD:$PWD/benchmarks:/tmp/site
W=/tmp/gpu_check_work
for pdl in on off; do
timeout 60 python3 benchmarks/kernel_breakdown.py rms_norm 16384x4096 32768x4096 --env LIGER_CPP_PDL=$pdl 2>&1 | grep -v Warn | grep -v _warn > $W/bd-rms-pdl$pdl.log; cat $W/bd-rms-pdl$pdl.log
timeout 60 python3 benchmarks/kernel_breakdown.py layer_norm 16384x4096 --env LIGER_CPP_PDL=$pdl 2>&1 | grep -v Warn | grep -v _warn > $W/bd-ln-pdl$pdl.log; cat $W/bd-ln-pdl$pdl.log
done
timeout 40 python3 benchmarks/kernel_breakdown.py rms_norm_fwd 16384x4096 32768x4096 2>&1 | grep -v Warn | grep -v _warn > $W/bd-rmsfwd.log; cat $W/bd-rmsfwd.log
tar czf $OUT/results.tgz -C $W .
timeout 240 python3 -m pytest tests/test_rms_norm.py tests/test_layer_norm.py tests/test_fused_add_rms_norm.py -q -n 16 -p no:cacheprovider -k cuda > $W/tests.log 2>&1; tail -3 $W/tests.log; grep -E "^(FAILED|ERROR)" $W/tests.log | head
tar czf $OUT/results.tgz -C $W .
