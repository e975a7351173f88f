"""Independent pure-PyTorch references of the RL and distillation losses (no liger_cpp code), written
from the published formulas: Liger-Kernel 0.8.x's chunked_loss (grpo_loss.py / fused_linear_ppo.py,
jsd_loss.py, cosine_similarity_loss.py, fused_linear_distillation.py), Liger's ops (jsd.py, kl_div.py,
tvd.py, fused_linear_jsd.py) and TRL (GRPOTrainer's losses, selective_log_softmax, GKD's
generalized_jsd_loss). They materialise the full logits and are differentiated by autograd; run them
on float64 copies for the exact reference, or in the input dtype (logits rounded to it, softmax in
float32, as Liger) for the low-precision PyTorch baseline of the tolerance.
"""

import math

import torch
import torch.nn.functional as F
from utils import ULP, assert_close_to_ref


def acc_dtype(t):
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def head_logits(x, w, b=None):
    logits = x @ w.t()
    return logits if b is None else logits + b


def token_logps(x, w, b, ids, temperature=1.0):
    """TRL's selective_log_softmax of (x W^T + b) / temperature at ids (float32 / float64)."""
    logits = head_logits(x, w, b)
    lps = torch.log_softmax(logits.to(acc_dtype(x)) / temperature, dim=-1)
    return lps.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def grpo_reference(
    x,
    w,
    b,
    ids,
    mask,
    adv,
    *,
    ref_lp=None,
    old_lp=None,
    ref_head=None,
    vllm=None,
    num_items=None,
    beta=0.04,
    eps_low=0.2,
    eps_high=0.2,
    loss_type="dapo",
    max_len=None,
    level="token",
    sapo_pos=1.0,
    sapo_neg=1.05,
    temperature=1.0,
    delta=None,
    bias_kl=False,
    vespo=(2.0, 3.0, 3.0, 2.0),
):
    """(loss, metrics, per_token_logps) of Liger's LigerFusedLinearGRPOLoss (ppo_loss_fn)."""
    acc = acc_dtype(x)
    lp = token_logps(x, w, b, ids, temperature)
    if ref_head is not None:
        with torch.no_grad():
            ref = token_logps(*ref_head, ids, temperature)
    elif ref_lp is not None:
        ref = ref_lp.to(acc)
    else:
        ref = lp.detach()
    old = old_lp.to(acc) if old_lp is not None else lp.detach()
    m = mask.to(acc)
    A = adv.to(acc).unsqueeze(1)
    v = None if vllm is None else (vllm.to(acc).unsqueeze(-1) if vllm.dim() == 1 else vllm.to(acc))
    log_ratio = lp - old
    if level == "token":
        liw = log_ratio
    else:
        liw = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    c1 = torch.exp(liw)
    lower = upper = None
    if loss_type == "cispo":
        c2 = torch.clamp(c1, max=eps_high).detach()
        ptl = -c2 * A * lp
        upper = c1 > eps_high
        lower = torch.zeros_like(upper)
    elif loss_type == "sapo":
        tau = torch.where(A > 0, torch.full_like(A, sapo_pos), torch.full_like(A, sapo_neg))
        ptl = -(torch.sigmoid(tau * (c1 - 1)) * 4 / tau) * A
    elif loss_type == "vespo":
        k_pos, l_pos, k_neg, l_neg = vespo
        with torch.no_grad():
            s = (torch.clamp(log_ratio, -20.0, 20.0) * m).sum(-1, keepdim=True)
            if v is not None:
                s = s + torch.clamp(torch.log(v), math.log(1e-8), 20.0).sum(-1, keepdim=True)
            logw = torch.clamp(s, math.log(1e-8), 20.0)
            nonneg = A >= 0
            k = torch.where(nonneg, torch.full_like(A, k_pos), torch.full_like(A, k_neg))
            lam = torch.where(nonneg, torch.full_like(A, l_pos), torch.full_like(A, l_neg)).clamp(min=1e-4)
            phi = torch.exp(lam + k * logw - lam * torch.exp(logw)).nan_to_num(
                nan=0.0, posinf=0.0, neginf=0.0
            )
        ptl = -phi * A * lp
    else:
        c2 = torch.clamp(c1, 1 - eps_low, 1 + eps_high)
        c1d = torch.clamp(c1, max=delta) if delta is not None else c1
        ptl = -torch.min(c1d * A, c2 * A)
        lower, upper = c1 < 1 - eps_low, c1 > 1 + eps_high
    if v is not None and loss_type != "vespo":
        ptl = ptl * v
    kl = None
    if beta != 0.0:
        kl = torch.exp(ref - lp) - (ref - lp) - 1.0
        if bias_kl:
            kl = kl * torch.exp(liw)
        ptl = ptl + beta * kl
    B = ids.shape[0]
    n_all = m.sum().clamp(min=1.0)
    if loss_type in ("grpo", "sapo"):
        loss = ((ptl * m).sum(-1) / m.sum(-1).clamp(min=1.0)).sum() / B
    elif loss_type == "bnpo":
        loss = (ptl * m).sum() / n_all
    elif loss_type == "dr_grpo":
        loss = (ptl * m).sum() / (B * max_len)
    elif loss_type in ("dapo", "cispo", "vespo"):
        norm = n_all if num_items is None else torch.as_tensor(float(num_items), dtype=acc).clamp(min=1.0)
        loss = (ptl * m).sum() / norm
    else:  # luspo: Liger's branch (no mask; divided by B x the per-token loss's width)
        weighted = ptl * m.sum(1, keepdim=True)
        loss = weighted.sum() / (B * weighted.shape[1])
    metrics = []
    if beta != 0.0:
        metrics.append((kl * m).sum() / n_all)
    if lower is None:
        metrics.append(torch.zeros((), dtype=acc))
    else:
        clipped = ((lower & (A < 0)) | (upper & (A > 0))).expand_as(m)
        metrics.append((clipped.to(acc) * m).sum() / n_all)
    return loss, metrics, lp


