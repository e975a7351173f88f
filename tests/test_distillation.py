"""Distillation fused with the lm_heads (liger_cpp.chunked_loss.LigerFusedLinearJSDLoss,
LigerFusedLinearCosineSimilarityLoss, liger_cpp.transformers.LigerFusedLinearJSD) against the
independent pure-PyTorch reference of tests/rl_reference.py (Liger's distillation base with full
logits, differentiated by autograd), in float64 and in the input's precision."""

import inspect
import math

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from rl_reference import acc_ulps, distillation_reference, leaf, tol_close

from liger_cpp._testing import plan_override
from liger_cpp.chunked_loss import (
    LigerFusedLinearCosineSimilarityLoss,
    LigerFusedLinearJSDLoss,
    liger_fused_linear_cosine,
    liger_fused_linear_jsd,
)
from liger_cpp.ops.fused_linear_distillation import fused_linear_distillation
from liger_cpp.transformers import LigerFusedLinearJSD


def _make(device, dtype, M=94, Hs=31, Ht=37, Vs=123, Vt=123, bias=True, n_ignored=9, seed=0, lead=None):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 is CPU-only: the CUDA row kernels take float32, float16 and bfloat16")
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen, dtype=torch.float64) * scale).to(device, dtype)

    shape = lead or (M,)
    xs = rn(*shape, Hs).requires_grad_(True)
    ws = rn(Vs, Hs, scale=2.0 / math.sqrt(Hs)).requires_grad_(True)
    bs = rn(Vs, scale=0.5).requires_grad_(True) if bias else None
    xt = rn(*shape, Ht)
    # a teacher correlated with the student (a realistic distillation: distributions that overlap)
    wt = rn(Vt, Ht, scale=2.5 / math.sqrt(Ht))
    bt = rn(Vt, scale=0.5) if bias else None
    t = torch.randint(0, Vs, shape, generator=gen)
    if n_ignored:
        t.view(-1)[torch.randperm(t.numel(), generator=gen)[:n_ignored]] = -100
    return xs, ws, bs, xt, wt, bt, t.to(device)


def _run(
    fn,
    device,
    dtype,
    *,
    loss="jsd",
    weight_hard=0.5,
    weight_soft=0.5,
    beta=0.5,
    temperature=1.0,
    grad_out=1.0,
    frozen_w=False,
    bias=True,
    dw_ulps=None,
    no_target=False,
    parts=True,
    **make,
):
    xs, ws, bs, xt, wt, bt, t = _make(device, dtype, bias=bias, **make)
    if frozen_w:
        ws.requires_grad_(False)
    target = None if no_target else t
    total, soft, hard = fn(xs, ws, xt, wt, target, bs, bt)
    (total * grad_out).backward()
    lo = torch.float32 if dtype == torch.float64 else dtype
    res = {}
    for rdt in (torch.float64, lo):
        rs, rw, rb = leaf(xs, rdt), leaf(ws, rdt), leaf(bs, rdt)
        flat = lambda a: a.reshape(-1, a.shape[-1])  # noqa: E731
        r = distillation_reference(
            flat(rs),
            rw,
            flat(xt.to(rdt)),
            wt.to(rdt),
            None if no_target else t.reshape(-1),
            rb,
            None if bt is None else bt.to(rdt),
            loss=loss,
            weight_hard=weight_hard,
            weight_soft=weight_soft,
            beta=beta,
            temperature=temperature,
        )
        (r[0] * grad_out).backward()
        res[rdt] = (r, rs, rw, rb)
    r64, rlo = res[torch.float64], res[lo]
    for name, out, i in (("loss", total, 0), ("soft_loss", soft, 1), ("hard_loss", hard, 2))[
        : 3 if parts else 1
    ]:
        assert out.dtype == torch.float32 and out.shape == ()
        tol_close(name, out, r64[0][i], rlo[0][i], dtype)
    tol_close("dX", xs.grad, r64[1].grad, rlo[1].grad, dtype)
    if frozen_w:
        assert ws.grad is None
    else:
        tol_close("dW", ws.grad, r64[2].grad, rlo[2].grad, dtype, in_ulps=dw_ulps)
    if bias:
        tol_close("dB", bs.grad, r64[3].grad, rlo[3].grad, dtype, in_ulps=dw_ulps)
    return total


