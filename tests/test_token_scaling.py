"""use_token_scaling in the fused linear cross entropy (Liger's option; TRL's DFT loss): each token's
loss (CE and z-loss) times the detached probability of its target, softmax(logits)[target] of the
logits the loss sees (scaled, softcapped; label smoothing and class weights do not enter it), the
mean's normaliser unchanged. Against an independent float64 reference, every reduction and option,
odd shapes and uneven chunks, grad_output != 1, every dtype; the module and functional in Liger's
parameter order; opcheck and torch.compile."""

import math

import pytest
import torch
from conftest import DEVICES
from utils import ULP, assert_close_to_ref

import liger_cpp  # noqa: F401
from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
from liger_cpp.transformers import LigerFusedLinearCrossEntropyLoss, liger_fused_linear_cross_entropy

LOW = (torch.float16, torch.bfloat16)


def dft_ref(
    x,
    w,
    t,
    bias=None,
    ce_weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    logit_scale=1.0,
):
    """Materialised logits (x's dtype for the GEMM, then float32 / float64), per-token CE and
    z-loss, each times p = softmax(logits)[target] detached (0 for ignored tokens)."""
    logits = x @ w.t()
    if bias is not None:
        logits = logits + bias
    if logit_scale != 1.0:
        logits = logits * logit_scale
    lf = logits.float() if logits.dtype in LOW else logits
    if softcap is not None:
        lf = softcap * torch.tanh(lf / softcap)
    V = lf.shape[-1]
    lf = lf.reshape(-1, V)
    tf = t.reshape(-1)
    valid = tf != ignore_index
    tt = torch.where(valid, tf, torch.zeros_like(tf))
    lse = torch.logsumexp(lf, -1)
    wts = ce_weight.to(lf.dtype) if ce_weight is not None else torch.ones(V, dtype=lf.dtype, device=lf.device)
    nll = (lse - lf.gather(1, tt[:, None]).squeeze(1)) * wts[tt]
    ce = (1 - label_smoothing) * nll + (label_smoothing / V) * (wts * (lse[:, None] - lf)).sum(-1)
    z = lse_square_scale * lse * lse
    p = torch.softmax(lf.detach(), -1).gather(1, tt[:, None]).squeeze(1)
    zero = torch.zeros((), dtype=lf.dtype, device=lf.device)
    ce, z = torch.where(valid, ce * p, zero), torch.where(valid, z * p, zero)
    if reduction == "none":
        return (ce + z).reshape(t.shape), z.reshape(t.shape)
    if reduction == "sum":
        return ce.sum() + z.sum(), z.sum()
    n = valid.sum().to(lf.dtype)
    denom = (wts[tt] * valid).sum() if ce_weight is not None else n
    one = torch.ones((), dtype=lf.dtype, device=lf.device)
    z_mean = z.sum() / torch.where(n != 0, n, one)
    return ce.sum() / torch.where(denom != 0, denom, one) + z_mean, z_mean


def _inputs(device, dtype, batch, H, V, bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, H, generator=g).to(device, dtype).requires_grad_(True)
    # logits of std ~2: target probabilities spread over (0, 1), the scaling far from constant
    w = (torch.randn(V, H, generator=g) * (2.0 / math.sqrt(H))).to(device, dtype).requires_grad_(True)
    b = (torch.randn(V, generator=g) * 0.5).to(device, dtype).requires_grad_(True) if bias else None
    t = torch.randint(0, V, batch, generator=g)
    t.view(-1)[torch.randperm(t.numel(), generator=g)[:2]] = -100
    return x, w, b, t.to(device)


OPTIONS = {
    "plain": {},
    "smoothing_weights": dict(label_smoothing=0.1, ce_weight=True),
    "z_softcap_scale": dict(lse_square_scale=1e-3, softcap=7.0, logit_scale=0.8),
}


def _check(out, ref64, reflo, name, dtype):
    if dtype == torch.float64:
        torch.testing.assert_close(out.double(), ref64.double(), rtol=2e-6, atol=1e-7, msg=name)
        return
    # as test_fused_linear_cross_entropy: a floor of 8 float32 / 1 input-dtype ulp at the reference
    extra = (8.0 if dtype == torch.float32 else 1.0) * ULP[dtype] / ULP[out.dtype]
    assert_close_to_ref(out, ref64, reflo, name, extra_ulps=extra)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("opt", list(OPTIONS))
