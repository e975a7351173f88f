"""RMSNorm: forward and backward against an independent float64 reference, every option and
dtype, odd shapes, strided rows, in-place backward, opcheck, torch.compile, gradcheck, errors."""

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from reference import rms_norm_ref
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
from liger_cpp._testing import plan_override
from liger_cpp.ops.rms_norm import rms_norm
from liger_cpp.transformers import LigerRMSNorm, LigerRMSNormForGemma, liger_rms_norm

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (rows..., hidden): one row, odd widths (vector and scalar paths), 3-D input.
SHAPES = [(1, 769), (7, 8), (5, 123, 123), (17, 4096), (3, 5125), (2, 1, 2048)]
CUDA_SHAPES = [(1, 65536), (3, 32768), (40, 16384), (2, 262144), (4, 100003), (300, 1024), (4096, 64)]


def _weight(kind, n, dtype, device, gemma):
    if kind is None:
        return None
    wdt = dtype if kind == "same" else torch.float32
    base = torch.zeros(n) if gemma else torch.ones(n)
    return (base + 0.1 * torch.randn(n)).to(device=device, dtype=wdt).requires_grad_(True)


def _run_case(shape, dtype, wkind, mode, offset, in_place, device, strided=False, start=3, check_rstd=False):
    """strided: rows padded by 24 elements, the row starting at element `start` (3: misaligned for
    16-byte vectors; 8: aligned). check_rstd: also the forward op's saved rstd, and its y again."""
    n = shape[-1]
    gemma = mode == "gemma"
    if strided:
        big = torch.randn(*shape[:-1], n + 24, device=device, dtype=dtype)
        x = big[..., start : start + n]  # unit last stride, padded rows
        assert not x.is_contiguous()
    else:
        x = torch.randn(*shape, device=device, dtype=dtype)
    x = (x * 2.0).detach().requires_grad_(True)
    w = _weight(wkind, n, dtype, device, gemma)
    eps = 1e-6

    y = rms_norm(x, w, eps, offset=offset, casting_mode=mode, in_place=in_place)
    dy = torch.randn_like(y)
    dy_copy = dy.clone()
    y.backward(dy)

    # float64 reference and the low-precision PyTorch baseline (HF formula in the input dtype)
    x64 = x.detach().double().requires_grad_(True)
    w64 = w.detach().double().requires_grad_(True) if w is not None else None
    y64 = rms_norm_ref(x64, w64, eps, offset, mode)
    y64.backward(dy_copy.double())
    xlo = x.detach().clone().requires_grad_(True)
    wlo = w.detach().clone().requires_grad_(True) if w is not None else None
    ylo = rms_norm_ref(xlo, wlo, eps, offset, mode)
    ylo.backward(dy_copy.to(ylo.dtype))

    assert y.dtype == ylo.dtype, f"output dtype {y.dtype} != HF's {ylo.dtype}"
    assert_close_to_ref(y, y64, ylo, "Y")
    assert_close_to_ref(x.grad, x64.grad, xlo.grad, "dX")
    if w is not None:
        assert w.grad.dtype == w.dtype
        assert_close_to_ref(w.grad, w64.grad, wlo.grad, "dW")
    if check_rstd:
        wd = w.detach() if w is not None else None
        y2, rstd = torch.ops.liger.rms_norm_fwd(x.detach(), wd, eps, offset, mode, False)
        assert torch.equal(y2, y.detach()), "a second forward call must give the same y, bit for bit"
        assert_rstd_close(x, eps, rstd)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind", [None, "same", "fp32"])
