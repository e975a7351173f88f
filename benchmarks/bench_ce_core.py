"""The cross-entropy row step alone (liger::_ce_rows: loss + gradient of every row in one call,
i.e. all the work of a CE forward+backward), bf16, 8192 rows x V, against eager
F.cross_entropy(logits.float()) forward+backward, torch.compile of it, and Liger-Kernel's
LigerCrossEntropyFunction (when importable; it writes the gradient into its input).
Bytes (minimum): 2*M*V*2 (read logits, write dlogits). Peak memory above inputs as well.
Usage: python benchmarks/bench_ce_core.py [--out FILE.json] [--quick] [--plans "SPEC;SPEC"]
--plans adds a liger_cpp row per launch-plan override (docs/tuning.md), e.g. "ce=cluster;ce=two_pass".
"""

import argparse

import torch
import torch.nn.functional as F
from harness import (
    bench_ms,
    copy_bandwidth_gbs,
    fmt_table,
    meta,
    peak_extra_bytes,
    try_import_liger,
    write_json,
)

import liger_cpp  # noqa: F401
from liger_cpp._testing import plan_override


def eager(x, y):
    return F.cross_entropy(x.float(), y)


def _with_plan(spec, fn):
    def run():
        with plan_override(**dict(kv.split("=") for kv in spec.split(","))):
            return fn()

    return run


def run_v(V, M, C, have_liger, compiled, plans=()):
    rows = []
    x = torch.randn(M, V, device="cuda", dtype=torch.bfloat16)
    y = torch.randint(0, V, (M,), device="cuda")
    scale = torch.full((1,), 1.0 / M, device="cuda")
    xg = x.clone().requires_grad_()
    fns = {
        "liger_cpp": lambda: torch.ops.liger._ce_rows(x, y, None, scale, scale, -100, 0.0, 0.0, 0.0, True),
        "eager": lambda: eager(xg, y).backward(),
        "compile": lambda: compiled(xg, y).backward(),
    }
    for spec in plans:
        fns[f"liger_cpp[{spec}]"] = _with_plan(spec, fns["liger_cpp"])
    if have_liger:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

        xl = x.clone().requires_grad_()
        fns["liger"] = lambda: LigerCrossEntropyFunction.apply(xl, y, None)[0].backward()
    for name, fn in fns.items():
        try:
            ms = bench_ms(fn, grad_to_none=[xg] + ([xl] if have_liger else []))
            mem = peak_extra_bytes(fn) / 2**30
            gbs = 2 * M * V * 2 / (ms * 1e-3) / 1e9
            rows.append(
                {
                    "V": V,
                    "impl": name,
                    "ms": round(ms, 4),
                    "GB/s": round(gbs),
                    "%C": round(100 * gbs / C, 1),
                    "peak_GiB": round(mem, 3),
                }
            )
        except Exception as e:  # noqa: BLE001 - a failing baseline is reported, not fatal
            rows.append({"V": V, "impl": name, "error": str(e).splitlines()[0][:120]})
        xg.grad = None
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plans", default="", help="';'-separated plan overrides as extra rows (ce=cluster;...)")
    args = ap.parse_args()
    have_liger = try_import_liger()
    C = copy_bandwidth_gbs()
    M = 8192
    vocab = [128256] if args.quick else [32000, 128256, 151936, 262144]
    compiled = torch.compile(eager, dynamic=False)
    rows = []
    for V in vocab:
        rows += run_v(V, M, C, have_liger, compiled, [p for p in args.plans.split(";") if p])
        torch.cuda.empty_cache()
    payload = {"op": "ce_core", "dtype": "bfloat16", "M": M, "copy_GBps": round(C), **meta(), "rows": rows}
    if args.out:
        write_json(args.out, payload)
    print(
        f"Cross-entropy row step bf16 M={M} on {payload['gpu']}, C = {C:.0f} GB/s, commit {payload['commit']}"
    )
    print(fmt_table(rows, ["V", "impl", "ms", "GB/s", "%C", "peak_GiB"]))


if __name__ == "__main__":
    main()
