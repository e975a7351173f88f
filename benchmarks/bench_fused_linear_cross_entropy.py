"""Fused linear cross entropy benchmark (bf16, mean over tokens, fwd+bwd): liger_cpp against
PyTorch eager (logits = x @ W.T, then F.cross_entropy(logits.float(), y): the HF formula), a
torch.compile of it, Liger-Kernel's LigerFusedLinearCrossEntropyFunction (when importable) and
"3 GEMMs": x @ W.T, g @ W and g.T @ x at the op's shapes, timed in the same run (T3GEMM, the floor a
chunked FLCE approaches), alone and beside each implementation (harness.paired_ms).

Reported per row: median ms, x T3GEMM (the median ratio over alternating rounds of the row and the
floor; T3GEMM_ms the floor's median in those rounds), TFLOP/s of 6*M*H*V, and peak memory above the inputs
(max_memory_allocated after a reset, minus what was allocated before the call; it includes the
returned dX and dW) against the target budget dX + dW + 256 MiB.
Usage: python benchmarks/bench_fused_linear_cross_entropy.py [--out FILE.json] [--quick]
       [--chunk-mb 64,128,256] (liger_cpp once per chunk_budget_mib value) [--shapes M,H,V ...]
The default liger_cpp row uses the process's LIGER_CPP_FLCE_CHUNK_MB when set (read once).
"""

import argparse
import os

import torch
import torch.nn.functional as F
from harness import bench_ms, fmt_table, meta, paired_ms, peak_extra_bytes, try_import_liger, write_json

import liger_cpp
from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy

SHAPES = [(8192, 4096, 128256), (2048, 4096, 128256), (32768, 4096, 128256), (8192, 2304, 256000)]
MiB = 1 << 20


def eager(x, w, t):
    return F.cross_entropy((x @ w.t()).float(), t)


def variants(have_liger, chunk_mbs):
    out = {}
    for mb in chunk_mbs:
        name = "liger_cpp" if mb is None else f"liger_cpp[{mb} MiB]"
        out[name] = (mb, lambda x, w, t, mb=mb: fused_linear_cross_entropy(x, w, t, chunk_budget_mib=mb)[0])
    out["liger_cpp[accum=fp32]"] = (
        None,
        lambda x, w, t: fused_linear_cross_entropy(x, w, t, accum_dtype=torch.float32)[0],
    )
    out["eager"] = (None, eager)
    out["compile"] = (None, "compile")  # fresh per shape (see run_shape)
    if have_liger:
        from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

        def liger(x, w, t):
            r = LigerFusedLinearCrossEntropyFunction.apply(x, w, t)
            return r[0] if isinstance(r, tuple) else r

        out["liger"] = (None, liger)
    return out


def _row(shape, impl, mode, ms, ratio, t3, peak, budget, error=None):
    """ratio: ms over the floor timed beside it (t3, paired_ms); None for forward rows."""
    m, h, v = shape
    r = {"shape": f"M{m} H{h} V{v}", "mode": mode, "impl": impl}
    if error is not None:
        return {**r, "ms": None, "xT3GEMM": None, "TFLOP/s": None, "peak_MiB": None, "error": error}
    flops = 6 * m * h * v if mode == "fwd+bwd" else 2 * m * h * v
    r.update(
        {
            "ms": round(ms, 3),
            "xT3GEMM": round(ratio, 3) if ratio is not None else None,
            "T3GEMM_ms": round(t3, 3) if t3 is not None else None,
            "TFLOP/s": round(flops / (ms * 1e-3) / 1e12, 1),
            "peak_MiB": round(peak / MiB) if peak is not None else None,
            "budget_MiB": round(budget / MiB) if budget is not None else None,
        }
    )
    return r