@pytest.mark.parametrize("mode,offset", [("llama", 0.0), ("gemma", 1.0), ("none", 0.0), ("llama", 0.5)])
def test_forward_backward(device, shape, dtype, wkind, mode, offset):
    if mode == "none" and wkind == "fp32" and dtype != torch.float32:
        pytest.skip("'none' keeps one dtype: HF's formula would promote")
    _run_case(shape, dtype, wkind, mode, offset, in_place=False, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_strided_rows_and_in_place(device, dtype, in_place):
    _run_case((9, 1000), dtype, "same", "llama", 0.0, in_place, device, strided=True)
    _run_case((4, 6, 4096), dtype, "same", "gemma", 1.0, in_place, device, strided=True)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("shape", CUDA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "wkind,mode,offset", [("same", "llama", 0.0), ("fp32", "gemma", 1.0), (None, "llama", 0.0)]
)
def test_cuda_wide_and_tall(shape, dtype, wkind, mode, offset):
    _run_case(shape, dtype, wkind, mode, offset, in_place=True, device="cuda")


def _assert_bwd_deterministic(rows, n, dtype):
    """Two CUDA backward calls on the same inputs give bit-identical dX and dW."""
    x = torch.randn(rows, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    grads = []
    for _ in range(2):
        x.grad = w.grad = None
        rms_norm(x, w, 1e-6).backward(dy)
        grads.append((x.grad.clone(), w.grad.clone()))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


# The CUDA backward's kernels (docs/kernels/rms_norm.md), each forced with the plan override
# (rms_bwd; None: the plan's own choice) where it runs, elsewhere the plan's choice: tma (sm_90, rows
# of 64..1024 16-byte vectors), pipe (rows up to 1024 vectors: the backward without sm_90 code),
# cached (rows up to 4096 vectors: the fallback of the wide rows without sm_90 code) and generic
# (any row), on the shapes of utils.RMS_VARIANT_SHAPES.
BWD_KERNELS = [None, "tma", "pipe", "cached", "generic"]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", BWD_KERNELS)
@pytest.mark.parametrize("shape", RMS_VARIANT_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,mode,offset", RMS_VARIANT_WEIGHTS)
def test_cuda_bwd_kernels(bwd, shape, dtype, wkind, mode, offset):
    with forced(rms_bwd=bwd):
        _run_case(shape, dtype, wkind, mode, offset, in_place=False, device="cuda")


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", BWD_KERNELS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_bwd_kernels_strided_in_place_deterministic(bwd, dtype):
    with forced(rms_bwd=bwd):
        _run_case((600, 2048), dtype, "same", "llama", 0.0, in_place=True, device="cuda", strided=True)
        mode = "none" if dtype == torch.float32 else "gemma"
        _run_case((3, 700, 512), dtype, "fp32", mode, 1.0, True, "cuda")
        # 16-byte aligned rows with a stride that is not the width (the TMA kernels copy each row)
        _run_case((600, 2048), dtype, "same", "llama", 0.0, True, "cuda", strided=True, start=8)
        _assert_bwd_deterministic(5000, 4096, dtype)


# The three weight cases a forward is checked with on CUDA: same-dtype weight (llama, out of
# place), fp32 weight with Gemma's offset (in place) and no weight (none); rstd checked too.
def _run_forward_layout_cases(shape, dtype):
    _run_case(shape, dtype, "same", "llama", 0.0, in_place=False, device="cuda", check_rstd=True)
    _run_case(shape, dtype, "fp32", "gemma", 1.0, in_place=True, device="cuda", check_rstd=True)
    _run_case(shape, dtype, None, "none", 0.0, in_place=False, device="cuda", check_rstd=True)


# The forward's kernels, forced with the plan override (rms_fwd; None: the plan's own choice) where
# they run: cached (the register-cached forward: 2 vectors a thread up to 128 vectors, 4 above, the
# 40-register build for 512-thread rows where y has x's dtype; it takes rows up to 4096 vectors) and
# l2hint (the two-pass wide-row forward, with L1 priorities above 64 KiB rows). Shapes: 16 rows a
# block, several, one; 512-thread rows (16384 bf16); 125 vectors (1000 bf16: the last warp partly
# idle); the wide rows (24584 bf16: a ragged last pass, 65536: L1 priorities); a width that is not
# whole vectors (16390: the generic forward).
FWD_KERNELS = [None, "cached", "l2hint"]
FWD_SHAPES = [
    (4096, 64),
    (301, 1024),
    (1001, 4096),
    (33, 8),
    (9, 16384),
    (5, 1000),
    (7, 24584),
    (3, 65536),
    (5, 16390),
]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("fwd", FWD_KERNELS)
@pytest.mark.parametrize("shape", FWD_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fwd_kernels(fwd, shape, dtype):
    with forced(rms_fwd=fwd):
        _run_forward_layout_cases(shape, dtype)


# torch.compile's skeleton (the default forward with x, w and y of one 16-bit dtype: compile-time
# width at hidden 4096 / 8192 / 16384, run-time width at the other widths of 129..2048 vectors, e.g.
# 1536, 2056, 5120, 5128 (641 vectors: a ragged last access) and 14336, with guarded accesses; every
# other case takes the register-cached forward); a strided x (aligned rows) and a width the plan
# leaves to the register-cached forward (1000).
FIXED_SHAPES = [
    (1, 4096),
    (301, 8192),
    (9, 16384),
    (3, 4096),
    (5, 1000),
    (7, 5120),
    (3, 5128),
    (5, 6144),
    (3, 2056),
    (4, 14336),
    (9, 1536),
    (2, 2048),
]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("shape", FIXED_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fwd_fixed(shape, dtype):
    _run_forward_layout_cases(shape, dtype)
    _run_case(shape, dtype, "same", "gemma", 1.0, in_place=False, device="cuda", check_rstd=True)
    if shape[0] > 1:  # one row of a padded buffer is contiguous
        _run_case(shape, dtype, "same", "none", 0.0, False, "cuda", strided=True, start=8, check_rstd=True)


# Rows above 1024 vectors (utils.RMS_WIDE_SHAPES): the plan's kernels (on sm_90 the cluster backward)
# and the register-cached backward (rms_bwd=cached; rows above 4096 vectors: the generic one): y,
# rstd, dX and dW against the reference.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd,in_place", [(None, False), (None, True), ("cached", True)])
@pytest.mark.parametrize("shape", RMS_WIDE_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,mode,offset", RMS_WIDE_WEIGHTS)
def test_cuda_wide(bwd, in_place, shape, dtype, wkind, mode, offset):
    if mode == "none" and wkind == "fp32" and dtype != torch.float32:
        pytest.skip("'none' keeps one dtype: HF's formula would promote")
    with forced(rms_bwd=bwd):
        _run_case(shape, dtype, wkind, mode, offset, in_place=in_place, device="cuda", check_rstd=True)


# Strided rows: misaligned (the generic kernels) and 16-byte aligned with a row stride that is not
# the width (the cluster kernels with x_row_stride != cols).
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", RMS_WIDE_BWD)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_wide_strided_in_place_deterministic(bwd, dtype):
    with forced(rms_bwd=bwd):
        _run_case((40, 16392), dtype, "same", "llama", 0.0, in_place=True, device="cuda", strided=True)
        _run_case((3, 5, 32768), dtype, "fp32", "gemma", 1.0, in_place=False, device="cuda", strided=True)
        for shape in [(40, 16392), (3, 5, 32768)]:
            _run_case(
                shape, dtype, "same", "llama", 0.0, True, "cuda", strided=True, start=8, check_rstd=True
            )
        _assert_bwd_deterministic(700, 32768, dtype)


# The TMA row backward (rms_bwd=tma: persistent blocks, a row at a time, 4 rows in flight per block;
# sm_90, rows of 64..1024 16-byte vectors, elsewhere the plan's kernels; by default from 129
# vectors): one row; rows not a multiple of the grid; more rows than blocks x stages (each stage's
# mbarrier goes through many phases); a width that is not a multiple of 32 vectors (1000 bf16: 125
# vectors, the last warp partly idle) nor of 128 bytes (520: the stages' regions padded); the widest
# row (8192 bf16; fp32 takes the wide kernels); rows below 64 vectors (256 bf16) and a width that is
# not a multiple of 16 bytes (1001), which fall back.
TMA_SHAPES = [(1, 4096), (2000, 4096), (20000, 1024), (7, 1000), (5, 520), (70, 8192), (300, 256), (3, 1001)]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("shape", TMA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,mode,offset", RMS_VARIANT_WEIGHTS + [("same", "none", 0.0)])
def test_cuda_tma(shape, dtype, wkind, mode, offset):
    with forced(rms_bwd="tma"):
        _run_case(shape, dtype, wkind, mode, offset, in_place=False, device="cuda", check_rstd=True)


# Programmatic dependent launch (plan override pdl=on|off; LIGER_CPP_PDL the user's kill switch, read
# once) changes when kernels start, never what they compute: the TMA backwards and their dW
# reductions give the same bits with it off.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_pdl_same_bits(dtype):
    from liger_cpp.ops.layer_norm import layer_norm

    x = torch.randn(3000, 4096, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(4096, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(4096, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    grads = {}
    for pdl in ("on", "off"):
        with plan_override(pdl=pdl):
            rms = torch.autograd.grad(rms_norm(x, w, 1e-6), [x, w], dy)
            ln = torch.autograd.grad(layer_norm(x, w, b, 1e-6), [x, w, b], dy)
        grads[pdl] = rms + ln
    for a, c in zip(grads["on"], grads["off"]):
        assert torch.equal(a, c)


# The TMA backward in place, many rows a block (each stage's mbarrier through many phases), with
# bit-identical repeated backwards.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_tma_in_place_deterministic(dtype):
    with forced(rms_bwd="tma"):
        for shape in [(20000, 1024), (1, 4096), (70, 8192), (5, 520)]:
            _run_case(shape, dtype, "fp32", "gemma", 1.0, in_place=True, device="cuda", check_rstd=True)
        _assert_bwd_deterministic(3000, 2048, dtype)


# Rows of 513..768 threads (bf16 hidden 4104..6144) take the TMA backward's two-rows-a-stage build,
# odd row counts (a last group of one row) included, except where two rows a stage do not fit in
# shared memory (fp32 dY with 16-bit x at 5120 / 6144: the one-row build); 4096 keeps the one-row
# build, and 1536 / 1032 (192 / 129 vectors) take the TMA backward by default too. dW sums every row
# once: the reference checks it.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize(
    "shape", [(3001, 5120), (7, 6144), (1, 5120), (5, 4104), (33, 5128), (2, 4096), (9, 1536), (4, 1032)]
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_tma_pairs(shape, dtype):
    _run_case(shape, dtype, "same", "llama", 0.0, in_place=False, device="cuda", check_rstd=True)
    _run_case(shape, dtype, "fp32", "gemma", 1.0, in_place=True, device="cuda")
    # fp32 weights in llama mode give fp32 y, so fp32 dY
    _run_case(shape, dtype, "fp32", "llama", 0.0, in_place=False, device="cuda")
    if shape == (3001, 5120):
        _assert_bwd_deterministic(*shape, dtype)


# The plan of record on sm_90 (docs/kernels/rms_norm.md's table): which kernels a call runs, read
# from the profiler. A plan change must show up here, and so must an override that is not applied.
# (shape, dtype, weight, override, forward kernel, backward kernels)
GENERIC_BWD = ["rms_bwd_dw_generic", "rms_bwd_dx_generic"]
SM90_PLAN = [
    ((300, 4096), torch.bfloat16, "same", {}, "rms_fwd_fixed", ["rms_bwd_tma", "reduce_partials4"]),
    ((300, 8192), torch.bfloat16, "same", {}, "rms_fwd_fixed", ["rms_bwd_tma", "reduce_partials4"]),
    ((300, 16384), torch.bfloat16, "same", {}, "rms_fwd_fixed", ["rms_bwd_cluster", "reduce_partials4"]),
    ((300, 2048), torch.bfloat16, "same", {}, "rms_fwd_fixed_rt", ["rms_bwd_tma", "reduce_partials4"]),
    ((300, 5120), torch.float16, "same", {}, "rms_fwd_fixed_rt", ["rms_bwd_tma", "reduce_partials4"]),
    ((300, 1024), torch.bfloat16, "same", {}, "rms_fwd_cached", ["rms_bwd_pipe", "reduce_partials4"]),
    ((300, 4096), torch.bfloat16, "fp32", {}, "rms_fwd_cached", ["rms_bwd_tma", "reduce_partials4"]),
    ((300, 4096), torch.float32, "same", {}, "rms_fwd_cached", ["rms_bwd_tma", "reduce_partials4"]),
    ((16, 32768), torch.bfloat16, "same", {}, "rms_fwd_l2hint", ["rms_bwd_cluster", "reduce_partials4"]),
    ((8, 65536), torch.bfloat16, "same", {}, "rms_fwd_l2hint", ["rms_bwd_cluster", "reduce_partials4"]),
    ((4, 131072), torch.bfloat16, "same", {}, "rms_fwd_l2hint", GENERIC_BWD + ["reduce_partials4"]),
    ((300, 1001), torch.bfloat16, "same", {}, "rms_fwd_generic", GENERIC_BWD + ["reduce_partials"]),
    ((300, 4096), torch.bfloat16, "same", {"rms_fwd": "cached"}, "rms_fwd_cached", None),
    ((300, 4096), torch.bfloat16, "same", {"rms_fwd": "l2hint"}, "rms_fwd_l2hint", None),
    ((300, 512), torch.bfloat16, "same", {"rms_bwd": "tma"}, None, ["rms_bwd_tma", "reduce_partials4"]),
    ((300, 4096), torch.bfloat16, "same", {"rms_bwd": "pipe"}, None, ["rms_bwd_pipe", "reduce_partials4"]),
    (
        (300, 16384),
        torch.bfloat16,
        "same",
        {"rms_bwd": "cached"},
        None,
        ["rms_bwd_cached", "reduce_partials4"],
    ),
    (
        (300, 32768),
        torch.bfloat16,
        "same",
        {"rms_bwd": "cached"},
        None,
        ["rms_bwd_cached", "reduce_partials4"],
    ),
    ((300, 4096), torch.bfloat16, "same", {"rms_bwd": "generic"}, None, GENERIC_BWD + ["reduce_partials4"]),
]


@pytest.mark.skipif(
    not CUDA_OK or torch.cuda.get_device_capability() != (9, 0), reason="the plan of record is sm_90's"
)
@pytest.mark.parametrize("shape,dtype,wkind,override,fwd,bwd", SM90_PLAN)
def test_cuda_sm90_plan(shape, dtype, wkind, override, fwd, bwd):
    x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
    w = _weight(wkind, shape[-1], dtype, "cuda", False)
    with forced(**override):
        y = rms_norm(x, w, 1e-6)
        dy = torch.randn_like(y)
        ran_fwd = cuda_kernels(lambda: rms_norm(x, w, 1e-6))
        ran_bwd = cuda_kernels(lambda: y.backward(dy, retain_graph=True))
    if fwd is not None:
        assert ran_fwd == [fwd]
    if bwd is not None:
        assert ran_bwd == bwd


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_writes_dy_visibly(device):
    x = torch.randn(6, 256, device=device, requires_grad=True)
    w = torch.ones(256, device=device, requires_grad=True)
    dy = torch.randn(6, 256, device=device)
    y, rstd = torch.ops.liger.rms_norm_fwd(x, w, 1e-6, 0.0, "llama", True)
    dx_ref, dw_ref = torch.ops.liger.rms_norm_bwd(dy, x, w, rstd, 0.0, "llama", True)
    v0 = dy._version
    dw = torch.ops.liger.rms_norm_bwd_(dy, x, w, rstd, 0.0, "llama", True)
    assert dy._version > v0, "the in-place backward must bump dY's version counter"
    torch.testing.assert_close(dy, dx_ref, rtol=0, atol=0)
    torch.testing.assert_close(dw, dw_ref, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_never_writes_an_expanded_gradient(device):
    # y.sum() sends an expanded (stride 0) gradient: writing into it would be wrong.
    x = torch.randn(5, 64, device=device, requires_grad=True)
    w = torch.randn(64, device=device, requires_grad=True)
    liger_rms_norm(x, w, 1e-6, in_place=True).sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    w2 = w.detach().clone().requires_grad_(True)
    rms_norm_ref(x2, w2, 1e-6).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_dw_is_deterministic(device):
    x = torch.randn(3000, 512, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(512, device=device, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(3000, 512, device=device, dtype=torch.bfloat16)
    grads = []
    for _ in range(3):
        x.grad = w.grad = None
        rms_norm(x, w, 1e-6).backward(dy)
        grads.append((x.grad.clone(), w.grad.clone()))
    for gx, gw in grads[1:]:
        assert torch.equal(gx, grads[0][0]) and torch.equal(gw, grads[0][1])


def test_gradcheck_float64_cpu():
    for mode, offset in [("llama", 0.0), ("gemma", 1.0), ("none", 0.3)]:
        x = torch.randn(4, 7, 13, dtype=torch.float64, requires_grad=True)
        w = torch.randn(13, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda a, b, o=offset, m=mode: rms_norm(a, b, 1e-5, o, m), (x, w))
        assert torch.autograd.gradcheck(lambda a, m=mode: rms_norm(a, None, 1e-5, 0.0, m), (x,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    x = torch.randn(5, 3, 96, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(96, device=device, dtype=dtype, requires_grad=True)
    w32 = torch.randn(96, device=device, dtype=torch.float32, requires_grad=True)
    for args in [
        (x, w, 1e-6, 0.0, "llama", False),
        (x, None, 1e-5, 0.0, "llama", False),
        (x, w32, 1e-6, 1.0, "gemma", True),
    ]:
        torch.library.opcheck(torch.ops.liger.rms_norm_fwd, args)
    y, rstd = torch.ops.liger.rms_norm_fwd(x, w, 1e-6, 0.0, "llama", False)
    dy = torch.randn_like(y)
    torch.library.opcheck(
        torch.ops.liger.rms_norm_bwd, (dy, x.detach(), w.detach(), rstd, 0.0, "llama", True)
    )
    torch.library.opcheck(
        torch.ops.liger.rms_norm_bwd_, (dy.clone(), x.detach(), w.detach(), rstd, 0.0, "llama", True)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    mod = LigerRMSNorm(256, eps=1e-5).to(device)
    with torch.no_grad():
        mod.weight.add_(0.1 * torch.randn(256, device=device))

    def f(x):
        return mod(x * 2.0).square().sum()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    x = torch.randn(4, 9, 256, device=device, requires_grad=True)
    loss = cf(x)
    loss.backward()
    gx, gw = x.grad.clone(), mod.weight.grad.clone()
    x.grad = None
    mod.weight.grad = None
    f(x).backward()
    torch.testing.assert_close(gx, x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, mod.weight.grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_modules_match_hf_formulas(device):
    x = torch.randn(3, 11, 64, device=device, dtype=torch.bfloat16)
    m = LigerRMSNorm(64, eps=1e-5).to(device=device, dtype=torch.bfloat16)
    assert m.weight.shape == (64,) and m.variance_epsilon == 1e-5
    # within one bf16 rounding of HF's formula (rstd may differ in its last fp32 bit)
    torch.testing.assert_close(m(x), rms_norm_ref(x, m.weight, 1e-5), rtol=2**-7, atol=1e-6)
    g = LigerRMSNormForGemma(64, eps=1e-6).to(device)
    assert torch.count_nonzero(g.weight) == 0
    torch.testing.assert_close(g(x), rms_norm_ref(x, g.weight, 1e-6, 1.0, "gemma"), rtol=1.6e-2, atol=1e-2)
    nw = LigerRMSNorm(64, elementwise_affine=False).to(device)
    assert nw.weight is None
    torch.testing.assert_close(nw(x), rms_norm_ref(x, None, 1e-6), rtol=2**-7, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_and_inf_propagate(device):
    x = torch.randn(3, 128, device=device)
    x[1, 5] = float("nan")
    x[2, 7] = float("inf")
    y = rms_norm(x, torch.ones(128, device=device), 1e-6)
    assert torch.isfinite(y[0]).all()
    assert torch.isnan(y[1]).all()
    assert not torch.isfinite(y[2]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rows(device):
    x = torch.randn(0, 64, device=device, requires_grad=True)
    w = torch.ones(64, device=device, requires_grad=True)
    y = rms_norm(x, w, 1e-6)
    assert y.shape == (0, 64)
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w))


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_name_the_argument(device):
    x = torch.randn(4, 64, device=device)
    with pytest.raises(RuntimeError, match="'W'.*shape"):
        rms_norm(x, torch.ones(63, device=device), 1e-6)
    with pytest.raises(RuntimeError, match="'W'.*dtype"):
        rms_norm(x.half(), torch.ones(64, device=device, dtype=torch.bfloat16), 1e-6)
    with pytest.raises(RuntimeError, match="'X'.*empty last dimension"):
        rms_norm(torch.randn(4, 0, device=device), None, 1e-6)
    with pytest.raises(RuntimeError, match="'X'.*expected float32"):
        rms_norm(torch.ones(4, 8, device=device, dtype=torch.int32), None, 1e-6)
    with pytest.raises(ValueError, match="casting_mode"):
        rms_norm(x, None, 1e-6, casting_mode="llamas")
    with pytest.raises(RuntimeError, match="casting_mode"):
        torch.ops.liger.rms_norm_fwd(x, None, 1e-6, 0.0, "bogus", False)
    y, rstd = torch.ops.liger.rms_norm_fwd(x, None, 1e-6, 0.0, "llama", False)
    with pytest.raises(RuntimeError, match="'dY'.*shape"):
        torch.ops.liger.rms_norm_bwd(torch.randn(4, 65, device=device), x, None, rstd, 0.0, "llama", True)
    with pytest.raises(RuntimeError, match="'RSTD'"):
        torch.ops.liger.rms_norm_bwd(torch.randn_like(x), x, None, rstd[:2], 0.0, "llama", True)
    with pytest.raises(RuntimeError, match="'dY'.*contiguous"):
        torch.ops.liger.rms_norm_bwd_(
            torch.randn(64, 4, device=device).t(), x, None, rstd, 0.0, "llama", True
        )


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_mismatched_devices():
    x = torch.randn(4, 64, device="cuda")
    with pytest.raises(RuntimeError, match="'W'.*device"):
        rms_norm(x, torch.ones(64), 1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_default_is_safe_in_a_residual(device):
    # h + norm(h): autograd hands the same gradient tensor to both branches, so a backward that
    # wrote dX into it would corrupt the residual's gradient. The default must be exact.
    x = torch.randn(4, 64, device=device, requires_grad=True)
    g = torch.randn(4, 64, device=device)
    h = x * 1.0
    (h + LigerRMSNorm(64, eps=1e-6).to(device).requires_grad_(False)(h)).backward(g)
    x_ref = x.detach().clone().requires_grad_(True)
    h_ref = x_ref * 1.0
    (h_ref + rms_norm_ref(h_ref, torch.ones(64, device=device), 1e-6)).backward(g)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)
    assert LigerRMSNorm(8).in_place is False


# The plan override rejects what it does not know (a typo must not silently time the default kernel),
# and the PDL kill switch its values; both before anything runs.
def test_unknown_plan_override_is_an_error():
    with pytest.raises(ValueError, match="rms_bwd: expected one of tma, pipe, cached, generic, got 'old'"):
        with forced(rms_bwd="old"):
            pass
    with pytest.raises(ValueError, match="rms_fwd: expected one of cached, l2hint, got 'new'"):
        with forced(rms_fwd="new"):
            pass


def test_backward_materializes_no_zero_gradients():
    """RSTD is an output no one differentiates: autograd must not build a zero gradient for it (a
    fill kernel per backward on the GPU before set_materialize_grads(False))."""
    x = torch.randn(7, 64, requires_grad=True)
    w = torch.ones(64, requires_grad=True)
    y = rms_norm(x, w)
    assert_backward_builds_no_zeros([y], [torch.ones_like(y)], "liger.rms_norm_bwd.default")
