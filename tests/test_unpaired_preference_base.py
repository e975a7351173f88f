"""LigerFusedLinearUnpairedPreferenceBase (liger_cpp.chunked_loss.fused_linear_unpaired_preference;
Liger's extension point for a KTO-like loss of one's own, reached as
liger_kernel.chunked_loss.fused_linear_unpaired_preference through the compatibility package): a
user's KTO subclass against a full-logit float64 reference written here, against liger_cpp's C++ KTO
loss, over chunkings and options; gradcheck; errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES
from rl_reference import leaf

from liger_cpp.chunked_loss import LigerFusedLinearKTOLoss
from liger_cpp.chunked_loss.fused_linear_unpaired_preference import LigerFusedLinearUnpairedPreferenceBase


class _KTO(LigerFusedLinearUnpairedPreferenceBase):
    @staticmethod
    def preference_loss_fn(log_probs, labels, full_target, ref_log_prob_chunk=None, beta=0.1, kl=None):
        ratio = log_probs - ref_log_prob_chunk if ref_log_prob_chunk is not None else log_probs
        sign = torch.where(labels, 1.0, -1.0).to(ratio.dtype)
        shifted = ratio - kl if kl is not None else ratio
        losses = 1 - torch.sigmoid(beta * shifted * sign)
        rewards = beta * ratio.detach()
        return losses.sum() / full_target.shape[0], (rewards * labels).sum(), (rewards * ~labels).sum()

    @classmethod
    def forward(
        cls,
        ctx,
        x,
        w,
        t,
        labels,
        b=None,
        rx=None,
        rw=None,
        rb=None,
        beta=0.1,
        kl=None,
        use_ref=True,
        avg=False,
        chunk_size=1,
    ):
        return LigerFusedLinearUnpairedPreferenceBase.forward(
            cls,
            ctx,
            x,
            w,
            t,
            labels,
            b,
            chunk_size=chunk_size,
            use_ref_model=use_ref,
            ref_input=rx,
            ref_weight=rw,
            ref_bias=rb,
            average_log_prob=avg,
            beta=beta,
            kl=kl,
        )

    @staticmethod
    def backward(ctx, *grad_output):
        g = LigerFusedLinearUnpairedPreferenceBase.backward(ctx, grad_output)
        return (g[0], g[1], None, None, g[4], *(None,) * 8)


def _inputs(device, dtype, B=5, T=10, H=13, V=29, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen, dtype=torch.float64) * scale).to(device, dtype)

    x = rn(B, T, H).requires_grad_(True)
    w = rn(V, H, scale=2.0 / math.sqrt(H)).requires_grad_(True)
    b = rn(V, scale=0.3).requires_grad_(True) if bias else None
    rx, rw = rn(B, T, 7), rn(V, 7, scale=2.0 / math.sqrt(7))
    rb = rn(V, scale=0.3) if bias else None
    t = torch.randint(0, V, (B, T), generator=gen)
    t[:, :2] = -100
    t[B - 2, -3:] = -100  # a shorter sequence
    labels = torch.tensor([True, False, True, True, False])[:B]
    return x, w, b, rx, rw, rb, t.to(device), labels.to(device)


def _reference(x, w, b, rx, rw, rb, t, labels, *, beta, kl, use_ref, avg):
    def seq(xx, ww, bb):
        logits = F.linear(xx, ww, bb).double()
        lp = torch.log_softmax(logits, -1)
        m = t != -100
        tok = lp.gather(-1, t.clamp(min=0).unsqueeze(-1)).squeeze(-1) * m
        return (tok.sum(-1) / m.sum(-1) if avg else tok.sum(-1)), logits

    s, logits = seq(x, w, b)
    r = seq(rx, rw, rb)[0].detach() if use_ref else torch.zeros_like(s)
    ratio = s - r
    sign = torch.where(labels, 1.0, -1.0).double()
    losses = 1 - torch.sigmoid(beta * ((ratio - kl) if kl is not None else ratio) * sign)
    sums = [
        (s * labels).sum(),
        (s * ~labels).sum(),
        (logits * labels.view(-1, 1, 1)).sum(),
        (logits * ~labels.view(-1, 1, 1)).sum(),
        (beta * ratio * labels).sum(),
        (beta * ratio * ~labels).sum(),
    ]
    return losses.sum() / t.shape[0], sums


def _run(
    device,
    dtype,
    *,
    chunk_size=1,
    beta=0.4,
    kl=None,
    use_ref=True,
    avg=False,
    bias=True,
    frozen_w=False,
    grad_out=0.7,
):
    x, w, b, rx, rw, rb, t, labels = _inputs(device, dtype, bias=bias)
    if frozen_w:
        w.requires_grad_(False)
    kl_t = torch.tensor(kl, dtype=torch.float64).to(device, dtype) if kl is not None else None
    loss, outs = _KTO.apply(x, w, t, labels, b, rx, rw, rb, beta, kl_t, use_ref, avg, chunk_size)
    (loss * grad_out).backward()
    a = [leaf(v, torch.float64) for v in (x, w, b)]
    rl, rsums = _reference(
        a[0],
        a[1],
        a[2],
        rx.double(),
        rw.double(),
        rb.double() if bias else None,
        t,
        labels,
        beta=beta,
        kl=kl,
        use_ref=use_ref,
        avg=avg,
    )
    (rl * grad_out).backward()
    tol = dict(rtol=1e-9, atol=1e-10) if dtype == torch.float64 else dict(rtol=2e-4, atol=2e-5)

    def close(o, r):
        torch.testing.assert_close(o.double(), r.detach().double(), **tol)

    close(loss, rl)
    assert len(outs) == 6
    for o, r in zip(outs, rsums):
        close(o, r)
    close(x.grad, a[0].grad)
    if frozen_w:
        assert w.grad is None
    else:
        close(w.grad, a[1].grad)
    if bias:
        close(b.grad, a[2].grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("chunk_size", [1, 2, 8])  # 5 chunks; 2 uneven; one chunk
def test_matches_full_logit_reference(device, dtype, chunk_size):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 on the CPU only")
    _run(device, dtype, chunk_size=chunk_size)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "opts",
    [
        dict(kl=0.3),
        dict(avg=True),
        dict(use_ref=False),
        dict(bias=False),
        dict(frozen_w=True),
        dict(grad_out=1.0),
    ],
)
def test_options(device, opts):
    _run(device, torch.float32, chunk_size=2, **opts)


def test_gradcheck_float64():
    x, w, b, rx, rw, rb, t, labels = _inputs("cpu", torch.float64, B=3, T=6, H=3, V=5)

    def f(x_, w_, b_):
        return _KTO.apply(x_, w_, t, labels, b_, rx, rw, rb, 0.5, None, True, True, 2)[0]

    assert torch.autograd.gradcheck(f, (x, w, b))


@pytest.mark.parametrize("device", DEVICES)
def test_agrees_with_the_fused_kto_loss(device):
    """The subclass on the base and liger_cpp's C++ KTO compute the same loss and gradients."""
    x, w, b, rx, rw, rb, t, labels = _inputs(device, torch.float32)
    x2, w2, b2 = (leaf(v) for v in (x, w, b))
    loss, _ = _KTO.apply(x, w, t, labels, b, rx, rw, rb, 0.4, None, True, False, 2)
    loss2 = LigerFusedLinearKTOLoss(beta=0.4, use_ref_model=True, chunk_size=2)(
        x2, w2, t, b2, preference_labels=labels, ref_input=rx, ref_weight=rw, ref_bias=rb
    )
    loss2 = loss2[0] if isinstance(loss2, tuple) else loss2
    loss.backward()
    loss2.backward()
    for a_, b_ in [(loss, loss2), (x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)]:
        torch.testing.assert_close(a_, b_, rtol=2e-5, atol=2e-6)


