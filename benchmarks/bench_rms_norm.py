"""RMSNorm benchmark (bf16): liger_cpp against PyTorch eager (HF formula), torch.compile of it,
F.rms_norm and Liger-Kernel (when importable), in one run, as % of the copy bandwidth C.

Bytes (minimum, ../shared/targets.md): fwd 2*M*N*2, fwd+bwd 5*M*N*2 (+ weight, negligible).
Usage: python benchmarks/bench_rms_norm.py [--out FILE.json] [--quick | --wide | --tma | --fwd |
       --widths 3072,5120] [--variants] [--impls liger_cpp,compile,...]
"""

import argparse
import re
import subprocess
import sys
import textwrap

import torch
import torch.nn.functional as F
from harness import (
    bench_ms,
    copy_bandwidth_gbs,
    fmt_table,
    meta,
    set_variant_env,
    set_variant_plan,
    try_import_liger,
    write_json,
)

import liger_cpp
from liger_cpp.ops.rms_norm import rms_norm

EPS = 1e-6


def eager(x, w):
    xf = x.float()
    xn = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)
    return w * xn


# liger_cpp rows with a kernel forced through the developer plan override (docs/tuning.md; the
# plain liger_cpp row runs the plan's own choice, docs/kernels/rms_norm.md), where that kernel runs:
# fwd=cached is the register-cached forward where torch.compile's skeleton (16-bit x = w = y, 129..2048
# vectors) or the wide-row forward (above 2048 vectors) would run; fwd=l2hint the two-pass wide-row
# forward at any width; bwd=tma (sm_90, 64..1024 vectors), bwd=pipe (up to 1024 vectors: the backward
# without sm_90 code), bwd=cached (up to 4096 vectors: the wide rows' backward without sm_90 code),
# bwd=generic (any width). pdl=off: without programmatic dependent launch (the pdl key).
VARIANT_PLAN = {
    "liger_cpp[fwd=cached]": {"rms_fwd": "cached"},
    "liger_cpp[fwd=l2hint]": {"rms_fwd": "l2hint"},
    "liger_cpp[bwd=tma]": {"rms_bwd": "tma"},
    "liger_cpp[bwd=pipe]": {"rms_bwd": "pipe"},
    "liger_cpp[bwd=cached]": {"rms_bwd": "cached"},
    "liger_cpp[bwd=generic]": {"rms_bwd": "generic"},
    "liger_cpp[pdl=off]": {"pdl": "off"},
}
VARIANT_ENV = {}
VARIANTS = {**VARIANT_PLAN, **VARIANT_ENV}  # every A/B row

# The rows whose forward differs from the default's (timed fwd and fwd+bwd; the others fwd+bwd only).
FWD_VARIANTS = {"liger_cpp[fwd=cached]", "liger_cpp[fwd=l2hint]"}


def set_variant(name):
    set_variant_env(VARIANT_ENV, name)
    set_variant_plan(VARIANT_PLAN, name)


def variants(have_liger):
    out = {
        "liger_cpp": lambda x, w: rms_norm(x, w, EPS),
        # A/B of the forward and backward kernels: see VARIANTS
        **{name: (lambda x, w: rms_norm(x, w, EPS)) for name in VARIANTS},
        "eager": eager,
        "compile": "compile",  # a fresh torch.compile per shape (see run_shape)
        "F.rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS),
        # not an RMSNorm: x copied into a new tensor, the forward's bytes (less w and rstd), the
        # ceiling a forward can reach at this size (launch, ramp and tail included)
        "clone": lambda x, w: x.clone(),
    }
    if have_liger:
        from liger_kernel.transformers.functional import liger_rms_norm

        out["liger"] = lambda x, w: liger_rms_norm(x, w, EPS, 0.0, "llama", False)
    return out


