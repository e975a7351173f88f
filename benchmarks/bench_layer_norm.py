"""LayerNorm benchmark (bf16, 16384x4096, with weight and bias): liger_cpp against PyTorch eager
(nn.LayerNorm's formula), torch.compile of it, F.layer_norm and Liger-Kernel (when importable),
as % of the copy bandwidth C. Bytes (minimum): fwd 2*M*N*2, fwd+bwd 5*M*N*2.
Usage: python benchmarks/bench_layer_norm.py [--out FILE.json]
"""

import argparse

import torch
import torch.nn.functional as F
from harness import bench_ms, copy_bandwidth_gbs, fmt_table, meta, try_import_liger, write_json

import liger_cpp
from liger_cpp.ops.layer_norm import layer_norm

EPS = 1e-6


def eager(x, w, b):
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + EPS) * w.float() + b.float()).to(x.dtype)


def variants(have_liger):
    out = {
        "liger_cpp": lambda x, w, b: layer_norm(x, w, b, EPS),
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
    args = ap.parse_args()
    C = copy_bandwidth_gbs()
    m, n = 16384, 4096
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16).requires_grad_(True)
    b = (0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16).requires_grad_(True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    rows = []
    for name, f in variants(try_import_liger()).items():
        for mode in ("fwd+bwd", "fwd"):
            try:
                if mode == "fwd":
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
    payload = {
        "op": "layer_norm",
        "dtype": "bfloat16",
        "copy_GBps": round(C),
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    print(f"LayerNorm bf16 on {payload['gpu']}, copy bandwidth C = {C:.0f} GB/s, commit {payload['commit']}")
    print(fmt_table(rows, ["shape", "mode", "impl", "ms", "GB/s", "%C"]))


if __name__ == "__main__":
    main()
