set -u
export LIGER_CPP_COMMIT=$(cat commit_id.txt)
C=$LIGER_CPP_COMMIT
W=/tmp/gpu_check_work
TESTS=0 BENCHES=none WORK=$W timeout 200 bash scripts/gpu_check.sh > /tmp/build_out.txt 2>&1; tail -1 /tmp/build_out.txt
export PYTHONPATH=$PWD:$PWD/benchmarks:/tmp/site
R=$W/r; mkdir -p $R
pk() { tar czf $OUT/results.tgz -C $R . ; }
timeout 260 python benchmarks/bench_rms_norm.py --out $R/rms_norm-$C.json > $R/rms_norm-$C.log 2>&1; tail -75 $R/rms_norm-$C.log | grep -E "liger_cpp|compile|clone|first|C =" ; pk
timeout 130 python benchmarks/bench_rms_norm.py --fwd --impls liger_cpp,compile,clone --out $R/rms_norm-fwd-b-$C.json > $R/rms_norm-fwd-b-$C.log 2>&1; tail -20 $R/rms_norm-fwd-b-$C.log; pk
timeout 120 python benchmarks/bench_rms_norm.py --wide --impls liger_cpp,liger_cpp[fwd_wide=l2hint,l1] --out $R/rms_norm-wide-l1-$C.json > $R/rms_norm-wide-l1-$C.log 2>&1; tail -14 $R/rms_norm-wide-l1-$C.log; pk
