"""LigerFusedLinearPreferenceBase (liger_cpp.chunked_loss.fused_linear_preference; Liger's extension
point for a paired preference loss of one's own, reached as
liger_kernel.chunked_loss.fused_linear_preference through the compatibility package): a user's DPO
subclass, written as AgileRL writes one (keyword call of the base's forward, the base's backward
with the subclass's gradient tuple), against a full-logit float64 reference written here, against
liger_cpp's C++ DPO loss, over chunkings and options; gradcheck; errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES
from rl_reference import leaf

from liger_cpp.chunked_loss import LigerFusedLinearDPOLoss
from liger_cpp.chunked_loss.fused_linear_preference import LigerFusedLinearPreferenceBase


class _DPO(LigerFusedLinearPreferenceBase):
    """A user's sigmoid DPO with an NLL weight; rewards as auxiliary outputs."""

    @staticmethod
    def preference_loss_fn(
        chosen_logps, rejected_logps, full_target, ref_chosen_logps=None, ref_rejected_logps=None, beta=0.1
    ):
        rc = ref_chosen_logps if ref_chosen_logps is not None else torch.zeros_like(chosen_logps)
        rr = ref_rejected_logps if ref_rejected_logps is not None else torch.zeros_like(rejected_logps)
        diff = beta * ((chosen_logps - rc) - (rejected_logps - rr))
        loss = -F.logsigmoid(diff).sum() / (full_target.shape[0] // 2)
        return loss, beta * (chosen_logps - rc).detach(), beta * (rejected_logps - rr).detach()

    @classmethod
    def forward(
        cls,
        ctx,
        _input,
        weight,
        target,
        bias=None,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        ignore_index=-100,
        beta=0.1,
        alpha=1.0,
        compute_nll_loss=True,
        use_ref_model=True,
        average_log_prob=False,
        chunk_size=1,
        nll_target=None,
    ):
        return LigerFusedLinearPreferenceBase.forward(
            cls=cls,
            ctx=ctx,
            _input=_input,
            weight=weight,
            target=target,
            bias=bias,
            ignore_index=ignore_index,
            alpha=alpha,
            beta=beta,
            compute_nll_loss=compute_nll_loss,
            nll_target=nll_target,
            use_ref_model=use_ref_model,
            ref_input=ref_input,
            ref_weight=ref_weight,
            ref_bias=ref_bias,
            average_log_prob=average_log_prob,
            chunk_size=chunk_size,
        )

    @staticmethod
    def backward(ctx, *grad_output):
        grads = LigerFusedLinearPreferenceBase.backward(ctx, grad_output)[:4]
        return (*grads, *(None,) * 12)


def _inputs(device, dtype, B=3, T=11, H=13, V=29, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen, dtype=torch.float64) * scale).to(device, dtype)

    x = rn(2 * B, T, H).requires_grad_(True)
    w = rn(V, H, scale=2.0 / math.sqrt(H)).requires_grad_(True)
    b = rn(V, scale=0.3).requires_grad_(True) if bias else None
    xr, wr = rn(2 * B, T, 7), rn(V, 7, scale=2.0 / math.sqrt(7))
    br = rn(V, scale=0.3) if bias else None
    t = torch.randint(0, V, (2 * B, T), generator=gen)
    t[:, :3] = -100  # the prompt
    t[1, -4:] = -100  # a shorter completion
    return x, w, b, xr, wr, br, t.to(device)


def _reference(x, w, b, xr, wr, br, t, *, beta, alpha, nll, use_ref, avg, nll_target=None):
    """Liger's preference base with full logits, float64, differentiated by autograd."""
    B = t.shape[0] // 2

    def seq_logps(xx, ww, bb):
        lp = torch.log_softmax(F.linear(xx, ww, bb).double(), -1)
        m = t != -100
        tok = lp.gather(-1, t.clamp(min=0).unsqueeze(-1)).squeeze(-1) * m
        return (tok.sum(-1) / m.sum(-1) if avg else tok.sum(-1)), lp

    s, lp = seq_logps(x, w, b)
    if use_ref:
        with torch.no_grad():
            r, _ = seq_logps(xr, wr, br)
    else:
        r = torch.zeros_like(s)
    c, rj = s[:B], s[B:]
    loss = -F.logsigmoid(beta * ((c - r[:B]) - (rj - r[B:]))).sum() / B
    labels = (nll_target if nll_target is not None else t)[:B]
    nll_loss = torch.zeros((), dtype=torch.float64)
    if nll:
        nll_loss = F.nll_loss(lp[:B].reshape(-1, lp.shape[-1]), labels.reshape(-1), reduction="sum")
        nll_loss = nll_loss / (labels != -100).sum().clamp(min=1)
    logits = F.linear(x, w, b).double()
    denom = B * t.shape[1] * w.shape[0]
    means = logits[:B].sum() / denom, logits[B:].sum() / denom
    return alpha * nll_loss + loss, c, rj, means, nll_loss


