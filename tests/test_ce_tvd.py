"""Fused per-token cross entropy + total variation distance (liger_cpp.ops.ce_tvd.fused_ce_tvd, Liger's
LigerFusedCETVDFunction / LigerFusedCETVDLoss) against an independent pure-PyTorch reference written
from Liger-Kernel 0.8.5's ops/fused_ce_tvd.py, differentiated by autograd: ce = lse(s) - s[target],
tvd = 0.5 sum_v |softmax(s)_v - softmax(t)_v| (sign(0) = 0, as torch.abs), both 0 and without
gradient on ignored rows; the teacher takes no gradient. The reference runs in float64 (exact) and in
float32 (the low-precision PyTorch baseline of the tolerance) on the same, already rounded, logits."""

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from rl_reference import tol_close

from liger_cpp.ops.ce_tvd import fused_ce_tvd
from liger_cpp.transformers import LigerFusedCETVDLoss

DTYPES = [torch.float32, torch.bfloat16, torch.float64] + ([torch.float16] if CUDA_OK else [])


def reference(s, t, target, ignore_index=-100):
    """(ce, tvd) per row in s's dtype (float64 or float32). p = exp(s - lse(s)) and q likewise, the
    formula of Liger's kernel (in float32 its rounding grows with |logits|, which the float32 baseline
    then shows); identical rows give p - q == 0 exactly."""
    t = t.to(s.dtype)
    valid = target != ignore_index
    lse = torch.logsumexp(s, -1, keepdim=True)
    p, q = torch.exp(s - lse), torch.exp(t - torch.logsumexp(t, -1, keepdim=True))
    lse = lse.squeeze(-1)
    picked = s.gather(-1, torch.where(valid, target, 0).long().unsqueeze(-1)).squeeze(-1)
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    ce = torch.where(valid, lse - picked, zero)
    tvd = torch.where(valid, 0.5 * (p - q).abs().sum(-1), zero)
    return ce, tvd


def _make(device, dtype, BT=37, V=123, n_ignored=5, ignore_index=-100, scale=2.0, seed=0):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 is CPU-only")
    if dtype == torch.float16 and device == "cpu":
        pytest.skip("float16 is CUDA-only")
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(BT, V, generator=gen, dtype=torch.float64) * scale
    t = 0.6 * s + torch.randn(BT, V, generator=gen, dtype=torch.float64) * scale * 0.8
    target = torch.randint(0, V, (BT,), generator=gen)
    if ignore_index >= 0:  # a class id used as ignore_index: keep the other rows off it
        target = torch.where(target == ignore_index, (target + 1) % V, target)
    target[torch.randperm(BT, generator=gen)[:n_ignored]] = ignore_index
    g_ce = torch.randn(BT, generator=gen)
    g_tvd = torch.randn(BT, generator=gen) * 3.0
    return (
        s.to(device, dtype),
        t.to(device, dtype).requires_grad_(True),  # must stay without gradient
        target.to(device),
        g_ce.to(device),
        g_tvd.to(device),
    )


def _objective(ce, tvd, g_ce, g_tvd, grads):
    if grads == "ce":
        return (ce * g_ce).sum()
    if grads == "tvd":
        return (tvd * g_tvd).sum()
    return (ce * g_ce).sum() + (tvd * g_tvd).sum()


def _check(s, t, target, g_ce, g_tvd, grads="both", ignore_index=-100, fn=None):
    """Runs fn (default fused_ce_tvd) on leaf s and compares (ce, tvd, ds) with the references."""
    dtype = s.dtype
    s = s.detach().requires_grad_(True)
    if fn is None:
        ce, tvd = fused_ce_tvd(s, t, target, ignore_index)
    else:
        ce, tvd = fn(s, t, target, ignore_index)
    for name, o in (("ce", ce), ("tvd", tvd)):
        assert o.shape == target.shape, (name, o.shape)  # float32: test_output_dtypes
    _objective(ce, tvd, g_ce, g_tvd, grads).backward()
    assert t.grad is None
    assert s.grad.dtype == dtype and s.grad.shape == s.shape
    res = {}
    for rdt in (torch.float64, torch.float32):
        sr = s.detach().to(rdt).requires_grad_(True)
        rce, rtvd = reference(sr, t.detach(), target, ignore_index)
        _objective(rce, rtvd, g_ce.to(rdt), g_tvd.to(rdt), grads).backward()
        res[rdt] = (rce, rtvd, sr.grad)
    r64, rlo = res[torch.float64], res[torch.float32]
    # float32 outputs of exactly known logits: the float32 bound whatever the input dtype
    tol_close("ce", ce, r64[0], rlo[0], torch.float32)
    tol_close("tvd", tvd, r64[1], rlo[1], torch.float32)
    tol_close("dstudent", s.grad, r64[2], rlo[2], dtype)
    ign = target == ignore_index
    assert (ce[ign] == 0).all() and (tvd[ign] == 0).all()
    assert (s.grad[ign] == 0).all()
    return ce, tvd, s.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(37, 123), (5, 2049)], ids=str)
