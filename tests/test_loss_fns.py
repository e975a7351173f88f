"""Liger's loss functions in PyTorch (liger_cpp.chunked_loss.loss_fns, attached as
``preference_loss_fn`` to the compatibility package's DPO / ORPO / CPO / SimPO / KTO Functions and as
``distillation_loss_fn`` to its JSD and cosine Functions):
run on the chunked-loss bases, each must give what liger_cpp's C++ loss of the same name gives (loss,
every output, gradients), for every DPO loss type; and AgileRL's DPO subclass pattern runs."""

import math

import pytest
import torch
from conftest import DEVICES
from rl_reference import leaf

from liger_cpp.chunked_loss import functional as cf
from liger_cpp.chunked_loss import loss_fns as pl
from liger_cpp.chunked_loss.fused_linear_distillation import LigerFusedLinearDistillationBase
from liger_cpp.chunked_loss.fused_linear_preference import LigerFusedLinearPreferenceBase
from liger_cpp.chunked_loss.fused_linear_unpaired_preference import LigerFusedLinearUnpairedPreferenceBase
from liger_cpp.ops.fused_linear_preference import DPO_LOSS_TYPES


def _paired(fn):
    class P(LigerFusedLinearPreferenceBase):
        preference_loss_fn = staticmethod(fn)

        @staticmethod
        def forward(ctx, x, w, t, b, rx, rw, rb, opts):
            return LigerFusedLinearPreferenceBase.forward(
                P,
                ctx,
                x,
                w,
                t,
                b,
                ref_input=rx,
                ref_weight=rw,
                ref_bias=rb,
                use_ref_model=rx is not None,
                **opts,
            )

        @staticmethod
        def backward(ctx, *grad_output):
            return (*LigerFusedLinearPreferenceBase.backward(ctx, grad_output)[:4], None, None, None, None)

    return P


def _inputs(device, B=3, T=12, H=13, V=29, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen) * scale).to(device)

    x = rn(2 * B, T, H).requires_grad_(True)
    w = rn(V, H, scale=2.0 / math.sqrt(H)).requires_grad_(True)
    b = rn(V, scale=0.3).requires_grad_(True)
    rx, rw, rb = rn(2 * B, T, 7), rn(V, 7, scale=2.0 / math.sqrt(7)), rn(V, scale=0.3)
    t = torch.randint(0, V, (2 * B, T), generator=gen)
    t[:, :3] = -100
    t[1, -4:] = -100
    return x, w, b, rx, rw, rb, t.to(device)


def _compare(ours, theirs, grads_ours, grads_theirs):
    loss, outs = ours
    loss2, outs2 = theirs
    torch.testing.assert_close(loss, loss2, rtol=2e-5, atol=2e-6)
    assert len(outs) == len(outs2)
    for i, (a, b) in enumerate(zip(outs, outs2)):
        torch.testing.assert_close(
            a, b.to(a.dtype), rtol=2e-5, atol=2e-6, msg=lambda m, i=i: f"output {i}: {m}"
        )
    for a, b in zip(grads_ours, grads_theirs):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6)


def _run_paired(device, fn, fused, opts, use_ref):
    x, w, b, rx, rw, rb, t = _inputs(device)
    x2, w2, b2 = (leaf(v) for v in (x, w, b))
    refs = (rx, rw, rb) if use_ref else (None, None, None)
    ours = _paired(fn).apply(x, w, t, b, *refs, opts)
    theirs = fused(x2, w2, t, b2)
    ours[0].backward()
    theirs[0].backward()
    _compare(ours, theirs, (x.grad, w.grad, b.grad), (x2.grad, w2.grad, b2.grad))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("loss_type", [t for t in DPO_LOSS_TYPES if t != "ipo"])
