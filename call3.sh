set -u
export LIGER_CPP_COMMIT=$(cat .commit) PYTHONUNBUFFERED=1
TESTS=0 BENCHES=none timeout 200 bash scripts/gpu_check.sh > /tmp/build.out 2>&1; tail -1 /tmp/build.out
export PYTHONPATH=$PWD:$PWD/benchmarks:/tmp/site
W=/tmp/gpu_check_work
python3 -c "import torch; p=torch.cuda.get_device_properties(0); print('L2', p.L2_cache_size)"
bd() { timeout 60 python3 benchmarks/kernel_breakdown.py "$@" 2>&1 | grep -v -i warn; }
{ bd rms_norm_bwd 8192x4096 16384x4096 32768x4096 65536x4096; bd layer_norm_bwd 16384x4096 32768x4096; bd rms_norm_fwd 8192x4096 65536x4096; bd rms_norm 8192x4096 65536x4096; } > $W/bd3.log; cat $W/bd3.log
tar czf $OUT/results.tgz -C $W .
for k in ln_fwd_cached rms_fwd_cached; do
op=layer_norm; [ $k = rms_fwd_cached ] && op=rms_norm_fwd
timeout 100 ncu --clock-control none -k regex:$k --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis python3 benchmarks/profile_kernels.py $op 6 > $W/ncu-$k.txt 2>&1
echo "== $k"; grep -E "Duration|DRAM Throughput|Issued Warp|No Eligible|Achieved Occupancy|Theoretical Occ|Registers Per|Executed Ipc A|Warp Cycles Per Issued|Eligible Warps" $W/ncu-$k.txt
done
tar czf $OUT/results.tgz -C $W .
