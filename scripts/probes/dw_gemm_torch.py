"""Probe beside dw_gemm_algos.cu: the same accumulating dW GEMMs as ATen runs them today
(W.addmm_(G.t(), X), beta 1) and without accumulation (torch.mm), median ms of 15 after 2 warm-ups."""

import torch

SHAPES = [
    ("gemma2 FLCE R512", 512, 256000, 2304),
    ("gemma2 FLCE R1024", 1024, 256000, 2304),
    ("gemma3 FLCE R512", 512, 262144, 2304),
    ("jsd student R1024", 1024, 151936, 2048),
    ("jsd student R2048", 2048, 151936, 2048),
    ("qwen FLCE R512", 512, 151936, 4096),
    ("qwen FLCE R1024", 1024, 151936, 4096),
    ("llama3 FLCE R512", 512, 128256, 4096),
    ("llama3 FLCE R1024", 1024, 128256, 4096),
    ("llama4 FLCE R512", 512, 202048, 5120),
    ("H8192 V128256 R512", 512, 128256, 8192),
    ("H2048 V128256 R256", 256, 128256, 2048),
    ("H2048 V128256 R768", 768, 128256, 2048),
]


def med(fn, steps=15, warm=2):
    """Median ms of `steps` timed calls of fn after `warm` untimed ones (CUDA events, no L2 flush)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return sorted(ts)[len(ts) // 2]


def main():
    for name, r, v, h in SHAPES:
        g = torch.randn(r, v, device="cuda", dtype=torch.bfloat16) * 0.01
        x = torch.randn(r, h, device="cuda", dtype=torch.bfloat16) * 0.01
        w = torch.randn(v, h, device="cuda", dtype=torch.bfloat16) * 0.01
        gf = 2 * r * v * h / 1e9
        acc = med(lambda g=g, x=x, w=w: w.addmm_(g.t(), x))
        plain = med(lambda g=g, x=x, w=w: torch.mm(g.t(), x, out=w))
        print(
            f"{name:20s} ATen addmm_ (beta 1) {acc:.3f} ms ({gf / acc:.0f} TFLOP/s)",
            f"mm {plain:.3f} ms ({gf / plain:.0f})",
        )
        del g, x, w


if __name__ == "__main__":
    main()
