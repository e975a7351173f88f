"""LigerFusedLinearPPOBase (liger_cpp.chunked_loss.fused_linear_ppo; Liger's extension point for a
policy-gradient loss of one's own, reached as liger_kernel.chunked_loss.fused_linear_ppo through the
compatibility package): a user's GRPO-family loss written as a subclass against the full-logit
reference of tests/rl_reference.py, over chunkings, loss types and options; against liger_cpp's C++
GRPO loss; gradcheck; errors."""

import math

import pytest
import torch
from conftest import DEVICES
from rl_reference import grpo_reference, leaf

from liger_cpp.chunked_loss import LigerFusedLinearGRPOLoss
from liger_cpp.chunked_loss.fused_linear_ppo import LigerFusedLinearPPOBase


class _GRPO(LigerFusedLinearPPOBase):
    """A user's clipped policy gradient + k3 KL (grpo, bnpo, dapo normalisations), metrics (kl, clip)."""

    @staticmethod
    def ppo_loss_fn(
        per_token_logps,
        attention_mask,
        advantages,
        full_attention_mask,
        ref_per_token_logps=None,
        old_per_token_logps=None,
        epsilon_low=0.2,
        epsilon_high=0.2,
        beta=0.04,
        loss_type="dapo",
        num_items_in_batch=None,
        **_,
    ):
        old = old_per_token_logps if old_per_token_logps is not None else per_token_logps.detach()
        ratio = torch.exp(per_token_logps - old)
        A = advantages.unsqueeze(1)
        ptl = -torch.min(ratio * A, ratio.clamp(1 - epsilon_low, 1 + epsilon_high) * A)
        m = attention_mask.to(ptl.dtype)
        n_all = full_attention_mask.sum().clamp(min=1.0)
        kl = None
        if beta != 0.0:
            d = ref_per_token_logps - per_token_logps
            kl = torch.exp(d) - d - 1.0
            ptl = ptl + beta * kl
        if loss_type == "grpo":
            loss = ((ptl * m).sum(-1) / m.sum(-1).clamp(min=1.0)).sum() / full_attention_mask.shape[0]
        elif loss_type == "bnpo":
            loss = (ptl * m).sum() / n_all
        else:  # dapo
            loss = (ptl * m).sum() / LigerFusedLinearPPOBase._compute_dapo_normalizer(
                full_attention_mask, num_items_in_batch
            )
        clipped = ((ratio < 1 - epsilon_low) & (A < 0)) | ((ratio > 1 + epsilon_high) & (A > 0))
        metrics = ([(kl * m).sum() / n_all] if kl is not None else []) + [(clipped * m).sum() / n_all]
        return loss, metrics

    @classmethod
    def forward(
        cls,
        ctx,
        x,
        w,
        ids,
        mask,
        adv,
        b=None,
        ref_lp=None,
        old_lp=None,
        ref_x=None,
        ref_w=None,
        ref_b=None,
        beta=0.04,
        loss_type="dapo",
        temperature=1.0,
        use_ref_model=True,
        chunk_size=1,
        num_items_in_batch=None,
    ):
        return LigerFusedLinearPPOBase.forward(
            cls,
            ctx,
            x,
            w,
            ids,
            mask,
            adv,
            b,
            ref_lp,
            old_lp,
            ref_x,
            ref_w,
            ref_b,
            beta=beta,
            loss_type=loss_type,
            temperature=temperature,
            use_ref_model=use_ref_model,
            chunk_size=chunk_size,
            num_items_in_batch=num_items_in_batch,
        )

    @staticmethod
    def backward(ctx, grad_output, *grad_metrics):
        g = LigerFusedLinearPPOBase.backward(ctx, grad_output)
        return (*g[:6], *(None,) * 11)


def _inputs(device, dtype, B=5, T=9, H=13, V=31, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen, dtype=torch.float64) * scale).to(device, dtype)

    x = rn(B, T, H).requires_grad_(True)
    w = rn(V, H, scale=2.0 / math.sqrt(H)).requires_grad_(True)
    b = rn(V, scale=0.3).requires_grad_(True) if bias else None
    ids = torch.randint(0, V, (B, T), generator=gen).to(device)
    mask = (torch.rand(B, T, generator=gen) > 0.25).to(device)
    mask[2] = False  # an empty completion
    adv = rn(B)
    old = rn(B, T, scale=0.1).float() - 3.5  # off-policy: some ratios clip
    ref = rn(B, T, scale=0.1).float() - 3.5
    return x, w, b, ids, mask, adv, old, ref


