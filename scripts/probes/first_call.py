"""Probe: what a process's first liger_cpp GRPO call pays (bench_rl_losses' first row read 2.3-3.3 x
a steady call on the H100, its later rows 0.96-1.08 x). A fresh process per run: the bench's GRPO
inputs (8 x 1024, H 4096, V 151936, ref log-probs given) and its floor GEMMs (cuBLAS warm), then
optionally a warm-up of something else, then four timed fwd+bwd calls (wall ms, synchronised).
--warm none: nothing; rms: a tiny liger_cpp RMSNorm fwd+bwd (as a model's forward runs before its
loss); tiny: a tiny GRPO call (1 x 16, H 64, V 128: the op's process-level first-call costs without
this shape's); torch: a tiny PyTorch-only fwd+bwd (linear, log_softmax, mean: PyTorch's own first
backward, e.g. the autograd engine's device thread, without any liger_cpp kernel).
Run with CUDA_MODULE_LOADING=EAGER to see what lazy loading of kernels costs.
Usage: PYTHONPATH=.:benchmarks python scripts/probes/first_call.py --warm none|rms|tiny|torch"""

import argparse
import os
import time

import torch
from bench_rl_losses import BETA, EPS_HI, GRPO_SHAPE, gemm_floor_ms, grpo_inputs

from liger_cpp import chunked_loss as cl


def timed_calls(mod, d, k):
    out = []
    for _ in range(k):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        mod(d["x"], d["w"], d["ids"], d["mask"], d["adv"], None, d["ref"], d["old"])[0].backward()
        torch.cuda.synchronize()
        out.append(round((time.perf_counter() - t0) * 1e3, 1))
        d["x"].grad = d["w"].grad = None
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm", default="none", choices=["none", "rms", "tiny", "torch"])
    ap.add_argument("--profile", action="store_true", help="profile the first call: top host ops")
    args = ap.parse_args()
    n, T, h, v = GRPO_SHAPE
    d = grpo_inputs(GRPO_SHAPE, "cuda", torch.bfloat16)
    gemm_floor_ms(n * T, h, v)
    torch.cuda.empty_cache()
    mod = cl.LigerFusedLinearGRPOLoss(beta=BETA, epsilon_high=EPS_HI, loss_type="dapo")
    t0 = time.perf_counter()
    if args.warm == "rms":
        from liger_cpp.transformers import LigerRMSNorm

        norm = LigerRMSNorm(64).cuda().to(torch.bfloat16)
        norm(torch.randn(8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)).sum().backward()
    elif args.warm == "torch":
        lin = torch.nn.Linear(64, 128).cuda().to(torch.bfloat16)
        x = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        torch.log_softmax(lin(x).float(), -1).mean().backward()
    elif args.warm == "tiny":
        timed_calls(mod, grpo_inputs((1, 16, 64, 128), "cuda", torch.bfloat16), 1)
    torch.cuda.synchronize()
    warm_ms = round((time.perf_counter() - t0) * 1e3, 1)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            first = timed_calls(mod, d, 1)
        print(f"profiled first call {first} ms")
        averages = prof.key_averages()
        print(averages.table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))
    calls = timed_calls(mod, d, 4)
    loading = os.environ.get("CUDA_MODULE_LOADING", "default")
    print(f"warm={args.warm} loading={loading}: warm-up {warm_ms} ms, calls {calls} ms")


if __name__ == "__main__":
    main()