def test_dpo_loss_types_match_the_fused_dpo(device, loss_type):
    ls = {"exo_pair": 0.1, "robust": 0.2}.get(loss_type, 0.0)
    x, w, b, rx, rw, rb, t = _inputs(device)

    def fused(x_, w_, t_, b_):
        return cf.liger_fused_linear_dpo(
            x_,
            w_,
            t_,
            b_,
            rx,
            rw,
            rb,
            beta=0.3,
            compute_nll_loss=True,
            loss_type=loss_type,
            label_smoothing=ls,
            chunk_size=2,
            alpha=0.6,
        )

    opts = dict(
        beta=0.3,
        alpha=0.6,
        compute_nll_loss=True,
        average_log_prob=False,
        chunk_size=2,
        loss_type=loss_type,
        label_smoothing=ls,
    )
    _run_paired(device, pl.dpo_preference_loss_fn, fused, opts, use_ref=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["orpo", "cpo", "simpo"])
def test_orpo_cpo_simpo_match_the_fused_losses(device, name):
    if name == "orpo":
        fn, opts = pl.orpo_preference_loss_fn, dict(beta=0.2, compute_nll_loss=True, chunk_size=2)

        def fused(x_, w_, t_, b_):
            return cf.liger_fused_linear_orpo(x_, w_, t_, b_, beta=0.2, chunk_size=2)
    elif name == "cpo":
        fn = pl.cpo_preference_loss_fn
        opts = dict(
            beta=0.2,
            alpha=0.8,
            label_smoothing=0.1,
            compute_nll_loss=True,
            average_log_prob=False,
            chunk_size=2,
        )

        def fused(x_, w_, t_, b_):
            return cf.liger_fused_linear_cpo(
                x_, w_, t_, b_, beta=0.2, alpha=0.8, label_smoothing=0.1, chunk_size=2
            )
    else:
        fn = pl.simpo_preference_loss_fn
        opts = dict(beta=0.2, gamma=0.4, label_smoothing=0.1, compute_nll_loss=False, chunk_size=2)

        def fused(x_, w_, t_, b_):
            return cf.liger_fused_linear_simpo(
                x_, w_, t_, b_, beta=0.2, gamma=0.4, label_smoothing=0.1, chunk_size=2
            )

    _run_paired(device, fn, fused, opts, use_ref=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kl", [None, 0.2])
def test_kto_matches_the_fused_kto(device, kl):
    class K(LigerFusedLinearUnpairedPreferenceBase):
        preference_loss_fn = staticmethod(pl.kto_preference_loss_fn)

        @staticmethod
        def forward(ctx, x, w, t, labels, b, rx, rw, rb, kl_):
            return LigerFusedLinearUnpairedPreferenceBase.forward(
                K,
                ctx,
                x,
                w,
                t,
                labels,
                b,
                chunk_size=2,
                use_ref_model=True,
                ref_input=rx,
                ref_weight=rw,
                ref_bias=rb,
                beta=0.3,
                kl=kl_,
            )

        @staticmethod
        def backward(ctx, *grad_output):
            g = LigerFusedLinearUnpairedPreferenceBase.backward(ctx, grad_output)
            return (*g, None, None, None, None)

    x, w, b, rx, rw, rb, t = _inputs(device)
    labels = torch.tensor([True, False, True, True, False, False], device=device)
    kl_t = torch.tensor(kl, device=device) if kl is not None else None
    x2, w2, b2 = (leaf(v) for v in (x, w, b))
    ours = K.apply(x, w, t, labels, b, rx, rw, rb, kl_t)
    theirs = cf.liger_fused_linear_kto(x2, w2, t, labels, b2, rx, rw, rb, kl=kl_t, beta=0.3, chunk_size=2)
    ours[0].backward()
    theirs[0].backward()
    _compare(ours, theirs, (x.grad, w.grad, b.grad), (x2.grad, w2.grad, b2.grad))


def test_ipo_and_bad_options_say_why():
    c, r, t = torch.zeros(2), torch.zeros(2), torch.zeros(4, 3)
    with pytest.raises(NotImplementedError, match="completion-token count"):
        pl.dpo_preference_loss_fn(c, r, t, loss_type="ipo")
    with pytest.raises(ValueError, match="label_smoothing"):
        pl.dpo_preference_loss_fn(c, r, t, loss_type="exo_pair")
    with pytest.raises(ValueError, match="label_smoothing"):
        pl.dpo_preference_loss_fn(c, r, t, loss_type="robust", label_smoothing=0.5)
    with pytest.raises(ValueError, match="Unsupported loss_type"):
        pl.dpo_preference_loss_fn(c, r, t, loss_type="nope")


def test_agilerl_dpo_with_alpha_pattern():
    """AgileRL defines, at import, a subclass of the preference base whose preference_loss_fn is
    staticmethod(LigerFusedLinearDPOFunction.preference_loss_fn), and calls the base's forward by
    keyword: through liger_kernel it must import, run, and equal liger_cpp's DPO with that alpha."""
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.chunked_loss.dpo_loss import LigerFusedLinearDPOFunction
    from liger_kernel.chunked_loss.fused_linear_preference import LigerFusedLinearPreferenceBase as Base

    class DPOWithAlpha(Base):
        preference_loss_fn = staticmethod(LigerFusedLinearDPOFunction.preference_loss_fn)

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
            compiled=True,
            use_ref_model=True,
            average_log_prob=False,
            chunk_size=1,
            loss_type="sigmoid",
        ):
            return Base.forward(
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
                compiled=compiled,
                use_ref_model=use_ref_model,
                ref_input=ref_input,
                ref_weight=ref_weight,
                ref_bias=ref_bias,
                average_log_prob=average_log_prob,
                chunk_size=chunk_size,
                loss_type=loss_type,
            )

        @staticmethod
        def backward(ctx, *grad_output):
            grads = Base.backward(ctx, grad_output)[:4]
            return (*grads, *(None,) * 12)

    x, w, b, rx, rw, rb, t = _inputs("cpu")
    x2, w2, b2 = (leaf(v) for v in (x, w, b))
    ours = DPOWithAlpha.apply(x, w, t, b, rx, rw, rb, -100, 0.1, 0.25, True)
    theirs = cf.liger_fused_linear_dpo(x2, w2, t, b2, rx, rw, rb, beta=0.1, compute_nll_loss=True, alpha=0.25)
    ours[0].backward()
    theirs[0].backward()
    _compare(ours, theirs, (x.grad, w.grad, b.grad), (x2.grad, w2.grad, b2.grad))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "loss, beta, temperature, Vt",
    [
        ("jsd", 0.0, 1.0, 29),
        ("jsd", 1.0, 1.7, 29),
        ("jsd", 0.4, 0.8, 33),
        ("cosine", 0.7, 1.3, 29),
        ("cosine", 1.0, 1.0, 33),
    ],
)
def test_distillation_fns_match_the_fused_losses(device, loss, beta, temperature, Vt):
    """On LigerFusedLinearDistillationBase, Liger's JSD and cosine loss functions give what liger_cpp's
    C++ JSD and cosine losses give: loss, soft and hard terms, gradients (ignored rows included, and a
    teacher vocabulary padded beyond the student's)."""
    fn = pl.jsd_distillation_loss_fn if loss == "jsd" else pl.cosine_distillation_loss_fn
    fused = cf.liger_fused_linear_jsd if loss == "jsd" else cf.liger_fused_linear_cosine

    class D(LigerFusedLinearDistillationBase):
        distillation_loss_fn = staticmethod(fn)

        @staticmethod
        def forward(ctx, xs, ws, xt, wt, t, bs, bt):
            return LigerFusedLinearDistillationBase.forward(
                D,
                ctx,
                xs,
                ws,
                xt,
                wt,
                t,
                bs,
                bt,
                chunk_size=16,
                beta=beta,
                temperature=temperature,
                weight_hard_loss=0.3,
                weight_soft_loss=0.9,
                return_soft_hard_loss=True,
            )

        @staticmethod
        def backward(ctx, *grad_output):
            return (*LigerFusedLinearDistillationBase.backward(ctx, grad_output[0]), None)

    gen = torch.Generator().manual_seed(5)
    M, Hs, Ht, Vs = 50, 13, 11, 29
    xs = torch.randn(M, Hs, generator=gen).to(device).requires_grad_(True)
    ws = (torch.randn(Vs, Hs, generator=gen) * 0.5).to(device).requires_grad_(True)
    bs = (torch.randn(Vs, generator=gen) * 0.3).to(device).requires_grad_(True)
    xt, wt = (
        torch.randn(M, Ht, generator=gen).to(device),
        (torch.randn(Vt, Ht, generator=gen) * 0.6).to(device),
    )
    bt = (torch.randn(Vt, generator=gen) * 0.3).to(device)
    t = torch.randint(0, Vs, (M,), generator=gen)
    t[::7] = -100
    t = t.to(device)
    x2, w2, b2 = (leaf(v) for v in (xs, ws, bs))
    ours = D.apply(xs, ws, xt, wt, t, bs, bt)
    theirs = fused(
        x2,
        w2,
        xt,
        wt,
        t,
        b2,
        bt,
        weight_hard_loss=0.3,
        weight_soft_loss=0.9,
        beta=beta,
        temperature=temperature,
        return_soft_hard_loss=True,
    )
    ours[0].backward()
    theirs[0].backward()
    for a, b in [*zip(ours, theirs), (xs.grad, x2.grad), (ws.grad, w2.grad), (bs.grad, b2.grad)]:
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6)


