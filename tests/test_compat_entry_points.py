"""Liger-Kernel's function-level forward / backward entry points through the compatibility package
(compat/liger_kernel/_entry_points.py): `liger_kernel.ops.<op>.<op>_forward / _backward` called
with Liger 0.8.5's positional arguments return its tuples, with values equal to independent float64
PyTorch references (the forward's outputs and, through the backward entry point, the gradients of
autograd on the reference). Odd shapes, float32 (tight tolerances) on the CPU, bfloat16 too on CUDA."""

import math

import pytest
import torch
import torch.nn.functional as F
from compat_env import ensure_compat

ensure_compat()

import liger_kernel.ops as kops  # noqa: E402
from liger_kernel.ops import cross_entropy as kce  # noqa: E402
from liger_kernel.ops import fused_add_rms_norm as kfa  # noqa: E402
from liger_kernel.ops import geglu as kgeglu  # noqa: E402
from liger_kernel.ops import group_norm as kgn  # noqa: E402
from liger_kernel.ops import jsd as kjsd  # noqa: E402
from liger_kernel.ops import kl_div as kkl  # noqa: E402
from liger_kernel.ops import layer_norm as kln  # noqa: E402
from liger_kernel.ops import llama4_rope as kl4  # noqa: E402
from liger_kernel.ops import qwen2vl_mrope as kmr  # noqa: E402
from liger_kernel.ops import relu_squared as krs  # noqa: E402
from liger_kernel.ops import rms_norm as krms  # noqa: E402
from liger_kernel.ops import rope as krope  # noqa: E402
from liger_kernel.ops import swiglu as ksw  # noqa: E402
from liger_kernel.ops import tvd as ktvd  # noqa: E402
from liger_kernel.ops import utils as kutils  # noqa: E402

from liger_cpp.transformers.qwen2vl_mrope import liger_multimodal_rotary_pos_emb  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.bfloat16]


def _cases():
    return [(d, t) for d in DEVICES for t in DTYPES if d == "cuda" or t == torch.float32]


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)


def _close(out, ref, dtype, name):
    torch.testing.assert_close(out.double(), ref.double(), **_tol(dtype), msg=lambda m: f"{name}: {m}")


def _leaf(t):
    return t.detach().double().requires_grad_()


def _grads(ref_fn, inputs, grad_out):
    """Gradients of <ref_fn(*inputs), grad_out> in float64 w.r.t. every input."""
    leaves = [_leaf(t) for t in inputs]
    out = ref_fn(*leaves)
    return torch.autograd.grad(out, leaves, grad_out.double())


def _g(device, seed=0):
    return torch.Generator(device=device).manual_seed(seed)


def test_package_level_names_are_the_entry_points():
    for name in ("rms_norm_forward", "swiglu_backward", "cross_entropy_forward", "rope_backward"):
        assert getattr(kops, name) is getattr(getattr(kops, name.rsplit("_", 1)[0]), name)


@pytest.mark.parametrize("device,dtype", _cases())
@pytest.mark.parametrize("casting_mode,offset", [("llama", 0.0), ("gemma", 1.0), (-1, 0.0)])
def test_rms_norm(device, dtype, casting_mode, offset):
    g = _g(device)
    X = torch.randn(3, 5, 37, device=device, generator=g).to(dtype)
    W = torch.randn(37, device=device, generator=g).to(dtype)
    dY = torch.randn(3, 5, 37, device=device, generator=g).to(dtype)

    def ref(x, w):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * (w + offset)

    Y, X2, RSTD, block, warps, mode = krms.rms_norm_forward(X, W, 1e-6, offset, casting_mode, None)
    assert (X2.shape, RSTD.shape, block, warps) == ((15, 37), (15,), 64, 4)
    assert mode == {"llama": 0, "gemma": 1, -1: -1}[casting_mode]
    _close(Y, ref(X.double(), W.double()), dtype, "Y")
    dX, dW = krms.rms_norm_backward(dY, X2, W, RSTD, offset, mode, block, warps, False, None)
    rdx, rdw = _grads(ref, [X, W], dY)
    _close(dX, rdx, dtype, "dX")
    _close(dW, rdw, dtype, "dW")
    assert dX.shape == X.shape and dW.dtype == W.dtype
    assert krms.rms_norm_backward(dY, X2, W, RSTD, offset, mode, block, warps, False, None, False)[1] is None


@pytest.mark.parametrize("device,dtype", _cases())
def test_fused_add_rms_norm(device, dtype):
    g = _g(device, 1)
    X, R, dY, dS_out = (torch.randn(7, 45, device=device, generator=g).to(dtype) for _ in range(4))
    W = torch.randn(45, device=device, generator=g).to(dtype)

    def ref(x, r, w):
        s = x + r
        return s * torch.rsqrt(s.square().mean(-1, keepdim=True) + 1e-6) * w

    Y, S, RSTD, block, warps, stages, mode = kfa.fused_add_rms_norm_forward(X, R, W, 1e-6, 0.0, "llama")
    assert (block, warps, stages, mode) == (64, 4, 2, 0)
    _close(Y, ref(X.double(), R.double(), W.double()), dtype, "Y")
    _close(S, X.double() + R.double(), dtype, "S")
    dX, dR, dW = kfa.fused_add_rms_norm_backward(
        dY, dS_out, S, W, RSTD, 0.0, mode, block, warps, stages, False
    )
    assert dX is dR
    s = _leaf(S)
    w = _leaf(W)
    out = s * torch.rsqrt(s.square().mean(-1, keepdim=True) + 1e-6) * w
    rds, rdw = torch.autograd.grad(out, (s, w), dY.double())
    _close(dX, rds + dS_out.double(), dtype, "dS")
    _close(dW, rdw, dtype, "dW")


