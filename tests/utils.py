"""Comparison helpers.

The main rule (FlashAttention's): our result's error against a float64 reference must be at
most twice the error of the same PyTorch formula evaluated in the input's low precision, plus
one unit of rounding of the output dtype at the reference's magnitude. It scales with dtype
and shape, so it needs no hand-tuned tolerance and cannot pass by being loose on fp32.
"""

import torch

# One unit in the last place, relative, for each dtype.
ULP = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float64: 2.0**-52}


def assert_close_to_ref(out, ref64, ref_lo, name="output", factor=2.0, extra_ulps=1.0):
    assert out.shape == ref64.shape, f"{name}: shape {tuple(out.shape)} != {tuple(ref64.shape)}"
    assert not torch.isnan(out).any(), f"{name}: NaN in output"
    out64 = out.detach().double().cpu()
    ref64 = ref64.detach().double().cpu()
    ref_lo = ref_lo.detach().double().cpu()
    err = (out64 - ref64).abs().max().item() if out.numel() else 0.0
    base = (ref_lo - ref64).abs().max().item() if out.numel() else 0.0
    scale = ref64.abs().max().item() if out.numel() else 0.0
    floor = extra_ulps * ULP[out.dtype] * max(scale, 1e-30) + 1e-12
    assert err <= factor * base + floor, (
        f"{name}: max error {err:.3e} > {factor} x low-precision PyTorch error {base:.3e} + {floor:.3e} "
        f"(dtype {out.dtype}, |ref| max {scale:.3e})"
    )


# The RMSNorm and FusedAddRMSNorm CUDA kernel-variant cases. Shapes: one warp per row with 16 rows
# per block, several rows per block, one row per block, 1024-thread rows, rows too wide for the
# register-cached kernels (fallback), and many rows per persistent block. Weights: (kind, casting
# mode, offset).
RMS_VARIANT_SHAPES = [(4096, 64), (3000, 256), (300, 1024), (2000, 4096), (70, 8192), (9, 16384), (5, 1000)]
RMS_VARIANT_WEIGHTS = [("same", "llama", 0.0), ("fp32", "gemma", 1.0), (None, "llama", 0.5)]