def test_token_scaling_matches_reference(device, dtype, reduction, opt):
    if device == "cuda" and dtype == torch.float64:
        pytest.skip("float64 is CPU-only")
    o = dict(OPTIONS[opt])
    x, w, b, t = _inputs(device, dtype, (3, 7), 24, 97, bias=opt != "plain")
    cw = (
        (torch.rand(97, generator=torch.Generator().manual_seed(3)) + 0.5).to(device)
        if o.pop("ce_weight", 0)
        else None
    )
    kw = dict(ce_weight=cw, reduction=reduction, **o)
    loss, z, _, _ = fused_linear_cross_entropy(
        x, w, t, b, use_token_scaling=True, return_z_loss=True, chunk_rows=5, **kw
    )
    go = torch.randn(t.shape, device=device) if reduction == "none" else torch.tensor(1.7, device=device)
    loss.backward(go)
    params = [x, w] + ([b] if b is not None else [])

    def ref(conv):
        ps = [conv(p).requires_grad_(True) for p in params]
        lr, zr = dft_ref(*ps[:2], t, ps[2] if b is not None else None, **kw)
        lr.backward(go.to(lr.dtype))
        return lr, zr, [p.grad for p in ps]

    l64, z64, g64 = ref(lambda u: u.detach().double())
    llo, zlo, glo = ref(lambda u: u.detach().clone())
    _check(loss, l64, llo, "loss", dtype)
    _check(z, z64, zlo, "z_loss", dtype)
    for name, p, r64, rlo in zip(("dX", "dW", "dB"), params, g64, glo):
        # dW in a 16-bit dtype accumulates over 5 chunks with one rounding each (as without scaling)
        if dtype in LOW and name == "dW":
            assert_close_to_ref(p.grad, r64, rlo, name, extra_ulps=1.0 + 0.5 * math.ceil(21 / 5))
        else:
            _check(p.grad, r64, rlo, name, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_token_scaling_changes_the_loss_and_is_off_by_default(device):
    x, w, b, t = _inputs(device, torch.float32, (2, 9), 16, 50, bias=True)
    plain = fused_linear_cross_entropy(x, w, t, b, reduction="none")[0]
    scaled = fused_linear_cross_entropy(x, w, t, b, reduction="none", use_token_scaling=True)[0]
    valid = t != -100
    # each valid token's loss times p = exp(-loss) in (0, 1): strictly smaller, never larger
    torch.testing.assert_close(scaled[valid], plain[valid] * torch.exp(-plain[valid]), rtol=1e-5, atol=1e-7)
    assert torch.all(scaled[~valid] == 0)
    torch.testing.assert_close(fused_linear_cross_entropy(x, w, t, b)[0], plain[valid].mean())


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_functional_in_liger_order(device):
    # Liger's positions: ..., return_z_loss, accum_dtype, use_token_scaling, return_token_accuracy, ...
    x, w, b, t = _inputs(device, torch.float32, (2, 5), 16, 40, bias=True)
    want = fused_linear_cross_entropy(x, w, t, b, use_token_scaling=True)[0]
    mod = LigerFusedLinearCrossEntropyLoss(None, -100, 0.0, 0.0, "mean", None, False, None, True)
    assert mod.use_token_scaling
    torch.testing.assert_close(mod(w, x, t, b), want)
    pos = liger_fused_linear_cross_entropy(x, w, t, b, None, -100, 0.0, 0.0, "mean", None, False, None, True)
    torch.testing.assert_close(pos, want)
    kw = liger_fused_linear_cross_entropy(x, w, t, b, use_token_scaling=True, return_token_accuracy=True)
    torch.testing.assert_close(kw.loss, want)
    assert kw.token_accuracy is not None
    assert not LigerFusedLinearCrossEntropyLoss().use_token_scaling


@pytest.mark.parametrize("device", DEVICES)
def test_token_scaling_opcheck_and_compile(device):
    x, w, b, t = _inputs(device, torch.float32, (3, 5), 16, 40, bias=True)
    op = torch.ops.liger.fused_linear_cross_entropy_fwd
    for red in ("mean", "none"):
        flags = red != "none"
        torch.library.opcheck(
            op,
            (
                x,
                w,
                t,
                b,
                None,
                -100,
                0.01,
                0.1,
                red,
                5.0,
                0.8,
                True,
                True,
                True,
                flags,
                flags,
                flags,
                None,
                4,
            ),
            {"use_token_scaling": True},
        )
    torch._dynamo.reset()

    def f(x, w, t, b):
        return fused_linear_cross_entropy(x, w, t, b, use_token_scaling=True, reduction="sum")[0]

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    got = cf(x, w, t, b)
    gg = torch.autograd.grad(got, [x, w, b])
    want = f(x, w, t, b)
    gw = torch.autograd.grad(want, [x, w, b])
    torch.testing.assert_close(got, want)
    for a, e in zip(gg, gw):
        torch.testing.assert_close(a, e)
