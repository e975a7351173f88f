"""ReLU squared benchmark (Nemotron's relu2 MLP activation; bf16, tokens x intermediate): liger_cpp
against PyTorch eager (HF's ReLUSquaredActivation: relu then square), torch.compile of it and
Liger-Kernel's LigerReLUSquaredFunction (when importable), in one run, as % of the copy bandwidth C.

Bytes (minimum): fwd 2*N*2 (read x, write y), fwd+bwd 5*N*2 (+ read dy and x, write dx).
Usage: python benchmarks/bench_relu_squared.py [--out FILE.json] [--quick] [--shapes 16384x16384,...]
"""

import argparse

import torch
from harness import bandwidth_rows, copy_bandwidth_gbs, parse_shapes, report, try_import_liger

import liger_cpp
from liger_cpp.ops.relu_squared import relu_squared


def eager(x):
    return torch.square(torch.relu(x))


def variants(have_liger):
    out = {"liger_cpp": relu_squared, "eager": eager, "compile": torch.compile(eager, dynamic=False)}
    if have_liger:
        from liger_kernel.ops.relu_squared import LigerReLUSquaredFunction

        out["liger"] = LigerReLUSquaredFunction.apply
    return out


def run(m, n, fns, C):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    nbytes = {"fwd": 2 * m * n * 2, "fwd+bwd": 5 * m * n * 2}
    return bandwidth_rows(
        {"shape": f"{m}x{n}"}, fns, lambda f: f(x), lambda f: f(x).backward(dy), nbytes, [x], C
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="a smaller shape (4096 x 16384)")
    ap.add_argument("--shapes", default="", help="comma-separated MxF shapes (default 16384x16384)")
    args = ap.parse_args()
    C = copy_bandwidth_gbs()
    shapes = [(4096 if args.quick else 16384, 16384)]
    if args.shapes:
        shapes = parse_shapes(args.shapes)
    fns = variants(try_import_liger())
    rows = [r for m, n in shapes for r in run(m, n, fns, C)]
    cols = ["shape", "mode", "impl", "ms", "GB/s", "%C", "error"]
    report("relu_squared", "ReLU^2 bf16", rows, C, args.out, cols, liger_cpp.__version__)


if __name__ == "__main__":
    main()
