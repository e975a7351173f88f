"""FusedAddRMSNorm benchmark (bf16, 16384x4096): liger_cpp against PyTorch eager (residual add +
HF LlamaRMSNorm formula), torch.compile of it and Liger-Kernel's LigerFusedAddRMSNormFunction
(when importable), as % of the copy bandwidth C. Bytes (minimum): fwd 4*M*N*2 (read x, r;
write s, y), fwd+bwd 8*M*N*2 (backward: read dY, dS_out, s; write dS).
fwd+bwd is timed with torch.autograd.grad(outputs, (x, r, w)), as the op runs inside a model:
the backward gives x and r the same gradient tensor dS, and with .backward() on two leaf tensors
autograd's AccumulateGrad copies it for the second leaf (one more M*N read and write, about a
quarter of the minimum bytes), which no residual stream pays. The liger_cpp row "fwd+bwd (leaf
.grad)" keeps that measurement (with .backward(), as runs before 2026-11-30 session 4 did).
The rows liger_cpp[bwd=...] A/B the backward kernels in the same run (fwd+bwd only; the plain
row runs the plan's choice); see VARIANT_PLAN.
Usage: python benchmarks/bench_fused_add_rms_norm.py [--out FILE.json] [--no-variants]
"""

import argparse

import torch
from harness import (
    bench_ms,
    copy_bandwidth_gbs,
    fmt_table,
    meta,
    set_variant_plan,
    try_import_liger,
    write_json,
)

import liger_cpp
from liger_cpp.ops.fused_add_rms_norm import fused_add_rms_norm

EPS = 1e-6


def eager(x, r, w):
    s = x + r
    sf = s.float()
    return w * (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + EPS)).to(s.dtype), s


# liger_cpp rows with the backward forced through the developer plan override (docs/tuning.md; the
# plain row runs the plan's own choice, docs/kernels/rms_norm.md: with a residual gradient, rows
# fetched 3 ahead by cp.async; above 1024 vectors the sm_90 cluster kernel): bwd=cached (4 vectors a
# thread, the wide rows' backward without sm_90 code), bwd=generic (any width). The forward has no
# alternative here (the register-cached kernel with packed stores; docs).
VARIANT_PLAN = {
    "liger_cpp[bwd=cached]": {"rms_bwd": "cached"},
    "liger_cpp[bwd=generic]": {"rms_bwd": "generic"},
}


def variants(have_liger, with_variants=True):
    out = {
        "liger_cpp": lambda x, r, w: fused_add_rms_norm(x, r, w, EPS),
        **{
            name: (lambda x, r, w: fused_add_rms_norm(x, r, w, EPS)) for name in VARIANT_PLAN if with_variants
        },
        "eager": eager,
        "compile": torch.compile(eager, dynamic=False),
    }
    if have_liger:
        try:
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

            out["liger"] = lambda x, r, w: LigerFusedAddRMSNormFunction.apply(
                x, r, w, EPS, 0.0, "llama", False
            )
        except ImportError:
            pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-variants", action="store_true", help="skip the liger_cpp[bwd=...] rows")
    args = ap.parse_args()
    C = copy_bandwidth_gbs()
    m, n = 16384, 4096
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16).requires_grad_(True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    ds = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    rows = []
    for name, f in variants(try_import_liger(), not args.no_variants).items():
        set_variant_plan(VARIANT_PLAN, name)
        modes = ("fwd+bwd", "fwd") + (("fwd+bwd (leaf .grad)",) if name == "liger_cpp" else ())
        for mode in modes:
            if "[bwd=" in name and mode == "fwd":
                continue  # the forward does not differ
            try:
                if mode == "fwd":
                    with torch.no_grad():
                        ms = bench_ms(lambda f=f: f(x, r, w))
                    nbytes = 4 * m * n * 2
                elif mode == "fwd+bwd":

                    def step(f=f):
                        y, s = f(x, r, w)
                        return torch.autograd.grad([y, s], [x, r, w], [dy, ds])

                    ms = bench_ms(step)
                    nbytes = 8 * m * n * 2
                else:

                    def step_leaf(f=f):
                        y, s = f(x, r, w)
                        torch.autograd.backward([y, s], [dy, ds])

                    ms = bench_ms(step_leaf, grad_to_none=[x, r, w])
                    nbytes = 8 * m * n * 2
                gbs = nbytes / (ms * 1e-3) / 1e9
                rows.append(
                    {
                        "shape": f"{m}x{n}",
                        "mode": mode,
                        "impl": name,
                        "ms": round(ms, 4),
                        "GB/s": round(gbs),
                        "%C": round(100 * gbs / C, 1),
                    }
                )
            except Exception as e:  # noqa: BLE001 - a failing baseline is reported, not fatal
                rows.append(
                    {
                        "shape": f"{m}x{n}",
                        "mode": mode,
                        "impl": name,
                        "ms": None,
                        "GB/s": None,
                        "%C": None,
                        "error": str(e).splitlines()[0][:120],
                    }
                )
    set_variant_plan(VARIANT_PLAN, None)
    payload = {
        "op": "fused_add_rms_norm",
        "dtype": "bfloat16",
        "copy_GBps": round(C),
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    print(
        f"FusedAddRMSNorm bf16 on {payload['gpu']}, copy bandwidth C = {C:.0f} GB/s, "
        f"commit {payload['commit']}"
    )
    print(fmt_table(rows, ["shape", "mode", "impl", "ms", "GB/s", "%C"]))


if __name__ == "__main__":
    main()