@pytest.mark.parametrize("device,dtype", _cases())
def test_layer_norm(device, dtype):
    g = _g(device, 2)
    X = torch.randn(2, 9, 51, device=device, generator=g).to(dtype) * 3 + 1
    W, B = (torch.randn(51, device=device, generator=g).to(dtype) for _ in range(2))
    dY = torch.randn(2, 9, 51, device=device, generator=g).to(dtype)

    def ref(x, w, b):
        return F.layer_norm(x, (51,), w, b, 1e-5)

    Y, X2, Mean, RSTD, block, warps = kln.layer_norm_forward(X, W, B, 1e-5)
    assert (X2.shape, Mean.shape, RSTD.shape, block) == ((18, 51), (18,), (18,), 64)
    _close(Y, ref(X.double(), W.double(), B.double()), dtype, "Y")
    dX, dW, dB = kln.layer_norm_backward(dY, X2, W, B, Mean, RSTD)
    for got, want, name in zip((dX, dW, dB), _grads(ref, [X, W, B], dY), ("dX", "dW", "dB")):
        _close(got, want, dtype, name)
    assert kln.layer_norm_backward(dY, X2, W, B, Mean, RSTD, False, False)[1:] == (None, None)


@pytest.mark.parametrize("device,dtype", _cases())
def test_group_norm(device, dtype):
    g = _g(device, 3)
    X = torch.randn(3, 6, 5, 7, device=device, generator=g).to(dtype)
    W, B = (torch.randn(6, device=device, generator=g).to(dtype) for _ in range(2))
    dY = torch.randn_like(X)

    def ref(x, w, b):
        return F.group_norm(x, 3, w, b, 1e-6)

    Y, X2, Mean, RSTD, block = kgn.group_norm_forward(X, 6, 3, W, B, 1e-6)
    assert Mean.shape == (3, 3) and RSTD.shape == (3, 3) and block == 128
    _close(Y, ref(X.double(), W.double(), B.double()), dtype, "Y")
    got = kgn.group_norm_backward(dY, X2, W, B, Mean, RSTD, 6, 3)
    for a, b, name in zip(got, _grads(ref, [X, W, B], dY), ("dX", "dW", "dB")):
        _close(a, b, dtype, name)
    with pytest.raises(ValueError, match="argument 'X'"):
        kgn.group_norm_forward(X, 6, 4, W, B, 1e-6)


@pytest.mark.parametrize("device,dtype", _cases())
@pytest.mark.parametrize("gate_multiplier", [1.0, 0.5])
def test_swiglu(device, dtype, gate_multiplier):
    g = _g(device, 4)
    a, b, dc = (torch.randn(4, 3, 29, device=device, generator=g).to(dtype) for _ in range(3))

    def ref(a, b):
        return F.silu(a * gate_multiplier) * b

    a_out, b_out, c = ksw.swiglu_forward(a, b, gate_multiplier)
    assert a_out is a and b_out is b
    _close(c, ref(a.double(), b.double()), dtype, "c")
    a0, b0 = a.clone(), b.clone()
    da, db = ksw.swiglu_backward(a, b, dc, gate_multiplier)
    rda, rdb = _grads(ref, [a, b], dc)
    _close(da, rda, dtype, "da")
    _close(db, rdb, dtype, "db")
    assert torch.equal(a, a0) and torch.equal(b, b0)  # not overwritten


@pytest.mark.parametrize("device,dtype", _cases())
def test_geglu_and_relu_squared(device, dtype):
    g = _g(device, 5)
    a, b, dc = (torch.randn(6, 33, device=device, generator=g).to(dtype) for _ in range(3))

    def ref(a, b):
        return F.gelu(a, approximate="tanh") * b

    _, _, c = kgeglu.geglu_forward(a, b)
    _close(c, ref(a.double(), b.double()), dtype, "c")
    for got, want, name in zip(kgeglu.geglu_backward(a, b, dc), _grads(ref, [a, b], dc), ("da", "db")):
        _close(got, want, dtype, name)
    _close(krs.relu_squared_forward(a), F.relu(a.double()).square(), dtype, "relu^2")
    _close(krs.relu_squared_backward(a, dc), 2 * F.relu(a.double()) * dc.double(), dtype, "relu^2 dX")


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


