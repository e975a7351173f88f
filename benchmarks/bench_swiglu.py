"""SwiGLU / GeGLU benchmark (bf16, 16384 x 14336): liger_cpp against PyTorch eager (HF formula),
torch.compile of it and Liger-Kernel's LigerSiLUMulFunction / LigerGELUMulFunction (when
importable), in one run, as % of the copy bandwidth C.

Bytes (minimum): fwd 3*M*F*2 (read a, b; write c), fwd+bwd 8*M*F*2 (+ read dc, a, b; write
da, db). The "chunked" rows read a and b as the two strided halves of one gate_up tensor.
Liger's backward writes da, db into a, b (its inputs); liger_cpp does that only with in_place=True
on non-leaf inputs, so here it allocates da, db like eager does.
Usage: python benchmarks/bench_swiglu.py [--out FILE.json] [--quick]
"""

import argparse

import torch
import torch.nn.functional as F
from harness import (
    bench_ms,
    copy_bandwidth_gbs,
    fmt_table,
    meta,
    parse_shapes,
    set_variant_plan,
    try_import_liger,
    write_json,
)

import liger_cpp
from liger_cpp.ops.geglu import geglu
from liger_cpp.ops.swiglu import swiglu


def eager_swiglu(a, b):
    return F.silu(a) * b


def eager_geglu(a, b):
    return F.gelu(a, approximate="tanh") * b


# The generic kernels (plan override glu=generic: the path of misaligned operands and of more than
# 2^31 elements) on the aligned operands that run the dense kernels by default; docs/kernels/glu.md
VARIANT_PLAN = {"liger_cpp[glu=generic]": {"glu": "generic"}}


def variants(op, have_liger):
    if op == "swiglu":
        out = {
            "liger_cpp": swiglu,
            **{name: swiglu for name in VARIANT_PLAN},
            "eager": eager_swiglu,
            "compile": torch.compile(eager_swiglu, dynamic=False),
        }
        if have_liger:
            from liger_kernel.ops.swiglu import LigerSiLUMulFunction

            out["liger"] = LigerSiLUMulFunction.apply
    else:
        out = {
            "liger_cpp": lambda a, b: geglu(a, b, "tanh"),
            **{name: (lambda a, b: geglu(a, b, "tanh")) for name in VARIANT_PLAN},
            "eager": eager_geglu,
            "compile": torch.compile(eager_geglu, dynamic=False),
        }
        if have_liger:
            from liger_kernel.ops.geglu import LigerGELUMulFunction

            out["liger"] = LigerGELUMulFunction.apply
    return out


def run_op(op, m, n, fns, C, modes):
    rows = []
    a = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dc = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    for name, f in fns.items():
        set_variant_plan(VARIANT_PLAN, name)
        for mode in modes:
            try:
                if mode == "fwd":
                    with torch.no_grad():
                        ms = bench_ms(lambda f=f, a=a, b=b: f(a, b))
                    nbytes = 3 * m * n * 2
                else:
                    ms = bench_ms(lambda f=f, a=a, b=b, dc=dc: f(a, b).backward(dc), grad_to_none=[a, b])
                    nbytes = 8 * m * n * 2
                gbs = nbytes / (ms * 1e-3) / 1e9
                rows.append(
                    {
                        "op": op,
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
                        "op": op,
                        "shape": f"{m}x{n}",
                        "mode": mode,
                        "impl": name,
                        "ms": None,
                        "GB/s": None,
                        "%C": None,
                        "error": str(e).splitlines()[0][:120],
                    }
                )
    del a, b, dc
    set_variant_plan(VARIANT_PLAN, None)
    # strided rows: the two halves of one fused gate_up projection (Phi-3), forward only
    gate_up = torch.randn(m, 2 * n, device="cuda", dtype=torch.bfloat16)
    ga, gb = gate_up.chunk(2, dim=-1)
    for name in ("liger_cpp", "eager"):
        ms = bench_ms(lambda f=fns[name], ga=ga, gb=gb: f(ga, gb))
        gbs = 3 * m * n * 2 / (ms * 1e-3) / 1e9
        rows.append(
            {
                "op": op,
                "shape": f"{m}x{n}",
                "mode": "fwd chunked",
                "impl": name,
                "ms": round(ms, 4),
                "GB/s": round(gbs),
                "%C": round(100 * gbs / C, 1),
            }
        )
    del gate_up, ga, gb
    torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="a smaller shape (4096 x 14336)")
    ap.add_argument(
        "--shapes", default="", help="comma-separated MxF shapes (16384x8192: Llama 3.2 1B at B8 T2048)"
    )
    ap.add_argument("--ops", default="swiglu,geglu", help="comma-separated subset of swiglu,geglu")
    args = ap.parse_args()
    have_liger = try_import_liger()
    C = copy_bandwidth_gbs()
    shapes = [(4096 if args.quick else 16384, 14336)]
    if args.shapes:
        shapes = parse_shapes(args.shapes)
    rows = []
    for m, n in shapes:
        for op in args.ops.split(","):
            rows += run_op(op, m, n, variants(op, have_liger), C, ["fwd+bwd", "fwd"])
    payload = {
        "op": "swiglu_geglu",
        "dtype": "bfloat16",
        "copy_GBps": round(C),
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    gpu, commit = payload["gpu"], payload["commit"]
    print(f"SwiGLU / GeGLU bf16 on {gpu}, copy bandwidth C = {C:.0f} GB/s, commit {commit}")
    print(fmt_table(rows, ["op", "shape", "mode", "impl", "ms", "GB/s", "%C"]))


if __name__ == "__main__":
    main()
