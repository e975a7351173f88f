"""Losses on materialised logits (bf16, fwd+bwd): liger_cpp's fused cross entropy + total variation
distance (LigerFusedCETVDLoss) and GRPO on given logits (triton_grpo_loss) against Liger-Kernel's Triton
kernels (when importable) and eager PyTorch, in one run.

Both are memory-bound: the floor is the logits' bytes at this GPU's copy bandwidth (measured in the
run). CE + TVD moves at least student and teacher once and writes the student's gradient once (3 x
rows x V elements); its forward reads the pair twice (the softmax statistics, then |p - q|) and the
backward once more, 7 x in all. GRPO reads the logits once forward and once backward and writes
dlogits (3 x). Per row: median ms of a steady fwd+bwd with the host hidden (harness.bench_ms), the
same call as a user makes it (host included: wall ms per call over a loop of back-to-back calls),
x floor, peak memory above the inputs, and |out - eager|. GRPO also runs one completion of 65,536
tokens (Liger's Triton kernel: "crashes at L >= 65,536", grid limit).

Usage: python benchmarks/bench_logits_losses.py [--out F.json] [--quick]
"""

import argparse
import time

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

from liger_cpp.ops.ce_tvd import fused_ce_tvd
from liger_cpp.transformers.grpo_loss import triton_grpo_loss


def wall_ms(fn, grad_to_none=(), n=20):
    """Milliseconds per call of n back-to-back calls, host included (what an eager loop pays)."""
    for t in grad_to_none:
        t.grad = None
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        for t in grad_to_none:
            t.grad = None
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / n


def eager_ce_tvd(s, t, y):
    sf, tf = s.float(), t.float()
    ce = F.cross_entropy(sf, y, reduction="none")
    tvd = 0.5 * (sf.softmax(-1) - tf.softmax(-1)).abs().sum(-1)
    return ce, tvd


def ce_tvd_rows(rows, V, bw, have_liger):
    g = torch.Generator(device="cuda").manual_seed(0)
    s = torch.randn(rows, V, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    t = torch.randn(rows, V, device="cuda", generator=g).to(torch.bfloat16)
    y = torch.randint(0, V, (rows,), device="cuda", generator=g)
    y[::7] = -100
    w1 = torch.rand(rows, device="cuda", generator=g)
    w2 = torch.rand(rows, device="cuda", generator=g)
    impls = {"liger_cpp": lambda: fused_ce_tvd(s, t, y)}
    if have_liger:
        from liger_kernel.ops.fused_ce_tvd import LigerFusedCETVDFunction

        impls["liger"] = lambda: LigerFusedCETVDFunction.apply(s, t, y, -100)
    impls["eager"] = lambda: eager_ce_tvd(s, t, torch.where(y == -100, -100, y))
    ref = None
    out = []
    floor = 3 * rows * V * 2 / (bw * 1e9) * 1e3
    for name, f in impls.items():

        def step(f=f):
            ce, tvd = f()
            valid = y != -100
            (ce * w1 * valid).sum().add_((tvd * w2 * valid).sum()).backward()

        row = {"case": f"ce_tvd {rows}x{V}", "impl": name}
        try:
            ms = bench_ms(step, grad_to_none=[s])
            row.update(ms=round(ms, 3), x_floor=round(ms / floor, 2), wall_ms=round(wall_ms(step, [s]), 3))
            s.grad = None
            row["peak_mib"] = round(peak_extra_bytes(step) / 2**20)
            with torch.no_grad():
                ce, tvd = f()
                valid = y != -100
                val = torch.stack([(ce * valid).sum(), (tvd * valid).sum()]).double()
            if ref is None:
                ref = val
            row["err_vs_first"] = f"{(val - ref).abs().max().item():.2e}"
        except Exception as e:  # noqa: BLE001 - a failing implementation is a result
            row["error"] = f"{type(e).__name__}: {str(e)[:120]}"
        s.grad = None
        torch.cuda.empty_cache()
        out.append(row)
    return out


def grpo_rows(B, L, V, bw, have_liger):
    g = torch.Generator(device="cuda").manual_seed(1)
    logits = (torch.randn(B, L + 1, V, device="cuda", generator=g) * 2).to(torch.bfloat16).requires_grad_()
    ids = torch.randint(0, V, (B, L), device="cuda", generator=g)
    mask = torch.ones(B, L, device="cuda")
    mask[:, L - L // 8 :] = 0
    adv = torch.randn(B, device="cuda", generator=g)
    old = -torch.rand(B, L, device="cuda", generator=g) * 12
    ref_lp = old + 0.05 * torch.randn(B, L, device="cuda", generator=g)
    kw = dict(temperature=0.9, beta=0.04, eps_low=0.2, eps_high=0.4, loss_type="dapo", reduce=False)
    impls = {"liger_cpp": lambda: triton_grpo_loss(logits, old, ref_lp, ids, adv, mask, inplace=True, **kw)}
    if have_liger:
        from liger_kernel.transformers.grpo_loss import triton_grpo_loss as liger_grpo

        impls["liger"] = lambda: liger_grpo(logits, old, ref_lp, ids, adv, mask, inplace=True, **kw)
    floor = 3 * B * (L + 1) * V * 2 / (bw * 1e9) * 1e3
    out = []
    fresh = logits.detach().clone()
    for name, f in impls.items():

        def step(f=f):
            loss, _, _ = f()
            ((loss * mask).sum() / mask.sum()).backward()

        row = {"case": f"grpo_logits {B}x{L}x{V}", "impl": name}
        try:
            with torch.no_grad():
                logits.copy_(fresh)
                loss, _, _ = f()
                row["loss"] = f"{((loss * mask).sum() / mask.sum()).item():.6f}"
            ms = bench_ms(step, grad_to_none=[logits])  # the in-place backward overwrites the logits
            wall = wall_ms(step, [logits])
            row.update(ms=round(ms, 3), x_floor=round(ms / floor, 2), wall_ms=round(wall, 3))
            logits.grad = None
            with torch.no_grad():
                logits.copy_(fresh)
            row["peak_mib"] = round(peak_extra_bytes(step) / 2**20)
        except Exception as e:  # noqa: BLE001 - a failing implementation is a result
            row["error"] = f"{type(e).__name__}: {str(e)[:120]}"
        logits.grad = None
        torch.cuda.empty_cache()
        out.append(row)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    have_liger = try_import_liger()
    bw = copy_bandwidth_gbs()
    rows = []
    payload = {"meta": meta(), "copy_gbs": round(bw, 1), "rows": rows}
    shapes = [(4096, 151936)] if args.quick else [(4096, 151936), (8192, 128256), (1000, 32000)]
    for r, v in shapes:
        rows += ce_tvd_rows(r, v, bw, have_liger)
        if args.out:
            write_json(args.out, payload)
    gshapes = [(8, 1024, 151936)] + ([] if args.quick else [(1, 65536, 151936)])
    for b, length, v in gshapes:
        rows += grpo_rows(b, length, v, bw, have_liger)
        if args.out:
            write_json(args.out, payload)
    cols = ["case", "impl", "ms", "wall_ms", "x_floor", "peak_mib", "err_vs_first", "loss", "error"]
    print(f"copy bandwidth {bw:.0f} GB/s")
    print(fmt_table(rows, cols))


if __name__ == "__main__":
    main()
