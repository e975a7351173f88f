set -u
export LIGER_CPP_COMMIT=$(cat .commit) PYTHONUNBUFFERED=1
TESTS=0 BENCHES=none timeout 200 bash scripts/gpu_check.sh > /tmp/build.out 2>&1; tail -3 /tmp/build.out
export PYTHONPATH=$PWD:$PWD/benchmarks:/tmp/site
W=/tmp/gpu_check_work
timeout 60 python3 benchmarks/kernel_breakdown.py rms_norm 16384x4096 32768x4096 16384x16384 2048x65536 > $W/bd-rms.log 2>&1; cat $W/bd-rms.log
timeout 40 python3 benchmarks/kernel_breakdown.py rms_norm_fwd 16384x4096 32768x4096 > $W/bd-rmsfwd.log 2>&1; cat $W/bd-rmsfwd.log
timeout 40 python3 benchmarks/kernel_breakdown.py layer_norm 16384x4096 > $W/bd-ln.log 2>&1; cat $W/bd-ln.log
timeout 40 python3 benchmarks/kernel_breakdown.py fused_add_rms_norm 16384x4096 > $W/bd-far.log 2>&1; cat $W/bd-far.log
timeout 150 ncu --clock-control none -k regex:"rms_bwd_tma" --launch-skip 3 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats python3 benchmarks/profile_kernels.py rms_norm 6 > $W/ncu-rms-bwd.txt 2>&1
grep -E "Duration|Throughput|Issued|Eligible|Achieved|Registers|Stall|No Eligible|Active Warps" $W/ncu-rms-bwd.txt | head -40
tar czf $OUT/results.tgz -C $W .