def _run(
    device,
    dtype,
    *,
    chunk_size=1,
    beta=0.3,
    alpha=0.7,
    nll=True,
    use_ref=True,
    avg=False,
    bias=True,
    frozen_w=False,
    grad_out=0.7,
    with_nll_target=False,
):
    x, w, b, xr, wr, br, t = _inputs(device, dtype, bias=bias)
    if frozen_w:
        w.requires_grad_(False)
    nt = None
    if with_nll_target:
        nt = t.clone()
        nt[:, 3:5] = -100
    loss, outs = _DPO.apply(
        x,
        w,
        t,
        b,
        xr if use_ref else None,
        wr if use_ref else None,
        br if use_ref else None,
        -100,
        beta,
        alpha,
        nll,
        use_ref,
        avg,
        chunk_size,
        nt,
    )
    (loss * grad_out).backward()
    a = [leaf(v, torch.float64) for v in (x, w, b)]
    rl, rc, rr, rmeans, rnll = _reference(
        a[0],
        a[1],
        a[2],
        xr.double(),
        wr.double(),
        br.double() if bias else None,
        t,
        beta=beta,
        alpha=alpha,
        nll=nll,
        use_ref=use_ref,
        avg=avg,
        nll_target=nt,
    )
    (rl * grad_out).backward()
    tol = dict(rtol=1e-9, atol=1e-11) if dtype == torch.float64 else dict(rtol=2e-4, atol=2e-5)
    # (the reference's NLL without an NLL term is a CPU constant 0)
    close = lambda o, r: torch.testing.assert_close(o.double(), r.detach().to(o.device), **tol)  # noqa: E731
    close(loss, rl)
    close(outs[0], rc)
    close(outs[1], rr)
    close(outs[2], rmeans[0])
    close(outs[3], rmeans[1])
    close(outs[4], rnll)
    assert outs[5].shape == (3,) and outs[6].shape == (3,)  # the rewards, concatenated over chunks
    close(x.grad, a[0].grad)
    if frozen_w:
        assert w.grad is None
    else:
        close(w.grad, a[1].grad)
    if bias:
        close(b.grad, a[2].grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("chunk_size", [1, 2, 5])  # 3 chunks of a pair; 1 + 2 pairs; one chunk
def test_matches_full_logit_reference(device, dtype, chunk_size):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 on the CPU only")
    _run(device, dtype, chunk_size=chunk_size)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "opts",
    [
        dict(avg=True),
        dict(nll=False),
        dict(use_ref=False),
        dict(bias=False),
        dict(frozen_w=True),
        dict(with_nll_target=True),
        dict(grad_out=1.0, alpha=1.0),
    ],
)
def test_options(device, opts):
    _run(device, torch.float32, chunk_size=2, **opts)


def test_gradcheck_float64():
    x, w, b, xr, wr, br, t = _inputs("cpu", torch.float64, B=2, T=8, H=3, V=5)

    def f(x_, w_, b_):
        return _DPO.apply(x_, w_, t, b_, xr, wr, br, -100, 0.5, 0.4, True, True, True, 1)[0]

    assert torch.autograd.gradcheck(f, (x, w, b))


@pytest.mark.parametrize("device", DEVICES)
def test_agrees_with_the_fused_dpo_loss(device):
    """The generic Python chunk loop and liger_cpp's C++ DPO compute the same loss and gradients."""
    x, w, b, xr, wr, br, t = _inputs(device, torch.float32)
    x2, w2, b2 = (leaf(v) for v in (x, w, b))
    loss, _ = _DPO.apply(x, w, t, b, xr, wr, br, -100, 0.3, 0.7, True, True, False, 2)
    fused = LigerFusedLinearDPOLoss(beta=0.3, alpha=0.7, compute_nll_loss=True, chunk_size=2)
    loss2 = fused(w2, x2, t, b2, xr, wr, br)
    loss2 = loss2[0] if isinstance(loss2, tuple) else loss2
    loss.backward()
    loss2.backward()
    for a_, b_ in [(loss, loss2), (x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)]:
        torch.testing.assert_close(a_, b_, rtol=2e-5, atol=2e-6)


def test_loss_fn_must_be_implemented():
    class NoLoss(LigerFusedLinearPreferenceBase):
        @staticmethod
        def forward(ctx, x, w, t):
            return LigerFusedLinearPreferenceBase.forward(NoLoss, ctx, x, w, t)

    x, w, _, _, _, _, t = _inputs("cpu", torch.float32, bias=False)
    with pytest.raises(NotImplementedError, match="must be implemented"):
        NoLoss.apply(x, w, t)


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(t=torch.zeros(6, 10, dtype=torch.long)), "target"),
        (dict(x=torch.randn(5, 11, 13), t=torch.zeros(5, 11, dtype=torch.long)), "even"),
        (dict(w=torch.randn(29, 12)), "weight must be"),
        (dict(b=torch.randn(28)), "bias must be"),
        (dict(chunk=0), "chunk_size"),
        (dict(xr=None), "ref_input"),
    ],
)
def test_bad_input_is_named(bad, match):
    x, w, b, xr, wr, br, t = _inputs("cpu", torch.float32)
    a = dict(x=x, w=w, b=b, xr=xr, wr=wr, br=br, t=t, chunk=1)
    a.update(bad)
    with pytest.raises(ValueError, match=match):
        _DPO.apply(
            a["x"],
            a["w"],
            a["t"],
            a["b"],
            a["xr"],
            a["wr"],
            a["br"],
            -100,
            0.1,
            1.0,
            True,
            True,
            False,
            a["chunk"],
        )


def test_compat_name_is_this_class():
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.chunked_loss.fused_linear_preference import LigerFusedLinearPreferenceBase as Base

    assert Base is LigerFusedLinearPreferenceBase
