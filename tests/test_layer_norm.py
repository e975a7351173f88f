"""LayerNorm: forward and backward against nn.LayerNorm's formula in float64, W/B optional,
every dtype, odd shapes, strided rows, opcheck, torch.compile, gradcheck, errors, determinism."""

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from reference import layer_norm_ref
from utils import assert_backward_builds_no_zeros, assert_close_to_ref, cuda_kernels, forced

import liger_cpp  # noqa: F401
from liger_cpp.ops.layer_norm import layer_norm
from liger_cpp.transformers import LigerLayerNorm, liger_layer_norm

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SHAPES = [(1, 769), (7, 8), (5, 123, 123), (17, 4096), (3, 5125), (2, 1, 2048)]
CUDA_SHAPES = [(1, 65536), (3, 32768), (40, 16384), (2, 262144), (4, 100003), (300, 1024), (4096, 64)]


def _param(kind, n, dtype, device, base):
    if kind is None:
        return None
    pdt = dtype if kind == "same" else torch.float32
    return (base + 0.2 * torch.randn(n)).to(device=device, dtype=pdt).requires_grad_(True)


def _run_case(shape, dtype, wkind, bkind, device, strided=False):
    """strided: rows of a wider tensor, starting 3 elements in (misaligned), or with
    strided="aligned" 8 elements in (16-byte aligned rows for the vector and TMA kernels)."""
    n = shape[-1]
    if strided:
        off = 8 if strided == "aligned" else 3
        big = torch.randn(*shape[:-1], n + 24, device=device, dtype=dtype)
        x = big[..., off : off + n]
        assert not x.is_contiguous()
    else:
        x = torch.randn(*shape, device=device, dtype=dtype)
    x = (x * 2.0 + 0.5).detach().requires_grad_(True)  # non-zero mean
    w = _param(wkind, n, dtype, device, 1.0)
    b = _param(bkind, n, dtype, device, 0.0)
    eps = 1e-6
    y = layer_norm(x, w, b, eps)
    dy = torch.randn_like(y) * 1.5
    y.backward(dy)

    def ref(xx, ww, bb):
        yy = layer_norm_ref(xx, ww, bb, eps)
        yy.backward(dy.to(yy.dtype))
        return yy

    def clone(t, f):
        return f(t.detach()).requires_grad_(True) if t is not None else None

    x64, w64, b64 = (clone(t, lambda u: u.double()) for t in (x, w, b))
    y64 = ref(x64, w64, b64)
    xlo, wlo, blo = (clone(t, lambda u: u.clone()) for t in (x, w, b))
    ylo = ref(xlo, wlo, blo)
    assert y.dtype == x.dtype
    assert_close_to_ref(y, y64, ylo, "Y")
    assert_close_to_ref(x.grad, x64.grad, xlo.grad, "dX")
    if w is not None:
        assert w.grad.dtype == w.dtype
        assert_close_to_ref(w.grad, w64.grad, wlo.grad, "dW")
    if b is not None:
        assert b.grad.dtype == b.dtype
        assert_close_to_ref(b.grad, b64.grad, blo.grad, "dB")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "wkind,bkind",
    [(None, None), ("same", "same"), ("fp32", "fp32"), ("same", None), (None, "same"), (None, "fp32")],
)
def test_forward_backward(device, shape, dtype, wkind, bkind):
    _run_case(shape, dtype, wkind, bkind, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows(device, dtype):
    _run_case((9, 1000), dtype, "same", "same", device, strided=True)
    _run_case((4, 6, 4096), dtype, "fp32", "fp32", device, strided=True)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("shape", CUDA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wkind,bkind", [("same", "same"), ("fp32", None), (None, None)])
def test_cuda_wide_and_tall(shape, dtype, wkind, bkind):
    _run_case(shape, dtype, wkind, bkind, device="cuda")


# The CUDA backward's kernels (docs/kernels/layer_norm.md), each forced with the plan override
# (ln_bwd; None: the plan's own choice) where it runs, elsewhere the plan's choice: tma (sm_90, rows
# of up to 512 16-byte vectors, in clusters of two where the plan pairs them), tma_unpaired (the same
# kernel, one partial row a block), pipe16 (16-byte vectors and cp.async stages: the default without
# sm_90 code), pipe (4-element vectors: rows of 513..1024 vectors, and rows of whole 4-element but not
# 16-byte vectors) and generic (any row).
# Shapes: several rows per block (1024, 64, 8), two vectors per thread for 16-bit types (8192),
# fallbacks (odd width, fp32 8192; tma/pipe16: above 512 16-byte vectors, i.e. fp32 4096 and 16-bit
# 8192; 2052: whole 4-element vectors only), fewer rows than blocks, many rows per block, a row that
# leaves threads idle (2000), more rows per block than threads (140000 x 64: tma reloads its
# mean/rstd chunk every 32 rows).
BWD_KERNELS = [None, "tma_unpaired", "pipe16", "pipe", "generic"]
BWD_SHAPES = [
    (300, 1024),
    (4096, 64),
    (33, 8),
    (40, 8192),
    (7, 4096),
    (1000, 4096),
    (3, 5125),
    (2, 2052),
    (50, 2000),
    (140000, 64),
]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", BWD_KERNELS)
@pytest.mark.parametrize("shape", BWD_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_bwd_kernels(bwd, shape, dtype):
    with forced(ln_bwd=bwd):
        _run_case(shape, dtype, "same", "same", device="cuda")
        _run_case(shape, dtype, "fp32", None, device="cuda")
        _run_case(shape, dtype, None, "same", device="cuda")


# The TMA backward paired and not: odd row counts (the even grid's last block has no rows) and
# 3-D input.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", ["tma", "tma_unpaired"])
@pytest.mark.parametrize("shape", [(1, 4096), (7, 4096), (263, 4096), (1000, 1024), (3, 5, 768)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_bwd_pair(bwd, shape, dtype):
    with forced(ln_bwd=bwd):
        _run_case(shape, dtype, "same", "same", device="cuda")
        _run_case(shape, dtype, "fp32", "fp32", device="cuda")


# Pairs with an odd row count (5001: the pairs' blocks get unequal rows) stay deterministic.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_bwd_pair_deterministic():
    _assert_bwd_deterministic(5001, 4096, "cuda")


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("bwd", BWD_KERNELS)
def test_cuda_bwd_kernels_strided_and_deterministic(bwd):
    with forced(ln_bwd=bwd):
        for dtype in DTYPES:
            _run_case((9, 1000), dtype, "same", "same", "cuda", strided=True)
            _run_case((4, 6, 4096), dtype, "fp32", "fp32", "cuda", strided=True)
            _run_case((9, 1000), dtype, "same", "same", "cuda", strided="aligned")
            _run_case((4, 6, 4096), dtype, "fp32", "fp32", "cuda", strided="aligned")
        _assert_bwd_deterministic(5000, 4096, "cuda")


# The forward (the register-cached kernel for rows of up to 4096 16-byte vectors, 128-thread blocks,
# else the generic kernel; no override): shapes as BWD_SHAPES, plus many rows per block (20000 x
# 1024, 140000 x 64), rows that leave a block's last group idle (301, 1001) and wide rows.
FWD_SHAPES = [
    (300, 1024),
    (4096, 64),
    (33, 8),
    (7, 4096),
    (1001, 4096),
    (50, 2000),
    (4, 16384),
    (20000, 1024),
    (140000, 64),
    (301, 1024),
    (7, 16384),
]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("shape", FWD_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_fwd_shapes(shape, dtype):
    _run_case(shape, dtype, "same", "same", device="cuda")
    _run_case(shape, dtype, "fp32", "fp32", device="cuda")
    _run_case(shape, dtype, None, "same", device="cuda")
    _run_case(shape, dtype, "same", None, device="cuda")
    _run_case(shape, dtype, None, None, device="cuda")


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_fwd_strided():
    for dtype in DTYPES:
        _run_case((9, 1000), dtype, "same", "same", "cuda", strided=True)
        _run_case((4, 6, 4096), dtype, "fp32", "fp32", "cuda", strided=True)
        _run_case((9, 1000), dtype, "same", "same", "cuda", strided="aligned")
        _run_case((4, 6, 4096), dtype, "fp32", "fp32", "cuda", strided="aligned")


# The plan of record on sm_90 (docs/kernels/layer_norm.md): the kernels a call runs, from the
# profiler, bf16 with weight and bias. (shape, override, forward kernel, backward kernels)
SM90_PLAN = [
    ((300, 4096), {}, "ln_fwd_cached", ["ln_bwd_tma", "reduce_partials4"]),
    ((300, 1024), {}, "ln_fwd_cached", ["ln_bwd_tma", "reduce_partials4"]),
    ((300, 8192), {}, "ln_fwd_cached", ["ln_bwd_pipe", "reduce_partials4"]),
    ((300, 2052), {}, "ln_fwd_generic", ["ln_bwd_pipe", "reduce_partials4"]),
    (
        (300, 16384),
        {},
        "ln_fwd_cached",
        ["ln_bwd_dwdb_generic", "ln_bwd_dx_generic", "reduce_partials", "reduce_partials"],
    ),
    (
        (4, 65536),
        {},
        "ln_fwd_generic",
        ["ln_bwd_dwdb_generic", "ln_bwd_dx_generic", "reduce_partials", "reduce_partials"],
    ),
    (
        (300, 1001),
        {},
        "ln_fwd_generic",
        ["ln_bwd_dwdb_generic", "ln_bwd_dx_generic", "reduce_partials", "reduce_partials"],
    ),
    ((300, 4096), {"ln_bwd": "tma_unpaired"}, None, ["ln_bwd_tma", "reduce_partials4"]),
    ((300, 4096), {"ln_bwd": "pipe16"}, None, ["ln_bwd_pipe16", "reduce_partials4"]),
    ((300, 4096), {"ln_bwd": "pipe"}, None, ["ln_bwd_pipe", "reduce_partials4"]),
    (
        (300, 4096),
        {"ln_bwd": "generic"},
        None,
        ["ln_bwd_dwdb_generic", "ln_bwd_dx_generic", "reduce_partials", "reduce_partials"],
    ),
]


@pytest.mark.skipif(
    not CUDA_OK or torch.cuda.get_device_capability() != (9, 0), reason="the plan of record is sm_90's"
)
@pytest.mark.parametrize("shape,override,fwd,bwd", SM90_PLAN)
def test_cuda_sm90_plan(shape, override, fwd, bwd):
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = _param("same", shape[-1], torch.bfloat16, "cuda", 1.0)
    b = _param("same", shape[-1], torch.bfloat16, "cuda", 0.0)
    with forced(**override):
        y = layer_norm(x, w, b, 1e-6)
        dy = torch.randn_like(y)
        ran_fwd = cuda_kernels(lambda: layer_norm(x, w, b, 1e-6))
        ran_bwd = cuda_kernels(lambda: y.backward(dy, retain_graph=True))
    if fwd is not None:
        assert ran_fwd == [fwd]
    assert ran_bwd == bwd


def test_unknown_plan_override_is_an_error():
    with pytest.raises(ValueError, match="ln_bwd: expected one of tma, tma_unpaired, pipe16, pipe, generic"):
        with forced(ln_bwd="v5"):
            pass


def _assert_bwd_deterministic(rows, cols, device):
    """Three bf16 backward passes on the same inputs give bit-identical dX, dW and dB."""
    x = torch.randn(rows, cols, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(cols, device=device, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(cols, device=device, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(rows, cols, device=device, dtype=torch.bfloat16)
    grads = []
    for _ in range(3):
        x.grad = w.grad = b.grad = None
        layer_norm(x, w, b, 1e-6).backward(dy)
        grads.append((x.grad.clone(), w.grad.clone(), b.grad.clone()))
    for g in grads[1:]:
        assert all(torch.equal(a, c) for a, c in zip(g, grads[0]))


def test_backward_materializes_no_zero_gradients():
    """MEAN and RSTD are outputs no one differentiates: autograd must not build zero gradients for
    them (two fill kernels per backward on the GPU before set_materialize_grads(False))."""
    x = torch.randn(7, 64, requires_grad=True)
    w = torch.ones(64, requires_grad=True)
    b = torch.zeros(64, requires_grad=True)
    y = layer_norm(x, w, b)
    assert_backward_builds_no_zeros([y], [torch.ones_like(y)], "liger.layer_norm_bwd.default")


@pytest.mark.parametrize("device", DEVICES)
def test_large_mean_is_stable(device):
    # Two-pass variance: a large offset must not destroy the variance (E[x^2]-E[x]^2 would).
    x = (1000.0 + torch.randn(8, 2048, device=device)).requires_grad_(True)
    y = layer_norm(x, None, None, 1e-6)
    ref = layer_norm_ref(x.detach().double(), None, None, 1e-6)
    assert (y.double() - ref).abs().max().item() < 1e-3


@pytest.mark.parametrize("device", DEVICES)
def test_dw_db_deterministic(device):
    _assert_bwd_deterministic(3000, 512, device)


def test_gradcheck_float64_cpu():
    x = torch.randn(4, 7, 13, dtype=torch.float64, requires_grad=True)
    w = torch.randn(13, dtype=torch.float64, requires_grad=True)
    b = torch.randn(13, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, c, d: layer_norm(a, c, d, 1e-5), (x, w, b))
    assert torch.autograd.gradcheck(lambda a: layer_norm(a, None, None, 1e-5), (x,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    x = torch.randn(5, 3, 96, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(96, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(96, device=device, dtype=dtype, requires_grad=True)
    w32 = torch.randn(96, device=device, dtype=torch.float32, requires_grad=True)
    for args in [(x, w, b, 1e-6), (x, None, None, 1e-5), (x, w32, None, 1e-6), (x, None, b, 1e-6)]:
        torch.library.opcheck(torch.ops.liger.layer_norm_fwd, args)
    y, mean, rstd = torch.ops.liger.layer_norm_fwd(x, w, b, 1e-6)
    dy = torch.randn_like(y)
    for ww, cdw, cdb in [(w.detach(), True, True), (None, False, True), (w.detach(), True, False)]:
        torch.library.opcheck(torch.ops.liger.layer_norm_bwd, (dy, x.detach(), ww, mean, rstd, cdw, cdb))


# Without W the backward op returns dB in float32 for 16-bit X (the bias it belongs to may be float32:
# its gradient is not rounded to X's dtype), in X's dtype otherwise; dW is empty. The default
# backward here; every backward kernel takes that path in test_cuda_bwd_kernels (no
# weight, a bias), and test_forward_backward's (None, fp32) checks the bias gradient end to end.
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 33), (300, 4096)])
def test_bwd_db_dtype_without_weight(device, dtype, shape):
    x = torch.randn(*shape, device=device, dtype=dtype)
    _, mean, rstd = torch.ops.liger.layer_norm_fwd(x, None, None, 1e-5)
    dy = torch.randn_like(x)
    _, dw, db = torch.ops.liger.layer_norm_bwd(dy, x, None, mean, rstd, True, True)
    assert dw.numel() == 0
    assert db.dtype == (torch.float32 if dtype != torch.float32 else dtype)
    torch.testing.assert_close(db.double(), dy.double().sum(0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    mod = LigerLayerNorm(256, eps=1e-5, bias=True).to(device)

    def f(x):
        return mod(x * 2.0).square().sum()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    x = torch.randn(4, 9, 256, device=device, requires_grad=True)
    cf(x).backward()
    gx, gw, gb = x.grad.clone(), mod.weight.grad.clone(), mod.bias.grad.clone()
    x.grad = mod.weight.grad = mod.bias.grad = None
    f(x).backward()
    torch.testing.assert_close(gx, x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, mod.weight.grad, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(gb, mod.bias.grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_module_matches_nn_layer_norm(device):
    m = LigerLayerNorm(64, eps=1e-5, bias=True).to(device)
    assert m.weight.shape == m.bias.shape == (64,) and m.variance_epsilon == 1e-5
    x = torch.randn(3, 11, 64, device=device)
    ref = torch.nn.functional.layer_norm(x, (64,), m.weight, m.bias, 1e-5)
    torch.testing.assert_close(m(x), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        liger_layer_norm(x, None, None, 1e-5),
        torch.nn.functional.layer_norm(x, (64,), eps=1e-5),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rows(device):
    x = torch.randn(0, 64, device=device, requires_grad=True)
    w = torch.ones(64, device=device, requires_grad=True)
    b = torch.zeros(64, device=device, requires_grad=True)
    y = layer_norm(x, w, b, 1e-6)
    assert y.shape == (0, 64)
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b))


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_name_the_argument(device):
    x = torch.randn(4, 64, device=device)
    with pytest.raises(RuntimeError, match="'W'.*shape"):
        layer_norm(x, torch.ones(63, device=device), None, 1e-6)
    with pytest.raises(RuntimeError, match="'B'.*shape"):
        layer_norm(x, None, torch.ones(63, device=device), 1e-6)
    with pytest.raises(RuntimeError, match="'B'.*W's dtype"):
        layer_norm(
            x.bfloat16(),
            torch.ones(64, device=device),
            torch.ones(64, device=device, dtype=torch.bfloat16),
            1e-6,
        )
    with pytest.raises(RuntimeError, match="'B'.*dtype"):
        layer_norm(x.half(), None, torch.ones(64, device=device, dtype=torch.bfloat16), 1e-6)
    with pytest.raises(RuntimeError, match="'X'.*empty last dimension"):
        layer_norm(torch.randn(4, 0, device=device), None, None, 1e-6)
    with pytest.raises(RuntimeError, match="'X'.*expected float32"):
        layer_norm(torch.ones(4, 8, device=device, dtype=torch.int32), None, None, 1e-6)
    y, mean, rstd = torch.ops.liger.layer_norm_fwd(x, None, None, 1e-6)
    with pytest.raises(RuntimeError, match="'dY'.*shape"):
        torch.ops.liger.layer_norm_bwd(torch.randn(4, 65, device=device), x, None, mean, rstd, True, True)
    with pytest.raises(RuntimeError, match="'MEAN'"):
        torch.ops.liger.layer_norm_bwd(y, x, None, mean[:2], rstd, True, True)
    with pytest.raises(RuntimeError, match="'RSTD'"):
        torch.ops.liger.layer_norm_bwd(y, x, None, mean, rstd.double(), True, True)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_mismatched_devices():
    x = torch.randn(4, 64, device="cuda")
    with pytest.raises(RuntimeError, match="'B'.*device"):
        layer_norm(x, None, torch.ones(64), 1e-6)
