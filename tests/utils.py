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
    # Compared on the output's device (float64 there too): copying multi-million-element tensors
    # to the host made the CUDA suites CPU-bound under pytest -n 16.
    out64 = out.detach().double()
    ref64 = ref64.detach().double().to(out64.device)
    ref_lo = ref_lo.detach().double().to(out64.device)
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

# Rows above 1024 16-byte vectors (bf16/fp16 hidden > 8192, fp32 > 4096): on sm_90 the backward
# splits each row over a thread-block cluster (LIGER_CPP_RMS_BWD_WIDE, default cluster; old: the
# 4-vectors-a-thread kernel); the forward (LIGER_CPP_RMS_FWD_WIDE) is by default l2hint above 2048
# vectors (a 1024-thread block per row reading it twice with L2 eviction hints) and old (the
# register-cached or generic kernel) up to there; or the cluster kernel (cluster), or a block per row
# reading it twice without hints (l2, l2x512).
# Shapes: cluster of 2 (fp32: 4), a width that is not a
# multiple of the cluster's blocks (16392 bf16 = 2049 vectors, 3 blocks of 704 threads), clusters of
# 4 and 8, 3073 vectors, and more rows than resident clusters (each cluster walks several rows);
# 12288 and 10240 (1536 / 1280 vectors) take clusters of two, not the three that 512-thread blocks
# would need.
# fp32 at 65536 (16384 vectors) is too wide for 8 blocks and takes the old kernels.
RMS_WIDE_SHAPES = [
    (3, 16384),
    (40, 16392),
    (5, 32768),
    (2, 65536),
    (7, 24584),
    (300, 16384),
    (3, 12288),
    (20, 10240),
]
# Each variant as its environment: the defaults (cluster backward with the block size chosen), the
# cluster kernels forced to 512-thread blocks (LIGER_CPP_RMS_WIDE_TX) with the cluster forward, the
# old backward, and the five other forwards.
RMS_WIDE_VARIANTS = {
    "cluster": {},
    "cluster512": {"LIGER_CPP_RMS_WIDE_TX": "512", "LIGER_CPP_RMS_FWD_WIDE": "cluster"},
    "old": {"LIGER_CPP_RMS_BWD_WIDE": "old"},
    "fwd_cluster": {"LIGER_CPP_RMS_FWD_WIDE": "cluster"},
    "fwd_l2": {"LIGER_CPP_RMS_FWD_WIDE": "l2"},
    "fwd_l2x512": {"LIGER_CPP_RMS_FWD_WIDE": "l2x512"},
    "fwd_l2hint": {"LIGER_CPP_RMS_FWD_WIDE": "l2hint"},
    "fwd_old": {"LIGER_CPP_RMS_FWD_WIDE": "old"},
    # the cluster backward's rows a message (LIGER_CPP_RMS_BWD_ROWS; default 2 for clusters of two
    # blocks): one, and two (odd row counts end on a pair of one), also in 512-thread blocks
    "rows1": {"LIGER_CPP_RMS_BWD_ROWS": "1"},
    "rows2": {"LIGER_CPP_RMS_BWD_ROWS": "2"},
    "rows2_512": {"LIGER_CPP_RMS_BWD_ROWS": "2", "LIGER_CPP_RMS_WIDE_TX": "512"},
    # the cluster backward's 1024-thread build (64 registers) for 513..768-thread blocks (default: 768)
    "regs64": {"LIGER_CPP_RMS_CLUSTER_REGS": "64"},
}
RMS_WIDE_WEIGHTS = [
    ("same", "llama", 0.0),
    ("fp32", "gemma", 1.0),
    (None, "llama", 0.5),
    ("same", "none", 0.0),
    ("fp32", "llama", 0.0),
]


def set_wide_variant(monkeypatch, variant):
    for key in {k for env in RMS_WIDE_VARIANTS.values() for k in env}:  # whatever any variant sets
        monkeypatch.delenv(key, raising=False)
    for key, value in RMS_WIDE_VARIANTS[variant].items():
        monkeypatch.setenv(key, value)


def assert_rstd_close(x, eps, rstd):
    """The forward's saved rstd = 1 / sqrt(mean(x^2) + eps) per row of x (for FusedAddRMSNorm, of
    s = x + r), float32, against float64; the low-precision baseline is the formula in float32."""
    assert rstd.dtype == torch.float32 and rstd.shape == x.shape[:-1]
    x64 = x.detach().double()
    r64 = torch.rsqrt(x64.pow(2).mean(-1) + eps)
    rlo = torch.rsqrt(x.detach().float().pow(2).mean(-1) + eps)
    # a few float32 units: the kernels sum the squares in another (fixed) order than PyTorch
    assert_close_to_ref(rstd, r64, rlo, "RSTD", extra_ulps=8.0)


def assert_backward_builds_no_zeros(outputs, grads, bwd_op):
    """torch.autograd.backward(outputs, grads) runs bwd_op (e.g. "liger.rms_norm_bwd.default") and
    no zeros / fill op: the gradients of outputs no one uses stay None (set_materialize_grads)."""
    ops = backward_aten_ops(outputs, grads)
    assert bwd_op in ops
    assert not [o for o in ops if "zeros" in o or "fill" in o], ops


def backward_aten_ops(outputs, grads):
    """The ATen/liger ops that torch.autograd.backward(outputs, grads) dispatches, as strings."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with _Record() as rec:
        torch.autograd.backward(outputs, grads)
    return rec.ops
