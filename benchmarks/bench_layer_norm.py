"""LayerNorm benchmark (bf16, 16384x4096, with weight and bias): liger_cpp against PyTorch eager
(nn.LayerNorm's formula), torch.compile of it, F.layer_norm and Liger-Kernel (when importable),
as % of the copy bandwidth C. Bytes (minimum): fwd 2*M*N*2, fwd+bwd 5*M*N*2, bwd 3*M*N*2.
--quick: liger_cpp (with its kernel rows, VARIANT_PLAN) and F.layer_norm only, plus the backward
alone. The kernel rows A/B the backwards (forced through the plan override) in one process; the
plain liger_cpp row runs the plan's choice.
Usage: python benchmarks/bench_layer_norm.py [--out FILE.json] [--quick]
"""

import argparse

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
from liger_cpp.ops.layer_norm import layer_norm

EPS = 1e-6


def eager(x, w, b):
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + EPS) * w.float() + b.float()).to(x.dtype)


# liger_cpp rows with the backward forced through the developer plan override (docs/tuning.md; the
# plain row runs the plan's own choice, docs/kernels/layer_norm.md: on sm_90 the TMA backward in
# clusters of two): bwd=tma_unpaired (the TMA backward, one dW/dB partial row a block), bwd=pipe16
# (16-byte vectors, rows fetched ahead by cp.async: the backward without sm_90 code), bwd=pipe
# (4-element vectors, rows ahead in registers: the rows of 513..1024 vectors), bwd=generic.
# pdl=off: without programmatic dependent launch (the plan override's pdl key; LIGER_CPP_PDL is
# read once per process).
VARIANT_PLAN = {
    "liger_cpp[bwd=tma_unpaired]": {"ln_bwd": "tma_unpaired"},
    "liger_cpp[bwd=pipe16]": {"ln_bwd": "pipe16"},
    "liger_cpp[bwd=pipe]": {"ln_bwd": "pipe"},
    "liger_cpp[bwd=generic]": {"ln_bwd": "generic"},
    "liger_cpp[bwd=tma,pdl=off]": {"pdl": "off"},
}
VARIANT_ENV = {}


def variants(have_liger):
    out = {
        "liger_cpp": lambda x, w, b: layer_norm(x, w, b, EPS),
        **{name: (lambda x, w, b: layer_norm(x, w, b, EPS)) for name in {**VARIANT_PLAN, **VARIANT_ENV}},
        "eager": eager,
        "compile": torch.compile(eager, dynamic=False),
        "F.layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS),
    }
    if have_liger:
        from liger_kernel.transformers.functional import liger_layer_norm

        out["liger"] = lambda x, w, b: liger_layer_norm(x, w, b, EPS)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="liger_cpp and F.layer_norm, with bwd alone")
    args = ap.parse_args()
    C = copy_bandwidth_gbs()
    m, n = 16384, 4096
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16).requires_grad_(True)
    b = (0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16).requires_grad_(True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    rows = []
    impls = variants(False if args.quick else try_import_liger())
    if args.quick:
        impls = {k: f for k, f in impls.items() if k.startswith("liger_cpp") or k == "F.layer_norm"}
    modes = ("fwd+bwd", "fwd", "bwd") if args.quick else ("fwd+bwd", "fwd")
    for name, f in impls.items():
        set_variant_env(VARIANT_ENV, name)
        set_variant_plan(VARIANT_PLAN, name)
        for mode in modes:
            if mode == "fwd" and "[bwd=" in name:
                continue  # a backward variant: the forward does not differ
            if mode == "bwd" and "[fwd=" in name and "bwd=" not in name:
                continue  # a forward variant: the backward does not differ
            try:
                if mode == "bwd":
                    y = f(x, w, b)
                    ms = bench_ms(lambda y=y: y.backward(dy, retain_graph=True), grad_to_none=[x, w, b])
                    nbytes = 3 * m * n * 2
                    del y
                elif mode == "fwd":
                    with torch.no_grad():
                        ms = bench_ms(lambda f=f: f(x, w, b))
                    nbytes = 2 * m * n * 2
                else:
                    ms = bench_ms(lambda f=f: f(x, w, b).backward(dy), grad_to_none=[x, w, b])
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
    set_variant_env(VARIANT_ENV, None)
    set_variant_plan(VARIANT_PLAN, None)
    payload = {
        "op": "layer_norm",
        "dtype": "bfloat16",
        "copy_GBps": round(C),
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "variant_env": VARIANT_ENV,
        "variant_plan": VARIANT_PLAN,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    print(f"LayerNorm bf16 on {payload['gpu']}, copy bandwidth C = {C:.0f} GB/s, commit {payload['commit']}")
    print(fmt_table(rows, ["shape", "mode", "impl", "ms", "GB/s", "%C"]))


if __name__ == "__main__":
    main()