def test_compat_stock_functions_take_the_fused_path(monkeypatch):
    """The compatibility package's Functions run liger_cpp's fused C++ losses when nothing is
    overridden (also through a subclass that overrides nothing), never the bases' Python loop."""
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.chunked_loss.dpo_loss import LigerFusedLinearDPOFunction
    from liger_kernel.chunked_loss.grpo_loss import LigerFusedLinearGRPOFunction
    from liger_kernel.chunked_loss.jsd_loss import LigerFusedLinearJSDFunction
    from liger_kernel.chunked_loss.kto_loss import LigerFusedLinearKTOFunction

    from liger_cpp.chunked_loss.fused_linear_ppo import LigerFusedLinearPPOBase

    def refuse(*a, **k):
        raise AssertionError("the bases' Python loop ran")

    for base in (
        LigerFusedLinearPreferenceBase,
        LigerFusedLinearUnpairedPreferenceBase,
        LigerFusedLinearPPOBase,
        LigerFusedLinearDistillationBase,
    ):
        monkeypatch.setattr(base, "forward", staticmethod(refuse))
    x, w, b, rx, rw, rb, t = _inputs("cpu")

    class Plain(LigerFusedLinearDPOFunction):
        pass

    for F_ in (LigerFusedLinearDPOFunction, Plain):
        loss, _ = F_.apply(x, w, t, b, rx, rw, rb)
        torch.testing.assert_close(loss, cf.liger_fused_linear_dpo(x, w, t, b, rx, rw, rb)[0], rtol=0, atol=0)
    labels = torch.tensor([True, False, True, True, False, False])
    LigerFusedLinearKTOFunction.apply(x, w, t, labels, b, rx, rw, rb)
    ids = t.clamp(min=0)
    LigerFusedLinearGRPOFunction.apply(x, w, ids, (t >= 0).long(), torch.randn(6), b, torch.randn(6, 12) - 3)
    xs = torch.randn(10, 13)
    LigerFusedLinearJSDFunction.apply(xs, w, torch.randn(10, 7), rw, torch.randint(0, 29, (10,)), b, rb)


