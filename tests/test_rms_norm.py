"""RMSNorm: forward and backward against an independent float64 reference, every option and
dtype, odd shapes, strided rows, in-place backward, opcheck, torch.compile, gradcheck, errors."""

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from reference import rms_norm_ref
from utils import (
    RMS_VARIANT_SHAPES,
    RMS_VARIANT_WEIGHTS,
    RMS_WIDE_SHAPES,
    RMS_WIDE_VARIANTS,
    RMS_WIDE_WEIGHTS,
    assert_backward_builds_no_zeros,
    assert_close_to_ref,
    assert_rstd_close,
    set_wide_variant,
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


# The CUDA backward has several kernels for rows of up to 1024 vectors, chosen by
# LIGER_CPP_RMS_BWD (read on every call): each must match the reference, on the shapes of
# utils.RMS_VARIANT_SHAPES. tma runs on sm_90 only (rows of 64..1024 16-byte vectors; unset, from
# 256 vectors up), elsewhere the default.
BWD_VARIANTS = ["old", "reg", "async", "tma"]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("variant", BWD_VARIANTS)
@pytest.mark.parametrize("shape", RMS_VARIANT_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,mode,offset", RMS_VARIANT_WEIGHTS)
def test_cuda_bwd_variants(monkeypatch, variant, shape, dtype, wkind, mode, offset):
    monkeypatch.setenv("LIGER_CPP_RMS_BWD", variant)
    _run_case(shape, dtype, wkind, mode, offset, in_place=False, device="cuda")


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("variant", BWD_VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_bwd_variants_strided_in_place_deterministic(monkeypatch, variant, dtype):
    monkeypatch.setenv("LIGER_CPP_RMS_BWD", variant)
    _run_case((600, 2048), dtype, "same", "llama", 0.0, in_place=True, device="cuda", strided=True)
    _run_case((3, 700, 512), dtype, "fp32", "none" if dtype == torch.float32 else "gemma", 1.0, True, "cuda")
    # 16-byte aligned rows with a stride that is not the width (the TMA kernels copy each row)
    _run_case((600, 2048), dtype, "same", "llama", 0.0, in_place=True, device="cuda", strided=True, start=8)
    _assert_bwd_deterministic(5000, 4096, dtype)


# Sets knobs of the register-cached and wide forwards, after setting the compile-time-width forward
# (LIGER_CPP_RMS_FWD_FIXED, the default at hidden 4096 / 8192 / 16384) off: where it runs, they are
# not read.
def _cached_forward_knobs(monkeypatch, **env):
    monkeypatch.setenv("LIGER_CPP_RMS_FWD_FIXED", "off")
    for k, v in env.items():
        monkeypatch.setenv(k, v)


# LIGER_CPP_RMS_FWD_TY sets the cached forward's rows a block (1, 2, 4; above 1024 threads it keeps
# its own): the same values whatever the block shape.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("ty", ["1", "2", "4"])
@pytest.mark.parametrize("shape", [(1, 4096), (301, 1024), (1001, 4096), (33, 8)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fwd_rows_per_block(monkeypatch, ty, shape, dtype):
    _cached_forward_knobs(monkeypatch, LIGER_CPP_RMS_FWD_TY=ty)
    _run_case(shape, dtype, "same", "llama", 0.0, in_place=False, device="cuda", check_rstd=True)
    _run_case(shape, dtype, "fp32", "gemma", 1.0, in_place=True, device="cuda", check_rstd=True)


# The three weight cases a forward layout knob is checked with on CUDA: same-dtype weight (llama,
# out of place), fp32 weight with Gemma's offset (in place) and no weight (none); rstd checked too.
def _run_forward_layout_cases(shape, dtype):
    _run_case(shape, dtype, "same", "llama", 0.0, in_place=False, device="cuda", check_rstd=True)
    _run_case(shape, dtype, "fp32", "gemma", 1.0, in_place=True, device="cuda", check_rstd=True)
    _run_case(shape, dtype, None, "none", 0.0, in_place=False, device="cuda", check_rstd=True)


# LIGER_CPP_RMS_FWD_V sets the cached forward's vectors a thread (2, 4; default 2 up to 128
# vectors, 4 above; where a row would need more than 1024 threads, 4): the same values whatever
# the layout.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("fwd", ["old", "new"])
@pytest.mark.parametrize("nv", ["2", "4"])
@pytest.mark.parametrize(
    "shape", [(1, 4096), (301, 1024), (1001, 4096), (33, 8), (9, 16384), (5, 1000), (300, 16384), (7, 32768)]
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fwd_vectors_per_thread(monkeypatch, fwd, nv, shape, dtype):
    _cached_forward_knobs(monkeypatch, LIGER_CPP_RMS_FWD=fwd, LIGER_CPP_RMS_FWD_V=nv)
    _run_forward_layout_cases(shape, dtype)


# LIGER_CPP_RMS_FWD_REGS=none|40: the 4-vector forward uncapped and in its 40-register build (the
# default for 512-thread rows where y has x's dtype width; forced here for any block of at most 512
# threads); wider rows (16384 fp32: 1024 threads) keep the uncapped kernel.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("regs", ["none", "40"])
@pytest.mark.parametrize("shape", [(1, 4096), (301, 1024), (1001, 4096), (33, 8), (9, 16384), (5, 1000)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fwd_register_cap(monkeypatch, regs, shape, dtype):
    _cached_forward_knobs(monkeypatch, LIGER_CPP_RMS_FWD_V="4", LIGER_CPP_RMS_FWD_REGS=regs)
    _run_forward_layout_cases(shape, dtype)


# LIGER_CPP_RMS_FWD_L1HINT=on: the two-pass wide forward (rms_fwd_l2hint, forced by
# LIGER_CPP_RMS_FWD_WIDE=l2hint above 1024 vectors) with L1 eviction priorities on its loads: a
# row that is one pass of the block, a ragged last pass, and a width that is not whole vectors
# (the other kernels).
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("l1", ["off", "on"])
@pytest.mark.parametrize("shape", [(9, 16384), (7, 24584), (3, 65536), (5, 16390)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fwd_l2hint_l1(monkeypatch, l1, shape, dtype):
    _cached_forward_knobs(monkeypatch, LIGER_CPP_RMS_FWD_WIDE="l2hint", LIGER_CPP_RMS_FWD_L1HINT=l1)
    _run_forward_layout_cases(shape, dtype)


# LIGER_CPP_RMS_FWD_FIXED: torch.compile's skeleton (the default forward with x, w and y of one
# 16-bit dtype: compile-time width at hidden 4096 / 8192 / 16384, run-time width at the other widths
# of 129..2048 vectors, e.g. 1536, 2056, 5120 and 14336, with guarded accesses; every other case takes the
# register-cached forward) off, on, with each block size forced (t256 / t512: the other widths take
# the register-cached forward), and gen (the run-time form at every width of 64..2048 vectors); a
# strided x (aligned rows) and a width the defaults leave to the register-cached forward (1000: gen
# takes it too).
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("variant", ["off", "on", "t256", "t512", "gen"])
@pytest.mark.parametrize(
    "shape",
    [
        (1, 4096),
        (301, 8192),
        (9, 16384),
        (3, 4096),
        (5, 1000),
        (7, 5120),
        (3, 2056),
        (4, 14336),
        (9, 1536),
        (2, 2048),
    ],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fwd_fixed(monkeypatch, variant, shape, dtype):
    monkeypatch.setenv("LIGER_CPP_RMS_FWD_FIXED", variant)
    _run_forward_layout_cases(shape, dtype)
    _run_case(shape, dtype, "same", "gemma", 1.0, in_place=False, device="cuda", check_rstd=True)
    if shape[0] > 1:  # one row of a padded buffer is contiguous
        _run_case(shape, dtype, "same", "none", 0.0, False, "cuda", strided=True, start=8, check_rstd=True)


# Rows above 1024 vectors: the forward and backward kernels of LIGER_CPP_RMS_FWD_WIDE and
# LIGER_CPP_RMS_BWD_WIDE (utils.RMS_WIDE_VARIANTS; the cluster kernels run on sm_90, elsewhere every
# variant takes the old kernels): y, rstd, dX and dW against the reference.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("variant", list(RMS_WIDE_VARIANTS))
@pytest.mark.parametrize("shape", RMS_WIDE_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,mode,offset", RMS_WIDE_WEIGHTS)
@pytest.mark.parametrize("in_place", [False, True])
def test_cuda_wide_variants(monkeypatch, variant, shape, dtype, wkind, mode, offset, in_place):
    if mode == "none" and wkind == "fp32" and dtype != torch.float32:
        pytest.skip("'none' keeps one dtype: HF's formula would promote")
    set_wide_variant(monkeypatch, variant)
    _run_case(shape, dtype, wkind, mode, offset, in_place=in_place, device="cuda", check_rstd=True)


# Strided rows: misaligned (the generic kernels) and 16-byte aligned with a row stride that is not
# the width (the cluster kernels with x_row_stride != cols).
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("variant", list(RMS_WIDE_VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_wide_strided_in_place_deterministic(monkeypatch, variant, dtype):
    set_wide_variant(monkeypatch, variant)
    _run_case((40, 16392), dtype, "same", "llama", 0.0, in_place=True, device="cuda", strided=True)
    _run_case((3, 5, 32768), dtype, "fp32", "gemma", 1.0, in_place=False, device="cuda", strided=True)
    for shape in [(40, 16392), (3, 5, 32768)]:
        _run_case(shape, dtype, "same", "llama", 0.0, True, "cuda", strided=True, start=8, check_rstd=True)
    _assert_bwd_deterministic(700, 32768, dtype)


# The CUDA register-cached forward's variants (LIGER_CPP_RMS_FWD, read on every call; default
# old for plain RMSNorm, see rms_norm.cu's fwd_mode) must match the reference and each other.
FWD_VARIANTS = ["old", "pack", "new"]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("variant", FWD_VARIANTS)
@pytest.mark.parametrize("shape", [(4096, 64), (300, 1024), (2000, 4096), (9, 16384), (5, 1000)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,mode,offset", RMS_VARIANT_WEIGHTS)
def test_cuda_fwd_variants(monkeypatch, variant, shape, dtype, wkind, mode, offset):
    # pack has 4 vectors a thread only: the others at 4 too, so all three sum in the same order
    _cached_forward_knobs(monkeypatch, LIGER_CPP_RMS_FWD_V="4", LIGER_CPP_RMS_FWD=variant)
    _run_case(shape, dtype, wkind, mode, offset, in_place=False, device="cuda")
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = _weight(wkind, shape[-1], dtype, "cuda", mode == "gemma")
    w = w.detach() if w is not None else None
    mine = rms_norm(x, w, 1e-6, offset=offset, casting_mode=mode)
    monkeypatch.setenv("LIGER_CPP_RMS_FWD", "old")
    assert torch.equal(mine, rms_norm(x, w, 1e-6, offset=offset, casting_mode=mode))


# The TMA row backward (LIGER_CPP_RMS_BWD=tma: persistent blocks, a row at a time,
# LIGER_CPP_RMS_TMA_STAGES rows in flight per block; sm_90, rows of 64..1024 16-byte vectors,
# elsewhere the default kernels; unset, it runs from 129 vectors up): one row; rows not a multiple
# of the grid; more rows than blocks x stages (each stage's mbarrier goes through many phases); a
# width that is not a multiple of 32 vectors (1000 bf16: 125 vectors, the last warp partly idle)
# nor of 128 bytes (520: the stages' regions padded); the widest row (8192 bf16; fp32 takes the wide
# kernels); rows below 64 vectors (256 bf16) and a width that is not a multiple of 16 bytes (1001),
# which fall back.
TMA_SHAPES = [(1, 4096), (2000, 4096), (20000, 1024), (7, 1000), (5, 520), (70, 8192), (300, 256), (3, 1001)]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("shape", TMA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,mode,offset", RMS_VARIANT_WEIGHTS + [("same", "none", 0.0)])
def test_cuda_tma(monkeypatch, shape, dtype, wkind, mode, offset):
    monkeypatch.setenv("LIGER_CPP_RMS_BWD", "tma")
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


# Every stage count (LIGER_CPP_RMS_TMA_STAGES), in place, with bit-identical repeated backwards.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("stages", ["2", "3", "4", "6", "8"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_tma_stages(monkeypatch, stages, dtype):
    monkeypatch.setenv("LIGER_CPP_RMS_BWD", "tma")
    monkeypatch.setenv("LIGER_CPP_RMS_TMA_STAGES", stages)
    for shape in [(20000, 1024), (1, 4096), (70, 8192), (5, 520)]:
        _run_case(shape, dtype, "fp32", "gemma", 1.0, in_place=True, device="cuda", check_rstd=True)
    _assert_bwd_deterministic(3000, 2048, dtype)


# LIGER_CPP_RMS_FWD_CH=2|3|4: the run-time-width forward (gen) with its accesses a thread forced
# (guarded tails where the row's vectors are no multiple: 5128 bf16 is 641 vectors; 2 accesses at
# 16384 bf16 are 1024-thread rows).
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("ch", ["2", "3", "4"])
@pytest.mark.parametrize("shape", [(7, 5120), (3, 5128), (5, 6144), (2, 16384), (3, 2056)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fwd_gen_accesses(monkeypatch, ch, shape, dtype):
    monkeypatch.setenv("LIGER_CPP_RMS_FWD_FIXED", "gen")
    monkeypatch.setenv("LIGER_CPP_RMS_FWD_CH", ch)
    _run_case(shape, dtype, "same", "gemma", 1.0, in_place=False, device="cuda", check_rstd=True)
    _run_case(shape, dtype, "same", "llama", 0.0, in_place=False, device="cuda", check_rstd=True)


# LIGER_CPP_RMS_TMA_PAIRS (default on): rows of 513..768 threads (bf16 hidden 4104..6144) take the
# TMA backward's two-rows-a-stage build, odd row counts (a last group of one row) included; off runs
# the one-row build there; 4096 keeps the one-row build, and 1536 / 1032 (192 / 129 vectors) take
# the TMA backward by default too. dW sums every row once: the reference checks it.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("pairs", ["off", "on"])
@pytest.mark.parametrize(
    "shape", [(3001, 5120), (7, 6144), (1, 5120), (5, 4104), (33, 5128), (2, 4096), (9, 1536), (4, 1032)]
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_tma_pairs(monkeypatch, pairs, shape, dtype):
    monkeypatch.setenv("LIGER_CPP_RMS_TMA_PAIRS", pairs)
    _run_case(shape, dtype, "same", "llama", 0.0, in_place=False, device="cuda", check_rstd=True)
    _run_case(shape, dtype, "fp32", "gemma", 1.0, in_place=True, device="cuda")
    # fp32 weights in llama mode give fp32 y, so fp32 dY: two rows a stage do not fit in shared
    # memory at 5120 / 6144 and the one-row build runs
    _run_case(shape, dtype, "fp32", "llama", 0.0, in_place=False, device="cuda")
    if shape == (3001, 5120):
        _assert_bwd_deterministic(*shape, dtype)


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


# The CUDA kernel-variant knobs reject values they do not know (a typo must not silently time the
# default kernel): RMSNorm's, LayerNorm's and SwiGLU's, each read on the call.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize(
    "var,op",
    [
        ("LIGER_CPP_RMS_BWD", "rms_bwd"),
        ("LIGER_CPP_RMS_BWD_WIDE", "rms_bwd_wide"),
        ("LIGER_CPP_RMS_FWD_WIDE", "rms_fwd_wide"),
        ("LIGER_CPP_RMS_WIDE_TX", "rms_wide_tx"),
        ("LIGER_CPP_RMS_CLUSTER_REGS", "rms_bwd_wide"),
        ("LIGER_CPP_RMS_FWD", "rms_fwd"),
        ("LIGER_CPP_RMS_TMA_STAGES", "rms_tma"),
        ("LIGER_CPP_RMS_TMA_PAIRS", "rms_tma"),
        ("LIGER_CPP_RMS_FWD_CH", "rms_fwd_gen"),
        ("LIGER_CPP_LN_BWD", "ln_bwd"),
        ("LIGER_CPP_LN_FWD_TY", "ln_bwd"),
        ("LIGER_CPP_LN_BWD_PAIR", "ln_bwd"),
        ("LIGER_CPP_RMS_FWD_TY", "rms_fwd"),
        ("LIGER_CPP_RMS_FWD_V", "rms_fwd"),
        ("LIGER_CPP_RMS_FWD_REGS", "rms_fwd"),
        ("LIGER_CPP_RMS_FWD_L1HINT", "rms_fwd_wide"),
        ("LIGER_CPP_RMS_FWD_FIXED", "rms_fwd"),
        ("LIGER_CPP_RMS_BWD_ROWS", "rms_bwd_wide"),
    ],
)
def test_cuda_unknown_kernel_knob_is_an_error(monkeypatch, var, op):
    from liger_cpp.ops.layer_norm import layer_norm
    from liger_cpp.ops.swiglu import swiglu

    n = 32768 if op.endswith(("_wide", "_wide_tx")) else 5120 if op == "rms_fwd_gen" else 1024
    x = torch.randn(8, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    monkeypatch.setenv(var, "no-such-kernel")
    if op == "rms_tma":  # the stage count is read where the tma backward is planned
        monkeypatch.setenv("LIGER_CPP_RMS_BWD", "tma")
    if op == "rms_fwd_gen":  # the accesses a thread are read where the run-time-width forward runs
        monkeypatch.setenv("LIGER_CPP_RMS_FWD_FIXED", "gen")
    with pytest.raises((RuntimeError, ValueError), match=f"{var}: expected one of .*got .no-such-kernel."):
        if op.startswith("rms"):
            rms_norm(x, w, 1e-6).sum().backward()
        elif op == "ln_bwd":
            layer_norm(x, w, None, 1e-6).sum().backward()
        else:
            swiglu(x, x.detach().clone()).sum().backward()


def test_backward_materializes_no_zero_gradients():
    """RSTD is an output no one differentiates: autograd must not build a zero gradient for it (a
    fill kernel per backward on the GPU before set_materialize_grads(False))."""
    x = torch.randn(7, 64, requires_grad=True)
    w = torch.ones(64, requires_grad=True)
    y = rms_norm(x, w)
    assert_backward_builds_no_zeros([y], [torch.ones_like(y)], "liger.rms_norm_bwd.default")