def run_shape(m, n, fns, C, modes, only=None):
    rows = []
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16).requires_grad_(True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    for name, f in fns.items():
        if only and name not in only:
            continue
        if name in VARIANTS and (only or ("fwd+bwd" not in modes and name not in FWD_VARIANTS)):
            continue
        if name == "clone" and "fwd" not in modes:
            continue
        set_variant(name)
        if f == "compile":  # fresh per shape: avoids the recompile limit falling back to eager
            torch._dynamo.reset()
            f = torch.compile(eager, dynamic=False)
        for mode in modes:
            if name in VARIANTS and mode == "fwd" and name not in FWD_VARIANTS:
                continue  # a backward variant: the forward does not differ
            if name == "clone" and mode != "fwd":
                continue
            try:
                if mode == "fwd":
                    with torch.no_grad():
                        ms = bench_ms(lambda f=f, x=x, w=w: f(x, w))
                    nbytes = 2 * m * n * 2
                else:
                    ms = bench_ms(lambda f=f, x=x, w=w, dy=dy: f(x, w).backward(dy), grad_to_none=[x, w])
                    nbytes = 5 * m * n * 2
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
            except Exception as e:  # noqa: BLE001 - a baseline that fails (e.g. Liger's N limit) is reported
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
    set_variant(None)
    del x, w, dy
    torch.cuda.empty_cache()
    return rows


FIRST_CALL = textwrap.dedent(
    """
    import time, torch
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    # torch's own first backward with an explicit gradient imports sympy (~1.2 s, in
    # autograd's _make_grads): pay it before timing, for every stack alike
    z = x.float() * 2; z.backward(torch.ones_like(z)); x.grad = None; torch.cuda.synchronize()
    {imp}
    def once():
        t0 = time.perf_counter(); y = f(x, w); torch.cuda.synchronize(); t1 = time.perf_counter()
        y.backward(dy); torch.cuda.synchronize(); t2 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3
    a = once(); b = once()
    print(a[0] + a[1], a[0], a[1], b[0] + b[1])
    """
)


def first_call_ms(imp):
    """(first fwd+bwd, its fwd, its bwd, second fwd+bwd) in ms, in a fresh process."""
    code = FIRST_CALL.format(imp=imp)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None
    return [round(float(v), 1) for v in r.stdout.strip().splitlines()[-1].split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--wide", action="store_true", help="wide-row variants and compile only, hidden 16K-64K")
    ap.add_argument("--variants", action="store_true", help="also the liger_cpp kernel-variant (A/B) rows")
    ap.add_argument(
        "--tma", action="store_true", help="the TMA row backward against reg and the default, hidden 1K-8K"
    )
    ap.add_argument(
        "--fwd", action="store_true", help="the forward alone, 128M elements at hidden 1K-16K, and 16384x4096"
    )
    ap.add_argument(
        "--widths",
        default=None,
        help="comma-separated hidden sizes (e.g. 3072,5120,6144,14336): fwd+bwd and fwd at 128 Mi elements",
    )
    ap.add_argument("--impls", default=None, help="comma-separated rows to keep (e.g. liger_cpp,compile)")
    args = ap.parse_args()
    have_liger = try_import_liger()
    C = copy_bandwidth_gbs()
    fns = variants(have_liger)
    if args.impls:
        keep = set(re.findall(r"[^,\[]+(?:\[[^\]]*\])?", args.impls))  # commas inside [...] kept
        unknown = keep - set(fns)
        if unknown:
            ap.error(f"--impls: unknown {sorted(unknown)}; known: {sorted(fns)}")
        fns = {k: v for k, v in fns.items() if k in keep}
    # rows named in --impls are kept even when they are A/B variants (no --variants needed)
    show_variants = args.variants or bool(args.impls)
    rows = []
    if args.wide or args.tma or args.fwd or args.widths:
        if args.widths:
            if not show_variants:
                fns = {k: v for k, v in fns.items() if k not in VARIANTS}
            shapes = [((128 << 20) // n, n) for n in map(int, args.widths.split(","))]
            what, modes = "chosen widths", ["fwd+bwd", "fwd"]
        elif args.fwd:
            fns = {k: v for k, v in fns.items() if k in FWD_VARIANTS or k != "eager" and k not in VARIANTS}
            if not show_variants:
                fns = {k: v for k, v in fns.items() if k not in VARIANTS}
            shapes = [((128 << 20) // n, n) for n in (1024, 2048, 4096, 8192, 16384)] + [(16384, 4096)]
            what, modes = "forward", ["fwd"]
        elif args.wide:
            keep = {
                "liger_cpp",
                "liger_cpp[fwd=cached]",
                "liger_cpp[bwd=cached]",
                "liger_cpp[pdl=off]",
                "compile",
            }
            fns = {k: v for k, v in fns.items() if k in keep}
            shapes, what = [((128 << 20) // n, n) for n in (16384, 32768, 65536)], "wide rows"
        else:
            keep = {"liger_cpp", "liger_cpp[bwd=tma]", "liger_cpp[bwd=pipe]", "liger_cpp[pdl=off]"}
            fns = {k: v for k, v in fns.items() if k in keep}
            shapes = [(16384, 4096)] + [((128 << 20) // n, n) for n in (1024, 2048, 4096, 8192)]
            what = "TMA row kernels"
        if not args.fwd and not args.widths:
            modes = ["fwd+bwd", "fwd"]
        for m, n in shapes:
            rows += run_shape(m, n, fns, C, modes)
        meta_rows = {"op": "rms_norm", "dtype": "bfloat16", "copy_GBps": round(C), **meta(), "rows": rows}
        if args.out:
            write_json(args.out, meta_rows)
        print(f"RMSNorm bf16 {what} on {meta_rows['gpu']}, C = {C:.0f} GB/s, commit {meta_rows['commit']}")
        print(fmt_table(rows, ["shape", "mode", "impl", "ms", "GB/s", "%C"]))
        return
    if not show_variants:  # the A/B rows only when asked for
        fns = {k: v for k, v in fns.items() if k not in VARIANTS}
    rows += run_shape(16384, 4096, fns, C, ["fwd+bwd", "fwd"])
    rows += run_shape(8192, 16384, fns, C, ["fwd"])
    # (128M / n) x n: 8192 x 16384, 4096 x 32768 and 2048 x 65536 take the wide (cluster) backward.
    sweep = [1024, 2048, 8192, 16384, 32768, 65536] if not args.quick else [1024, 16384, 32768, 65536]
    for n in sweep:
        rows += run_shape((128 << 20) // n, n, fns, C, ["fwd+bwd", "fwd"])
    rows += run_shape(64, 262144, fns, C, ["fwd+bwd", "fwd"], only={"liger_cpp", "F.rms_norm"})
    first = {
        "liger_cpp": first_call_ms(
            "from liger_cpp.ops.rms_norm import rms_norm as r; f = lambda x, w: r(x, w, 1e-6)"
        )
    }
    if have_liger:
        first["liger"] = first_call_ms(
            "from liger_kernel.transformers.functional import liger_rms_norm as r; "
            "f = lambda x, w: r(x, w, 1e-6, 0.0, 'llama', False)"
        )
    payload = {
        "op": "rms_norm",
        "dtype": "bfloat16",
        "copy_GBps": round(C),
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "rows": rows,
        "first_call_ms": first,
    }
    if args.out:
        write_json(args.out, payload)
    print(f"RMSNorm bf16 on {payload['gpu']}, copy bandwidth C = {C:.0f} GB/s, commit {payload['commit']}")
    print(fmt_table(rows, ["shape", "mode", "impl", "ms", "GB/s", "%C"]))
    print("first call in a fresh process, ms [fwd+bwd, fwd, bwd, second fwd+bwd]:", first)


if __name__ == "__main__":
    main()
