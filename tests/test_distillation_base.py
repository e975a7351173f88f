"""LigerFusedLinearDistillationBase (liger_cpp.chunked_loss.fused_linear_distillation; Liger's
extension point for one's own distillation loss, reached as
liger_kernel.chunked_loss.fused_linear_distillation through the compatibility package): a subclass's
loss and the student's gradients against the full-logit reference of tests/rl_reference.py, the
chunking, temperature, vocabulary padding, hard-loss switch and grad_output; Axolotl's pattern (a
subclass with a forward and backward of its own); errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES
from rl_reference import acc_ulps, distillation_reference, jsd_soft_rows, leaf, tol_close

from liger_cpp.chunked_loss import LigerFusedLinearJSDLoss
from liger_cpp.chunked_loss.fused_linear_distillation import LigerFusedLinearDistillationBase


class _JSD(LigerFusedLinearDistillationBase):
    """A user's JSD: the soft loss summed over the rows whose target is not ignored."""

    @staticmethod
    def distillation_loss_fn(student_logits, teacher_logits, target=None, ignore_index=-100, beta=0.5):
        rows = jsd_soft_rows(student_logits, teacher_logits, beta, 1.0)  # logits come divided by T
        return (rows * (target != ignore_index)).sum()

    @classmethod
    def forward(
        cls,
        ctx,
        xs,
        ws,
        xt,
        wt,
        target,
        bs=None,
        bt=None,
        weight_hard_loss=0.5,
        weight_soft_loss=0.5,
        beta=0.5,
        ignore_index=-100,
        temperature=1.0,
        chunk_size=1024,
        return_soft_hard_loss=False,
    ):
        return LigerFusedLinearDistillationBase.forward(
            cls,
            ctx,
            xs,
            ws,
            xt,
            wt,
            target,
            bs,
            bt,
            chunk_size=chunk_size,
            ignore_index=ignore_index,
            weight_hard_loss=weight_hard_loss,
            weight_soft_loss=weight_soft_loss,
            beta=beta,
            temperature=temperature,
            return_soft_hard_loss=return_soft_hard_loss,
        )

    @staticmethod
    def backward(ctx, grad_output, *args):
        grads = LigerFusedLinearDistillationBase.backward(ctx, grad_output, *args)
        return (*grads, None, None, None, None, None, None, None, None, None)


def _inputs(device, dtype, M=94, Hs=31, Ht=37, Vs=123, Vt=123, bias=True, n_ignored=9, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen, dtype=torch.float64) * scale).to(device, dtype)

    xs = rn(M, Hs).requires_grad_(True)
    ws = rn(Vs, Hs, scale=2.0 / math.sqrt(Hs)).requires_grad_(True)
    bs = rn(Vs, scale=0.5).requires_grad_(True) if bias else None
    xt, wt = rn(M, Ht), rn(Vt, Ht, scale=2.5 / math.sqrt(Ht))
    bt = rn(Vt, scale=0.5) if bias else None
    t = torch.randint(0, Vs, (M,), generator=gen)
    t[torch.randperm(M, generator=gen)[:n_ignored]] = -100
    return xs, ws, bs, xt, wt, bt, t.to(device)


def _check(
    device,
    dtype,
    *,
    bias=True,
    chunk_size=1024,
    beta=0.5,
    temperature=1.0,
    weight_hard=0.5,
    weight_soft=0.5,
    grad_out=0.7,
    Vt=123,
    n_ignored=9,
    M=94,
):
    xs, ws, bs, xt, wt, bt, t = _inputs(device, dtype, M=M, Vt=Vt, bias=bias, n_ignored=n_ignored)
    loss, soft, hard = _JSD.apply(
        xs, ws, xt, wt, t, bs, bt, weight_hard, weight_soft, beta, -100, temperature, chunk_size, True
    )
    (loss * grad_out).backward()
    ours = [loss, soft, hard, xs.grad, ws.grad] + ([bs.grad] if bias else [])

    def ref(prec):
        a = [leaf(v, prec) for v in (xs, ws, bs)]
        lo, so, ha = distillation_reference(
            a[0],
            a[1],
            xt.to(prec),
            wt.to(prec),
            t,
            a[2],
            bt.to(prec) if bias else None,
            weight_hard=weight_hard,
            weight_soft=weight_soft,
            beta=beta,
            temperature=temperature,
        )
        (lo * grad_out).backward()
        return [lo, so, ha, a[0].grad, a[1].grad] + ([a[2].grad] if bias else [])

    r64 = ref(torch.float64)
    rlo = ref(dtype) if dtype != torch.float64 else ref(torch.float32)
    chunks = max(1, M // chunk_size)
    names = ["loss", "soft", "hard", "dX", "dW", "dB"]
    for name, o, a, b in zip(names, ours, r64, rlo):
        ulps = acc_ulps(dtype, chunks) if name in ("dW", "dB") else None
        tol_close(name, o, a.to(o.dtype) if o.dtype != a.dtype else a, b, dtype, in_ulps=ulps)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("chunk_size", [1024, 7, 47])  # one chunk; 13 uneven chunks; 2 chunks
def test_matches_full_logit_reference(device, dtype, bias, chunk_size):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 on the CPU only")
    _check(device, dtype, bias=bias, chunk_size=chunk_size)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "opts",
    [
        dict(beta=0.0, temperature=2.0),
        dict(beta=1.0, temperature=0.7),
        dict(weight_hard=0.0, weight_soft=1.0),  # the CE term skipped, still returned as 0
        dict(Vt=130),  # a padded teacher vocabulary: the student's logits zero-padded
        dict(n_ignored=94),  # every target ignored: divided by 1, not 0
        dict(grad_out=1.0),
    ],
)
def test_options(device, opts):
    _check(device, torch.float32, chunk_size=20, **opts)


