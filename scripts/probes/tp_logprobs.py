"""Probe: the tensor-parallel token log-probs (LigerFusedLinearScaledCrossEntropyTPFunction) in a
group of one against the single-device op (fused_linear_token_logprobs, return_entropy) at
M 8192, H 4096, V 151936, bf16, NLL + entropy fwd+bwd: what the sharded path costs before any
communication (its forward keeps the shard's statistics, its backward reruns the logits GEMM).
Times with harness.paired_ms. Usage: PYTHONPATH=.:benchmarks python scripts/probes/tp_logprobs.py"""

import os
import tempfile

import torch
import torch.distributed as dist
from harness import paired_ms

from liger_cpp.ops import LigerFusedLinearScaledCrossEntropyTPFunction, fused_linear_token_logprobs

M, H, V = 8192, 4096, 151936


def main():
    store = tempfile.NamedTemporaryFile(delete=False).name
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(M, H, device="cuda", generator=g) * 1.0).bfloat16().requires_grad_(True)
    w = (torch.randn(V, H, device="cuda", generator=g) * H**-0.5).bfloat16().requires_grad_(True)
    t = torch.randint(0, V, (M,), device="cuda", generator=g)
    g_nll, g_ent = torch.randn(M, device="cuda"), torch.randn(M, device="cuda")

    def tp():
        nll, ent = LigerFusedLinearScaledCrossEntropyTPFunction.apply(x, w, t, None, 1.0, -100, 1, True)
        ((nll * g_nll).sum() + (ent * g_ent).sum()).backward()

    def single():
        lp, ent = fused_linear_token_logprobs(x, w, t, return_entropy=True)
        ((-lp * g_nll).sum() + (ent * g_ent).sum()).backward()

    for f in (tp, single):
        f()
    ms, ref, ratio = paired_ms(tp, single, grad_to_none=[x, w])
    torch.cuda.reset_peak_memory_stats()
    tp()
    peak_tp = torch.cuda.max_memory_allocated() / 2**20
    torch.cuda.reset_peak_memory_stats()
    single()
    peak_single = torch.cuda.max_memory_allocated() / 2**20
    flops = 8.0 * M * H * V  # the forward's logits GEMM, the backward's again, dX, dW
    print(f"tp (group of one) {ms:.2f} ms ({flops / ms / 1e9:.0f} TFLOP/s), peak {peak_tp:.0f} MiB")
    print(f"single device {ref:.2f} ms, peak {peak_single:.0f} MiB; tp / single {ratio:.3f}")
    dist.destroy_process_group()
    if os.path.exists(store):
        os.unlink(store)


if __name__ == "__main__":
    main()
