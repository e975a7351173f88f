"""FusedAddRMSNorm: (rmsnorm(x + r), x + r) and its backward (dX = dR = dS_out + RMSNorm's dX)
against an independent float64 reference, every option and dtype, odd shapes, strided rows,
a non-zero residual gradient, opcheck, torch.compile, gradcheck, bad inputs, determinism."""

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from reference import fused_add_rms_norm_ref
from utils import (
    RMS_VARIANT_SHAPES,
    RMS_VARIANT_WEIGHTS,
    RMS_WIDE_BWD,
    RMS_WIDE_SHAPES,
    RMS_WIDE_WEIGHTS,
    assert_backward_builds_no_zeros,
    assert_close_to_ref,
    assert_rstd_close,
    cuda_kernels,
    forced,
)

import liger_cpp  # noqa: F401
from liger_cpp.ops.fused_add_rms_norm import fused_add_rms_norm
from liger_cpp.transformers import LigerFusedAddRMSNorm, liger_fused_add_rms_norm

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SHAPES = [(1, 769), (7, 8), (5, 123, 123), (17, 4096), (3, 5125), (2, 1, 2048)]
CUDA_SHAPES = [(1, 65536), (3, 32768), (40, 16384), (2, 262144), (4, 100003), (300, 1024), (4096, 64)]


def _weight(kind, n, dtype, device, gemma):
    if kind is None:
        return None
    wdt = dtype if kind == "same" else torch.float32
    base = torch.zeros(n) if gemma else torch.ones(n)
    return (base + 0.1 * torch.randn(n)).to(device=device, dtype=wdt).requires_grad_(True)


def _input(shape, dtype, device, strided, start=5):
    """strided: rows padded by 24 elements, the row starting at element `start` (5: misaligned for
    16-byte vectors; 8: aligned)."""
    n = shape[-1]
    if strided:
        big = torch.randn(*shape[:-1], n + 24, device=device, dtype=dtype)
        t = big[..., start : start + n]
        assert not t.is_contiguous()
    else:
        t = torch.randn(*shape, device=device, dtype=dtype)
    return t.detach().requires_grad_(True)


def _run_case(
    shape, dtype, wkind, mode, offset, device, strided=False, ds_scale=1.0, start=5, check_rstd=False
):
    """check_rstd: also the forward op's saved rstd, and its y and s again."""
    gemma = mode == "gemma"
    x = _input(shape, dtype, device, strided, start)
    r = _input(shape, dtype, device, strided, start)
    w = _weight(wkind, shape[-1], dtype, device, gemma)
    eps = 1e-6
    y, s = fused_add_rms_norm(x, r, w, eps, offset=offset, casting_mode=mode)
    dy = torch.randn_like(y) * 1.5
    ds = torch.randn_like(s) * ds_scale
    torch.autograd.backward([y, s], [dy, ds])

    def ref(xx, rr, ww):
        yy, ss = fused_add_rms_norm_ref(xx, rr, ww, eps, offset, mode)
        torch.autograd.backward([yy, ss], [dy.to(yy.dtype), ds.to(ss.dtype)])
        return yy, ss

    x64, r64 = (t.detach().double().requires_grad_(True) for t in (x, r))
    w64 = w.detach().double().requires_grad_(True) if w is not None else None
    y64, s64 = ref(x64, r64, w64)
    xlo, rlo = (t.detach().clone().requires_grad_(True) for t in (x, r))
    wlo = w.detach().clone().requires_grad_(True) if w is not None else None
    ylo, slo = ref(xlo, rlo, wlo)

    assert y.dtype == ylo.dtype and s.dtype == x.dtype
    assert_close_to_ref(s, s64, slo, "S")
    assert_close_to_ref(y, y64, ylo, "Y")
    assert_close_to_ref(x.grad, x64.grad, xlo.grad, "dX")
    assert torch.equal(x.grad, r.grad), "dX and dR must be the same values"
    if w is not None:
        assert w.grad.dtype == w.dtype
        assert_close_to_ref(w.grad, w64.grad, wlo.grad, "dW")
    if check_rstd:
        wd = w.detach() if w is not None else None
        y2, s2, rstd = torch.ops.liger.fused_add_rms_norm_fwd(
            x.detach(), r.detach(), wd, eps, offset, mode, False
        )
        assert torch.equal(y2, y.detach()) and torch.equal(s2, s.detach()), (
            "a second call must match bit for bit"
        )
        assert_rstd_close(s, eps, rstd)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind", [None, "same", "fp32"])
