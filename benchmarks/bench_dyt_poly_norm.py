"""DyT and PolyNorm benchmark (bf16 hidden states, tokens x hidden): liger_cpp against PyTorch eager
(the formula in float32 as a user writes it, what liger_cpp ran before its kernels), torch.compile of
it and Liger-Kernel's LigerDyTFunction / LigerPolyNormFunction (when importable), in one run, as % of
the copy bandwidth C. Parameters in x's dtype (a bf16 model's), grad_output random.

Bytes (minimum, both ops): fwd 2*N*2 (read x, write y), fwd+bwd 5*N*2 (+ read x and dy, write dx).
Usage: python benchmarks/bench_dyt_poly_norm.py [--out FILE.json] [--quick] [--shapes 16384x4096,...]
"""

import argparse

import torch
from harness import bandwidth_rows, copy_bandwidth_gbs, parse_shapes, report, try_import_liger

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
    base = {"op": op, "shape": f"{m}x{n}"}
    nbytes = {"fwd": 2 * m * n * 2, "fwd+bwd": 5 * m * n * 2}
    return bandwidth_rows(
        base, fns, lambda f: f(x, *params), lambda f: f(x, *params).backward(dy), nbytes, [x, *params], C
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="one smaller shape (4096 x 4096)")
    ap.add_argument("--shapes", default="", help="comma-separated MxH shapes")
    args = ap.parse_args()
    C = copy_bandwidth_gbs()
    shapes = [(4096, 4096)] if args.quick else [(16384, 4096), (8192, 8192), (32768, 2048)]
    if args.shapes:
        shapes = parse_shapes(args.shapes)
    fns = variants(try_import_liger())
    rows = [r for op in fns for m, n in shapes for r in run(op, m, n, fns[op], C)]
    cols = ["op", "shape", "mode", "impl", "ms", "GB/s", "%C", "error"]
    report("dyt_poly_norm", "DyT/PolyNorm bf16", rows, C, args.out, cols, liger_cpp.__version__)


if __name__ == "__main__":
    main()