def _op(loss="jsd", mask_soft=None, chunk_rows=0, **kw):
    def fn(xs, ws, xt, wt, t, bs, bt):
        return fused_linear_distillation(
            xs,
            ws,
            xt,
            wt,
            t,
            bs,
            bt,
            loss=loss,
            chunk_rows=chunk_rows,
            mask_soft=True if mask_soft is None else mask_soft,
            **kw,
        )

    return fn


def _kw(weight_hard=0.5, weight_soft=0.5, beta=0.5, temperature=1.0):
    return dict(
        weight_hard_loss=weight_hard, weight_soft_loss=weight_soft, beta=beta, temperature=temperature
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16] + ([torch.float16] if CUDA_OK else []), ids=str
)
@pytest.mark.parametrize("loss", ["jsd", "cosine"])
@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_losses(device, dtype, loss, beta, temperature):
    opts = _kw(beta=beta, temperature=temperature)
    _run(
        _op(loss, chunk_rows=40, **opts),
        device,
        dtype,
        loss=loss,
        beta=beta,
        temperature=temperature,
        weight_hard=0.5,
        weight_soft=0.5,
        dw_ulps=acc_ulps(dtype, 3),
    )


OPTIONS = [
    {"weight_hard": 0.0, "weight_soft": 1.0},  # TRL's GKD
    {"weight_hard": 1.0, "weight_soft": 0.0},
    {"weight_hard": 0.3, "weight_soft": 0.9, "beta": 0.7, "temperature": 0.6},
    {"Vt": 130},  # a teacher vocabulary padded beyond the student's
    {"Vt": 130, "loss": "cosine"},
    {"Hs": 16, "Ht": 64},
    {"bias": False},
    {"frozen_w": True},
    {"grad_out": 2.5},
    {"n_ignored": 94},  # every row ignored: 0 and zero gradients, not NaN
    {"n_ignored": 0},
    {"M": 1, "n_ignored": 0},
    {"lead": (2, 47)},  # (B, T, H) hidden states, (B, T) labels
    {"no_target": True, "weight_hard": 0.0, "weight_soft": 1.0},
    {"loss": "cosine", "beta": 1.0, "n_ignored": 20},
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype,opt",
    [(torch.float32, o) for o in OPTIONS] + [(torch.float64, OPTIONS[i]) for i in (0, 2, 3, 5, 9, 12, 13)],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) if isinstance(o, dict) else str(o),
)
def test_options(device, dtype, opt):
    opt = dict(opt)
    loss = opt.pop("loss", "jsd")
    k = {key: opt.pop(key) for key in ("weight_hard", "weight_soft", "beta", "temperature") if key in opt}
    _run(_op(loss, **_kw(**k)), device, dtype, loss=loss, **k, **opt)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chunk_rows", [1, 13, 47, 94, 500])
