"""Probe: log-probs of given tokens from given logits at a temperature, forward only (old and
reference log-probs): liger_cpp's fused_selective_log_softmax against Liger's Triton one (when
importable) and eager PyTorch (log_softmax in float32 + gather, TRL's selective_log_softmax), at
B 8, L 1024, V 151936, bf16, temperature 0.9 (or the first argument). Median ms (harness.bench_ms),
the logits' read rate, and the largest difference to the float64 reference.
Usage: PYTHONPATH=.:benchmarks[:<liger site>] python scripts/probes/selective_logprobs.py [temperature]"""

import sys

import torch
from harness import bench_ms

from liger_cpp.ops import fused_selective_log_softmax

B, L, V = 8, 1024, 151936
T = float(sys.argv[1]) if len(sys.argv) > 1 else 0.9


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = (torch.randn(B, L + 1, V, device="cuda", generator=g) * 4).bfloat16()
    ids = torch.randint(0, V, (B, L + 1), device="cuda", generator=g)
    ref = torch.log_softmax(logits[:, :-1].double() / T, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)

    def eager():
        return torch.log_softmax(logits[:, :-1].float() / T, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)

    impls = {"liger_cpp": lambda: fused_selective_log_softmax(logits, ids, T), "eager": eager}
    try:
        from liger_kernel.ops.grpo_loss import fused_selective_log_softmax as liger

        impls["liger"] = lambda: liger(logits, ids, T)
    except Exception as e:  # noqa: BLE001 - a missing baseline is a line, not a failure
        print(f"liger: not importable ({type(e).__name__}: {e})")
    gb = B * L * V * 2 / 1e9
    for name, f in impls.items():
        err = (f().double() - ref).abs().max().item()
        ms = bench_ms(f)
        print(f"T {T} {name}: {ms:.3f} ms, {gb / ms * 1e3:.0f} GB/s of logits read, max |diff| {err:.2e}")


if __name__ == "__main__":
    main()
