"""DyT and PolyNorm (liger::dyt_*, liger::poly_norm_*: kernels of their own, CPU twins): forward
and every gradient against independent float64 references written here from the papers' formulas,
every dtype, parameters in x's dtype and in float32, odd, strided, wide and empty shapes,
grad_output != 1, frozen parameters, determinism; opcheck, torch.compile(fullgraph=True), float64
gradcheck; Liger's Triton-level function names; errors."""

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from utils import check_against_ref

import liger_cpp  # noqa: F401
from liger_cpp.ops.dyt import dyt
from liger_cpp.ops.poly_norm import poly_norm
from liger_cpp.transformers.dyt import LigerDyT, liger_dyt_bwd, liger_dyt_fwd
from liger_cpp.transformers.poly_norm import LigerPolyNorm, poly_norm_backward, poly_norm_forward

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# one element; odd widths (no 16-byte vectors); several rows a block; a 3-D input
SHAPES = [(1, 1), (3, 5), (2, 7, 33), (4, 1000), (6, 256)]
# the CUDA plans: 16-byte vectors over 1-4 vectors a thread (PolyNorm's registers), rows too long
# to hold (read twice), many rows (several row groups / strided blocks), an unaligned width
CUDA_SHAPES = [(64, 4096), (16, 8192), (3, 20000), (4099, 512), (33, 4097), (1, 8)]


def _dyt_ref(x, alpha, gamma, beta):
    y = gamma * torch.tanh(alpha * x)
    return y if beta is None else y + beta


def _poly_ref(x, w, b, eps=1e-6):
    def n(u):
        return u / torch.sqrt((u * u).mean(-1, keepdim=True) + eps)

    return w[0] * n(x**3) + w[1] * n(x**2) + w[2] * n(x) + b


def _dyt_inputs(shape, beta, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = shape[-1]
    x = torch.randn(shape, generator=g) * 2
    ins = [x, torch.tensor([0.7]), torch.randn(h, generator=g)]
    return ins + ([torch.randn(h, generator=g)] if beta else [])


def _poly_inputs(shape, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g), torch.tensor([0.3, -0.5, 0.9]), torch.tensor(0.25)]


def _check_dyt(shape, dtype, device, beta):
    ins = _dyt_inputs(shape, beta)
    names = ["x", "alpha", "gamma", "beta"][: len(ins)]
    check_against_ref(dyt, _dyt_ref if beta else lambda *a: _dyt_ref(*a, None), ins, dtype, device, names)


