"""Chunked preference losses (liger_cpp.chunked_loss: DPO and its variants, ORPO, CPO, SimPO) against
an independent pure-PyTorch reference that materialises the full logits and follows the published
formulas (Liger's chunked_loss, TRL's DPOTrainer for ipo), differentiated by autograd.

Every comparison is against the float64 reference, with the bound of tests/utils.assert_close_to_ref:
at most twice the error of the same formula run by PyTorch in the input's precision (the logits
rounded to the input dtype, log-softmax in float32, as Liger), plus a few units of rounding.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES
from utils import ULP, assert_close_to_ref

from liger_cpp.chunked_loss import (
    LigerFusedLinearCPOLoss,
    LigerFusedLinearDPOLoss,
    LigerFusedLinearORPOLoss,
    LigerFusedLinearSimPOLoss,
    liger_fused_linear_dpo,
)
from liger_cpp.ops.fused_linear_preference import DPO_LOSS_TYPES

METRICS = ("chosen_logps", "rejected_logps", "chosen_logits_mean", "rejected_logits_mean", "nll_loss")


# ---------------------------------------------------------------- reference
def _seq_logps(x, w, b, t, ignore_index, average_log_prob):
    logits = x @ w.t()
    if b is not None:
        logits = logits + b
    lp = F.log_softmax(logits.float() if logits.dtype != torch.float64 else logits, dim=-1)
    mask = t != ignore_index
    tok = lp.gather(-1, torch.where(mask, t, 0).unsqueeze(-1)).squeeze(-1)
    s = (tok * mask).sum(-1)
    if average_log_prob:
        s = s / mask.sum(-1)
    return logits, tok, mask, s


def _pair_losses(kind, c, r, rc, rr, beta, ls, gamma, tau):
    """Per-pair losses and (chosen, rejected) rewards, as published."""
    if kind == "orpo":
        lo = (c - r) - (torch.log1p(-torch.exp(c)) - torch.log1p(-torch.exp(r)))
        return -beta * F.logsigmoid(lo), beta * c, beta * r, (F.logsigmoid(lo), lo)
    if kind in ("cpo", "simpo"):
        d = beta * (c - r) - (gamma if kind == "simpo" else 0.0)
        return -(1 - ls) * F.logsigmoid(d) - ls * F.logsigmoid(-d), beta * c, beta * r, None
    cl, rl = c - rc, r - rr
    cr, rj = beta * cl, beta * rl
    d = beta * (cl - rl)
    if kind == "sigmoid":
        out = -F.logsigmoid(d)
    elif kind == "ipo":  # TRL
        out = ((cl - rl) - 1 / (2 * beta)) ** 2
    elif kind == "hinge":
        out = torch.relu(1 - d)
    elif kind == "exo_pair":
        out = torch.sigmoid(d) * (F.logsigmoid(d) - math.log(1 - ls)) + torch.sigmoid(-d) * (
            F.logsigmoid(-d) - math.log(ls)
        )
    elif kind == "nca_pair":
        out = -F.logsigmoid(cr) - 0.5 * F.logsigmoid(-cr) - 0.5 * F.logsigmoid(-rj)
    elif kind == "robust":
        out = (-(1 - ls) * F.logsigmoid(d) + ls * F.logsigmoid(-d)) / (1 - 2 * ls)
    elif kind == "bco_pair":
        out = -F.logsigmoid(cr) - F.logsigmoid(-rj)
    elif kind == "sppo_hard":
        out = (cl - 0.5 / beta) ** 2 + (rl + 0.5 / beta) ** 2
    elif kind == "apo_zero":
        out = (1 - torch.sigmoid(cr)) + torch.sigmoid(rj)
    elif kind == "apo_down":
        out = torch.sigmoid(cr) + (1 - torch.sigmoid(d))
    elif kind == "discopop":
        m = torch.sigmoid(d / tau)
        out = -F.logsigmoid(d) * (1 - m) + torch.exp(-d) * m
    else:
        raise AssertionError(kind)
    return out, cr, rj, None


def reference(x, w, t, b=None, ref=None, kind="sigmoid", ignore_index=-100, beta=0.1, alpha=1.0,
              nll=False, avg=False, ls=0.0, gamma=0.5, tau=0.05):  # fmt: skip
    B, T = t.shape[0] // 2, t.shape[1]
    logits, tok, mask, s = _seq_logps(x, w, b, t, ignore_index, avg)
    c, r = s[:B], s[B:]
    if ref is not None:
        with torch.no_grad():
            rs = _seq_logps(*ref, t, ignore_index, avg)[3]
        rc, rr = rs[:B], rs[B:]
    else:
        rc = rr = torch.zeros((), dtype=c.dtype)
    losses, crw, rrw, orpo = _pair_losses(kind, c, r, rc, rr, beta, ls, gamma, tau)
    loss = losses.sum() / B
    nll_loss = -(tok[:B] * mask[:B]).sum() / mask[:B].sum() if nll else torch.zeros((), dtype=loss.dtype)
    loss = loss + alpha * nll_loss
    V = w.shape[0]
    lf = logits.double() if logits.dtype == torch.float64 else logits.float()
    metrics = (c, r, lf[:B].sum() / (B * T * V), lf[B:].sum() / (B * T * V), nll_loss, crw, rrw)
    if orpo is not None:
        metrics = metrics + (orpo[0].sum() / B, orpo[1].sum() / B)
    return loss, metrics


# ---------------------------------------------------------------- helpers
def _make(device, dtype, B, T, H, V, bias=True, ref=True, n_ignored=5, seed=0):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 is CPU-only: the CUDA row kernels take float32, float16 and bfloat16")
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen) * scale).to(device, dtype)

    x = rn(2 * B, T, H).requires_grad_(True)
    w = rn(V, H, scale=2.0 / math.sqrt(H)).requires_grad_(True)
    b = rn(V, scale=0.5).requires_grad_(True) if bias else None
    t = torch.randint(0, V, (2 * B, T), generator=gen)
    if n_ignored:
        # ignored tokens inside sequences (not only padding at the end) and a few at the ends
        t.view(-1)[torch.randperm(t.numel(), generator=gen)[:n_ignored]] = -100
        t[0, :2] = -100
        t[-1, -3:] = -100
    t = t.to(device)
    refs = None
    if ref:
        refs = (rn(2 * B, T, H), rn(V, H, scale=2.0 / math.sqrt(H)), rn(V, scale=0.5) if bias else None)
    return x, w, b, t, refs


def _leaf(t, dtype=None):
    if t is None:
        return None
    return t.detach().to(dtype or t.dtype).requires_grad_(t.requires_grad)


def _tol_close(name, out, ref64, ref_lo, dtype, in_ulps=None, magnitude=None):
    """As tests/test_fused_linear_cross_entropy.py: <= 2 x the low-precision PyTorch error + a floor of
    `in_ulps` units of the input dtype (float32: 16, the float32 sequence sums over T tokens and the
    row step's float32 softmax; 16-bit: 2, the logits and dlogits roundings). float64 inputs: the
    statistics (per-token log-probs, sequence sums) are float32, so the bound is the float32 one
    (ref_lo is then the float32 PyTorch run). `magnitude`: the size of the summed terms when it
    exceeds |ref| (a mean of logits of either sign: its rounding scales with mean |logit|)."""
    unit = torch.float32 if dtype == torch.float64 else dtype
    if in_ulps is None:
        in_ulps = 16.0 if unit == torch.float32 else 2.0
    extra = in_ulps * ULP[unit] / ULP[out.dtype]
    if magnitude is not None:
        extra *= max(1.0, magnitude / max(ref64.detach().abs().max().item(), 1e-30))
    assert_close_to_ref(out, ref64, ref_lo, name, factor=2.0, extra_ulps=extra)


def _check(fn, kind, device, dtype, B=3, T=47, H=31, V=123, bias=True, ref=True, n_ignored=9,
           grad_out=1.0, frozen_w=False, dw_ulps=None, **opts):  # fmt: skip
    """Runs fn(x, w, t, b, refs) -> (loss, metrics) in dtype and compares loss, metrics and the
    gradients with the float64 reference and the low-precision PyTorch one."""
    x, w, b, t, refs = _make(device, dtype, B, T, H, V, bias=bias, ref=ref, n_ignored=n_ignored)
    if frozen_w:
        w.requires_grad_(False)
    loss, metrics = fn(x, w, t, b, refs)
    (loss * grad_out).backward()

    results = {}
    lo = torch.float32 if dtype == torch.float64 else dtype
    for rdt in (torch.float64, lo):
        xr, wr, br = _leaf(x, rdt), _leaf(w, rdt), _leaf(b, rdt)
        rr = tuple(_leaf(z, rdt) for z in refs) if refs is not None else None
        rl, rm = reference(xr, wr, t, br, rr, kind, **opts)
        (rl * grad_out).backward()
        results[rdt] = (rl, rm, xr, wr, br)
    r64, rlo = results[torch.float64], results[lo]
    assert loss.dtype == torch.float32 and loss.shape == ()
    _tol_close("loss", loss, r64[0], rlo[0], dtype)
    names = METRICS + ("chosen_rewards", "rejected_rewards", "log_odds_ratio", "log_odds_chosen")
    assert len(metrics) == len(r64[1])
    # mean |logit| over every position: the logits means sum terms of either sign
    mag = F.linear(r64[2].detach(), r64[3].detach(), None if r64[4] is None else r64[4].detach()).abs().mean()
    for i, m in enumerate(metrics):
        is_mean = names[i].endswith("logits_mean")
        _tol_close(names[i], m, r64[1][i], rlo[1][i], dtype, magnitude=mag.item() if is_mean else None)
    _tol_close("dX", x.grad, r64[2].grad, rlo[2].grad, dtype)
    if frozen_w:
        assert w.grad is None
    else:
        _tol_close("dW", w.grad, r64[3].grad, rlo[3].grad, dtype, in_ulps=dw_ulps)
    if bias:
        _tol_close("dB", b.grad, r64[4].grad, rlo[4].grad, dtype, in_ulps=dw_ulps)


def _dpo(loss_type="sigmoid", use_ref=True, **kw):
    mod = LigerFusedLinearDPOLoss(loss_type=loss_type, use_ref_model=use_ref, **kw)

    def fn(x, w, t, b, refs):
        if refs is None:
            return mod(w, x, t, b)
        return mod(w, x, t, b, *refs)

    return fn


# 16-bit dW / dB: accumulated over the chunks' halves in the input dtype (one rounding per GEMM, as
# Liger's grad_weight.add_), where the PyTorch reference rounds once: 2 ulps per accumulation.
def _acc_ulps(dtype, B, chunk):
    return None if dtype in (torch.float32, torch.float64) else 2.0 * 2 * math.ceil(B / chunk)


LS = {"exo_pair": 0.1, "robust": 0.2}


# ---------------------------------------------------------------- DPO
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("loss_type", DPO_LOSS_TYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_dpo_loss_types(device, loss_type, dtype):
    ls = LS.get(loss_type, 0.0)
    fn = _dpo(loss_type, beta=0.5, label_smoothing=ls, chunk_size=2)
    _check(fn, loss_type, device, dtype, beta=0.5, ls=ls, dw_ulps=_acc_ulps(dtype, 3, 2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(
    "opt",
    [
        {"avg": True},
        {"nll": True},
        {"nll": True, "alpha": 0.3, "avg": True},
        {"use_ref": False},
        {"use_ref": False, "nll": True},
        {"bias": False},
        {"frozen_w": True},
        {"grad_out": 2.5},
    ],
    ids=str,
)
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "apo_down"])
def test_dpo_options(device, dtype, opt, loss_type):
    opt = dict(opt)
    use_ref = opt.pop("use_ref", True)
    bias = opt.pop("bias", True)
    frozen_w = opt.pop("frozen_w", False)
    grad_out = opt.pop("grad_out", 1.0)
    avg, nll, alpha = opt.get("avg", False), opt.get("nll", False), opt.get("alpha", 1.0)
    fn = _dpo(loss_type, use_ref, beta=0.2, alpha=alpha, compute_nll_loss=nll, average_log_prob=avg,
              chunk_size=1)  # fmt: skip
    _check(fn, loss_type, device, dtype, bias=bias, ref=use_ref, frozen_w=frozen_w, grad_out=grad_out,
           beta=0.2, alpha=alpha, nll=nll, avg=avg)  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("B,chunk", [(1, 1), (1, 4), (3, 1), (3, 2), (3, 3), (4, 3), (4, 8)])
def test_chunk_sizes_and_batch_of_one(device, B, chunk):
    fn = _dpo("sigmoid", beta=0.1, compute_nll_loss=True, chunk_size=chunk)
    _check(fn, "sigmoid", device, torch.float32, B=B, T=13, H=16, V=57, n_ignored=4, nll=True)


@pytest.mark.parametrize("device", DEVICES)
def test_chunking_does_not_change_the_result(device):
    x, w, b, t, refs = _make(device, torch.float32, 4, 9, 16, 40)
    outs = []
    for chunk in (1, 3, 4):
        for p in (x, w, b):
            p.grad = None
        loss, m = LigerFusedLinearDPOLoss(chunk_size=chunk, compute_nll_loss=True)(w, x, t, b, *refs)
        loss.backward()
        outs.append((loss.detach(), *m, x.grad.clone(), w.grad.clone(), b.grad.clone()))
    for o in outs[1:]:
        for a, e in zip(o, outs[0]):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- ORPO, CPO, SimPO
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("nll", [True, False])
def test_orpo(device, dtype, nll):
    mod = LigerFusedLinearORPOLoss(beta=0.3, compute_nll_loss=nll, chunk_size=2)
    _check(lambda x, w, t, b, r: mod(w, x, t, b), "orpo", device, dtype, ref=False, beta=0.3, nll=nll,
           avg=True, dw_ulps=_acc_ulps(dtype, 3, 2))  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("ls,avg,nll", [(0.0, False, True), (0.1, True, False), (0.0, False, False)])
def test_cpo(device, dtype, ls, avg, nll):
    mod = LigerFusedLinearCPOLoss(beta=0.2, alpha=0.7, label_smoothing=ls, compute_nll_loss=nll,
                                  average_log_prob=avg, chunk_size=2)  # fmt: skip
    _check(lambda x, w, t, b, r: mod(w, x, t, b), "cpo", device, dtype, ref=False, beta=0.2, alpha=0.7,
           ls=ls, nll=nll, avg=avg, dw_ulps=_acc_ulps(dtype, 3, 2))  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("ls,nll", [(0.0, True), (0.1, False)])
def test_simpo(device, dtype, ls, nll):
    mod = LigerFusedLinearSimPOLoss(beta=2.0, gamma=0.7, label_smoothing=ls, compute_nll_loss=nll,
                                    chunk_size=2)  # fmt: skip
    _check(lambda x, w, t, b, r: mod(w, x, t, b), "simpo", device, dtype, ref=False, beta=2.0, gamma=0.7,
           ls=ls, nll=nll, avg=True, dw_ulps=_acc_ulps(dtype, 3, 2))  # fmt: skip


# ---------------------------------------------------------------- behaviour
@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_forward_and_input_without_grad(device):
    x, w, b, t, refs = _make(device, torch.float32, 2, 5, 8, 20)
    with torch.no_grad():
        loss, m = LigerFusedLinearDPOLoss()(w, x, t, b, *refs)
    assert not loss.requires_grad
    ref_loss, _ = reference(x.detach(), w.detach(), t, b.detach(), refs)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    loss, _ = LigerFusedLinearDPOLoss()(w, x.detach(), t, b, *refs)
    loss.backward()
    assert w.grad is not None and b.grad is not None and x.grad is None


@pytest.mark.parametrize("device", DEVICES)
def test_fully_ignored_sequence_averages_to_zero(device):
    x, w, b, t, refs = _make(device, torch.float32, 2, 6, 8, 20, n_ignored=0)
    t[1] = -100  # a chosen sequence without a scored token
    loss, m = LigerFusedLinearDPOLoss(average_log_prob=True, compute_nll_loss=True)(w, x, t, b, *refs)
    loss.backward()
    assert m[0][1].item() == 0.0 and torch.isfinite(loss)
    assert torch.isfinite(x.grad).all() and (x.grad[1] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph_second_backward_raises(device):
    x, w, b, t, refs = _make(device, torch.float32, 1, 4, 8, 10)
    loss, _ = LigerFusedLinearDPOLoss()(w, x, t, b, *refs)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_functional_matches_module(device):
    x, w, b, t, refs = _make(device, torch.float32, 2, 5, 8, 20)
    a, ma = liger_fused_linear_dpo(x, w, t, b, *refs, beta=0.3, loss_type="hinge")
    e, me = LigerFusedLinearDPOLoss(beta=0.3, loss_type="hinge")(w, x, t, b, *refs)
    torch.testing.assert_close(a, e)
    for u, v in zip(ma, me):
        torch.testing.assert_close(u, v)


def _op_args(device, dtype):
    x, w, b, t, refs = _make(device, dtype, 2, 5, 8, 20)
    return x, w, b, t, refs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(device, dtype):
    x, w, b, t, (rx, rw, rb) = _op_args(device, dtype)
    op = torch.ops.liger.fused_linear_preference_fwd
    torch.library.opcheck(
        op,
        (x, w, t, b, rx, rw, rb, "sigmoid", -100, 0.1, 1.0, True, True, 0.0, 0.5, 0.05, 1, True, True, True),
    )
    torch.library.opcheck(
        op,
        (x.detach(), w, t, b.detach()),
        {"loss_type": "orpo", "compute_nll_loss": True, "compute_dw": True, "chunk_size": 2},
    )
    torch.library.opcheck(op, (x.detach(), w.detach(), t), {"loss_type": "simpo"})


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    x, w, b, t, refs = _make(device, torch.float32, 2, 5, 8, 20)
    mod = LigerFusedLinearDPOLoss(compute_nll_loss=True, chunk_size=1)

    def f(x, w, b):
        loss, m = mod(w, x * 1.5, t, b, *refs)
        return loss * 2.0, m[0]

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    loss_c, logps_c = cf(x, w, b)
    loss_c.backward()
    got = [p.grad.clone() for p in (x, w, b)]
    for p in (x, w, b):
        p.grad = None
    loss_e, logps_e = f(x, w, b)
    loss_e.backward()
    torch.testing.assert_close(loss_c, loss_e)
    torch.testing.assert_close(logps_c, logps_e)
    for g, p in zip(got, (x, w, b)):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x, w, b, t, (rx, rw, rb) = _make(device, torch.float32, 2, 5, 8, 20)
    x, w, b = x.detach(), w.detach(), b.detach()
    with pytest.raises(ValueError, match="loss_type"):
        LigerFusedLinearDPOLoss(loss_type="nope")
    with pytest.raises(ValueError, match="ref_input"):
        LigerFusedLinearDPOLoss()(w, x, t, b)
    # As Liger-Kernel: a label_smoothing the loss type is undefined for is a ValueError at
    # construction (and from the functional); the raw op's check is a RuntimeError (below).
    with pytest.raises(ValueError, match="argument 'label_smoothing'.*exo_pair"):
        LigerFusedLinearDPOLoss(loss_type="exo_pair")
    with pytest.raises(ValueError, match="argument 'label_smoothing'.*robust"):
        LigerFusedLinearDPOLoss(loss_type="robust", label_smoothing=0.5)
    with pytest.raises(ValueError, match="argument 'label_smoothing'"):
        liger_fused_linear_dpo(x, w, t, b, rx, rw, rb, loss_type="sigmoid", label_smoothing=1.5)
    bad_t = t.clone()
    bad_t[1, 2] = 20  # V = 20
    op = torch.ops.liger.fused_linear_preference_fwd
    cases = [
        ((x, w, t[:3]), {}, "argument 'target'"),
        ((x[:, :4], w, t), {}, "argument 'input'"),
        ((x, w[:, :5], t), {}, "argument 'weight'"),
        ((x, w.double(), t), {}, "argument 'weight'"),
        ((x, w, t, b[:3]), {}, "argument 'bias'"),
        ((x, w, t.float()), {}, "argument 'target'"),
        ((x, w, t), {"loss_type": "nope"}, "argument 'loss_type'"),
        ((x, w, t), {"chunk_size": 0}, "argument 'chunk_size'"),
        ((x, w, t), {"beta": 0.0}, "argument 'beta'"),
        ((x, w, t), {"loss_type": "exo_pair"}, "argument 'label_smoothing'"),
        ((x, w, t), {"loss_type": "robust", "label_smoothing": 0.5}, "argument 'label_smoothing'"),
        ((x, w, t, b, rx, rw[:7]), {}, "argument 'ref_weight'"),
        ((x, w, t, b, rx[:, :3], rw), {}, "argument 'ref_input'"),
        ((x, w, t, b, None, rw), {}, "argument 'ref_input'"),
        ((x, w, t, b, rx, rw), {"loss_type": "orpo"}, "argument 'ref_weight'"),
    ]
    if device == "cpu":
        # On CUDA an out-of-range target is a device-side assertion, which poisons the process's CUDA
        # context: test_cross_entropy checks it in a subprocess for the row step all these losses share.
        cases.append(((x, w, bad_t), {}, "target"))
    for args, kw, msg in cases:
        with pytest.raises((RuntimeError, IndexError, ValueError), match=msg):
            op(*args, **kw)


# ---------------------------------------------------------------- KTO
def kto_reference(x, w, t, labels, b=None, ref=None, kl=None, ignore_index=-100, beta=0.1, avg=False):
    logits, _, _, s = _seq_logps(x, w, b, t, ignore_index, avg)
    lr = s
    if ref is not None:
        with torch.no_grad():
            ref_s = _seq_logps(*ref, t, ignore_index, avg)[3]
        lr = s - ref_s
    sign = torch.where(labels, 1.0, -1.0).to(s.dtype)
    z = beta * (lr - (kl if kl is not None else 0.0)) * sign
    loss = (1 - torch.sigmoid(z)).sum() / t.shape[0]
    lf = logits.double() if logits.dtype == torch.float64 else logits.float()
    rw = beta * lr
    return loss, (s[labels].sum(), s[~labels].sum(), lf[labels].sum(), lf[~labels].sum(), rw[labels].sum(),
                  rw[~labels].sum())  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize(
    "use_ref,with_kl,avg,chunk,grad_out",
    [
        (True, True, False, 2, 1.0),
        (False, False, True, 1, 2.5),
        (True, False, True, 5, 1.0),
        (False, True, False, 3, 0.5),
    ],
)
def test_kto(device, dtype, use_ref, with_kl, avg, chunk, grad_out):
    from liger_cpp.chunked_loss import LigerFusedLinearKTOLoss

    B = 5
    x, w, b, t2, refs = _make(device, dtype, 3, 23, 16, 41, ref=use_ref, n_ignored=7)
    x = x.detach()[:B].requires_grad_(True)
    t = t2[:B]
    refs = tuple(r[:B] if r is not None and r.dim() == 3 else r for r in refs) if refs else None
    labels = torch.tensor([True, False, False, True, True], device=device)
    kl = torch.tensor(0.3, device=device) if with_kl else None
    mod = LigerFusedLinearKTOLoss(beta=0.4, use_ref_model=use_ref, average_log_prob=avg, chunk_size=chunk)
    loss, metrics = mod(x, w, t, b, labels, *(refs or (None, None, None)), kl=kl)
    (loss * grad_out).backward()
    lo = torch.float32 if dtype == torch.float64 else dtype
    res = {}
    for rdt in (torch.float64, lo):
        xr, wr, br = _leaf(x, rdt), _leaf(w, rdt), _leaf(b, rdt)
        rr = tuple(_leaf(z, rdt) for z in refs) if refs is not None else None
        rl, rm = kto_reference(xr, wr, t, labels, br, rr, kl, beta=0.4, avg=avg)
        (rl * grad_out).backward()
        res[rdt] = (rl, rm, xr, wr, br)
    r64, rlo = res[torch.float64], res[lo]
    _tol_close("loss", loss, r64[0], rlo[0], dtype)
    names = ("chosen_logps_sum", "rejected_logps_sum", "chosen_logits_sum", "rejected_logits_sum",
             "chosen_rewards_sum", "rejected_rewards_sum")  # fmt: skip
    assert len(metrics) == 6
    for name, m, e64, elo in zip(names, metrics, r64[1], rlo[1]):
        _tol_close(name, m, e64, elo, dtype)
    acc = _acc_ulps(dtype, B, chunk) and _acc_ulps(dtype, B, chunk) / 2  # one GEMM per chunk
    _tol_close("dX", x.grad, r64[2].grad, rlo[2].grad, dtype)
    _tol_close("dW", w.grad, r64[3].grad, rlo[3].grad, dtype, in_ulps=acc)
    _tol_close("dB", b.grad, r64[4].grad, rlo[4].grad, dtype, in_ulps=acc)


@pytest.mark.parametrize("device", DEVICES)
def test_kto_opcheck_and_errors(device):
    x, w, b, t, (rx, rw, rb) = _make(device, torch.float32, 2, 5, 8, 20)
    labels = torch.tensor([True, False, True, False], device=device)
    op = torch.ops.liger.fused_linear_kto_fwd
    torch.library.opcheck(
        op,
        (
            x,
            w,
            t,
            labels,
            b,
            rx,
            rw,
            rb,
            torch.tensor([0.1], device=device),
            -100,
            0.2,
            True,
            3,
            True,
            True,
            True,
        ),
    )
    torch.library.opcheck(op, (x.detach(), w.detach(), t, labels))
    from liger_cpp.chunked_loss import LigerFusedLinearKTOLoss

    with pytest.raises(ValueError, match="preference_labels"):
        LigerFusedLinearKTOLoss()(x, w, t, b)
    with pytest.raises(RuntimeError, match="argument 'preference_labels'"):
        op(x.detach(), w.detach(), t, labels[:3])
    with pytest.raises(RuntimeError, match="argument 'kl'"):
        op(x.detach(), w.detach(), t, labels, kl=torch.zeros(3, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_runs_in_the_autocast_dtype(device):
    x, w, b, t, refs = _make(device, torch.float32, 2, 7, 16, 30)
    mod = LigerFusedLinearDPOLoss(compute_nll_loss=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss, m = mod(w, x, t, b, *refs)
    loss.backward()
    assert w.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    xb, wb, bb = (_leaf(p, torch.bfloat16) for p in (x, w, b))
    loss_b, m_b = mod(wb, xb, t, bb, *(r.to(torch.bfloat16) for r in refs))
    loss_b.backward()
    torch.testing.assert_close(loss, loss_b)
    for g, e in ((x.grad, xb.grad), (w.grad, wb.grad), (b.grad, bb.grad)):
        torch.testing.assert_close(g, e.float())