def test_gradcheck_float64():
    xs, ws, bs, xt, wt, bt, t = _inputs("cpu", torch.float64, M=9, Hs=5, Ht=4, Vs=7, Vt=8, n_ignored=2)

    def f(x, w, b):
        return _JSD.apply(x, w, xt, wt, t, b, bt, 0.5, 0.5, 0.3, -100, 1.5, 4)

    assert torch.autograd.gradcheck(f, (xs, ws, bs))


@pytest.mark.parametrize("device", DEVICES)
def test_agrees_with_the_fused_jsd_loss(device):
    """The generic Python chunk loop and liger_cpp's C++ JSD loss compute the same thing."""
    xs, ws, bs, xt, wt, bt, t = _inputs(device, torch.float32)
    x2, w2, b2 = (leaf(v) for v in (xs, ws, bs))
    generic = _JSD.apply(xs, ws, xt, wt, t, bs, bt, 0.5, 0.5, 0.5, -100, 1.3, 40)
    fused = LigerFusedLinearJSDLoss(beta=0.5, temperature=1.3)(x2, w2, xt, wt, t, b2, bt)
    generic.backward()
    fused.backward()
    for a, b in [(generic, fused), (xs.grad, x2.grad), (ws.grad, w2.grad), (bs.grad, b2.grad)]:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_base_loss_fn_must_be_implemented():
    class NoLoss(LigerFusedLinearDistillationBase):
        @staticmethod
        def forward(ctx, xs, ws, xt, wt, t):
            return LigerFusedLinearDistillationBase.forward(NoLoss, ctx, xs, ws, xt, wt, t)

    xs, ws, _, xt, wt, _, t = _inputs("cpu", torch.float32, bias=False)
    with pytest.raises(NotImplementedError, match="must be implemented"):
        NoLoss.apply(xs, ws, xt, wt, t)


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(t=torch.zeros(5, dtype=torch.long)), "same rows"),
        (dict(ws=torch.randn(123, 30)), "student_weight must be"),
        (dict(wt=torch.randn(123, 36)), "teacher_weight must be"),
        (dict(bs=torch.randn(122)), "student_bias must be"),
        (dict(xs=torch.randn(2, 47, 31)), "2-D"),
        (dict(chunk_size=0), "chunk_size"),
    ],
)
def test_bad_input_is_named(bad, match):
    xs, ws, bs, xt, wt, bt, t = _inputs("cpu", torch.float32)
    a = dict(xs=xs, ws=ws, bs=bs, xt=xt, wt=wt, bt=bt, t=t, chunk_size=16)
    a.update(bad)
    with pytest.raises(ValueError, match=match):
        _JSD.apply(
            a["xs"],
            a["ws"],
            a["xt"],
            a["wt"],
            a["t"],
            a["bs"],
            a["bt"],
            0.5,
            0.5,
            0.5,
            -100,
            1.0,
            a["chunk_size"],
        )


def test_compat_name_is_this_class_and_axolotl_pattern_runs():
    """Axolotl's top-k KD subclasses the base through liger_kernel and writes its own forward /
    backward: the base must be a real autograd Function there, not a stub."""
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.chunked_loss.fused_linear_distillation import LigerFusedLinearDistillationBase as Base

    assert Base is LigerFusedLinearDistillationBase

    class TopKKL(Base):  # the shape of Axolotl's subclass: everything its own
        @staticmethod
        def forward(ctx, x, w, ids, logp_t):
            logp_s = torch.log_softmax(F.linear(x, w).float(), -1).gather(-1, ids)
            ctx.save_for_backward(x, w, ids, logp_t)
            return (logp_t.exp() * (logp_t - logp_s)).sum()

        @staticmethod
        def backward(ctx, g):
            x, w, ids, logp_t = ctx.saved_tensors
            with torch.enable_grad():
                x_, w_ = x.detach().requires_grad_(), w.detach().requires_grad_()
                logp_s = torch.log_softmax(F.linear(x_, w_).float(), -1).gather(-1, ids)
                out = (logp_t.exp() * (logp_t - logp_s)).sum()
                dx, dw = torch.autograd.grad(out, (x_, w_), g)
            return dx, dw, None, None

    x = torch.randn(6, 5, requires_grad=True)
    w = torch.randn(11, 5, requires_grad=True)
    ids = torch.randint(0, 11, (6, 3))
    logp_t = torch.log_softmax(torch.randn(6, 3), -1)
    TopKKL.apply(x, w, ids, logp_t).backward()
    assert x.grad is not None and w.grad is not None