def _check_poly(shape, dtype, device):
    check_against_ref(poly_norm, _poly_ref, _poly_inputs(shape), dtype, device, ["x", "w", "b"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beta", [True, False])
def test_dyt(device, dtype, shape, beta):
    _check_dyt(shape, dtype, device, beta)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES)
def test_poly_norm(device, dtype, shape):
    _check_poly(shape, dtype, device)


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", CUDA_SHAPES)
def test_cuda_plans(dtype, shape):
    _check_dyt(shape, dtype, "cuda", True)
    _check_dyt(shape, dtype, "cuda", False)
    _check_poly(shape, dtype, "cuda")


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
@pytest.mark.parametrize(
    ("dtype", "pdt"),
    [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)],
    ids=["fp32", "bf16", "bf16_params_fp32"],
)
@pytest.mark.parametrize("with_beta", [True, False], ids=["beta", "no_beta"])
def test_dyt_parameters_at_unaligned_offsets(dtype, pdt, with_beta):
    """gamma / beta as views one element into larger tensors: the forward reads them as 16-byte
    (or 32-byte) vectors, so the host must hand over aligned copies, not the views."""
    rows, h = 70, 1024
    g = torch.Generator().manual_seed(3)
    x = torch.randn(rows, h, generator=g).to("cuda", dtype)
    a = torch.tensor([0.6], device="cuda", dtype=pdt)
    store = torch.randn(2, h + 1, generator=g).to("cuda", pdt)
    gamma, beta = store[0, 1:], store[1, 1:]
    assert gamma.data_ptr() % 16 != 0 and beta.data_ptr() % 16 != 0
    before = store.clone()
    y = dyt(x, a, gamma, beta if with_beta else None)
    ref = _dyt_ref(x.double(), a.double(), gamma.double(), beta.double() if with_beta else None)
    tol = 1e-5 if dtype == torch.float32 else 8e-3  # bf16: one rounding of y, 2^-8 relative at most
    torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol)
    assert torch.equal(store, before)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_float32_parameters_with_low_precision_input(device, dtype):
    """Parameters kept in float32 (mixed precision) with a 16-bit x: the kernels read them in
    float32; each gradient comes back in its parameter's dtype."""
    x, a, gm, b = _dyt_inputs((5, 64), True)
    x = x.to(device, dtype).requires_grad_()
    ps = [t.to(device).requires_grad_() for t in (a, gm, b)]
    y = dyt(x, *ps)
    y64 = _dyt_ref(x.double(), *[p.double() for p in ps])
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), y64, rtol=1e-2, atol=1e-2)
    y.backward(torch.ones_like(y))
    assert all(p.grad.dtype == torch.float32 for p in ps) and x.grad.dtype == dtype
    xp, w, bp = _poly_inputs((5, 64))
    xp = xp.to(device, dtype).requires_grad_()
    w, bp = w.to(device).requires_grad_(), bp.to(device).requires_grad_()
    poly_norm(xp, w, bp).sum().backward()
    assert w.grad.dtype == torch.float32 and bp.grad.shape == () and xp.grad.dtype == dtype


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_parameter_dtypes(device):
    """gamma in float16 with a bfloat16 x (neither x's dtype nor float32): read as float32, the
    gradients cast back; alpha and beta of other dtypes than gamma's."""
    x = torch.randn(4, 16, device=device, dtype=torch.bfloat16, requires_grad=True)
    a = torch.tensor([0.5], device=device, dtype=torch.float32, requires_grad=True)
    gm = torch.randn(16, device=device, dtype=torch.float16, requires_grad=True)
    b = torch.randn(16, device=device, dtype=torch.bfloat16, requires_grad=True)
    y = dyt(x, a, gm, b)
    torch.testing.assert_close(
        y.double(), _dyt_ref(x.double(), a.double(), gm.double(), b.double()), rtol=1e-2, atol=1e-2
    )
    y.sum().backward()
    assert (a.grad.dtype, gm.grad.dtype, b.grad.dtype) == (torch.float32, torch.float16, torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_and_empty(device):
    x = torch.randn(40, 6, device=device).t()  # (6, 40), non-contiguous
    _, a, gm, b = _dyt_inputs((6, 40), True)
    a, gm, b = (t.to(device) for t in (a, gm, b))
    torch.testing.assert_close(dyt(x, a, gm, b), dyt(x.contiguous(), a, gm, b), rtol=0, atol=0)
    w, pb = torch.tensor([0.3, -0.5, 0.9], device=device), torch.tensor(0.25, device=device)
    torch.testing.assert_close(poly_norm(x, w, pb), poly_norm(x.contiguous(), w, pb), rtol=0, atol=0)
    # no rows: empty outputs, zero parameter gradients
    e = torch.empty(0, 40, device=device, requires_grad=True)
    ps = [t.clone().requires_grad_() for t in (a, gm, b)]
    dyt(e, *ps).sum().backward()
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in ps)
    wq, bq = w.clone().requires_grad_(), pb.clone().requires_grad_()
    poly_norm(e, wq, bq).sum().backward()
    assert torch.equal(wq.grad, torch.zeros(3, device=device)) and bq.grad.item() == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_frozen_parameters_and_x(device):
    x, a, gm, b = (t.to(device) for t in _dyt_inputs((3, 8), True))
    xr = x.clone().requires_grad_()
    dyt(xr, a, gm, b).sum().backward()  # only x: no parameter gradients
    assert xr.grad is not None and a.grad is None
    gr = gm.clone().requires_grad_()
    dyt(x, a, gr, b).sum().backward()  # only gamma
    torch.testing.assert_close(gr.grad, torch.tanh(0.7 * x).sum(0))
    w = torch.tensor([0.3, -0.5, 0.9], device=device, requires_grad=True)
    poly_norm(x, w, torch.tensor(0.25, device=device)).sum().backward()
    assert w.grad is not None


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
def test_cuda_parameter_gradients_deterministic():
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(8192, 1024, device="cuda", generator=g, dtype=torch.bfloat16)
    dy = torch.randn(x.shape, device="cuda", generator=g, dtype=torch.bfloat16)
    a, gm, b = (
        torch.tensor([0.6], device="cuda"),
        torch.randn(1024, device="cuda"),
        torch.zeros(1024, device="cuda"),
    )
    first = torch.ops.liger.dyt_bwd(dy, x, a, gm, b)
    again = torch.ops.liger.dyt_bwd(dy, x, a, gm, b)
    assert all(torch.equal(u, v) for u, v in zip(first, again))
    w, pb = torch.tensor([0.3, -0.5, 0.9], device="cuda"), torch.tensor(0.25, device="cuda")
    _, rstd = torch.ops.liger.poly_norm_fwd(x, w, pb)
    first = torch.ops.liger.poly_norm_bwd(dy, x, w, pb, rstd)
    again = torch.ops.liger.poly_norm_bwd(dy, x, w, pb, rstd)
    assert all(torch.equal(u, v) for u, v in zip(first, again))


