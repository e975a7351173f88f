"""Where the JSD distillation step's wall time goes beyond its kernels: one steady fwd+bwd of
liger_cpp's LigerFusedLinearJSDLoss at bench_rl_losses' shape profiled (torch.profiler), the GPU
timeline's idle gaps (> 20 us) with the kernels on either side, and the CUDA runtime calls that take
host time (synchronisations, allocations, copies). bench_rl_losses read 1.105-1.126 x its GEMM floor
while its kernels sum to 1.035 x (H100, 2026-12-07): ~3 ms of the 39.8 are not kernels.
Usage: python scripts/probes/jsd_gaps.py [steps profiled back to back, default 1]"""

import sys

import torch

sys.path.insert(0, "benchmarks")
from bench_rl_losses import JSD_KW, jsd_inputs  # noqa: E402

from liger_cpp import chunked_loss as cl  # noqa: E402

d = jsd_inputs((8192, 2048, 4096, 151936), "cuda", torch.bfloat16)
mod = cl.LigerFusedLinearJSDLoss(**JSD_KW)


def step():
    d["xs"].grad = d["ws"].grad = None
    mod(d["xs"], d["ws"], d["xt"], d["wt"], d["t"]).backward()


for _ in range(5):
    step()
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(10):
    step()
e.record()
torch.cuda.synchronize()
print(f"back-to-back: {s.elapsed_time(e) / 10:.3f} ms a step")
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 1  # back-to-back steps profiled
with torch.profiler.profile(activities=acts) as prof:
    for _ in range(STEPS):
        step()
    torch.cuda.synchronize()
CUDA = torch.autograd.DeviceType.CUDA
ev = [x for x in prof.events() if x.device_type == CUDA and x.time_range.elapsed_us() > 0]
ev.sort(key=lambda x: x.time_range.start)
busy = sum(x.time_range.elapsed_us() for x in ev)
span = ev[-1].time_range.end - ev[0].time_range.start
print(f"GPU span {span / 1e3:.3f} ms, kernels {busy / 1e3:.3f} ms, {len(ev)} kernels, {STEPS} step(s)")
for a, b in zip(ev, ev[1:]):
    gap = b.time_range.start - a.time_range.end
    if gap > 20:
        print(f"  gap {gap:8.1f} us after {a.name[:60]!r} before {b.name[:60]!r}")
rt = {}
for x in prof.events():
    if x.name.startswith("cuda") or x.name.startswith("cu"):
        t = rt.setdefault(x.name, [0, 0.0])
        t[0] += 1
        t[1] += x.time_range.elapsed_us()
print("CUDA runtime calls (count, host us):")
for k, (n, us) in sorted(rt.items(), key=lambda kv: -kv[1][1])[:12]:
    print(f"  {us:10.1f} us  x{n:<4d} {k}")