@pytest.mark.parametrize("device,dtype", _cases())
@pytest.mark.parametrize("table_dims,rotary_dim", [(3, None), (2, None), (4, None), (3, 8)])
def test_rope(device, dtype, table_dims, rotary_dim):
    g = _g(device, 6)
    B, Hq, Hk, S, D = 2, 5, 3, 11, 16
    q = torch.randn(B, Hq, S, D, device=device, generator=g).to(dtype)
    k = torch.randn(B, Hk, S, D, device=device, generator=g).to(dtype)
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    rd = rotary_dim or D
    f = torch.randn(1, S, rd // 2, device=device, generator=g)
    cos, sin = torch.cat((f, f), -1).cos(), torch.cat((f, f), -1).sin()
    if table_dims == 2:
        cos, sin = cos[0], sin[0]
    elif table_dims == 4:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    c3, s3 = (t.reshape(1, S, rd).double().unsqueeze(1) for t in (cos, sin))

    def ref(q, k):
        def rot(x):
            xr, xp = x[..., :rd], x[..., rd:]
            return torch.cat((xr * c3 + _rotate_half(xr) * s3, xp), -1)

        return rot(q), rot(k)

    qo, ko, cos_out, sin_out = krope.rope_forward(q, k, cos, sin, None, 1, rotary_dim)
    assert cos_out.dim() == 3
    rq, rk = ref(q.double(), k.double())
    _close(qo, rq, dtype, "q")
    _close(ko, rk, dtype, "k")
    gq, gk = krope.rope_backward(dq, dk, cos, sin, None, 1, rotary_dim)
    ql, kl = _leaf(q), _leaf(k)
    rq, rk = ref(ql, kl)
    wq, wk = torch.autograd.grad((rq, rk), (ql, kl), (dq.double(), dk.double()))
    _close(gq, wq, dtype, "dq")
    _close(gk, wk, dtype, "dk")


@pytest.mark.parametrize("device,dtype", _cases())
def test_qwen2vl_mrope(device, dtype):
    g = _g(device, 7)
    B, H, S, D = 2, 3, 9, 16
    q, k = (torch.randn(B, H, S, D, device=device, generator=g).to(dtype) for _ in range(2))
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    f = torch.randn(3, B, S, D // 2, device=device, generator=g)
    cos, sin = torch.cat((f, f), -1).cos(), torch.cat((f, f), -1).sin()
    section = [2, 3, 3]
    qo, ko, _, _ = kmr.qwen2vl_mrope_forward(q, k, cos, sin, section)
    wq, wk = liger_multimodal_rotary_pos_emb(q, k, cos, sin, section)
    assert torch.equal(qo, wq) and torch.equal(ko, wk)
    gq, gk = kmr.qwen2vl_mrope_backward(dq, dk, cos, sin, section)
    ql, kl = q.detach().requires_grad_(), k.detach().requires_grad_()
    rq, rk = torch.autograd.grad(
        liger_multimodal_rotary_pos_emb(ql, kl, cos, sin, section), (ql, kl), (dq, dk)
    )
    torch.testing.assert_close(gq, rq, rtol=0, atol=0)
    torch.testing.assert_close(gk, rk, rtol=0, atol=0)


@pytest.mark.parametrize("device,dtype", _cases())
def test_llama4_rope(device, dtype):
    g = _g(device, 8)
    B, S, Hq, Hk, D = 2, 7, 4, 2, 12
    q = torch.randn(B, S, Hq, D, device=device, generator=g).to(dtype)
    k = torch.randn(B, S, Hk, D, device=device, generator=g).to(dtype)
    ang = torch.randn(S, D // 2, device=device, generator=g, dtype=torch.float64)
    freqs = torch.polar(torch.ones_like(ang), ang)

    def ref(x, f):
        xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], D // 2, 2))
        return torch.view_as_real(xc * f[None, :, None, :]).flatten(-2)

    qo, ko = kl4.llama4_rope_forward(q, k, freqs.to(torch.complex64))
    _close(qo, ref(q, freqs), dtype, "q")
    _close(ko, ref(k, freqs), dtype, "k")
    # imag_sign -1: the conjugate rotation, the forward's transpose (Liger's backward)
    qb, _ = kl4.llama4_rope_forward(q, k, freqs.to(torch.complex64), None, -1.0)
    _close(qb, ref(q, freqs.conj()), dtype, "q conj")


@pytest.mark.parametrize("device,dtype", _cases())
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(device, dtype, reduction):
    g = _g(device, 9)
    N, V = 13, 97
    x = (torch.randn(N, V, device=device, generator=g) * 2).to(dtype).requires_grad_()
    y = torch.randint(0, V, (N,), device=device, generator=g)
    y[::4] = -100
    w = torch.rand(V, device=device, generator=g) + 0.5
    ls, zs = 0.1, 1e-3

    def ref(x):
        lse = torch.logsumexp(x, -1)
        valid = y != -100
        ce = F.cross_entropy(x, y, weight=w.double(), ignore_index=-100, label_smoothing=ls, reduction="none")
        z = torch.where(valid, zs * lse.square(), torch.zeros_like(lse))
        if reduction == "none":
            return ce + z, z
        if reduction == "sum":
            return ce.sum() + z.sum(), z.sum()
        denom = w.double()[y.clamp(min=0)][valid].sum()
        return ce.sum() / denom + z.sum() / valid.sum(), z.sum() / valid.sum()

    x0 = x.detach().clone()
    loss, z, acc, pred, grad = kce.cross_entropy_forward(
        x, y, w, -100, zs, ls, reduction, None, True, True, True
    )
    rl, rz = ref(x.detach().double())
    _close(loss, rl, torch.float32 if dtype == torch.float32 else dtype, "loss")
    _close(z, rz, dtype, "z_loss")
    am = x.detach().float().argmax(-1)
    want_pred = torch.where(y != -100, am, torch.full_like(am, -1))
    assert torch.equal(pred, want_pred)
    hits = ((am == y) & (y != -100)).double()
    want_acc = hits if reduction == "none" else hits.sum() / (y != -100).sum()
    torch.testing.assert_close(acc.double(), want_acc)
    assert torch.equal(x.detach(), x0)  # the logits are not overwritten with the gradient
    go = (
        torch.rand(N, device=device, generator=g) + 0.5
        if reduction == "none"
        else torch.tensor(1.7, device=device)
    )
    got = kce.cross_entropy_backward(grad, go)
    xl = _leaf(x)
    want = torch.autograd.grad(ref(xl)[0], xl, go.double())[0]
    _close(got, want, dtype, "grad")
    # without requires_grad, the logits come back untouched as Liger's do
    assert (
        kce.cross_entropy_forward(x.detach(), y, None, -100, 0.0, 0.0, reduction, None, False)[4] is not None
    )


@pytest.mark.parametrize("device,dtype", _cases())
def test_divergences(device, dtype):
    g = _g(device, 10)
    N, V = 9, 41
    lq = torch.log_softmax(torch.randn(N, V, device=device, generator=g), -1).to(dtype)
    lp = torch.log_softmax(torch.randn(N, V, device=device, generator=g), -1).to(dtype)
    labels = torch.randint(0, V, (N,), device=device, generator=g)
    labels[::3] = -100
    go = torch.tensor(0.7, device=device)

    def jsd_ref(x):
        beta = 0.3
        q, p = x.exp(), lp.double().exp()
        m = beta * p + (1 - beta) * q
        rows = beta * (p * (lp.double() - m.log())).sum(-1) + (1 - beta) * (q * (x - m.log())).sum(-1)
        valid = labels != -100
        return (rows * valid).sum() / valid.sum()

    loss, dX = kjsd.jsd_forward(lq, lp, labels, 0.3, -100, True)
    assert loss.dtype == dtype
    _close(loss, jsd_ref(lq.double()), dtype, "jsd")
    xl = _leaf(lq)
    _close(kjsd.jsd_backward(dX, go), torch.autograd.grad(jsd_ref(xl), xl, go.double())[0], dtype, "jsd dX")
    assert kjsd.jsd_backward(dX, torch.tensor(1.0, device=device)) is dX

    p = lp.exp()
    for reduction in ("batchmean", "sum", "mean", "none"):
        want = F.kl_div(lq.double(), p.double(), reduction=reduction)
        _close(kkl.kldiv_forward_triton(lq, p, False, reduction, 1e-10), want, dtype, f"kl {reduction}")
    buf = torch.empty_like(p)
    got = kkl.kldiv_backward_triton(lp, go, buf, True)
    _close(got, -lp.double().exp() * 0.7, dtype, "kl grad")

    q = torch.softmax(torch.randn(N, V, device=device, generator=g), -1).to(dtype)
    loss, grads = ktvd.tv_distance_forward_triton(p, q, labels, "batchmean", -100, True)
    valid = (labels != -100).double()[:, None]
    diff = p.double() - q.double()
    _close(loss, (0.5 * diff.abs() * valid).sum() / valid.sum(), dtype, "tvd")
    _close(
        ktvd.tvd_backward_triton(go, grads), 0.5 * diff.sign() * valid / valid.sum() * 0.7, dtype, "tvd dp"
    )


def test_utils():
    with kutils.device_context("cpu"):
        pass
    if torch.cuda.is_available():
        with kutils.device_context("cuda:0"):
            assert torch.cuda.current_device() == 0
    fwd, bwd = kutils.get_amp_custom_fwd_bwd()
    assert callable(fwd) and callable(bwd)
    assert kutils.get_npu_core_count() == 20 and kutils.get_npu_core_count(7) == 7
    args = {"x": 1}
    kutils.set_large_grf_mode(args)
    assert args == {"x": 1}


def test_bad_casting_mode_names_the_argument():
    x, w = torch.randn(2, 8), torch.randn(8)
    with pytest.raises(ValueError, match="argument 'casting_mode'"):
        krms.rms_norm_forward(x, w, 1e-6, 0.0, "llama3", None)
    with pytest.raises(ValueError, match="argument 'casting_mode'"):
        krms.rms_norm_forward(x, w, 1e-6, 0.0, 5, None)
    assert math.isfinite(krms.rms_norm_forward(x, w, 1e-6, 0.0, 1, None)[0].sum().item())


@pytest.mark.parametrize("device,dtype", _cases())
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_fused_linear_cross_entropy(device, dtype, reduction):
    from liger_kernel.ops import fused_linear_cross_entropy as kfl

    g = _g(device, 11)
    N, H, V = 23, 19, 67
    x = torch.randn(N, H, device=device, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(V, H, device=device, generator=g) * 0.3).to(dtype).requires_grad_()
    b = torch.randn(V, device=device, generator=g).to(dtype)
    y = torch.randint(0, V, (N,), device=device, generator=g)
    y[::5] = -100

    def ref(x, w, b):
        logits = x @ w.T + b
        ce = F.cross_entropy(logits, y, ignore_index=-100, label_smoothing=0.05, reduction="none")
        z = torch.where(y != -100, 1e-3 * torch.logsumexp(logits, -1).square(), torch.zeros_like(ce))
        per_row = ce + z
        return per_row if reduction == "none" else per_row.sum() / (y != -100).sum()

    out = kfl.fused_linear_cross_entropy_forward(
        x, w, y, None, b, -100, 1e-3, 0.05, reduction, None, True, None, False, True, True
    )
    loss, z, acc, pred, dx, dw, db = out
    _close(loss, ref(x.double(), w.double(), b.double()), dtype, "loss")
    assert z is not None and acc is not None and pred.shape == (N,)
    go = (
        torch.rand(N, device=device, generator=g) + 0.5
        if reduction == "none"
        else torch.tensor(0.6, device=device)
    )
    xl, wl, bl = _leaf(x), _leaf(w), _leaf(b)
    rdx, rdw, rdb = torch.autograd.grad(ref(xl, wl, bl), (xl, wl, bl), go.double())
    if reduction == "none":  # the per-token upstream gradient goes in with the forward, as Liger's
        out = kfl.fused_linear_cross_entropy_forward(
            x, w, y, None, b, -100, 1e-3, 0.05, reduction, None, token_grad_output=go
        )
        dx, dw, db = out[4:]
    else:
        dx, dw, db = kfl.fused_linear_cross_entropy_backward(go, dx, dw, db)
    tol = dtype if dtype == torch.float32 else torch.bfloat16
    _close(dx, rdx, tol, "dX")
    _close(dw, rdw, tol, "dW")
    _close(db, rdb, tol, "dB")
    # no gradient wanted: zeros for the input, None for the weight and bias (Liger's)
    none = kfl.fused_linear_cross_entropy_forward(x.detach(), w.detach(), y, None, b)
    assert torch.equal(none[4], torch.zeros_like(x)) and none[5] is None and none[6] is None


@pytest.mark.parametrize("device,dtype", _cases())
def test_fused_linear_jsd_and_kl_div(device, dtype):
    from liger_kernel.ops import fused_linear_jsd as kfj
    from liger_kernel.ops import fused_linear_kl_div as kfk

    g = _g(device, 12)
    N, Hs, Ht, V, T = 17, 11, 13, 43, 0.8
    xs = torch.randn(N, Hs, device=device, generator=g).to(dtype).requires_grad_()
    ws = (torch.randn(V, Hs, device=device, generator=g) * 0.4).to(dtype).requires_grad_()
    xt = torch.randn(N, Ht, device=device, generator=g).to(dtype)
    wt = (torch.randn(V, Ht, device=device, generator=g) * 0.4).to(dtype)
    labels = torch.randint(0, V, (N,), device=device, generator=g)
    labels[1::4] = -100
    valid = labels != -100
    go = torch.tensor(1.3, device=device)

    def jsd_ref(x, w, beta=0.25):
        lq = torch.log_softmax(x @ w.T / T, -1)
        lp = torch.log_softmax(xt.double() @ wt.double().T / T, -1)
        m = (beta * lp.exp() + (1 - beta) * lq.exp()).log()
        rows = beta * (lp.exp() * (lp - m)).sum(-1) + (1 - beta) * (lq.exp() * (lq - m)).sum(-1)
        return (rows * valid).sum() / valid.sum()

    loss, dx, dw = kfj.fused_linear_jsd_forward(xs, ws, xt, wt, labels, 0.25, -100, True, T)
    _close(loss, jsd_ref(xs.double(), ws.double()), dtype, "jsd")
    xl, wl = _leaf(xs), _leaf(ws)
    rdx, rdw = torch.autograd.grad(jsd_ref(xl, wl), (xl, wl), go.double())
    dx, dw = kfj.fused_linear_jsd_backward(go, dx, dw)
    _close(dx, rdx, dtype, "jsd dX")
    _close(dw, rdw, dtype, "jsd dW")

    q = torch.softmax(torch.randn(N, V, device=device, generator=g), -1)

    def kl_ref(x, w):
        ls = torch.log_softmax(x @ w.T / T, -1)
        rows = (q.double() * (q.double().clamp(min=1e-10).log() - ls)).sum(-1)
        return (rows * valid).sum() / valid.sum()

    loss, dx, dw = kfk.fused_linear_kl_div_forward(xs, ws, q, labels, "batchmean", -100, True, T, 1e-10)
    _close(loss, kl_ref(xs.double(), ws.double()), dtype, "kl")
    rdx, rdw = torch.autograd.grad(kl_ref(xl, wl), (xl, wl), go.double())
    dx, dw = kfk.fused_linear_kl_div_backward(go, dx, dw)
    _close(dx, rdx, dtype, "kl dX")
    _close(dw, rdw, dtype, "kl dW")
    assert kfk.get_num_warps(4096) == 8 and kfk.get_num_warps(65536) == 32


@pytest.mark.parametrize("device,dtype", _cases())
def test_swiglu_fused_gate_up(device, dtype):
    g = _g(device, 13)
    y = torch.randn(3, 5, 2 * 21, device=device, generator=g).to(dtype)
    dc = torch.randn(3, 5, 21, device=device, generator=g).to(dtype)

    def ref(y):
        gate, up = y.chunk(2, -1)
        return F.silu(gate) * up

    rows, c = ksw.swiglu_fused_gate_up_forward(y)
    assert rows.shape == (15, 42) and c.shape == (3, 5, 21)
    _close(c, ref(y.double()), dtype, "c")
    y0 = y.clone()
    dy = ksw.swiglu_fused_gate_up_backward(y, dc, True)
    assert dy.shape == (15, 42) and torch.equal(y, y0)
    _close(dy, _grads(ref, [y], dc)[0].reshape(15, 42), dtype, "dy")
    with pytest.raises(ValueError, match="argument 'y'"):
        ksw.swiglu_fused_gate_up_forward(y[..., 1:])


@pytest.mark.parametrize("device,dtype", _cases())
@pytest.mark.parametrize("casting_mode,with_shift", [("llama", True), ("gemma", False)])
def test_modulated_rms_norm(device, dtype, casting_mode, with_shift):
    from liger_kernel.ops import modulated_rms_norm as kmod

    g = _g(device, 14)
    X = torch.randn(2, 6, 24, device=device, generator=g).to(dtype)
    W = torch.randn(24, device=device, generator=g).to(dtype)
    scale = (torch.randn(2, 1, 24, device=device, generator=g) * 0.3).to(dtype)  # one row per sample
    shift = torch.randn(2, 1, 24, device=device, generator=g).to(dtype) if with_shift else None
    dY = torch.randn_like(X)

    def ref(x, w, sc, sh=None):
        y = (1 + sc) * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * (w + 0.5))
        return y if sh is None else y + sh

    Y, RSTD, block, warps, mode, per = kmod.modulated_rms_norm_forward(
        X, W, scale, shift, 1e-6, 0.5, casting_mode
    )
    assert RSTD.shape == (12,) and per == 6 and mode == {"llama": 0, "gemma": 1}[casting_mode]
    inputs = [X, W, scale] + ([shift] if with_shift else [])
    _close(Y, ref(*[t.double() for t in inputs]), dtype, "Y")
    got = kmod.modulated_rms_norm_backward(dY, X, W, scale, shift, RSTD, 0.5, mode, block, warps, per, False)
    want = _grads(ref, inputs, dY)
    for a, b, name in zip(got, want, ("dX", "dW", "dScale", "dShift")):
        _close(a, b, dtype if dtype == torch.float32 else torch.bfloat16, name)
    assert (got[3] is None) == (not with_shift) and got[2].shape == scale.shape
    with pytest.raises(ValueError, match="argument 'scale'"):
        kmod.modulated_rms_norm_forward(X, W, scale[:, :, :5], None, 1e-6, 0.0, "llama")


@pytest.mark.parametrize("device,dtype", _cases())
def test_attn_res(device, dtype):
    from liger_kernel.ops import attn_res as kar

    g = _g(device, 15)
    N, B, T, D = 4, 2, 5, 16
    blocks = [torch.randn(B, T, D, device=device, generator=g).to(dtype) for _ in range(N)]
    wq, wn = (torch.randn(D, device=device, generator=g).to(dtype) for _ in range(2))
    dh = torch.randn(B, T, D, device=device, generator=g).to(dtype)

    def ref(v, wq, wn):
        k = v * torch.rsqrt(v.square().mean(-1, keepdim=True) + 1e-6) * wn
        alpha = torch.softmax((k * wq).sum(-1), dim=0)
        return (alpha.unsqueeze(-1) * v).sum(0)

    h, V3, alpha, rstd = kar.attn_res_forward(blocks, wq, wn)
    assert h.shape == (B, T, D) and V3.shape == (N, B * T, D) and alpha.shape == rstd.shape == (B * T, N)
    v = torch.stack(blocks).double()
    _close(h, ref(v, wq.double(), wn.double()), dtype, "h")
    torch.testing.assert_close(alpha.sum(-1), torch.ones(B * T, device=device, dtype=torch.float32))
    dv, dwq, dwn = kar.attn_res_backward(dh, V3, wq, wn, alpha, rstd)
    want = _grads(ref, [torch.stack(blocks), wq, wn], dh)
    _close(dv, want[0].reshape(N, B * T, D), dtype, "dV")
    _close(dwq, want[1], dtype, "dw_query")
    _close(dwn, want[2], dtype, "dw_norm")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,K,E,block", [(37, 3, 5, 4), (1, 2, 9, 64), (50, 8, 16, 16)])
def test_compute_routing_metadata(device, T, K, E, block):
    from liger_kernel.ops import fused_moe as kmoe

    g = _g(device, 16)
    topk = torch.stack([torch.randperm(E, device=device, generator=g)[:K] for _ in range(T)]).int()
    count, start, gather, scatter, reverse, tile_start, tile_expert = kmoe.compute_routing_metadata(
        topk, E, block
    )
    flat = topk.reshape(-1).tolist()
    order = [p for e in range(E) for p in range(T * K) if flat[p] == e]  # by expert, then (t, k)
    counts = [flat.count(e) for e in range(E)]
    starts = [sum(counts[:e]) for e in range(E + 1)]
    tiles = [(starts[e] + j * block, e) for e in range(E) for j in range(-(-counts[e] // block))]
    assert all(
        t.dtype == torch.int32 for t in (count, start, gather, scatter, reverse, tile_start, tile_expert)
    )
    assert count.tolist() == counts and start.tolist() == starts
    assert scatter.tolist() == order and gather.tolist() == [p // K for p in order]
    assert [reverse[p].item() for p in order] == list(range(T * K))
    assert list(zip(tile_start.tolist(), tile_expert.tolist())) == tiles
    with pytest.raises(ValueError, match="argument 'topk_indices'"):
        kmoe.compute_routing_metadata(topk, E - 1 if topk.max() == E - 1 else 0, block)


def test_get_bucket_m():
    from liger_kernel.ops import mlp as kmlp

    assert [kmlp.get_bucket_m(m) for m in (0, 31, 32, 255, 256, 383, 4095, 4096, 10**6)] == [
        0, 0, 1, 7, 10, 10, 39, 40, 40,
    ]  # fmt: skip


@pytest.mark.parametrize("device,dtype", _cases())
@pytest.mark.parametrize("kernel_size,dilation", [(5, 1), (3, 2)])
def test_fused_neighborhood_attention_forward(device, dtype, kernel_size, dilation):
    from liger_kernel.ops import fused_neighborhood_attention as kna

    g = _g(device, 17)
    q, k, v = (torch.randn(2, 3, 13, 8, device=device, generator=g).to(dtype) for _ in range(3))
    i = torch.arange(13, device=device)
    rel = i[None, :] - i[:, None]
    allowed = (rel.abs() <= (kernel_size // 2) * dilation) & (rel % dilation == 0)
    scores = (q.double() @ k.double().transpose(-1, -2)) * 0.25
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
    out, weights, params = kna.fused_neighborhood_attention_forward(q, k, v, kernel_size, dilation, 0.25)
    _close(out, probs @ v.double(), dtype, "out")
    assert weights.dtype == dtype and len(params) == 3
    _close(weights, probs, dtype, "weights")
    with pytest.raises(NotImplementedError, match="argument 'return_lse'"):
        kna.fused_neighborhood_attention_forward(q, k, v, return_lse=True)


def test_rows_wider_than_liger_block_limit():
    # Liger-Kernel's Triton norms stop at 65536 columns; liger_cpp's kernels do not, nor do these
    x, w = torch.randn(2, 70001), torch.randn(70001)
    y, _, rstd, block, warps, _ = krms.rms_norm_forward(x, w, 1e-6, 0.0, "llama", None)
    assert (block, warps) == (65536, 32)
    _close(
        y,
        x.double() * torch.rsqrt(x.double().square().mean(-1, keepdim=True) + 1e-6) * w.double(),
        x.dtype,
        "Y",
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M,K,N", [(5, 12, 7), (33, 64, 24)])
def test_mm_int8int2(device, M, K, N):
    from liger_kernel.ops.experimental import mm_int8int2 as kmm

    g = _g(device, 18)
    w = torch.randint(-1, 2, (K, N), device=device, generator=g, dtype=torch.int32)
    w0 = w.clone()
    packed = kmm.pack_weights(w)
    assert torch.equal(w, w0) and packed.dtype == torch.uint8 and packed.shape == (K // 4, N)
    assert torch.equal(kmm.unpack_weights(packed), w)
    # the layout: packed row r, bits 2 i, holds row i K/4 + r of the weights, plus one
    assert int(packed[1, 2]) >> 4 & 3 == int(w[2 * (K // 4) + 1, 2]) + 1
    a = torch.randint(-128, 128, (M, K), device=device, generator=g, dtype=torch.int8)
    c = kmm.matmul(a, packed)
    want = (a.long().cpu() @ w.long().cpu()).to(torch.int32)
    assert c.dtype == torch.int32 and torch.equal(c.cpu(), want)
    assert kmm.get_autotune_config() == []
    with pytest.raises(ValueError, match="arguments 'a', 'b'"):
        kmm.matmul(a[:, :-1], packed)


@pytest.mark.parametrize("device,dtype", _cases())
def test_mhc_steps(device, dtype):
    from liger_kernel.ops import mhc as kmhc

    g = _g(device, 19)
    N, HC, C, eps, tmax = 7, 3, 10, 1e-6, 6
    M = HC * HC + 2 * HC
    x = torch.randn(N, HC * C, device=device, generator=g).to(dtype)
    phi = (torch.randn(HC * C, M, device=device, generator=g) * 0.2).to(dtype)
    b = torch.randn(M, device=device, generator=g)
    a_pre, a_post, a_res = (torch.rand((), device=device, generator=g) + 0.5 for _ in range(3))

    def mm_norm(x, phi):
        return (x @ phi) * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)

    mix, invr = kmhc.mhc_mm_norm_fwd(x, phi, eps)
    _close(mix, mm_norm(x.double(), phi.double()), dtype, "mix")
    gm = torch.randn(N, M, device=device, generator=g)
    gx, gphi = kmhc.mhc_mm_norm_bwd(x, phi, mix, invr, gm)
    rx, rphi = _grads(mm_norm, [x, phi], gm)
    _close(gx, rx, dtype, "mm_norm grad_x")
    _close(gphi, rphi, dtype, "mm_norm grad_phi")
    assert gx.dtype == dtype and gphi.dtype == torch.float32

    def sinkhorn(logits):
        mat = torch.softmax(logits, -1) + 1e-6
        mat = mat / (mat.sum(-2, keepdim=True) + 1e-6)
        for _ in range(tmax - 1):
            mat = mat / (mat.sum(-1, keepdim=True) + 1e-6)
            mat = mat / (mat.sum(-2, keepdim=True) + 1e-6)
        return mat

    m64, b64 = mix.double(), b.double()
    logits = (m64[:, 2 * HC :] * a_res.double() + b64[2 * HC :]).reshape(N, HC, HC)
    out_hres = torch.empty(N, HC, HC, device=device)
    h_pre, h_post, h_res, hist = kmhc.mhc_split_sinkhorn_fwd(
        mix, b, a_pre, a_post, a_res, tmax=tmax, pre_eps=0.01, sinkhorn_eps=1e-6, post_mult=2.0,
        out_hres=out_hres, return_hist=True,
    )  # fmt: skip
    assert h_res is out_hres and hist.shape == (N, tmax, HC, HC)
    _close(h_pre, torch.sigmoid(m64[:, :HC] * a_pre.double() + b64[:HC]) + 0.01, torch.float32, "h_pre")
    _close(
        h_post,
        2 * torch.sigmoid(m64[:, HC : 2 * HC] * a_post.double() + b64[HC : 2 * HC]),
        torch.float32,
        "h_post",
    )
    _close(h_res, sinkhorn(logits), torch.float32, "h_res")
    _close(hist[:, -1], h_res, torch.float32, "hist")
    gh = torch.randn(N, HC, HC, device=device, generator=g)
    got = kmhc.mhc_sinkhorn_bwd(mix, b, a_res, gh, tmax=tmax, sinkhorn_eps=1e-6)
    lg = logits.clone().requires_grad_()
    _close(got, torch.autograd.grad(sinkhorn(lg), lg, gh.double())[0], torch.float32, "sinkhorn grad")

    xs = x.reshape(N, HC, C)
    f = torch.randn(N, C, device=device, generator=g).to(dtype)
    go_pre = torch.randn(N, C, device=device, generator=g)
    go_post = torch.randn(N, HC, C, device=device, generator=g)

    def pre(x, h):
        return (h.unsqueeze(-1) * x).sum(1)

    def post_res(x, f, hp, hr):
        return hr @ x + hp.unsqueeze(-1) * f.unsqueeze(1)

    _close(kmhc.mhc_pre_fwd(xs, h_pre), pre(xs.double(), h_pre.double()), dtype, "pre")
    for a_, b_, name in zip(
        kmhc.mhc_pre_bwd(xs, h_pre, go_pre), _grads(pre, [xs, h_pre], go_pre), ("gx", "gh")
    ):
        _close(a_, b_, dtype, f"pre {name}")
    want = post_res(xs.double(), f.double(), h_post.double(), h_res.double())
    _close(kmhc.mhc_post_res_fwd(xs, f, h_post, h_res), want, dtype, "post_res")
    got = kmhc.mhc_post_res_bwd(xs, f, h_post, h_res, go_post)
    want = _grads(post_res, [xs, f, h_post, h_res], go_post)
    for a_, b_, name in zip(got, want, ("gx", "gf", "ghpost", "ghres")):
        _close(a_, b_, dtype, f"post_res {name}")
    with pytest.raises(ValueError, match="argument 'mix'"):
        kmhc.mhc_split_sinkhorn_fwd(mix[:, :-1], b[:-1], a_pre, a_post, a_res, tmax=2, pre_eps=0.0,
                                    sinkhorn_eps=1e-6, post_mult=2.0)  # fmt: skip


@pytest.mark.parametrize("device,dtype", _cases())
@pytest.mark.parametrize("gm,dm", [(1.0, 1.0), (0.7, 1.3)])
def test_fused_mlp_steps(device, dtype, gm, dm):
    from liger_kernel.ops import mlp as kmlp

    g = _g(device, 20)
    B, S, D, H = 2, 5, 12, 20
    x = torch.randn(B, S, D, device=device, generator=g).to(dtype)
    wg, wu = ((torch.randn(H, D, device=device, generator=g) * 0.3).to(dtype) for _ in range(2))
    wd = (torch.randn(D, H, device=device, generator=g) * 0.3).to(dtype)
    dO = torch.randn(B, S, D, device=device, generator=g).to(dtype)

    def ref(x, wg, wu, wd):
        return (F.silu(x @ wg.T * gm) * (x @ wu.T)) @ wd.T * dm

    A, cfg = kmlp.gemm_swiglu(x, wg, wu, gm, False)
    AGU, cfg = kmlp.gemm_swiglu(x, wg, wu, gm)
    assert AGU.shape == (B, S, 3 * H) and torch.equal(AGU[..., :H], A)
    _close(A @ wd.T * dm, ref(x.double(), wg.double(), wu.double(), wd.double()), dtype, "out")
    # Liger-Kernel's LigerMLPFunction.backward, step by step
    want = _grads(ref, [x, wg, wu, wd], dO)
    # The weight gradients' GEMMs are the caller's (Liger's Function runs them): done here in float64
    # on what the steps left in AGU, so that only the steps' outputs are under test. Each is a sum of
    # B S products of values rounded to the dtype, so its error scales with the terms, not with the
    # (possibly cancelling) sum: the tolerance is relative to the largest gradient.
    dWd = dO.double().reshape(-1, D).T @ AGU[..., :H].double().reshape(-1, H) * dm
    assert kmlp.swiglu_backward_dGU(dO, wd, AGU, cfg, gm, dm) is None
    dWug = AGU[..., H:].double().reshape(-1, 2 * H).T @ x.double().reshape(-1, D)
    dI = kmlp.swiglu_backward_dI(wg, wu, AGU)
    tol = dtype if dtype == torch.float32 else torch.bfloat16
    _close(dI, want[0], tol, "dI")
    t = _tol(tol)
    for got, exp, name in ((dWug[:H], want[1], "dWg"), (dWug[H:], want[2], "dWu"), (dWd, want[3], "dWd")):
        scale = max(1.0, exp.abs().max().item())
        torch.testing.assert_close(got, exp.double(), rtol=t["rtol"], atol=t["atol"] * scale, msg=name)
