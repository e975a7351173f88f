"""Chunked DPO loss benchmark (bf16, sigmoid loss with a reference model, fwd+bwd): liger_cpp's
LigerFusedLinearDPOLoss against PyTorch eager (full logits: x @ W.T, log_softmax(logits.float()),
gathered per-token log-probs, the reference model's the same way under no_grad: TRL's formula), a
torch.compile of it, and Liger-Kernel's LigerFusedLinearDPOLoss (when importable).

Reported per row: median ms, x GEMM floor (policy 6*M*H*V + reference 2*M*H*V FLOPs at the bf16
GEMM rate measured in this run with harness.gemm_tflops; M = 2 * pairs * T), TFLOP/s of those FLOPs,
and peak memory above the inputs (max_memory_allocated after a reset, minus what was allocated
before the call; it includes the returned dX and dW).
Usage: python benchmarks/bench_chunked_loss.py [--out FILE.json] [--quick] [--chunk-sizes 1,2,4]
"""

import argparse

import torch
import torch.nn.functional as F
from harness import bench_ms, fmt_table, gemm_tflops, meta, peak_extra_bytes, try_import_liger, write_json

import liger_cpp
from liger_cpp.chunked_loss import LigerFusedLinearDPOLoss

SHAPES = [(8, 1024, 4096, 128256), (4, 512, 4096, 128256)]  # pairs, T, H, V
MiB = 1 << 20


def _seq_logps(x, w, t):
    logp = F.log_softmax((x @ w.t()).float(), dim=-1)
    mask = t != -100
    tok = logp.gather(-1, torch.where(mask, t, 0).unsqueeze(-1)).squeeze(-1)
    return (tok * mask).sum(-1)


def eager(w, x, t, rx, rw, beta=0.1):
    B = t.shape[0] // 2
    s = _seq_logps(x, w, t)
    with torch.no_grad():
        rs = _seq_logps(rx, rw, t)
    d = beta * ((s[:B] - rs[:B]) - (s[B:] - rs[B:]))
    return -F.logsigmoid(d).mean()


def variants(have_liger, chunk_sizes):
    out = {}
    for cs in chunk_sizes:
        mod = LigerFusedLinearDPOLoss(chunk_size=cs)
        out[f"liger_cpp[chunk={cs}]"] = lambda w, x, t, rx, rw, mod=mod: mod(w, x, t, None, rx, rw)[0]
    out["eager"] = eager
    out["compile"] = "compile"
    if have_liger:
        from liger_kernel.chunked_loss import LigerFusedLinearDPOLoss as LigerDPO

        lmod = LigerDPO(use_ref_model=True)
        out["liger"] = lambda w, x, t, rx, rw, lmod=lmod: lmod(w, x, t, None, rx, rw)[0]
    return out


def _row(shape, impl, ms, floor_ms, tflop, peak, error=None):
    p, T, h, v = shape
    r = {"shape": f"pairs{p} T{T} H{h} V{v}", "impl": impl}
    if error is not None:
        return {**r, "ms": None, "xFloor": None, "TFLOP/s": None, "peak_MiB": None, "error": error}
    r.update(
        {
            "ms": round(ms, 3),
            "xFloor": round(ms / floor_ms, 3),
            "TFLOP/s": round(tflop / (ms * 1e-3) / 1e12, 1),
            "peak_MiB": round(peak / MiB) if peak is not None else None,
        }
    )
    return r


def run_shape(shape, fns, rate):
    p, T, h, v = shape
    m = 2 * p * T
    x = torch.randn(2 * p, T, h, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    w = (torch.randn(v, h, device="cuda") * h**-0.5).to(torch.bfloat16).requires_grad_(True)
    rx = torch.randn(2 * p, T, h, device="cuda", dtype=torch.bfloat16)
    rw = (torch.randn(v, h, device="cuda") * h**-0.5).to(torch.bfloat16)
    t = torch.randint(0, v, (2 * p, T), device="cuda")
    t[:, : T // 4] = -100  # prompt tokens
    flops = 8.0 * m * h * v
    floor_ms = flops / (rate * 1e12) * 1e3
    rows = [{"shape": f"pairs{p} T{T} H{h} V{v}", "impl": "GEMM floor", "ms": round(floor_ms, 3)}]
    for name, f in fns.items():
        if f == "compile":
            torch._dynamo.reset()
            f = torch.compile(eager, dynamic=False)
        try:

            def step(f=f):
                f(w, x, t, rx, rw).backward()

            step()  # warm-up (compilation, cuBLAS heuristics)
            x.grad = w.grad = None
            peak = peak_extra_bytes(step)
            x.grad = w.grad = None
            ms = bench_ms(step, grad_to_none=[x, w], warmup=5, rep=50)
            rows.append(_row(shape, name, ms, floor_ms, flops, peak))
        except Exception as e:  # noqa: BLE001 - a failing baseline (OOM) is reported, not fatal
            rows.append(_row(shape, name, None, floor_ms, flops, None, error=str(e).splitlines()[0][:120]))
        finally:
            x.grad = w.grad = None
            torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="the first shape only (8 pairs, T 1024)")
    ap.add_argument("--chunk-sizes", default="1,2", help="comma-separated pairs per chunk for liger_cpp")
    args = ap.parse_args()
    fns = variants(try_import_liger(), [int(s) for s in args.chunk_sizes.split(",")])
    rate = gemm_tflops()
    shapes = SHAPES[:1] if args.quick else SHAPES
    rows = []
    for shape in shapes:
        rows += run_shape(shape, fns, rate)
    payload = {
        "op": "chunked_loss_dpo",
        "dtype": "bfloat16",
        **meta(),
        "gemm_tflops": round(rate, 1),
        "liger_cpp_version": liger_cpp.__version__,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    print(
        f"Chunked DPO loss fwd+bwd (bf16, sigmoid, reference model) on {payload['gpu']}, "
        f"commit {payload['commit']}; bf16 GEMM rate {rate:.0f} TFLOP/s"
    )
    print("floor: policy 6*M*H*V + reference 2*M*H*V FLOPs at that rate")
    print(fmt_table(rows, ["shape", "impl", "ms", "xFloor", "TFLOP/s", "peak_MiB", "error"]))


if __name__ == "__main__":
    main()
