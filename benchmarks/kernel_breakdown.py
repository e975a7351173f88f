"""Where one call's GPU time goes: each kernel's duration and the idle gaps between them.

Runs an op the way `harness.bench_ms` times it (L2 flushed, then a GPU sleep long enough for the
host to enqueue the whole call) under the torch profiler, and prints, per kernel of the call, the
median duration and the median idle time before it, then the call's span (first kernel start to
last kernel end) and the % of C that span would read at the op's minimum bytes. Not a benchmark of
record (the profiler adds its own overhead between calls, not inside one); it says which kernel or
gap a change should target.

Usage (GPU): python benchmarks/kernel_breakdown.py OP [MxN ...] [--reps 20] [--plan K=V ...] [--env K=V ...]
--plan forces kernels through the developer plan override (docs/tuning.md, e.g. rms_bwd=cached);
--env sets environment variables first (e.g. LIGER_CPP_PDL=off).
OP: rms_norm, rms_norm_fwd, rms_norm_bwd (the backward op alone, after a forward outside the
timed call), layer_norm, layer_norm_bwd, fused_add_rms_norm, add (torch.add of two bf16 tensors into
a third: what two reads and one write reach, the backwards' traffic mix).
"""

import argparse
import json
import os
import statistics
import tempfile

import torch
from harness import _sleep_cycles_per_ms, copy_bandwidth_gbs

import liger_cpp  # noqa: F401

BYTES_PER_ELEM = {
    "rms_norm": 10,
    "rms_norm_fwd": 4,
    "rms_norm_bwd": 6,
    "layer_norm": 10,
    "layer_norm_bwd": 6,
    "fused_add_rms_norm": 16,
    "add": 6,  # torch.add(x, y, out=z): the two-reads-one-write ceiling of the backwards
}


def make_fn(op, m, n):
    from liger_cpp.transformers import LigerFusedAddRMSNorm, LigerLayerNorm, LigerRMSNorm

    dev, bf = "cuda", torch.bfloat16
    grad = op in ("rms_norm", "layer_norm", "fused_add_rms_norm")
    x = torch.randn(m, n, device=dev, dtype=bf, requires_grad=grad)
    dy = torch.randn(m, n, device=dev, dtype=bf)
    w = torch.randn(n, device=dev, dtype=bf)
    if op == "add":
        z = torch.empty_like(dy)
        return (lambda: torch.add(x, dy, out=z)), []
    if op == "rms_norm_bwd":
        _, rstd = torch.ops.liger.rms_norm_fwd(x, w, 1e-6)
        return (lambda: torch.ops.liger.rms_norm_bwd(dy, x, w, rstd)), []
    if op == "layer_norm_bwd":
        _, mean, rstd = torch.ops.liger.layer_norm_fwd(x, w, w, 1e-6)
        return (lambda: torch.ops.liger.layer_norm_bwd(dy, x, w, mean, rstd)), []
    if op == "layer_norm":
        mod = LigerLayerNorm(n, bias=True).to(dev, bf)
    elif op == "fused_add_rms_norm":
        mod = LigerFusedAddRMSNorm(n).to(dev, bf)
        r = torch.randn(m, n, device=dev, dtype=bf, requires_grad=True)

        def fn():
            y, s = mod(x, r)
            torch.autograd.backward([y, s], [dy, dy])

        return fn, [x, r] + list(mod.parameters())
    else:
        mod = LigerRMSNorm(n, in_place=False).to(dev, bf)
    if op == "rms_norm_fwd":

        def fn():
            with torch.no_grad():
                mod(x)

        return fn, []

    def fn():
        mod(x).backward(dy)

    return fn, [x] + list(mod.parameters())


def kernels_of_calls(trace_path):
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    ks = sorted(
        (e for e in events if e.get("cat") == "kernel" or e.get("cat") == "gpu_memset"),
        key=lambda e: e["ts"],
    )
    calls, cur = [], None
    for e in ks:
        name = e["name"]
        if "spin" in name or "sleep" in name.lower():  # the lead sleep starts a call
            cur = []
            calls.append(cur)
        elif cur is not None and "FillFunctor" not in name:  # the L2 flush belongs to no call
            cur.append((name, float(e["ts"]), float(e["dur"])))
    return [c for c in calls if c]


def short(name, width=70):
    name = name.replace("liger_cpp::kernels::(anonymous namespace)::", "")
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op")
    ap.add_argument("shapes", nargs="*", default=["16384x4096"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--plan", nargs="*", default=[], help="K=V plan overrides (docs/tuning.md)")
    ap.add_argument("--env", nargs="*", default=[], help="K=V environment variables set before the calls")
    args = ap.parse_args()
    for kv in args.env:
        k, v = kv.split("=", 1)
        os.environ[k] = v
    from liger_cpp._testing import set_plan_override

    set_plan_override(",".join(args.plan))
    C = copy_bandwidth_gbs()
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    lead = int(2.0 * _sleep_cycles_per_ms())  # 2 ms: ample for a few launches
    print(f"{args.op} {' '.join(args.plan + args.env)}  C = {C:.0f} GB/s")
    for shape in args.shapes:
        m, n = (int(v) for v in shape.split("x"))
        fn, leaves = make_fn(args.op, m, n)
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(args.reps):
                for t in leaves:
                    t.grad = None
                flush.zero_()
                torch.cuda._sleep(lead)
                fn()
            torch.cuda.synchronize()
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            path = f.name
        prof.export_chrome_trace(path)
        calls = kernels_of_calls(path)
        os.unlink(path)
        sig = [k[0] for k in calls[-1]]
        calls = [c for c in calls if [k[0] for k in c] == sig]
        print(f"\n{shape}: {len(calls)} calls of {len(sig)} kernels")
        print(f"{'kernel':72s} {'us':>8s} {'gap us':>8s}")
        for i, name in enumerate(sig):
            dur = statistics.median(c[i][2] for c in calls)
            gap = statistics.median(c[i][1] - (c[i - 1][1] + c[i - 1][2]) for c in calls) if i else 0.0
            print(f"{short(name):72s} {dur:8.2f} {gap:8.2f}")
        span = statistics.median(c[-1][1] + c[-1][2] - c[0][1] for c in calls)
        busy = statistics.median(sum(k[2] for k in c) for c in calls)
        nbytes = BYTES_PER_ELEM[args.op] * m * n
        print(
            f"span {span:.2f} us ({nbytes / (span * 1e-6) / 1e9 / C * 100:.1f} % of C), "
            f"kernels {busy:.2f} us ({nbytes / (busy * 1e-6) / 1e9 / C * 100:.1f} % of C)"
        )


if __name__ == "__main__":
    main()
