"""Probe: the eager host cost of liger_cpp's GRPO on the CPU (fwd+bwd, ref and old log-probs given,
beta 0.04), median wall ms of 30 calls after 3 warm-ups, 2 threads. Run it once per build to A/B
two builds: PYTHONPATH=<package root> python scripts/probes/grpo_host_cpu.py <label>.
At small shapes the call is host cost (the per-token math's op count shows there); at the largest
the GEMMs dominate."""

import sys
import time

import torch

from liger_cpp import chunked_loss as cl

SHAPES = [(1, 16, 32, 64), (4, 64, 64, 512), (8, 256, 128, 2048)]  # B, T, H, V
LOSSES = [("dapo", "token"), ("grpo", "sequence"), ("vespo", "token")]


def median_ms(B, T, H, V, loss_type, level, reps=30):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, H, generator=g, requires_grad=True)
    w = (torch.randn(V, H, generator=g) * 0.1).requires_grad_()
    ids = torch.randint(0, V, (B, T), generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.1).long()
    adv = torch.randn(B, generator=g)
    ref, old = torch.randn(B, T, generator=g) - 5, torch.randn(B, T, generator=g) - 5
    mod = cl.LigerFusedLinearGRPOLoss(beta=0.04, loss_type=loss_type, importance_sampling_level=level)

    def call():
        mod(x, w, ids, mask, adv, None, ref, old)[0].backward()
        x.grad = w.grad = None

    for _ in range(3):
        call()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return sorted(times)[reps // 2] * 1e3


def main():
    label = sys.argv[1] if len(sys.argv) > 1 else "this build"
    torch.set_num_threads(2)
    for shape in SHAPES:
        for loss_type, level in LOSSES:
            ms = median_ms(*shape, loss_type, level)
            print(f"{label} B,T,H,V={shape} {loss_type}/{level}: {ms:.3f} ms")


if __name__ == "__main__":
    main()