@pytest.mark.parametrize("device", DEVICES)
def test_liger_triton_level_functions(device):
    """liger_kernel.ops.dyt's liger_dyt_fwd / _bwd and liger_kernel.ops.poly_norm's
    poly_norm_forward / _backward: Liger's return conventions, the autograd path's numbers."""
    x, a, gm, b = (t.to(device) for t in _dyt_inputs((2, 3, 16), True))
    dy = torch.randn(x.shape, device=device)
    ps = [t.clone().requires_grad_() for t in (x, a, gm, b)]
    y = dyt(*ps)
    y.backward(dy)
    torch.testing.assert_close(liger_dyt_fwd(x, a, gm, b), y.detach(), rtol=0, atol=0)
    got = liger_dyt_bwd(dy, x, a, gm, b)
    for u, p in zip(got, ps):
        torch.testing.assert_close(u, p.grad, rtol=0, atol=0)
    assert liger_dyt_bwd(dy, x, a, gm, None)[3] is None
    xp, w, pb = (t.to(device) for t in _poly_inputs((2, 3, 16)))
    ps = [t.clone().requires_grad_() for t in (xp, w, pb)]
    y = poly_norm(*ps)
    y.backward(dy)
    yf, x2, rstd, _, _ = poly_norm_forward(xp, w, pb)
    torch.testing.assert_close(yf, y.detach(), rtol=0, atol=0)
    assert x2.shape == (6, 16) and rstd.shape == (6, 3)
    dx, dw, db = poly_norm_backward(dy, x2, w, rstd, None, None, True)
    torch.testing.assert_close(dx.view(dy.shape), ps[0].grad, rtol=0, atol=0)
    torch.testing.assert_close(dw, ps[1].grad, rtol=0, atol=0)
    torch.testing.assert_close(db, ps[2].grad, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_and_compile(device):
    x, a, gm, b = (t.to(device) for t in _dyt_inputs((3, 17), True))
    dy = torch.randn(x.shape, device=device)
    for args in ((x, a, gm, b), (x, a, gm)):
        torch.library.opcheck(torch.ops.liger.dyt_fwd, args)
        torch.library.opcheck(torch.ops.liger.dyt_bwd, (dy, *args))
    w, pb = torch.tensor([0.3, -0.5, 0.9], device=device), torch.tensor(0.25, device=device)
    torch.library.opcheck(torch.ops.liger.poly_norm_fwd, (x, w, pb, 1e-5))
    _, rstd = torch.ops.liger.poly_norm_fwd(x, w, pb)
    torch.library.opcheck(torch.ops.liger.poly_norm_bwd, (dy, x, w, pb, rstd))
    backend = "inductor" if device == "cuda" else "aot_eager"
    dm, pm = LigerDyT(17).to(device), LigerPolyNorm().to(device)

    def f(t):
        return pm(dm(t)).square().sum()

    cf = torch.compile(f, fullgraph=True, backend=backend)
    xr = x.clone().requires_grad_()
    cf(xr).backward()
    got = [xr.grad.clone()] + [p.grad.clone() for p in (*dm.parameters(), *pm.parameters())]
    xr.grad = None
    for p in (*dm.parameters(), *pm.parameters()):
        p.grad = None
    f(xr).backward()
    want = [xr.grad] + [p.grad for p in (*dm.parameters(), *pm.parameters())]
    for u, v in zip(got, want):
        torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-5)


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(6)

    def r(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)

    assert torch.autograd.gradcheck(dyt, (r(3, 4), r(1), r(4), r(4)))
    assert torch.autograd.gradcheck(dyt, (r(2, 3, 5), r(()), r(5)))
    assert torch.autograd.gradcheck(poly_norm, (r(3, 5), r(3), r(())))
    assert torch.autograd.gradcheck(poly_norm, (r(2, 2, 7), r(3), r(1)))


def test_second_backward_raises():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    a, gm = torch.tensor([0.5], dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    (gx,) = torch.autograd.grad(dyt(x, a, gm).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="dyt has no double-backward formula"):
        gx.sum().backward()


def test_errors():
    x = torch.randn(2, 8)
    with pytest.raises(RuntimeError, match="argument 'gamma': expected shape"):
        dyt(x, torch.tensor([0.5]), torch.ones(7))
    with pytest.raises(RuntimeError, match="argument 'alpha': expected one element"):
        dyt(x, torch.ones(2), torch.ones(8))
    with pytest.raises(RuntimeError, match="argument 'beta': expected shape"):
        dyt(x, torch.tensor([0.5]), torch.ones(8), torch.ones(9))
    with pytest.raises(RuntimeError, match="argument 'x': expected float32"):
        dyt(x.long(), torch.tensor([0.5]), torch.ones(8))
    with pytest.raises(RuntimeError, match="argument 'weight': expected shape"):
        poly_norm(x, torch.ones(2), torch.tensor(0.0))
    with pytest.raises(RuntimeError, match="argument 'bias': expected one element"):
        poly_norm(x, torch.ones(3), torch.ones(2))
    with pytest.raises(RuntimeError, match="argument 'x': expected a non-empty last dimension"):
        poly_norm(torch.ones(2, 0), torch.ones(3), torch.tensor(0.0))
    _, rstd = torch.ops.liger.poly_norm_fwd(x, torch.ones(3), torch.tensor(0.0))
    with pytest.raises(RuntimeError, match="argument 'rstd'"):
        torch.ops.liger.poly_norm_bwd(x, x, torch.ones(3), torch.tensor(0.0), rstd[:1])
    with pytest.raises(RuntimeError, match="argument 'dy': expected x's shape"):
        torch.ops.liger.dyt_bwd(x[:1], x, torch.tensor([0.5]), torch.ones(8))