def _run(
    device,
    dtype,
    *,
    loss_type="dapo",
    chunk_size=1,
    beta=0.04,
    temperature=1.0,
    bias=True,
    use_ref=True,
    ref_head=False,
    frozen_w=False,
    grad_out=0.7,
    old=True,
    num_items=None,
):
    x, w, b, ids, mask, adv, old_lp, ref_lp = _inputs(device, dtype, bias=bias)
    if frozen_w:
        w.requires_grad_(False)
    rx = rw = None
    if ref_head:
        gen = torch.Generator().manual_seed(9)
        rx = torch.randn(*x.shape[:2], 7, generator=gen, dtype=torch.float64).to(device, dtype)
        rw = (torch.randn(w.shape[0], 7, generator=gen, dtype=torch.float64) * 0.5).to(device, dtype)
    loss, metrics = _GRPO.apply(
        x,
        w,
        ids,
        mask,
        adv,
        b,
        None if ref_head else ref_lp,
        old_lp if old else None,
        rx,
        rw,
        None,
        beta,
        loss_type,
        temperature,
        use_ref,
        chunk_size,
        num_items,
    )
    (loss * grad_out).backward()
    a = [leaf(v, torch.float64) for v in (x, w, b)]
    rl, rm, _ = grpo_reference(
        a[0],
        a[1],
        a[2],
        ids,
        mask,
        adv.double(),
        ref_lp=None if (ref_head or not use_ref) else ref_lp.double(),
        ref_head=(rx.double(), rw.double(), None) if ref_head else None,
        old_lp=old_lp.double() if old else None,
        beta=beta if use_ref else 0.0,
        loss_type=loss_type,
        temperature=temperature,
        num_items=num_items,
    )
    (rl * grad_out).backward()
    # the per-token log-probs are float32 whatever the input's dtype (Liger's contract, and the op's)
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == torch.float64 else dict(rtol=2e-4, atol=2e-5)

    def close(o, r):
        torch.testing.assert_close(o.double(), r.detach().double(), **tol)

    close(loss, rl)
    assert len(metrics) == len(rm)
    for o, r in zip(metrics, rm):
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
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo"])
@pytest.mark.parametrize("chunk_size", [1, 2, 8])  # 5 chunks; 2 uneven (3 + 2); one chunk
def test_matches_full_logit_reference(device, dtype, loss_type, chunk_size):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 on the CPU only")
    _run(device, dtype, loss_type=loss_type, chunk_size=chunk_size)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "opts",
    [
        dict(beta=0.0),
        dict(temperature=0.7),
        dict(ref_head=True),  # the reference model run in the loop
        dict(use_ref=False, beta=0.0),
        dict(bias=False),
        dict(frozen_w=True),
        dict(old=False),
        dict(num_items=17),
        dict(grad_out=1.0),
    ],
)
def test_options(device, opts):
    _run(device, torch.float32, chunk_size=2, **opts)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo"])
def test_agrees_with_the_fused_grpo_loss(device, loss_type):
    """The subclass on the base and liger_cpp's C++ GRPO loss compute the same loss and gradients."""
    x, w, b, ids, mask, adv, old_lp, ref_lp = _inputs(device, torch.float32)
    x2, w2, b2 = (leaf(v) for v in (x, w, b))
    loss, metrics = _GRPO.apply(
        x, w, ids, mask, adv, b, ref_lp, old_lp, None, None, None, 0.04, loss_type, 1.0, True, 2
    )
    loss2, metrics2 = LigerFusedLinearGRPOLoss(loss_type=loss_type, beta=0.04)(
        x2, w2, ids, mask, adv, b2, ref_per_token_logps=ref_lp, old_per_token_logps=old_lp
    )
    loss.backward()
    loss2.backward()
    for a_, b_ in [
        (loss, loss2),
        *zip(metrics, metrics2),
        (x.grad, x2.grad),
        (w.grad, w2.grad),
        (b.grad, b2.grad),
    ]:
        torch.testing.assert_close(a_, b_, rtol=2e-5, atol=2e-6)


def test_loss_fn_must_be_implemented():
    class NoLoss(LigerFusedLinearPPOBase):
        @staticmethod
        def forward(ctx, x, w, ids, mask, adv):
            return LigerFusedLinearPPOBase.forward(NoLoss, ctx, x, w, ids, mask, adv)

    x, w, _, ids, mask, adv, _, _ = _inputs("cpu", torch.float32, bias=False)
    with pytest.raises(NotImplementedError, match="must be implemented"):
        NoLoss.apply(x, w, ids, mask, adv)


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(ids=torch.zeros(5, 8, dtype=torch.long)), "selected_token_ids"),
        (dict(adv=torch.zeros(4)), "advantages"),
        (dict(w=torch.randn(31, 12)), "weight must be"),
        (dict(b=torch.randn(30)), "bias must be"),
        (dict(chunk=0), "chunk_size"),
        (dict(ref_lp=None), "use_ref_model"),
    ],
)
def test_bad_input_is_named(bad, match):
    x, w, b, ids, mask, adv, old_lp, ref_lp = _inputs("cpu", torch.float32)
    a = dict(x=x, w=w, b=b, ids=ids, adv=adv, ref_lp=ref_lp, chunk=1)
    a.update(bad)
    with pytest.raises(ValueError, match=match):
        _GRPO.apply(
            a["x"],
            a["w"],
            a["ids"],
            mask,
            a["adv"],
            a["b"],
            a["ref_lp"],
            old_lp,
            None,
            None,
            None,
            0.04,
            "dapo",
            1.0,
            True,
            a["chunk"],
        )


def test_compat_name_is_this_class():
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.chunked_loss.fused_linear_ppo import LigerFusedLinearPPOBase as Base

    assert Base is LigerFusedLinearPPOBase
