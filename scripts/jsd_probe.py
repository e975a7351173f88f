"""JSD distillation probe (issue 31): the bench's GKD config (and the KL one) on the GPU.
default: one liger_cpp call profiled: GPU span against the sum of its kernels, and bench_ms.
--kernels SPEC...: the row kernel's GPU time (profiler, median of 5 calls) under each plan spec
                   ("" = the plan's own choice), JSD and KL.
--ncu: two warm calls then one call (for ncu -k regex:distill_smem -s N -c 1)."""

import argparse
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
from bench_rl_losses import (  # noqa: E402
    JSD_SHAPE,
    KL_SHAPE,
    jsd_inputs,
    jsd_variants,
    kl_inputs,
    kl_variants,
)
from harness import bench_ms  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--ncu", action="store_true")
p.add_argument("--kernels", nargs="*", default=None)
p.add_argument("--out", default="")
args = p.parse_args()


def make(case):
    if case == "jsd":
        d = jsd_inputs(JSD_SHAPE, "cuda", torch.bfloat16)
        return d, [d["xs"], d["ws"]], jsd_variants(False)["liger_cpp"]()
    d = kl_inputs(KL_SHAPE, "cuda", torch.bfloat16)
    return d, [d["x"], d["w"]], kl_variants(False)["liger_cpp"]()


def stepper(d, grads, f):
    def step():
        f(d).backward()
        for g in grads:
            g.grad = None

    return step


def cuda_events(prof):
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ev.sort(key=lambda e: e.time_range.start)
    return ev


res = {}
if args.kernels is not None:
    from liger_cpp._testing import set_plan_override

    for case in ("jsd", "kl"):
        d, grads, f = make(case)
        step = stepper(d, grads, f)
        for spec in args.kernels:
            old = set_plan_override(spec)
            try:
                step()
                step()
                torch.cuda.synchronize()
                times = []
                for _ in range(5):
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        step()
                        torch.cuda.synchronize()
                    times.append(
                        sum(
                            (e.time_range.end - e.time_range.start) / 1e3
                            for e in cuda_events(prof)
                            if "distill_smem" in e.name or "distill_kernel" in e.name
                        )
                    )
                total = bench_ms(step, warmup=5, rep=200)
                res[f"{case}[{spec}]"] = {
                    "row_kernel_ms": round(statistics.median(times), 3),
                    "call_ms": round(total, 3),
                }
            except Exception as e:  # noqa: BLE001
                res[f"{case}[{spec}]"] = {"error": str(e)[:200]}
            finally:
                set_plan_override(old)
            print(case, repr(spec), res[f"{case}[{spec}]"], flush=True)
        del d, grads, f
        torch.cuda.empty_cache()
    if args.out:
        json.dump(res, open(args.out, "w"), indent=1)
    sys.exit(0)

d, grads, f = make("jsd")
step = stepper(d, grads, f)
for _ in range(2):
    step()
torch.cuda.synchronize()
if args.ncu:
    step()
    torch.cuda.synchronize()
    sys.exit(0)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    res["wall_profiled_ms"] = (time.perf_counter() - t0) * 1e3
ev = cuda_events(prof)
start, end = ev[0].time_range.start, max(e.time_range.end for e in ev)
gaps, cur = [], ev[0].time_range.end
for e in ev[1:]:
    if e.time_range.start > cur:
        gaps.append((e.time_range.start - cur, e.name[:60]))
    cur = max(cur, e.time_range.end)
gaps.sort(reverse=True)
res.update(
    span_ms=(end - start) / 1e3,
    kernels_ms=sum(e.time_range.end - e.time_range.start for e in ev) / 1e3,
    n_kernels=len(ev),
    top_gaps_us=[(round(g, 1), n) for g, n in gaps[:12]],
    bench_ms=bench_ms(step, warmup=5, rep=300),
)
print(json.dumps(res, indent=1))
if args.out:
    json.dump(res, open(args.out, "w"), indent=1)