@pytest.mark.parametrize("mode,offset", [("llama", 0.0), ("gemma", 1.0), ("none", 0.0), ("llama", 0.5)])
def test_forward_backward(device, shape, dtype, wkind, mode, offset):
    if mode == "none" and wkind == "fp32" and dtype != torch.float32:
        pytest.skip("'none' keeps one dtype: HF's formula would promote")
    _run_case(shape, dtype, wkind, mode, offset, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows_and_zero_residual_grad(device, dtype):
    _run_case((9, 1000), dtype, "same", "llama", 0.0, device, strided=True)
    _run_case((4, 6, 4096), dtype, "same", "gemma", 1.0, device, strided=True)
    _run_case((6, 512), dtype, "fp32", "llama", 0.0, device, ds_scale=0.0)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("shape", CUDA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "wkind,mode,offset", [("same", "llama", 0.0), ("fp32", "gemma", 1.0), (None, "llama", 0.0)]
)
def test_cuda_wide_and_tall(shape, dtype, wkind, mode, offset):
    _run_case(shape, dtype, wkind, mode, offset, device="cuda")


# The CUDA backward's kernels on the residual-gradient (ds_out) path (see test_rms_norm.py), each
# forced with the plan override where it runs: the plan's (pipe with cp.async stages up to 1024
# vectors, ds_out a third operand a row; the cluster kernel above on sm_90), cached and generic. (The
# TMA backward takes no residual gradient.)
BWD_KERNELS = [None, "cached", "generic"]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", BWD_KERNELS)
@pytest.mark.parametrize("shape", RMS_VARIANT_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,mode,offset", RMS_VARIANT_WEIGHTS)
def test_cuda_bwd_kernels(bwd, shape, dtype, wkind, mode, offset):
    with forced(rms_bwd=bwd):
        _run_case(shape, dtype, wkind, mode, offset, device="cuda")


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", BWD_KERNELS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_bwd_kernels_strided_zero_ds(bwd, dtype):
    with forced(rms_bwd=bwd):
        _run_case((600, 2048), dtype, "same", "llama", 0.0, "cuda", strided=True)
        _run_case((700, 512), dtype, "fp32", "llama", 0.0, "cuda", ds_scale=0.0)


# Rows above 1024 vectors (utils.RMS_WIDE_SHAPES): the forward (s, y, rstd: the register-cached
# forward up to 4096 vectors, then the generic one) and the residual-gradient (ds_out) backward of
# the plan (the cluster kernel on sm_90) and the register-cached fallback (rms_bwd=cached), with
# strided inputs (misaligned, and 16-byte aligned with a row stride that is not the width) and a
# zero ds_out too.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", RMS_WIDE_BWD)
@pytest.mark.parametrize("shape", RMS_WIDE_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,mode,offset", RMS_WIDE_WEIGHTS)
def test_cuda_wide(bwd, shape, dtype, wkind, mode, offset):
    if mode == "none" and wkind == "fp32" and dtype != torch.float32:
        pytest.skip("'none' keeps one dtype: HF's formula would promote")
    with forced(rms_bwd=bwd):
        _run_case(shape, dtype, wkind, mode, offset, device="cuda", check_rstd=True)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", RMS_WIDE_BWD)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_wide_strided_zero_ds(bwd, dtype):
    with forced(rms_bwd=bwd):
        _run_case((40, 16392), dtype, "same", "llama", 0.0, "cuda", strided=True)
        _run_case((300, 16384), dtype, "fp32", "llama", 0.0, "cuda", ds_scale=0.0)
        for shape in [(40, 16392), (3, 5, 32768)]:
            _run_case(shape, dtype, "fp32", "gemma", 1.0, "cuda", strided=True, start=8, check_rstd=True)


# The forward on CUDA (the register-cached kernel up to 4096 vectors: s and y stored as packed
# 16-byte words, the weights loaded before the reduction; the generic kernel for wider rows and
# widths that are not whole vectors; no forward override applies to FusedAddRMSNorm): y against the
# reference, s = x + r exactly, and the same bits on a second call.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "wkind,mode", [("same", "llama"), ("fp32", "llama"), ("same", "gemma"), (None, "none")]
)
@pytest.mark.parametrize("shape", [(1000, 4096), (333, 2048), (64, 16384), (5, 1000), (3, 65536)])
def test_cuda_fwd(dtype, wkind, mode, shape):
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    r = torch.randn(*shape, device="cuda", dtype=dtype)
    w = _weight(wkind, shape[-1], dtype, "cuda", mode == "gemma")
    w = w.detach() if w is not None else None
    outs = [torch.ops.liger.fused_add_rms_norm_fwd(x, r, w, 1e-6, 0.0, mode, False) for _ in range(2)]
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    assert torch.equal(outs[0][1], x + r)
    y64 = fused_add_rms_norm_ref(
        x.double(), r.double(), w.double() if w is not None else None, 1e-6, 0.0, mode
    )[0]
    ylo = fused_add_rms_norm_ref(x, r, w, 1e-6, 0.0, mode)[0]
    assert_close_to_ref(outs[0][0], y64, ylo, "Y")


# The plan of record on sm_90 (docs/kernels/rms_norm.md): the kernels a call runs, from the profiler.
# (shape, override, forward kernel, backward kernels) for bf16 with a weight and a residual gradient.
SM90_PLAN = [
    ((300, 4096), {}, "rms_fwd_cached", ["rms_bwd_pipe", "reduce_partials4"]),
    ((8, 65536), {}, "rms_fwd_generic", ["rms_bwd_cluster", "reduce_partials4"]),
    ((300, 4096), {"rms_bwd": "cached"}, None, ["rms_bwd_cached", "reduce_partials4"]),
    (
        (300, 4096),
        {"rms_bwd": "generic"},
        None,
        ["rms_bwd_dw_generic", "rms_bwd_dx_generic", "reduce_partials4"],
    ),
]


@pytest.mark.skipif(
    not CUDA_OK or torch.cuda.get_device_capability() != (9, 0), reason="the plan of record is sm_90's"
)
@pytest.mark.parametrize("shape,override,fwd,bwd", SM90_PLAN)
def test_cuda_sm90_plan(shape, override, fwd, bwd):
    x, r = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    w = _weight("same", shape[-1], torch.bfloat16, "cuda", False)
    with forced(**override):
        y, s = fused_add_rms_norm(x, r, w, 1e-6)
        dy, ds = torch.randn_like(y), torch.randn_like(s)
        ran_fwd = cuda_kernels(lambda: fused_add_rms_norm(x, r, w, 1e-6))
        ran_bwd = cuda_kernels(lambda: torch.autograd.backward([y, s], [dy, ds], retain_graph=True))
    if fwd is not None:
        assert ran_fwd == [fwd]
    assert ran_bwd == bwd


@pytest.mark.parametrize("device", DEVICES)
def test_only_y_used(device):
    # s unused downstream: its gradient is zero (autograd materialises it or passes None).
    x = torch.randn(5, 64, device=device, requires_grad=True)
    r = torch.randn(5, 64, device=device, requires_grad=True)
    w = torch.randn(64, device=device, requires_grad=True)
    y, _ = liger_fused_add_rms_norm(x, r, w, 1e-6)
    y.sum().backward()
    x2, r2, w2 = (t.detach().clone().requires_grad_(True) for t in (x, r, w))
    fused_add_rms_norm_ref(x2, r2, w2, 1e-6)[0].sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r.grad, r2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_dw_is_deterministic(device):
    x = torch.randn(3000, 512, device=device, dtype=torch.bfloat16, requires_grad=True)
    r = torch.randn(3000, 512, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(512, device=device, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(3000, 512, device=device, dtype=torch.bfloat16)
    ds = torch.randn(3000, 512, device=device, dtype=torch.bfloat16)
    grads = []
    for _ in range(3):
        x.grad = r.grad = w.grad = None
        y, s = fused_add_rms_norm(x, r, w, 1e-6)
        torch.autograd.backward([y, s], [dy, ds])
        grads.append((x.grad.clone(), w.grad.clone()))
    for gx, gw in grads[1:]:
        assert torch.equal(gx, grads[0][0]) and torch.equal(gw, grads[0][1])


def test_gradcheck_float64_cpu():
    for mode, offset in [("llama", 0.0), ("gemma", 1.0), ("none", 0.3)]:
        x = torch.randn(4, 7, 13, dtype=torch.float64, requires_grad=True)
        r = torch.randn(4, 7, 13, dtype=torch.float64, requires_grad=True)
        w = torch.randn(13, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(
            lambda a, b, c, o=offset, m=mode: fused_add_rms_norm(a, b, c, 1e-5, o, m), (x, r, w)
        )
        assert torch.autograd.gradcheck(
            lambda a, b, m=mode: fused_add_rms_norm(a, b, None, 1e-5, 0.0, m), (x, r)
        )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    x = torch.randn(5, 3, 96, device=device, dtype=dtype, requires_grad=True)
    r = torch.randn(5, 3, 96, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(96, device=device, dtype=dtype, requires_grad=True)
    w32 = torch.randn(96, device=device, dtype=torch.float32, requires_grad=True)
    for args in [
        (x, r, w, 1e-6, 0.0, "llama", False),
        (x, r, None, 1e-5, 0.0, "llama", False),
        (x, r, w32, 1e-6, 1.0, "gemma", True),
    ]:
        torch.library.opcheck(torch.ops.liger.fused_add_rms_norm_fwd, args)
    y, s, rstd = torch.ops.liger.fused_add_rms_norm_fwd(x, r, w, 1e-6, 0.0, "llama", False)
    dy = torch.randn_like(y)
    ds = torch.randn_like(s)
    for d in (ds, None):
        torch.library.opcheck(
            torch.ops.liger.fused_add_rms_norm_bwd, (dy, d, s.detach(), w.detach(), rstd, 0.0, "llama", True)
        )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    mod = LigerFusedAddRMSNorm(256, eps=1e-5).to(device)
    with torch.no_grad():
        mod.weight.add_(0.1 * torch.randn(256, device=device))

    def f(x, r):
        y, s = mod(x * 2.0, r)
        return y.square().sum() + (s * s).sum() * 0.5

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    x = torch.randn(4, 9, 256, device=device, requires_grad=True)
    r = torch.randn(4, 9, 256, device=device, requires_grad=True)
    cf(x, r).backward()
    gx, gr, gw = x.grad.clone(), r.grad.clone(), mod.weight.grad.clone()
    x.grad = r.grad = mod.weight.grad = None
    f(x, r).backward()
    torch.testing.assert_close(gx, x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gr, r.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, mod.weight.grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    m = LigerFusedAddRMSNorm(64, eps=1e-5, offset=1.0, casting_mode="gemma", init_fn="zeros").to(device)
    assert m.weight.shape == (64,) and m.variance_epsilon == 1e-5 and torch.count_nonzero(m.weight) == 0
    x, r = torch.randn(3, 64, device=device), torch.randn(3, 64, device=device)
    y, s = m(x, r)
    y_ref, s_ref = fused_add_rms_norm_ref(x, r, m.weight, 1e-5, 1.0, "gemma")
    torch.testing.assert_close(s, s_ref)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rows(device):
    x = torch.randn(0, 64, device=device, requires_grad=True)
    r = torch.randn(0, 64, device=device, requires_grad=True)
    w = torch.ones(64, device=device, requires_grad=True)
    y, s = fused_add_rms_norm(x, r, w, 1e-6)
    assert y.shape == s.shape == (0, 64)
    (y.sum() + s.sum()).backward()
    assert torch.equal(w.grad, torch.zeros_like(w))


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_name_the_argument(device):
    x = torch.randn(4, 64, device=device)
    r = torch.randn(4, 64, device=device)
    with pytest.raises(RuntimeError, match="'R'.*shape"):
        fused_add_rms_norm(x, torch.randn(4, 63, device=device), None, 1e-6)
    with pytest.raises(RuntimeError, match="'R'.*dtype"):
        fused_add_rms_norm(x, r.half(), None, 1e-6)
    with pytest.raises(RuntimeError, match="'W'.*shape"):
        fused_add_rms_norm(x, r, torch.ones(63, device=device), 1e-6)
    with pytest.raises(RuntimeError, match="'X'.*expected float32"):
        fused_add_rms_norm(x.int(), r.int(), None, 1e-6)
    with pytest.raises(ValueError, match="casting_mode"):
        fused_add_rms_norm(x, r, None, 1e-6, casting_mode="llamas")
    y, s, rstd = torch.ops.liger.fused_add_rms_norm_fwd(x, r, None, 1e-6, 0.0, "llama", False)
    with pytest.raises(RuntimeError, match="'dS_out'.*shape"):
        torch.ops.liger.fused_add_rms_norm_bwd(
            y, torch.randn(4, 65, device=device), s, None, rstd, 0.0, "llama", True
        )
    with pytest.raises(RuntimeError, match="'dY'.*shape"):
        torch.ops.liger.fused_add_rms_norm_bwd(
            torch.randn(4, 65, device=device), None, s, None, rstd, 0.0, "llama", True
        )
    with pytest.raises(RuntimeError, match="'RSTD'"):
        torch.ops.liger.fused_add_rms_norm_bwd(y, None, s, None, rstd[:2], 0.0, "llama", True)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_mismatched_devices():
    x = torch.randn(4, 64, device="cuda")
    with pytest.raises(RuntimeError, match="'R'.*device"):
        fused_add_rms_norm(x, torch.randn(4, 64), None, 1e-6)


@pytest.mark.parametrize("use_s", [True, False])
def test_backward_materializes_no_zero_gradients(use_s):
    """RSTD's gradient, and s's when s is not used downstream, stay None: no fill kernel, and no
    [rows, cols] zeros for dS_out (the kernel takes dS_out=None)."""
    x = torch.randn(7, 64, requires_grad=True)
    r = torch.randn(7, 64, requires_grad=True)
    w = torch.ones(64, requires_grad=True)
    y, s = fused_add_rms_norm(x, r, w)
    outs, grads = ([y, s], [torch.ones_like(y), torch.ones_like(s)]) if use_s else ([y], [torch.ones_like(y)])
    assert_backward_builds_no_zeros(outs, grads, "liger.fused_add_rms_norm_bwd.default")
    # Same gradients as with an explicit zero gradient for s.
    x2, r2, w2 = (t.detach().clone().requires_grad_(True) for t in (x, r, w))
    y2, s2 = fused_add_rms_norm(x2, r2, w2)
    torch.autograd.backward([y2, s2], [torch.ones_like(y2), grads[1] if use_s else torch.zeros_like(s2)])
    for a, b in ((x, x2), (r, r2), (w, w2)):
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)
