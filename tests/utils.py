"""Comparison helpers.

The main rule (FlashAttention's): our result's error against a float64 reference must be at
most twice the error of the same PyTorch formula evaluated in the input's low precision, plus
one unit of rounding of the output dtype at the reference's magnitude. It scales with dtype
and shape, so it needs no hand-tuned tolerance and cannot pass by being loose on fp32.
"""

import re

import pytest
import torch

# Compiled autograd runs C++ autograd functions (ours) from torch 2.7 on (pytorch#146229); 2.6 raises
# "Attempting to trace a potentially unsafe C++ autograd function".
needs_compiled_autograd_cpp = pytest.mark.skipif(
    torch.__version__ < "2.7",
    reason="compiled autograd takes C++ autograd functions from torch 2.7 on (pytorch#146229)",
)


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


# The RMSNorm and FusedAddRMSNorm CUDA kernel cases (each kernel forced with the plan override,
# liger_cpp._testing.plan_override; docs/kernels/rms_norm.md). Shapes: one warp per row with 16 rows
# per block, several rows per block, one row per block, 1024-thread rows, rows too wide for the
# register-cached kernels (fallback), and many rows per persistent block. Weights: (kind, casting
# mode, offset).
RMS_VARIANT_SHAPES = [(4096, 64), (3000, 256), (300, 1024), (2000, 4096), (70, 8192), (9, 16384), (5, 1000)]
RMS_VARIANT_WEIGHTS = [("same", "llama", 0.0), ("fp32", "gemma", 1.0), (None, "llama", 0.5)]

# Rows above 1024 16-byte vectors (bf16/fp16 hidden > 8192, fp32 > 4096): on sm_90 the backward
# splits each row over a thread-block cluster (its fallback: the register-cached backward,
# rms_bwd=cached); the forward is the two-pass wide-row kernel above 2048 vectors and the
# register-cached one up to there (FusedAddRMSNorm: register-cached up to 4096, then generic).
# Shapes: clusters of 2 (fp32: 4), a width that is not a multiple of the cluster's blocks (16392
# bf16 = 2049 vectors, 3 blocks of 704 threads), clusters of 4 and 8, 3073 vectors, and more rows
# than resident clusters (each cluster walks several rows); 12288 and 10240 (1536 / 1280 vectors)
# take clusters of two 768 / 640-thread blocks (the 768-thread build, rows in pairs); an odd row
# count ends on a pair of one row. fp32 at 65536 (16384 vectors) is too wide for 8 blocks and takes
# the generic kernels.
RMS_WIDE_SHAPES = [
    (3, 16384),
    (40, 16392),
    (5, 32768),
    (2, 65536),
    (7, 24584),
    (300, 16384),
    (3, 12288),
    (21, 10240),
]
# The wide rows' backwards: the plan's (cluster on sm_90) and the register-cached fallback.
RMS_WIDE_BWD = [None, "cached"]
RMS_WIDE_WEIGHTS = [
    ("same", "llama", 0.0),
    ("fp32", "gemma", 1.0),
    (None, "llama", 0.5),
    ("same", "none", 0.0),
    ("fp32", "llama", 0.0),
]


def forced(**choices):
    """liger_cpp._testing.plan_override(**choices) without the None values (the plan's own choice)."""
    from liger_cpp._testing import plan_override

    return plan_override(**{k: v for k, v in choices.items() if v is not None})


def cuda_kernels(fn):
    """The liger_cpp CUDA kernels fn() launches, in order, by name without template arguments (from
    the profiler's trace, as benchmarks/kernel_breakdown.py reads it)."""
    import json
    import os
    import tempfile

    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    names = []
    for e in sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        if "liger_cpp" not in e["name"]:
            continue
        # demangled ("...::rms_bwd_tma<__nv_bfloat16, ...>(...)") or not ("...11rms_bwd_tmaI13__nv_...")
        m = re.search(r"((?:rms|ln)_(?:fwd|bwd)_[a-z0-9_]+?|reduce_partials4?)(?=<|I|\()", e["name"])
        names.append(m.group(1) if m else e["name"])
    return names


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


def assert_compiled_grads_match(f, x, modules, device, tol):
    """torch.compile(f, fullgraph=True) (aot_eager on the CPU, inductor on CUDA) against eager f: the
    gradients of f(x) for x and every parameter of `modules` agree within rtol = atol = tol."""
    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    params = [x] + [p for m in modules for p in m.parameters()]
    cf(x).backward()
    got = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    f(x).backward()
    for g, p in zip(got, params):
        torch.testing.assert_close(g, p.grad, rtol=tol, atol=tol)


def check_against_ref(fn, ref, inputs, dtype, device, names):
    """fn's output and the gradients of every input that requires one against ref in float64 and
    against fn run in float32 where dtype is lower (PyTorch's low-precision error as the bound)."""
    ins = [t.to(device, dtype).detach().requires_grad_(t.is_floating_point()) for t in inputs]
    y = fn(*ins)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(9)).to(device, dtype)
    y.backward(dy)
    ins64 = [t.double().to(device).detach().requires_grad_() for t in inputs]
    y64 = ref(*ins64)
    y64.backward(dy.double())
    lo = [t.to(device, dtype).detach().requires_grad_() for t in inputs]
    y_lo = ref(*lo)  # the formula in the low dtype: what plain PyTorch code would get
    y_lo.backward(dy)
    assert_close_to_ref(y, y64, y_lo, "y", factor=4.0, extra_ulps=4.0)
    for name, a, a64, alo in zip(names, ins, ins64, lo):
        assert_close_to_ref(a.grad, a64.grad, alo.grad, f"d{name}", factor=4.0, extra_ulps=4.0)