@pytest.mark.parametrize("grads", ["both", "ce", "tvd"])
def test_forward_backward(device, dtype, shape, grads):
    s, t, target, g_ce, g_tvd = _make(device, dtype, *shape, n_ignored=2 if shape[0] == 5 else 5)
    _check(s, t, target, g_ce, g_tvd, grads)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_output_dtypes(device, dtype):
    # Liger's: ce and tvd are float32 whatever the logits' dtype (float64 logits, CPU only here, give
    # float64: gradcheck needs it); the gradient has the student's
    s, t, target, g_ce, g_tvd = _make(device, dtype, BT=4, V=9, n_ignored=1)
    s.requires_grad_(True)
    ce, tvd = fused_ce_tvd(s, t, target)
    out = torch.float64 if dtype == torch.float64 else torch.float32
    assert (ce.dtype, tvd.dtype) == (out, out)
    _objective(ce, tvd, g_ce, g_tvd, "both").backward()
    assert s.grad.dtype == dtype and t.grad is None


@pytest.mark.skipif(not CUDA_OK, reason="CUDA kernels")
@pytest.mark.parametrize("device", ["cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_large_vocab_cuda(device, dtype):
    s, t, target, g_ce, g_tvd = _make(device, dtype, BT=3, V=151936, n_ignored=1)
    _check(s, t, target, g_ce, g_tvd)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ignore_index", [-100, -1, 0])
@pytest.mark.parametrize("scale", [2.0, 30.0])  # 30: peaked rows, most probabilities underflow
def test_ignore_index_and_scale(device, ignore_index, scale):
    s, t, target, g_ce, g_tvd = _make(device, torch.float32, ignore_index=ignore_index, scale=scale)
    _check(s, t, target, g_ce, g_tvd, ignore_index=ignore_index)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_all_rows_ignored(device, dtype):
    s, t, target, g_ce, g_tvd = _make(device, dtype, BT=6, n_ignored=6)
    ce, tvd, grad = _check(s, t, target, g_ce, g_tvd)
    assert (ce == 0).all() and (tvd == 0).all() and (grad == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["column_slice", "transposed"])
@pytest.mark.parametrize("target_dtype", [torch.int64, torch.int32], ids=str)
def test_strided_logits_and_int32_targets(device, layout, target_dtype):
    s, t, target, g_ce, g_tvd = _make(device, torch.float32)
    BT, V = s.shape
    if layout == "column_slice":  # rows with a stride of V + 9, starting at column 3
        wide = torch.randn(BT, V + 9, device=device)
        wide[:, 3 : 3 + V] = s
        s_view = wide[:, 3 : 3 + V]
    else:  # columns with a stride of BT
        s_view = s.t().contiguous().t()
    assert not s_view.is_contiguous()
    tw = torch.randn(BT, V + 5, device=device)
    tw[:, :V] = t.detach()
    t_view = tw[:, :V].requires_grad_(False)
    ce, tvd, grad = _check(s_view, t_view, target.to(target_dtype), g_ce, g_tvd)
    ce2, tvd2, grad2 = _check(s, t, target, g_ce, g_tvd)
    torch.testing.assert_close(ce, ce2, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(tvd, tvd2, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, grad2, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_ties(device, dtype):
    # Rows where teacher == student (p == q: tvd 0 and no tvd gradient, sign(0) = 0), a row of
    # constant logits for both (uniform p == q), mixed with ordinary and ignored rows.
    s, t, target, g_ce, g_tvd = _make(device, dtype, BT=12, n_ignored=2)
    tie = torch.zeros(12, dtype=torch.bool)
    tie[[0, 3, 4, 7, 11]] = True
    t = t.detach().clone()
    t[tie.to(device)] = s[tie.to(device)]
    s[5] = 1.25
    t[5] = 1.25
    tie[5] = True
    tie = tie.to(device)
    ce, tvd, grad = _check(s, t, target, g_ce, g_tvd)
    assert torch.isfinite(grad).all()
    assert (tvd[tie] == 0).all()
    # on tie rows the gradient is the cross entropy's alone
    _, _, grad_ce_only = _check(s, t, target, g_ce, torch.zeros_like(g_tvd))
    torch.testing.assert_close(grad[tie], grad_ce_only[tie])


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    s, t, target, g_ce, g_tvd = _make(device, torch.float32, ignore_index=-1)
    mod = LigerFusedCETVDLoss(ignore_index=-1)
    assert mod.ignore_index == -1 and LigerFusedCETVDLoss().ignore_index == -100
    _check(s, t, target, g_ce, g_tvd, ignore_index=-1, fn=lambda a, b, c, i: mod(a, b, c))


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph_second_backward(device):
    s, t, target, g_ce, g_tvd = _make(device, torch.float32)
    x = s.detach().requires_grad_(True)
    ce, tvd = fused_ce_tvd(x, t, target)
    total = _objective(ce, tvd, g_ce, g_tvd, "both")
    total.backward(retain_graph=True)
    first = x.grad.clone()
    total.backward()
    torch.testing.assert_close(x.grad, 2 * first)


def test_gradcheck_float64_cpu():
    gen = torch.Generator().manual_seed(15)
    BT, V = 4, 6
    s = torch.randn(BT, V, generator=gen, dtype=torch.float64)
    t = torch.randn(BT, V, generator=gen, dtype=torch.float64) * 1.5
    # every |p_v - q_v| well away from 0: the step never flips a sign of the TVD
    assert (torch.softmax(s, -1) - torch.softmax(t, -1)).abs().min() > 0.01
    target = torch.tensor([1, -100, 5, 0])
    s.requires_grad_(True)
    # float32 outputs for float64 inputs: a larger step keeps their rounding out
    kw = dict(eps=1e-3, atol=1e-3, rtol=1e-3)
    assert torch.autograd.gradcheck(lambda a: fused_ce_tvd(a, t, target), (s,), **kw)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    s, t, target, g_ce, g_tvd = _make(device, torch.float32, BT=10, V=33, n_ignored=3)
    t = t.detach()
    torch.library.opcheck(torch.ops.liger.ce_tvd_fwd, (s.detach().requires_grad_(True), t, target, -100))
    torch.library.opcheck(torch.ops.liger.ce_tvd_fwd, (s, t, target.int(), -100))
    ce, tvd, stats = torch.ops.liger.ce_tvd_fwd(s, t, target, -100)
    assert stats.dtype == torch.float32 and stats.shape == (10, 3)
    r_ce, r_tvd = reference(s.double(), t, target)
    torch.testing.assert_close(ce, r_ce.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tvd, r_tvd.float(), rtol=1e-5, atol=1e-5)
    torch.library.opcheck(torch.ops.liger.ce_tvd_bwd, (g_ce, g_tvd, s, t, target, stats, -100))
    grad = torch.ops.liger.ce_tvd_bwd(g_ce, g_tvd, s, t, target, stats, -100)
    sr = s.double().requires_grad_(True)
    _objective(*reference(sr, t, target), g_ce.double(), g_tvd.double(), "both").backward()
    torch.testing.assert_close(grad, sr.grad.float(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    s, t, target, g_ce, g_tvd = _make(device, torch.float32)
    x = s.detach().requires_grad_(True)
    t = t.detach()

    def f(x):
        ce, tvd = fused_ce_tvd(x * 1.5, t, target)
        return (ce * g_ce).sum() + (tvd * g_tvd).sum()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    out = cf(x)
    out.backward()
    g = x.grad.clone()
    x.grad = None
    e = f(x)
    e.backward()
    torch.testing.assert_close(out, e, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(g, x.grad, rtol=1e-5, atol=1e-7)
    assert g.abs().max() > 0


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    s, t, target, _, _ = _make(device, torch.float32, BT=6, V=20, n_ignored=1)
    t = t.detach()
    errs = (ValueError, RuntimeError, IndexError)
    with pytest.raises(errs, match="teacher_logits"):
        fused_ce_tvd(s, t[:, :19], target)
    with pytest.raises(errs, match="teacher_logits"):
        fused_ce_tvd(s, t[:5], target)
    with pytest.raises(errs, match="student_logits"):
        fused_ce_tvd(s[0], t[0], target[:1])
    with pytest.raises(errs, match="student_logits"):
        fused_ce_tvd(s.view(2, 3, 20), t.view(2, 3, 20), target)
    with pytest.raises(errs, match="target"):
        fused_ce_tvd(s, t, target[:5])
    with pytest.raises(errs, match="target"):
        fused_ce_tvd(s, t, target.view(2, 3))
    with pytest.raises(errs, match="teacher_logits"):
        fused_ce_tvd(s, t.double() if device == "cpu" else t.half(), target)
    with pytest.raises(errs, match="teacher_logits"):
        fused_ce_tvd(s.bfloat16(), t, target)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [20, -5])
def test_target_out_of_range(device, bad):
    import liger_cpp

    s, t, target, _, _ = _make(device, torch.float32, BT=6, V=20, n_ignored=1)
    target[3] = bad
    # CUDA: the documented synchronising check (the default is a device-side assertion)
    prev = liger_cpp.set_check_targets(True) if device == "cuda" else None
    try:
        with pytest.raises((ValueError, RuntimeError, IndexError), match="target"):
            fused_ce_tvd(s, t.detach(), target)
    finally:
        if prev is not None:
            liger_cpp.set_check_targets(prev)


@pytest.mark.parametrize("device", DEVICES)
def test_compat_function_and_module(device):
    from compat_env import ensure_compat

    ensure_compat()
    import liger_kernel.transformers as kt
    from liger_kernel.ops import LigerFusedCETVDFunction
    from liger_kernel.transformers.fused_ce_tvd import LigerFusedCETVDLoss as CompatLoss

    assert kt.LigerFusedCETVDLoss is CompatLoss
    s, t, target, g_ce, g_tvd = _make(device, torch.bfloat16)
    x = s.detach().requires_grad_(True)
    ce, tvd = fused_ce_tvd(x, t, target)
    _objective(ce, tvd, g_ce, g_tvd, "both").backward()
    want = (ce.detach(), tvd.detach(), x.grad.clone())
    for call in (
        lambda a: LigerFusedCETVDFunction.apply(a, t, target, -100),
        lambda a: LigerFusedCETVDFunction.apply(a, t, target),
        lambda a: CompatLoss()(a, t, target),
        lambda a: CompatLoss(ignore_index=-100)(student_logits=a, teacher_logits=t, target=target),
    ):
        x.grad = None
        ce2, tvd2 = call(x)
        _objective(ce2, tvd2, g_ce, g_tvd, "both").backward()
        for a, b in zip((ce2, tvd2, x.grad), want):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert t.grad is None


def test_reference_matches_liger_closed_form():
    # The autograd reference against the closed forms of Liger's backward kernel:
    # d ce / ds = p - onehot(target), d tvd / ds = 0.5 p (sign(p - q) - sum_u p_u sign(p_u - q_u)).
    s, t, target, g_ce, g_tvd = _make("cpu", torch.float64, BT=9, V=17, n_ignored=2)
    t = t.detach().clone()
    t[2] = s[2]  # a tie row
    sr = s.clone().requires_grad_(True)
    ce, tvd = reference(sr, t, target)
    _objective(ce, tvd, g_ce.double(), g_tvd.double(), "both").backward()
    p, q = torch.softmax(s, -1), torch.softmax(t, -1)
    sign = torch.sign(p - q)
    valid = (target != -100).double().unsqueeze(-1)
    onehot = torch.nn.functional.one_hot(torch.where(target < 0, 0, target), 17).double()
    d_ce = p - onehot
    d_tvd = 0.5 * p * (sign - (p * sign).sum(-1, keepdim=True))
    want = (g_ce.double().unsqueeze(-1) * d_ce + g_tvd.double().unsqueeze(-1) * d_tvd) * valid
    torch.testing.assert_close(sr.grad, want, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(ce, -(torch.log_softmax(s, -1) * onehot).sum(-1) * valid.squeeze(-1))
    assert tvd[2] == 0 and (sr.grad[2] - g_ce[2].double() * d_ce[2]).abs().max() < 1e-15


@pytest.mark.parametrize("device", DEVICES)
def test_compat_forward_backward_entry_points(device):
    # Liger's module-level kernel entry points (liger_kernel.ops.fused_ce_tvd): the forward's five
    # per-row tensors, and the backward from them, equal to the op's autograd.
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.ops.fused_ce_tvd import fused_ce_tvd_backward, fused_ce_tvd_forward

    s, t, target, g_ce, g_tvd = _make(device, torch.float32, BT=9, V=37, n_ignored=2)
    t = t.detach()
    ce, tvd, lse_s, lse_t, sigma = fused_ce_tvd_forward(s, t, target, -100)
    s2 = s.detach().clone().requires_grad_(True)
    ce2, tvd2 = fused_ce_tvd(s2, t, target)
    torch.testing.assert_close(ce, ce2.detach(), rtol=0, atol=0)
    torch.testing.assert_close(tvd, tvd2.detach(), rtol=0, atol=0)
    valid = target != -100
    torch.testing.assert_close(lse_s[valid], torch.logsumexp(s.detach().float(), -1)[valid])
    (ce2 * g_ce + tvd2 * g_tvd).sum().backward()
    grad = fused_ce_tvd_backward(g_ce, g_tvd, s.detach(), t, target, lse_s, lse_t, sigma, -100)
    torch.testing.assert_close(grad, s2.grad, rtol=0, atol=0)