def jsd_soft_rows(s_logits, t_logits, beta, temperature):
    """Per-row generalized JSD of Liger's chunked JSD loss (log-softmax of logits / temperature)."""
    acc = acc_dtype(s_logits)
    ls = F.log_softmax(s_logits.to(acc) / temperature, dim=-1)
    lt = F.log_softmax(t_logits.to(acc) / temperature, dim=-1)
    if beta == 0:
        out = F.kl_div(ls, lt, reduction="none", log_target=True)
    elif beta == 1:
        out = F.kl_div(lt, ls, reduction="none", log_target=True)
    else:
        lm = torch.logsumexp(torch.stack([ls + math.log(1 - beta), lt + math.log(beta)]), dim=0)
        out = beta * F.kl_div(lm, lt, reduction="none", log_target=True) + (1 - beta) * F.kl_div(
            lm, ls, reduction="none", log_target=True
        )
    return out.sum(-1)


def cosine_soft_rows(s_logits, t_logits, beta, temperature):
    acc = acc_dtype(s_logits)
    s = F.normalize(s_logits.to(acc) / temperature, p=2, dim=-1)
    t = F.normalize(t_logits.to(acc) / temperature, p=2, dim=-1)
    return beta * (1 - F.cosine_similarity(s, t, dim=-1))


def distillation_reference(
    xs,
    ws,
    xt,
    wt,
    target,
    bs=None,
    bt=None,
    *,
    loss="jsd",
    weight_hard=0.5,
    weight_soft=0.5,
    beta=0.5,
    ignore_index=-100,
    temperature=1.0,
):
    """(loss, soft, hard) of Liger's LigerFusedLinearDistillationBase with the JSD / cosine loss.
    xs (M, Hs), xt (M, Ht); a teacher vocabulary larger than the student's zero-pads the student's
    logits; the hard loss is the student's CE at temperature 1."""
    acc = acc_dtype(xs)
    s_logits = head_logits(xs, ws, bs)
    with torch.no_grad():
        t_logits = head_logits(xt, wt, bt)
    if target is None:  # Liger's LigerFusedLinearJSD without shift_labels: every row counts, no hard loss
        valid = torch.ones(s_logits.shape[0], dtype=torch.bool, device=s_logits.device)
        hard = torch.zeros((), dtype=acc, device=s_logits.device)
    else:
        valid = target != ignore_index
    n = valid.sum().clamp(min=1)
    if target is not None:
        hard = F.cross_entropy(s_logits.to(acc), target, ignore_index=ignore_index, reduction="sum") / n
    if wt.shape[0] > ws.shape[0]:
        pad = torch.zeros(
            s_logits.shape[0], wt.shape[0] - ws.shape[0], dtype=s_logits.dtype, device=s_logits.device
        )
        s_logits = torch.cat([s_logits, pad], dim=-1)
    if loss == "jsd":
        soft = (jsd_soft_rows(s_logits, t_logits, beta, temperature) * valid).sum() / n
    else:
        soft = (cosine_soft_rows(s_logits, t_logits, beta, temperature) * valid).sum() / n
    return weight_hard * hard + weight_soft * soft, soft, hard


def liger_jsd_reference(log_q, log_p, shift_labels=None, beta=0.5, ignore_index=-100):
    """Liger's ops.jsd on given log-probabilities: per element, averaged over the counted rows."""
    acc = acc_dtype(log_q)
    x, y = log_q.to(acc), log_p.to(acc)
    Q, P = x.exp(), y.exp()
    if beta == 0:
        el = P * (y - x)
    elif beta == 1:
        el = Q * (x - y)
    else:
        M = beta * P + (1 - beta) * Q
        el = beta * P * y + (1 - beta) * Q * x - M * torch.log(M)
    rows = el.sum(-1)
    if shift_labels is None:
        return rows.sum() / rows.numel()
    keep = shift_labels != ignore_index
    return (rows * keep).sum() / keep.sum()


def tol_close(name, out, ref64, ref_lo, dtype, in_ulps=None, magnitude=None):
    """<= 2 x the low-precision PyTorch error + a floor of `in_ulps` units of the input dtype
    (float32: 16, float32 sums over rows and classes; 16-bit: 2, the logits' and dlogits' roundings).
    float64 inputs: the per-token statistics are float32, so the float32 bound applies (ref_lo is the
    float32 PyTorch run). `magnitude`: the size of the summed terms when it exceeds |ref|."""
    unit = torch.float32 if dtype == torch.float64 else dtype
    if in_ulps is None:
        in_ulps = 16.0 if unit == torch.float32 else 2.0
    extra = in_ulps * ULP[unit] / ULP[out.dtype]
    if magnitude is not None:
        extra *= max(1.0, magnitude / max(ref64.detach().abs().max().item(), 1e-30))
    assert_close_to_ref(out, ref64, ref_lo, name, factor=2.0, extra_ulps=extra)


def leaf(t, dtype=None):
    if t is None:
        return None
    return t.detach().to(dtype or t.dtype).requires_grad_(t.requires_grad)


def acc_ulps(dtype, chunks):
    """16-bit dW / dB accumulated over `chunks` GEMMs in the weight's dtype (one rounding each) where
    the PyTorch reference rounds once: 2 ulps per accumulation."""
    return None if dtype in (torch.float32, torch.float64) else 2.0 * max(1, chunks)
