"""Probe (issue 31's FLCE heads): where a fused linear cross entropy call's time goes against its
three full-size GEMMs. Per head: the three GEMMs at full M (the bench's floor: logits, dX, dW), then
one profiled fwd+bwd call of liger_cpp's op at its default chunking, its GPU time by kernel (name,
launches, total ms), and the same three GEMMs at the op's chunk rows (R) times the chunk count.

    python scripts/probes/flce_chunk_breakdown.py [--shapes M,H,V ...]
"""

import argparse
import collections

import torch
from dw_gemm_torch import med  # median ms of CUDA-event-timed calls
from torch.profiler import ProfilerActivity, profile

from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy

DEFAULT = ["8192,2304,256000", "8192,5120,202048", "8192,4096,128256"]


def gemms(m, h, v, dev):
    """Median ms of logits [m,h]x[h,v], dX [m,v]x[v,h] and dW (+)= [v,m]x[m,h] (beta 0 / beta 1)."""
    x = torch.randn(m, h, device=dev, dtype=torch.bfloat16) * 0.1
    w = torch.randn(v, h, device=dev, dtype=torch.bfloat16) * 0.02
    g = torch.randn(m, v, device=dev, dtype=torch.bfloat16) * 1e-3
    dw = torch.zeros(v, h, device=dev, dtype=torch.bfloat16)
    out = {
        "logits": med(lambda: torch.mm(x, w.t())),
        "dX": med(lambda: torch.mm(g, w)),
        "dW_beta0": med(lambda: torch.mm(g.t(), x)),
        "dW_beta1": med(lambda: dw.addmm_(g.t(), x)),
    }
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*", default=DEFAULT)
    args = ap.parse_args()
    dev = "cuda"
    for spec in args.shapes:
        M, H, V = (int(s) for s in spec.split(","))
        full = gemms(M, H, V, dev)
        floor = full["logits"] + full["dX"] + full["dW_beta0"]
        x = (torch.randn(M, H, device=dev, dtype=torch.bfloat16) * 0.1).requires_grad_()
        w = (torch.randn(V, H, device=dev, dtype=torch.bfloat16) * 0.02).requires_grad_()
        t = torch.randint(0, V, (M,), device=dev)

        def step(x=x, w=w, t=t):
            fused_linear_cross_entropy(x, w, t)[0].backward()
            x.grad = None
            w.grad = None

        call = med(step, steps=5)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        by = collections.defaultdict(lambda: [0, 0.0])
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                k = by[e.name[:90]]
                k[0] += 1
                k[1] += (e.time_range.end - e.time_range.start) / 1e3
        ce = [n for n, (c, _) in by.items() if "ce_" in n or "cross_entropy" in n]
        chunks = max((by[n][0] for n in ce), default=0)
        print(
            f"\n== M {M} H {H} V {V}: call {call:.2f} ms, floor (3 full GEMMs) {floor:.2f} ms "
            f"(x {call / floor:.3f}); full GEMMs {', '.join(f'{k} {v:.2f}' for k, v in full.items())}"
        )
        tot = sum(v[1] for v in by.values())
        print(f"   profiled kernels {tot:.2f} ms; {chunks} CE row launches")
        for n, (c, ms) in sorted(by.items(), key=lambda kv: -kv[1][1])[:10]:
            print(f"   {ms:8.2f} ms {c:4d} x  {n}")
        del x, w, t, step
        torch.cuda.empty_cache()
        if chunks:
            r = (M + chunks - 1) // chunks
            part = gemms(r, H, V, dev)
            print(
                f"   GEMMs at the chunk's {r} rows x {chunks}: "
                + ", ".join(f"{k} {v * chunks:.2f}" for k, v in part.items())
            )


if __name__ == "__main__":
    main()