def run_shape(shape, fns):
    m, h, v = shape
    rows = []
    x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    w = (torch.randn(v, h, device="cuda") * h**-0.5).to(torch.bfloat16).requires_grad_(True)
    t = torch.randint(0, v, (m,), device="cuda")
    t[::13] = -100

    # The floor: the three GEMMs of the op at its shapes, with a preallocated stand-in for dlogits,
    # timed alone once and then beside every implementation's fwd+bwd (paired_ms): each row's
    # xT3GEMM is its median ratio to the floor over alternating rounds.
    g = torch.randn(m, v, device="cuda", dtype=torch.bfloat16)
    xd, wd = x.detach(), w.detach()

    def floor(g=g, xd=xd, wd=wd):
        return xd @ wd.t(), g @ wd, g.t() @ xd

    t3 = bench_ms(floor)
    rows.append(_row(shape, "3 GEMMs", "fwd+bwd", t3, 1.0, t3, None, None))
    budget = (m * h + v * h) * 2 + 256 * MiB  # dX + dW (bf16) + 256 MiB

    for name, (_mb, f) in fns.items():
        if f == "compile":
            torch._dynamo.reset()
            f = torch.compile(eager, dynamic=False)
        try:

            def step(f=f, x=x, w=w, t=t):
                f(x, w, t).backward()

            step()  # warm-up (compilation, cuBLAS heuristics)
            x.grad = w.grad = None
            peak = peak_extra_bytes(step)
            x.grad = w.grad = None
            ms, t3_beside, ratio = paired_ms(step, floor, grad_to_none=[x, w])
            rows.append(_row(shape, name, "fwd+bwd", ms, ratio, t3_beside, peak, budget))
            if name in ("liger_cpp", "eager"):
                with torch.no_grad():
                    fwd_ms = bench_ms(lambda f=f, x=x, w=w, t=t: f(x, w, t))
                rows.append(_row(shape, name, "fwd", fwd_ms, None, None, None, None))
        except Exception as e:  # noqa: BLE001 - a failing baseline (OOM, missing op) is reported, not fatal
            rows.append(
                _row(shape, name, "fwd+bwd", None, None, None, None, None, error=str(e).splitlines()[0][:120])
            )
        finally:
            x.grad = w.grad = None
            torch.cuda.empty_cache()
    del x, w, t, g, xd, wd, floor
    torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="the first shape only (M8192 H4096 V128256)")
    ap.add_argument("--chunk-mb", default=None, help="comma-separated chunk_budget_mib values (MiB) to sweep")
    ap.add_argument("--shapes", nargs="*", default=None, help="M,H,V triples instead of the default shapes")
    ap.add_argument("--only", default=None, help="comma-separated impl names to run (plus 3 GEMMs)")
    args = ap.parse_args()
    env_mb = os.environ.get("LIGER_CPP_FLCE_CHUNK_MB")
    chunk_mbs = [None] + ([float(s) for s in args.chunk_mb.split(",")] if args.chunk_mb else [])
    fns = variants(try_import_liger(), chunk_mbs)
    if args.only:
        keep = set(args.only.split(","))
        fns = {k: v for k, v in fns.items() if k in keep or k.split("[")[0] in keep}
    shapes = [tuple(int(u) for u in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    if args.quick:
        shapes = shapes[:1]
    rows = []
    for shape in shapes:
        rows += run_shape(shape, fns)
    payload = {
        "op": "fused_linear_cross_entropy",
        "dtype": "bfloat16",
        "reduction": "mean",
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "chunk_mb_env": env_mb,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    gpu, commit = payload["gpu"], payload["commit"]
    print(f"Fused linear cross entropy fwd+bwd (bf16, mean) on {gpu}, commit {commit}")
    print("target: xT3GEMM <= 1.10 and peak_MiB <= budget_MiB (dX + dW + 256 MiB)")
    cols = [
        "shape",
        "mode",
        "impl",
        "ms",
        "xT3GEMM",
        "T3GEMM_ms",
        "TFLOP/s",
        "peak_MiB",
        "budget_MiB",
        "error",
    ]
    print(fmt_table(rows, cols))


if __name__ == "__main__":
    main()