def test_compat_function_subclass_with_its_own_forward_runs_it():
    """A subclass of the compat DPO Function that writes its own forward (a staticmethod here, as
    users write them) runs that forward through autograd, not the fused loss."""
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.chunked_loss.dpo_loss import LigerFusedLinearDPOFunction

    calls = []

    class Mine(LigerFusedLinearDPOFunction):
        @staticmethod
        def forward(ctx, x, w, t, b):
            calls.append(1)
            return LigerFusedLinearPreferenceBase.forward(
                Mine, ctx, x, w, t, b, beta=0.2, compute_nll_loss=False, average_log_prob=False
            )

        @staticmethod
        def backward(ctx, *grad_output):
            return (*LigerFusedLinearPreferenceBase.backward(ctx, grad_output)[:4],)

    x, w, b, rx, rw, rb, t = _inputs("cpu")
    x2, w2, b2 = (leaf(v) for v in (x, w, b))
    loss, _ = Mine.apply(x, w, t, b)
    loss.backward()
    assert calls == [1]
    ref, _ = cf.liger_fused_linear_dpo(x2, w2, t, b2, beta=0.2, use_ref_model=False)
    ref.backward()
    torch.testing.assert_close(loss, ref, rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(x.grad, x2.grad, rtol=2e-5, atol=2e-6)
