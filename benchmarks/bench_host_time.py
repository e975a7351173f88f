"""Host time of the norm ops: how long the host takes to enqueue one call (bf16, 4096x4096).

What it measures: the CPU side of a call (argument checks, the launch planning in
csrc/kernels/{rms_norm,layer_norm}/*.cu, allocations, kernel launches), not the GPU time. Before
each timed call the GPU is given --lead-ms of torch.cuda._sleep, so the call is enqueued behind
it and nothing waits for the GPU; time.perf_counter() brackets the call without synchronising
(the GPU is synchronised after the bracket, outside it). A median close to the lead means the
call synchronised (column "sync?").
Modes per op: fwd (under no_grad), bwd (the backward op alone, torch.ops.liger.*_bwd: the
planning this benchmark is for) and fwd+bwd (the public op and torch.autograd.grad; autograd
runs the backward on its device thread). Rows liger_cpp[...] run backward kernels forced through
the plan override (VARIANT_PLAN); rows "torch" are PyTorch's own ops, for
scale. Compare a run on main with one on the branch under test.
Usage: python benchmarks/bench_host_time.py [--out FILE.json] [--reps N | --quick] [--lead-ms MS]
       [--no-variants]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from harness import _sleep_cycles_per_ms, fmt_table, meta, set_variant_plan, write_json

import liger_cpp
from liger_cpp.ops.fused_add_rms_norm import fused_add_rms_norm
from liger_cpp.ops.layer_norm import layer_norm
from liger_cpp.ops.rms_norm import rms_norm

EPS = 1e-6
M, N = 4096, 4096

# Backward kernels whose host planning differs from the default's (forced through the plan override).
VARIANT_PLAN = {
    "liger_cpp[ln_bwd=pipe]": {"ln_bwd": "pipe"},
    "liger_cpp[ln_bwd=generic]": {"ln_bwd": "generic"},
    "liger_cpp[rms_bwd=pipe]": {"rms_bwd": "pipe"},
    "liger_cpp[rms_bwd=cached]": {"rms_bwd": "cached"},
}
# Which op each variant row applies to.
VARIANT_OPS = {
    "liger_cpp[ln_bwd=pipe]": ("layer_norm",),
    "liger_cpp[ln_bwd=generic]": ("layer_norm",),
    "liger_cpp[rms_bwd=pipe]": ("rms_norm", "fused_add_rms_norm"),
    "liger_cpp[rms_bwd=cached]": ("rms_norm", "fused_add_rms_norm"),
}


def host_us(fn, reps, lead_cycles, warmup=20):
    """Host microseconds per fn() call: median, 10th and 90th percentiles over reps calls, each
    enqueued behind a GPU sleep of lead_cycles."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        torch.cuda._sleep(lead_cycles)
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    times.sort()
    return statistics.median(times), times[len(times) // 10], times[(9 * len(times)) // 10]


def cases(dev):
    """{op: {mode: fn}} for liger_cpp and {op: {mode: fn}} for the PyTorch reference."""
    dt = torch.bfloat16
    x = torch.randn(M, N, device=dev, dtype=dt, requires_grad=True)
    r = torch.randn(M, N, device=dev, dtype=dt, requires_grad=True)
    w = (1 + 0.1 * torch.randn(N, device=dev)).to(dt).requires_grad_(True)
    b = (0.1 * torch.randn(N, device=dev)).to(dt).requires_grad_(True)
    dy = torch.randn(M, N, device=dev, dtype=dt)
    ds = torch.randn(M, N, device=dev, dtype=dt)
    with torch.no_grad():
        _, rstd = torch.ops.liger.rms_norm_fwd(x, w, EPS, 0.0, "llama", False)
        _, ln_mean, ln_rstd = torch.ops.liger.layer_norm_fwd(x, w, b, EPS)
        _, s, add_rstd = torch.ops.liger.fused_add_rms_norm_fwd(x, r, w, EPS, 0.0, "llama", False)

    def no_grad(f):
        def g():
            with torch.no_grad():
                return f()

        return g

    ours = {
        "rms_norm": {
            "fwd": no_grad(lambda: rms_norm(x, w, EPS)),
            "bwd": lambda: torch.ops.liger.rms_norm_bwd(dy, x, w, rstd, 0.0, "llama", True),
            "fwd+bwd": lambda: torch.autograd.grad(rms_norm(x, w, EPS), [x, w], dy),
        },
        "layer_norm": {
            "fwd": no_grad(lambda: layer_norm(x, w, b, EPS)),
            "bwd": lambda: torch.ops.liger.layer_norm_bwd(dy, x, w, ln_mean, ln_rstd, True, True),
            "fwd+bwd": lambda: torch.autograd.grad(layer_norm(x, w, b, EPS), [x, w, b], dy),
        },
        "fused_add_rms_norm": {
            "fwd": no_grad(lambda: fused_add_rms_norm(x, r, w, EPS)),
            "bwd": lambda: torch.ops.liger.fused_add_rms_norm_bwd(dy, ds, s, w, add_rstd, 0.0, "llama", True),
            "fwd+bwd": lambda: torch.autograd.grad(
                list(fused_add_rms_norm(x, r, w, EPS)), [x, r, w], [dy, ds]
            ),
        },
    }
    ref = {
        "layer_norm": {
            "fwd": no_grad(lambda: F.layer_norm(x, (N,), w, b, EPS)),
            "fwd+bwd": lambda: torch.autograd.grad(F.layer_norm(x, (N,), w, b, EPS), [x, w, b], dy),
        },
    }
    if hasattr(F, "rms_norm"):  # torch >= 2.4
        ref["rms_norm"] = {
            "fwd": no_grad(lambda: F.rms_norm(x, (N,), w, EPS)),
            "fwd+bwd": lambda: torch.autograd.grad(F.rms_norm(x, (N,), w, EPS), [x, w], dy),
        }
    return ours, ref


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="50 calls per row (gpu_check's BENCH_ARGS)")
    ap.add_argument("--lead-ms", type=float, default=3.0, help="GPU sleep enqueued before each timed call")
    ap.add_argument("--no-variants", action="store_true", help="skip the backward-variant rows")
    args = ap.parse_args()
    if args.quick:
        args.reps = 50
    if not torch.cuda.is_available():
        print("bench_host_time: no CUDA device; skipped")
        return
    from liger_cpp.env import has_cuda_kernels

    if not has_cuda_kernels():
        print("bench_host_time: liger_cpp was built without its CUDA kernels; skipped")
        return
    lead_cycles = int(args.lead_ms * _sleep_cycles_per_ms())
    ours, ref = cases("cuda")
    runs = [("liger_cpp", op, modes) for op, modes in ours.items()]
    if not args.no_variants:
        for name, ops in VARIANT_OPS.items():
            runs += [(name, op, {k: f for k, f in ours[op].items() if k != "fwd"}) for op in ops]
    runs += [("torch", op, modes) for op, modes in ref.items()]
    rows = []
    for impl, op, modes in runs:
        set_variant_plan(VARIANT_PLAN, impl)
        for mode, fn in modes.items():
            row = {"op": op, "shape": f"{M}x{N}", "mode": mode, "impl": impl}
            try:
                med, p10, p90 = host_us(fn, args.reps, lead_cycles)
                row.update(
                    {
                        "host_us": round(med, 1),
                        "p10_us": round(p10, 1),
                        "p90_us": round(p90, 1),
                        "sync?": "yes" if med > 0.5e3 * args.lead_ms else "",
                    }
                )
            except Exception as e:  # noqa: BLE001 - a failing row is reported, not fatal
                row.update({"host_us": None, "error": str(e).splitlines()[0][:120]})
            rows.append(row)
    set_variant_plan(VARIANT_PLAN, None)
    payload = {
        "op": "host_time",
        "dtype": "bfloat16",
        "lead_ms": args.lead_ms,
        "reps": args.reps,
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "variant_plan": VARIANT_PLAN,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    print(
        f"Host time per call (bf16 {M}x{N}, GPU {args.lead_ms} ms ahead) on {payload['gpu']}, "
        f"commit {payload['commit']}"
    )
    print(fmt_table(rows, ["op", "mode", "impl", "host_us", "p10_us", "p90_us", "sync?"]))


if __name__ == "__main__":
    main()
