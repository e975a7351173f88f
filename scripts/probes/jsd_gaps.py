"""Probe: where the JSD distillation call's wall time goes beyond its kernels. bench_rl_losses.py's
median (bench_ms) of a steady liger_cpp fwd+bwd reads ~40.5 ms on an H100 where one profiled call's
kernels sum to ~37.5. This prints, for one profiled call with and without a lead sleep (the host
enqueues the whole call before the GPU starts it): the span from the first kernel's start to the last
kernel's end, the time the GPU is busy, the idle gaps (largest five, with the kernels around them),
synchronisations reported by torch.cuda.set_sync_debug_mode, the host time of one call, and
bench_ms of the call and of one chunk's teacher GEMM next to that GEMM's profiled time.
Run on the GPU: PYTHONPATH=.:benchmarks python3 scripts/probes/jsd_gaps.py"""

import time
import warnings

import torch
from bench_rl_losses import JSD_SHAPE, jsd_inputs, jsd_variants
from harness import _sleep_cycles_per_ms, bench_ms
from torch.profiler import ProfilerActivity, profile


def kernels_of(prof):
    out = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA or "sleep" in e.name.lower():
            continue
        out.append((e.time_range.start, e.time_range.end, e.name))
    return sorted(out)


def report(tag, ks):
    span = (ks[-1][1] - ks[0][0]) / 1e3
    busy, gaps, end, prev = 0.0, [], ks[0][0], ks[0][2]
    for s, e, n in ks:
        if s > end:
            gaps.append(((s - end) / 1e3, prev[:50], n[:50]))
        busy += max(0, e - max(s, end)) / 1e3
        if e > end:
            end, prev = e, n
    gaps.sort(reverse=True)
    print(f"{tag}: kernels {len(ks)}, span {span:.3f} ms, busy {busy:.3f} ms, idle {span - busy:.3f} ms")
    for g, a, b in gaps[:5]:
        print(f"    gap {g:.3f} ms after {a} before {b}")


def main():
    d = jsd_inputs(JSD_SHAPE, "cuda", torch.bfloat16)
    f = jsd_variants(False)["liger_cpp"]()
    grads = [d["xs"], d["ws"]]

    def step():
        f(d).backward()

    def clear():
        for p in grads:
            p.grad = None

    for _ in range(3):
        step()
        clear()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        step()
        torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode(0)
    print(f"synchronisations reported in one call: {sum('synchroniz' in str(x.message) for x in w)}")
    clear()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    clear()
    print(f"host time of one call (enqueue, no sync): {host_ms:.3f} ms")
    cyc = _sleep_cycles_per_ms()
    for lead in (False, True):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            if lead:
                torch.cuda._sleep(int(50 * cyc))
            step()
            torch.cuda.synchronize()
        clear()
        report(f"profiled call, lead sleep {lead}", kernels_of(prof))
    print(f"bench_ms of the call: {bench_ms(step, grad_to_none=grads, warmup=1, rep=400):.3f} ms")
    x = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    wt = torch.randn(151936, 4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(1024, 151936, device="cuda", dtype=torch.bfloat16)
    g = lambda: torch.mm(x, wt.t(), out=out)  # noqa: E731
    ms = bench_ms(g, warmup=5, rep=200)
    for _ in range(3):
        g()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g()
        torch.cuda.synchronize()
    ks = kernels_of(prof)
    print(f"teacher chunk GEMM: bench_ms {ms:.3f} ms, profiled {sum(e - s for s, e, _ in ks) / 1e3:.3f} ms")


if __name__ == "__main__":
    main()
