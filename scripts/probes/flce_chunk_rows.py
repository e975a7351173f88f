"""Probe (issue 31's FLCE heads): an FLCE fwd+bwd call at given chunk row counts against its three
full-size GEMMs, the two timed in alternation (rounds of: the GEMMs, then each row count) so that a
card whose clock sags under sustained load weighs on both alike. Prints, per head and row count, the
median ratio over the rounds and the peak memory above the inputs (dX, dW and the chunk's buffers).

    python scripts/probes/flce_chunk_rows.py --head 8192,5120,202048:0,640,512 [--head ...] [--rounds 5]

Row count 0 is the op's own choice.
"""

import argparse
import statistics

import torch
from dw_gemm_torch import med  # median ms of CUDA-event-timed calls

from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy

MiB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head", action="append", required=True, help="M,H,V:rows,rows,...")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    for spec in args.head:
        shape, rows = spec.split(":")
        M, H, V = (int(s) for s in shape.split(","))
        row_counts = [int(r) for r in rows.split(",")]
        x = (torch.randn(M, H, device="cuda", dtype=torch.bfloat16) * 0.1).requires_grad_()
        w = (torch.randn(V, H, device="cuda", dtype=torch.bfloat16) * H**-0.5).requires_grad_()
        t = torch.randint(0, V, (M,), device="cuda")
        g = torch.randn(M, V, device="cuda", dtype=torch.bfloat16) * 1e-3
        xd, wd = x.detach(), w.detach()

        def floor(xd=xd, wd=wd, g=g):
            xd @ wd.t(), g @ wd, g.t() @ xd

        def call(r, x=x, w=w, t=t):
            fused_linear_cross_entropy(x, w, t, chunk_rows=r)[0].backward()
            x.grad = w.grad = None

        peaks = {}
        for r in row_counts:
            call(r)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fused_linear_cross_entropy(x, w, t, chunk_rows=r)[0].backward()
            torch.cuda.synchronize()
            peaks[r] = (torch.cuda.max_memory_allocated() - base) / MiB
            x.grad = w.grad = None
        ratios = {r: [] for r in row_counts}
        times = {r: [] for r in row_counts}
        floors = []
        for _ in range(args.rounds):
            f = med(floor, steps=3, warm=1)
            floors.append(f)
            for r in row_counts:
                ms = med(lambda r=r: call(r), steps=3, warm=1)
                times[r].append(ms)
                ratios[r].append(ms / f)
        budget = (M * H + V * H) * 2 / MiB + 256
        print(
            f"== M {M} H {H} V {V}: floor (3 full GEMMs) median {statistics.median(floors):.2f} ms "
            f"(rounds {', '.join(f'{v:.2f}' for v in floors)}); budget dX + dW + 256 MiB = {budget:.0f} MiB"
        )
        for r in row_counts:
            print(
                f"   rows {r:5d}: x {statistics.median(ratios[r]):.3f} (rounds "
                f"{', '.join(f'{v:.3f}' for v in ratios[r])}), {statistics.median(times[r]):.2f} ms, "
                f"peak {peaks[r]:.0f} MiB"
            )
        del x, w, t, g, xd, wd
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
