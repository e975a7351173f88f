"""Launches one op repeatedly so that `ncu` can read its kernels' hardware counters.
Not a benchmark: no timing here. Usage (on the GPU machine):
  ncu --clock-control none --launch-skip 5 --launch-count 1 -k regex:NAME \
      --section SpeedOfLight ... python benchmarks/profile_kernels.py OP
OP: ce_rows (8192 x 128256 bf16; ce_rows_V for another vocabulary, e.g. ce_rows_151936),
    rms_norm (16384 x 4096 bf16 fwd+bwd), rms_norm_fwd, rms_fwd_wide (4096 x 32768 forward) and
    rms_fwd_wide_compile (torch.compile of the Hugging Face formula at that shape: its Triton
    kernel, for comparison); rms_fwd_MxN, rms_fwd_compile_MxN, rms_fwd_liger_MxN (ours, compile's,
    Liger-Kernel's forward at M x N), layer_norm, fused_add_rms_norm, rope (B4 T4096 32/8 d128 fwd+bwd),
    glu_fwd / glu_fwd_compile (SwiGLU forward 8192 x 14336 bf16: ours, torch.compile's Triton kernel).
"""

import sys

import torch

import liger_cpp  # noqa: F401


def main():
    op = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    dev = "cuda"
    bf = torch.bfloat16
    if op == "ce_rows" or op.startswith("ce_rows_"):
        M, V = 8192, int(op[len("ce_rows_") :]) if op.startswith("ce_rows_") else 128256
        x = torch.randn(M, V, device=dev, dtype=bf)
        y = torch.randint(0, V, (M,), device=dev)
        s = torch.full((1,), 1.0 / M, device=dev)

        def fn():
            torch.ops.liger._ce_rows(x, y, None, s, s, -100, 0.0, 0.0, 0.0, True)

    elif op in ("rms_norm", "rms_norm_fwd", "layer_norm", "fused_add_rms_norm"):
        from kernel_breakdown import make_fn  # the same calls as the kernel-time breakdown

        fn, _ = make_fn(op, 16384, 4096)

    elif op.startswith("rms_fwd_"):  # rms_fwd_wide[_compile], rms_fwd[_compile|_liger]_MxN
        from liger_cpp.transformers import LigerRMSNorm

        parts = op.split("_")
        M, N = (4096, 32768) if parts[2] == "wide" else map(int, parts[-1].split("x"))
        x = torch.randn(M, N, device=dev, dtype=bf)
        mod = LigerRMSNorm(N).to(dev, bf)

        def hf(h):  # LlamaRMSNorm's forward
            v = h.float().pow(2).mean(-1, keepdim=True)
            return mod.weight * (h.float() * torch.rsqrt(v + 1e-6)).to(h.dtype)

        f = mod
        if "compile" in parts:
            f = torch.compile(hf)
        elif "liger" in parts:
            from liger_kernel.transformers.functional import liger_rms_norm

            def f(h):
                return liger_rms_norm(h, mod.weight, 1e-6, 0.0, "llama", False)

        def fn():
            with torch.no_grad():
                f(x)

    elif op in ("glu_fwd", "glu_fwd_compile"):
        import torch.nn.functional as F

        from liger_cpp.ops.swiglu import swiglu

        a = torch.randn(8192, 14336, device=dev, dtype=bf)
        b = torch.randn_like(a)
        f = torch.compile(lambda a, b: F.silu(a) * b) if op == "glu_fwd_compile" else swiglu

        def fn():
            with torch.no_grad():
                f(a, b)

    elif op == "rope":
        from liger_cpp.transformers import liger_rotary_pos_emb

        B, T, Hq, Hk, D = 4, 4096, 32, 8, 128
        q = torch.randn(B, Hq, T, D, device=dev, dtype=bf, requires_grad=True)
        k = torch.randn(B, Hk, T, D, device=dev, dtype=bf, requires_grad=True)
        cos = torch.randn(1, T, D, device=dev, dtype=bf)
        sin = torch.randn(1, T, D, device=dev, dtype=bf)
        dq = torch.randn_like(q)
        dk = torch.randn_like(k)

        def fn():
            qo, ko = liger_rotary_pos_emb(q, k, cos, sin)
            torch.autograd.backward([qo, ko], [dq, dk])

    else:
        raise SystemExit(f"unknown op {op}")
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