def test_loss_fn_must_be_implemented():
    class NoLoss(LigerFusedLinearUnpairedPreferenceBase):
        @staticmethod
        def forward(ctx, x, w, t, labels):
            return LigerFusedLinearUnpairedPreferenceBase.forward(NoLoss, ctx, x, w, t, labels)

    x, w, _, _, _, _, t, labels = _inputs("cpu", torch.float32, bias=False)
    with pytest.raises(NotImplementedError, match="must be implemented"):
        NoLoss.apply(x, w, t, labels)


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(t=torch.zeros(5, 9, dtype=torch.long)), "target"),
        (dict(labels=torch.ones(5)), "preference_labels"),
        (dict(labels=torch.ones(4, dtype=torch.bool)), "preference_labels"),
        (dict(w=torch.randn(29, 12)), "weight must be"),
        (dict(b=torch.randn(28)), "bias must be"),
        (dict(chunk=0), "chunk_size"),
        (dict(rx=None), "ref_input"),
    ],
)
def test_bad_input_is_named(bad, match):
    x, w, b, rx, rw, rb, t, labels = _inputs("cpu", torch.float32)
    a = dict(x=x, w=w, b=b, rx=rx, t=t, labels=labels, chunk=1)
    a.update(bad)
    with pytest.raises(ValueError, match=match):
        _KTO.apply(
            a["x"], a["w"], a["t"], a["labels"], a["b"], a["rx"], rw, rb, 0.1, None, True, False, a["chunk"]
        )


def test_compat_name_is_this_class():
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.chunked_loss.fused_linear_unpaired_preference import (
        LigerFusedLinearUnpairedPreferenceBase as Base,
    )

    assert Base is LigerFusedLinearUnpairedPreferenceBase