@pytest.mark.parametrize("loss", ["jsd", "cosine"])
def test_chunk_rows(device, chunk_rows, loss):
    _run(_op(loss, chunk_rows=chunk_rows, **_kw(beta=0.4)), device, torch.float32, loss=loss, beta=0.4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", [LigerFusedLinearJSDLoss, LigerFusedLinearCosineSimilarityLoss])
def test_modules_and_functionals(device, cls):
    loss = "jsd" if cls is LigerFusedLinearJSDLoss else "cosine"
    xs, ws, bs, xt, wt, bt, t = _make(device, torch.float32)
    mod = cls(
        weight_hard_loss=0.2, weight_soft_loss=0.8, beta=0.4, temperature=1.5, return_soft_hard_loss=True
    )
    total, soft, hard = mod(xs, ws, xt, wt, t, bs, bt)
    e = distillation_reference(
        xs.detach().double(),
        ws.double(),
        xt.double(),
        wt.double(),
        t,
        bs.double(),
        bt.double(),
        loss=loss,
        weight_hard=0.2,
        weight_soft=0.8,
        beta=0.4,
        temperature=1.5,
    )
    for a, b in zip((total, soft, hard), e):
        torch.testing.assert_close(a, b.float(), rtol=1e-5, atol=1e-6)
    only = cls(weight_hard_loss=0.2, weight_soft_loss=0.8, beta=0.4, temperature=1.5)(
        xs, ws, xt, wt, t, bs, bt
    )
    torch.testing.assert_close(only, total)
    fn = liger_fused_linear_jsd if loss == "jsd" else liger_fused_linear_cosine
    # Liger's Function.apply order: (..., true_labels, student_bias, teacher_bias, weight_hard_loss,
    # weight_soft_loss, beta, ignore_index, temperature, compiled, chunk_size, return_soft_hard_loss)
    out = fn(xs, ws, xt, wt, t, bs, bt, 0.2, 0.8, 0.4, -100, 1.5, False, 16, True)
    for a, b in zip(out, (total, soft, hard)):
        torch.testing.assert_close(a, b)
    params = list(inspect.signature(cls.__init__).parameters)[1:]
    assert params == [
        "weight_hard_loss",
        "weight_soft_loss",
        "beta",
        "ignore_index",
        "temperature",
        "compiled",
        "chunk_size",
        "return_soft_hard_loss",
    ]
    assert list(inspect.signature(cls.forward).parameters)[1:] == [
        "student_input",
        "student_weight",
        "teacher_input",
        "teacher_weight",
        "true_labels",
        "student_bias",
        "teacher_bias",
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("labels", [True, False])
def test_transformers_fused_linear_jsd(device, dtype, beta, labels):
    """Liger's LigerFusedLinearJSD (no bias, no hard loss): averaged over the rows whose shift_labels is
    not ignore_index, or over every row without labels."""
    mod = LigerFusedLinearJSD(jsd_beta=beta, temperature=0.8)

    def fn(xs, ws, xt, wt, t, bs, bt):
        loss = mod(xs, ws, xt, wt, t)
        return loss, loss, torch.zeros((), device=loss.device)

    _run(
        fn,
        device,
        dtype,
        bias=False,
        beta=beta,
        temperature=0.8,
        weight_hard=0.0,
        weight_soft=1.0,
        no_target=not labels,
        parts=False,
        dw_ulps=acc_ulps(dtype, 1),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph_second_backward_reruns(device):
    xs, ws, bs, xt, wt, bt, t = _make(device, torch.float32)
    total = LigerFusedLinearJSDLoss(beta=0.3)(xs, ws, xt, wt, t, bs, bt)
    total.backward(retain_graph=True)
    first = [p.grad.clone() for p in (xs, ws, bs)]
    total.backward()
    for g, p in zip(first, (xs, ws, bs)):
        torch.testing.assert_close(p.grad, 2 * g, rtol=1e-5, atol=1e-6)


def test_gradcheck_float64_cpu():
    for loss, beta in (("jsd", 0.0), ("jsd", 0.4), ("jsd", 1.0), ("cosine", 0.7)):
        xs, ws, bs, xt, wt, bt, t = _make("cpu", torch.float64, M=6, Hs=4, Ht=5, Vs=7, Vt=9, n_ignored=2)

        def f(xs, ws, bs, loss=loss, beta=beta, xt=xt, wt=wt, bt=bt, t=t):
            return fused_linear_distillation(
                xs, ws, xt, wt, t, bs, bt, loss=loss, beta=beta, temperature=1.3, chunk_rows=4
            )[0]

        # the per-row losses are float32 even for float64 inputs: a larger step keeps their rounding out
        assert torch.autograd.gradcheck(f, (xs, ws, bs), eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(device, dtype):
    xs, ws, bs, xt, wt, bt, t = _make(device, dtype, M=10, Hs=8, Ht=6, Vs=20, Vt=24, n_ignored=2)
    op = torch.ops.liger.fused_linear_distillation_fwd
    torch.library.opcheck(
        op,
        (xs, ws, xt, wt, t, bs, bt),
        {"compute_dx": True, "compute_dw": True, "compute_db": True, "chunk_rows": 3},
    )
    torch.library.opcheck(
        op,
        (xs.detach(), ws, xt, wt, None),
        {"loss": "cosine", "compute_dw": True, "beta": 1.0, "temperature": 2.0},
    )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    xs, ws, bs, xt, wt, bt, t = _make(device, torch.float32)
    mod = LigerFusedLinearJSDLoss(beta=0.3, return_soft_hard_loss=True)

    def f(xs, ws, bs):
        total, soft, hard = mod(xs * 1.5, ws, xt, wt, t, bs, bt)
        return total * 2.0, soft, hard

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    out_c = cf(xs, ws, bs)
    out_c[0].backward()
    got = [p.grad.clone() for p in (xs, ws, bs)]
    for p in (xs, ws, bs):
        p.grad = None
    out_e = f(xs, ws, bs)
    out_e[0].backward()
    for a, e in zip(out_c, out_e):
        torch.testing.assert_close(a, e)
    for g, p in zip(got, (xs, ws, bs)):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    xs, ws, bs, xt, wt, bt, t = _make(device, torch.float32, M=10, Hs=8, Ht=6, Vs=20, Vt=24)
    xs, ws, bs = xs.detach(), ws.detach(), bs.detach()
    with pytest.raises(ValueError, match="Temperature"):
        LigerFusedLinearJSDLoss(temperature=0)
    with pytest.raises(ValueError, match="argument 'loss'"):
        fused_linear_distillation(xs, ws, xt, wt, t, loss="kl")
    op = torch.ops.liger.fused_linear_distillation_fwd
    cases = [
        ((xs, ws, xt[:5], wt, t), {}, "argument 'teacher_input'"),
        ((xs, ws, xt, wt[:10], t), {}, "argument 'teacher_weight'"),  # teacher vocabulary below the student's
        ((xs, ws[:, :3], xt, wt, t), {}, "argument 'student_weight'"),
        ((xs, ws, xt, wt[:, :2], t), {}, "argument 'teacher_weight'"),
        ((xs, ws, xt, wt, t[:4]), {}, "argument 'true_labels'"),
        ((xs, ws, xt, wt, t.float()), {}, "argument 'true_labels'"),
        ((xs, ws, xt.double(), wt, t), {}, "argument 'teacher_input'"),
        ((xs, ws, xt, wt, t, bs[:3]), {}, "argument 'student_bias'"),
        ((xs, ws, xt, wt, t), {"loss": "kl"}, "argument 'loss'"),
        ((xs, ws, xt, wt, t), {"beta": 1.5}, "argument 'beta'"),
        ((xs, ws, xt, wt, t), {"temperature": 0.0}, "argument 'temperature'"),
        ((xs, ws, xt, wt, t), {"chunk_rows": -2}, "argument 'chunk_rows'"),
    ]
    if device == "cpu":
        bad = t.clone()
        bad[3] = 20  # the student's V = 20 (the teacher's 24 does not count)
        cases.append(((xs, ws, xt, wt, bad), {}, "target", ValueError))
    # an out-of-range target is a ValueError (as liger_cpp.set_check_targets documents)
    for args, kw, msg, *exc in cases:
        with pytest.raises(exc[0] if exc else RuntimeError, match=msg):
            op(*args, **kw)


@pytest.mark.parametrize("device", DEVICES)
def test_trl_gkd_call_pattern(device):
    """TRL's GKD / GOLD / distillation trainers: LigerFusedLinearJSDLoss(beta, ignore_index, temperature,
    compiled=False, weight_hard_loss=0, weight_soft_loss=1) called with keywords on (B, T, H) hidden
    states (h[:, :-1]) and (B, T) labels."""
    xs, ws, _, xt, wt, _, t = _make(device, torch.float32, lead=(2, 47), bias=False)
    loss_fn = LigerFusedLinearJSDLoss(
        beta=0.5,
        ignore_index=-100,
        temperature=0.9,
        compiled=False,
        weight_hard_loss=0.0,
        weight_soft_loss=1.0,
    )
    loss = loss_fn(
        student_input=xs,
        student_weight=ws,
        teacher_input=xt,
        teacher_weight=wt,
        true_labels=t,
        student_bias=None,
        teacher_bias=None,
    )
    loss.backward()
    rs, rw = leaf(xs, torch.float64), leaf(ws, torch.float64)
    e = distillation_reference(
        rs.reshape(-1, 31),
        rw,
        xt.double().reshape(-1, 37),
        wt.double(),
        t.reshape(-1),
        weight_hard=0.0,
        weight_soft=1.0,
        beta=0.5,
        temperature=0.9,
    )[0]
    e.backward()
    torch.testing.assert_close(loss, e.float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xs.grad, rs.grad.float(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ws.grad, rw.grad.float(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("weight_hard", [0.0, 0.4])
@pytest.mark.parametrize("temperature", [1.0, 0.9])
def test_compute_hard_false(device, dtype, weight_hard, temperature):
    """compute_hard=False skips the hard loss only where its weight is 0 (hard_loss 0 there); the
    loss, soft_loss and every gradient are those of compute_hard=True."""
    outs = []
    for compute_hard in (True, False):
        xs, ws, bs, xt, wt, bt, t = _make(device, dtype)
        opts = _kw(weight_hard=weight_hard, weight_soft=0.7, beta=0.3, temperature=temperature)
        out = _op("jsd", compute_hard=compute_hard, **opts)(xs, ws, xt, wt, t, bs, bt)
        (out[0] * 0.6).backward()
        outs.append((out, xs.grad, ws.grad, bs.grad))
    (l1, s1, h1), *g1 = outs[0]
    (l2, s2, h2), *g2 = outs[1]
    assert float(h1) > 0
    torch.testing.assert_close(h2, h1 if weight_hard != 0 else torch.zeros_like(h1), rtol=0, atol=0)
    for a, b in [(l1, l2), (s1, s2), *zip(g1, g2)]:
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    # the modules: LigerFusedLinearJSDLoss returns the hard loss it was asked for
    xs, ws, bs, xt, wt, bt, t = _make(device, dtype)
    mod = LigerFusedLinearJSDLoss(weight_hard_loss=0.0, weight_soft_loss=1.0, return_soft_hard_loss=True)
    torch.testing.assert_close(mod(xs, ws, xt, wt, t, bs, bt)[2], h1, rtol=0, atol=0)


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA")
@pytest.mark.parametrize("loss", ["jsd", "cosine"])
def test_row_kernel_many_rows_cuda(loss):
    """The distillation row kernel on 3000 rows of a padded teacher vocabulary (V 32008: 16-byte
    rows, the student's 32000 classes within it), a block per row."""
    _run(
        _op(loss, **_kw(beta=0.4, temperature=0.8)),
        "cuda",
        torch.bfloat16,
        loss=loss,
        beta=0.4,
        temperature=0.8,
        M=3000,
        Hs=64,
        Ht=96,
        Vs=32000,
        Vt=32008,
        n_ignored=100,
        dw_ulps=acc_ulps(torch.bfloat16, 4),
    )


_ROW_PLANS = [
    dict(distill="block"),
    dict(distill="smem"),
    dict(distill="smem", distill_smem_blocks="1"),
    dict(distill="smem", distill_smem_blocks="8"),
    dict(distill="smem", distill_smem_blocks="16"),
]
_ROW_CASES = [
    # a padded teacher vocabulary and temperature: the hard softmax is its own (over Vs classes)
    dict(loss="jsd", beta=0.4, temperature=0.8, Vs=4000, Vt=4104),
    # beta 0 with a gradient: the loss summed in the gradient pass; the hard softmax is the soft one
    dict(loss="jsd", beta=0.0, temperature=1.0, Vs=4104, Vt=4104),
    dict(loss="jsd", beta=1.0, temperature=1.0, Vs=4104, Vt=4104),
    dict(loss="cosine", beta=0.5, temperature=1.3, Vs=4000, Vt=4104),
    # TRL's GKD call: no hard loss weight (the gradient pass without each element's column)
    dict(loss="jsd", beta=0.5, temperature=0.9, Vs=4104, Vt=4104, weight_hard=0.0),
]


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA")
@pytest.mark.parametrize("plan", _ROW_PLANS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
@pytest.mark.parametrize("case", _ROW_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_row_kernels_cuda(plan, case, dtype):
    """Both row kernels (a block per row; the sm_90 shared-memory cluster kernel, at one, eight and
    sixteen blocks a row) on 16-byte aligned rows, with and without a gradient."""
    case = dict(case)
    loss, beta, temperature, Vs, Vt = (case.pop(k) for k in ("loss", "beta", "temperature", "Vs", "Vt"))
    weight_hard = case.pop("weight_hard", 0.4)
    opts = _kw(beta=beta, temperature=temperature, weight_hard=weight_hard, weight_soft=0.7)
    shape = dict(M=37, Hs=64, Ht=48, Vs=Vs, Vt=Vt, n_ignored=5)
    with plan_override(**plan):
        total = _run(
            _op(loss, **opts),
            "cuda",
            dtype,
            loss=loss,
            beta=beta,
            temperature=temperature,
            weight_hard=weight_hard,
            weight_soft=0.7,
            grad_out=0.6,
            dw_ulps=acc_ulps(dtype, 1),
            **shape,
        )
        xs, ws, bs, xt, wt, bt, t = _make("cuda", dtype, **shape)
        with torch.no_grad():
            nograd = _op(loss, **opts)(xs, ws, xt, wt, t, bs, bt)[0]
    torch.testing.assert_close(nograd, total.detach(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_cosine_ignored_rows_change_nothing(device):
    """Liger 0.8.5 masks ignored rows out of the cosine term: rows labelled ignore_index (padding, the
    prompt) change neither the loss nor any gradient of the labelled rows."""
    xs, ws, bs, xt, wt, bt, t = _make(device, torch.float32, n_ignored=0, M=20)
    pad_s = torch.randn(5, xs.shape[1], device=device)
    pad_t = torch.randn(5, xt.shape[1], device=device)
    pad_y = torch.full((5,), -100, dtype=t.dtype, device=device)
    loss_fn = LigerFusedLinearCosineSimilarityLoss(beta=0.8, temperature=1.5)
    x1 = xs.detach().clone().requires_grad_(True)
    x2 = torch.cat([xs.detach(), pad_s]).requires_grad_(True)
    l1 = loss_fn(x1, ws, xt, wt, t, bs, bt)
    l2 = loss_fn(x2, ws, torch.cat([xt, pad_t]), wt, torch.cat([t, pad_y]), bs, bt)
    torch.testing.assert_close(l1, l2, rtol=1e-6, atol=1e-7)
    g1 = torch.autograd.grad(l1, [x1, ws])
    g2 = torch.autograd.grad(l2, [x2, ws])
    torch.testing.assert_close(g1[0], g2[0][:20], rtol=1e-5, atol=1e-7)
    assert g2[0][20:].abs().max() == 0
    torch.testing.assert_close(g1[1], g2[1], rtol=1e-5, atol=1e-7)
