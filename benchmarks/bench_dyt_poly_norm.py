"""DyT and PolyNorm benchmark (bf16 hidden states, tokens x hidden): liger_cpp against PyTorch eager
(the formula in float32 as a user writes it, what liger_cpp ran before its kernels), torch.compile of
it and Liger-Kernel's LigerDyTFunction / LigerPolyNormFunction (when importable), in one run, as % of
the copy bandwidth C. Parameters in x's dtype (a bf16 model's), grad_output random.

Bytes (minimum, both ops): fwd 2*N*2 (read x, write y), fwd+bwd 5*N*2 (+ read x and dy, write dx).
Usage: python benchmarks/bench_dyt_poly_norm.py [--out FILE.json] [--quick] [--shapes 16384x4096,...]
"""

import argparse

import torch
from harness import bench_ms, copy_bandwidth_gbs, fmt_table, meta, try_import_liger, write_json

import liger_cpp
from liger_cpp.ops.dyt import dyt
from liger_cpp.ops.poly_norm import poly_norm

EPS = 1e-6


def dyt_eager(x, alpha, gamma, beta):
    return (gamma.float() * torch.tanh(alpha.float() * x.float()) + beta.float()).to(x.dtype)


def poly_norm_eager(x, w, b):
    xf, wf = x.float(), w.float()

    def n(u):
        return u * torch.rsqrt(u.square().mean(-1, keepdim=True) + EPS)

    return (wf[0] * n(xf**3) + wf[1] * n(xf**2) + wf[2] * n(xf) + b.float()).to(x.dtype)


def variants(have_liger):
    out = {
        "dyt": {
            "liger_cpp": dyt,
            "eager": dyt_eager,
            "compile": torch.compile(dyt_eager, dynamic=False),
        },
        "poly_norm": {
            "liger_cpp": lambda x, w, b: poly_norm(x, w, b, EPS),
            "eager": poly_norm_eager,
            "compile": torch.compile(poly_norm_eager, dynamic=False),
        },
    }
    if have_liger:
        from liger_kernel.ops.dyt import LigerDyTFunction
        from liger_kernel.ops.poly_norm import LigerPolyNormFunction

        out["dyt"]["liger"] = LigerDyTFunction.apply
        out["poly_norm"]["liger"] = lambda x, w, b: LigerPolyNormFunction.apply(x, w, b, EPS, False)
    return out


def run(op, m, n, fns, C):
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    bf = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(m, n, generator=g, **bf).requires_grad_()
    dy = torch.randn(m, n, generator=g, **bf)
    if op == "dyt":
        params = [
            torch.full((1,), 0.5, **bf),
            torch.randn(n, generator=g, **bf),
            torch.randn(n, generator=g, **bf),
        ]
    else:
        params = [torch.tensor([0.3, 0.3, 0.4], **bf), torch.tensor(0.1, **bf)]
    params = [p.requires_grad_() for p in params]
    for name, f in fns.items():
        for mode in ("fwd+bwd", "fwd"):
            row = {"op": op, "shape": f"{m}x{n}", "mode": mode, "impl": name}
            try:
                if mode == "fwd":
                    with torch.no_grad():
                        ms = bench_ms(lambda f=f: f(x, *params))
                    nbytes = 2 * m * n * 2
                else:
                    ms = bench_ms(lambda f=f: f(x, *params).backward(dy), grad_to_none=[x, *params])
                    nbytes = 5 * m * n * 2
                gbs = nbytes / (ms * 1e-3) / 1e9
                row.update({"ms": round(ms, 4), "GB/s": round(gbs), "%C": round(100 * gbs / C, 1)})
            except Exception as e:  # noqa: BLE001 - a failing baseline is reported, not fatal
                row["error"] = str(e).splitlines()[0][:120]
            rows.append(row)
    torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="one smaller shape (4096 x 4096)")
    ap.add_argument("--shapes", default="", help="comma-separated MxH shapes")
    args = ap.parse_args()
    C = copy_bandwidth_gbs()
    shapes = [(4096, 4096)] if args.quick else [(16384, 4096), (8192, 8192), (32768, 2048)]
    if args.shapes:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")]
    fns = variants(try_import_liger())
    rows = [r for op in fns for m, n in shapes for r in run(op, m, n, fns[op], C)]
    payload = {"op": "dyt_poly_norm", "dtype": "bfloat16", "copy_GBps": round(C), **meta(), "rows": rows}
    payload["liger_cpp_version"] = liger_cpp.__version__
    if args.out:
        write_json(args.out, payload)
    print(
        f"DyT/PolyNorm bf16 on {payload['gpu']}, copy bandwidth C = {C:.0f} GB/s, commit {payload['commit']}"
    )
    print(fmt_table(rows, ["op", "shape", "mode", "impl", "ms", "GB/s", "%C", "error"]))


if __name__ == "__main__":
    main()
