"""Liger's loss functions in PyTorch, for subclasses of the chunked-loss bases: the
``preference_loss_fn`` of Liger's DPO, ORPO, CPO, SimPO and KTO Functions (for
fused_linear_preference.LigerFusedLinearPreferenceBase and fused_linear_unpaired_preference.
LigerFusedLinearUnpairedPreferenceBase) and the ``distillation_loss_fn`` of its JSD and cosine
Functions (for fused_linear_distillation.LigerFusedLinearDistillationBase), which code such as
AgileRL's reuses (``staticmethod(LigerFusedLinearDPOFunction.preference_loss_fn)``). The
compatibility package attaches them to its Function classes. (The GRPO family's ``ppo_loss_fn`` is
grpo_loss.grpo_ppo_loss_fn.)

liger_cpp's own losses of these names compute the same in C++; these exist for the bases' Python
loops. A preference function takes a chunk's sequence log-probs and returns the chunk's loss already
divided by the batch's pair (or sequence) count, and the rewards (plus ORPO's log-odds terms); a
distillation function returns the chunk's soft loss summed over its rows whose target is not
ignored, which the base divides by the batch's count; both as Liger's do.
"""

import math

import torch
import torch.nn.functional as F

from liger_cpp.chunked_loss._chunk_loop import log_softmax32


def _pairs(full_target):
    return full_target.shape[0] // 2


def dpo_preference_loss_fn(
    chosen_logps,
    rejected_logps,
    full_target,
    ref_chosen_logps=None,
    ref_rejected_logps=None,
    beta=0.1,
    loss_type="sigmoid",
    label_smoothing=0.0,
    discopop_tau=0.05,
):
    """DPO and its variants on the log-ratios c = pi_c - ref_c, r = pi_r - ref_r (ref 0 without a
    reference model), d = beta (c - r). Returns (loss, beta c, beta r). ``ipo`` needs each sequence's
    token count, which a loss function does not see (liger_cpp's fused DPO has it)."""
    c = chosen_logps - (ref_chosen_logps if ref_chosen_logps is not None else 0.0)
    r = rejected_logps - (ref_rejected_logps if ref_rejected_logps is not None else 0.0)
    d = beta * (c - r)
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(d)
    elif loss_type == "hinge":
        losses = torch.relu(1 - d)
    elif loss_type == "ipo":
        raise NotImplementedError(
            "loss_type='ipo' needs each sequence's completion-token count, which preference_loss_fn does not "
            "receive; liger_cpp's LigerFusedLinearDPOLoss(loss_type='ipo') computes it"
        )
    elif loss_type == "exo_pair":
        if label_smoothing <= 0.0:
            raise ValueError(f"label_smoothing must be > 0 for loss_type='exo_pair', got {label_smoothing}")
        eps = label_smoothing
        losses = torch.sigmoid(d) * (F.logsigmoid(d) - math.log1p(-eps)) + torch.sigmoid(-d) * (
            F.logsigmoid(-d) - math.log(eps)
        )
    elif loss_type == "nca_pair":
        losses = -F.logsigmoid(beta * c) - 0.5 * F.logsigmoid(-beta * c) - 0.5 * F.logsigmoid(-beta * r)
    elif loss_type == "robust":
        if not 0.0 <= label_smoothing < 0.5:
            raise ValueError(
                f"label_smoothing must lie in [0, 0.5) for loss_type='robust', got {label_smoothing}"
            )
        ls = label_smoothing
        losses = (-(1 - ls) * F.logsigmoid(d) + ls * F.logsigmoid(-d)) / (1 - 2 * ls)
    elif loss_type == "bco_pair":
        losses = -F.logsigmoid(beta * c) - F.logsigmoid(-beta * r)
    elif loss_type == "sppo_hard":
        losses = (c - 0.5 / beta) ** 2 + (r + 0.5 / beta) ** 2
    elif loss_type == "apo_zero":
        losses = 1 - torch.sigmoid(beta * c) + torch.sigmoid(beta * r)
    elif loss_type == "apo_down":
        losses = torch.sigmoid(beta * c) + 1 - torch.sigmoid(d)
    elif loss_type == "discopop":
        m = torch.sigmoid(d / discopop_tau)
        losses = -F.logsigmoid(d) * (1 - m) + torch.exp(-d) * m
    else:
        raise ValueError(
            f"Unsupported loss_type: {loss_type}. Supported types are: sigmoid, hinge, exo_pair, nca_pair, "
            "robust, bco_pair, sppo_hard, apo_zero, apo_down, discopop"
        )
    return losses.sum() / _pairs(full_target), beta * c, beta * r


def orpo_preference_loss_fn(chosen_logps, rejected_logps, full_target, beta=0.1):
    """ORPO: -beta logsigmoid(log-odds(chosen) - log-odds(rejected)) over the pairs. Returns (loss,
    beta pi_c, beta pi_r, mean log-sigmoid of the log-odds ratio, mean log-odds ratio)."""
    log_odds = (chosen_logps - rejected_logps) - (
        torch.log1p(-torch.exp(chosen_logps)) - torch.log1p(-torch.exp(rejected_logps))
    )
    ratio = F.logsigmoid(log_odds)
    n = _pairs(full_target)
    return (
        -beta * ratio.sum() / n,
        beta * chosen_logps,
        beta * rejected_logps,
        ratio.sum() / n,
        log_odds.sum() / n,
    )


def _smoothed_sigmoid(logits, label_smoothing, full_target):
    return (
        -F.logsigmoid(logits) * (1 - label_smoothing) - F.logsigmoid(-logits) * label_smoothing
    ).sum() / _pairs(full_target)


def cpo_preference_loss_fn(chosen_logps, rejected_logps, full_target, beta=0.1, label_smoothing=0.0):
    """CPO: label-smoothed -logsigmoid(beta (pi_c - pi_r)). Returns (loss, beta pi_c, beta pi_r)."""
    loss = _smoothed_sigmoid(beta * (chosen_logps - rejected_logps), label_smoothing, full_target)
    return loss, beta * chosen_logps, beta * rejected_logps


def simpo_preference_loss_fn(
    chosen_logps, rejected_logps, full_target, beta=0.1, gamma=0.5, label_smoothing=0.0
):
    """SimPO: label-smoothed -logsigmoid(beta (pi_c - pi_r) - gamma). Returns (loss, beta pi_c,
    beta pi_r)."""
    loss = _smoothed_sigmoid(beta * (chosen_logps - rejected_logps) - gamma, label_smoothing, full_target)
    return loss, beta * chosen_logps, beta * rejected_logps


def kto_preference_loss_fn(
    log_prob_chunk, preference_labels_chunk, full_target, ref_log_prob_chunk=None, beta=0.1, kl=None
):
    """KTO (unpaired): 1 - sigmoid(beta (logratio - kl)) for desirable sequences, 1 - sigmoid(beta
    (kl - logratio)) for the others, summed over the batch's sequences and divided by their count.
    Returns (loss, the desirable rewards' sum, the undesirable rewards' sum)."""
    ratio = log_prob_chunk - ref_log_prob_chunk if ref_log_prob_chunk is not None else log_prob_chunk
    sign = torch.where(preference_labels_chunk, 1.0, -1.0).to(ratio.dtype)
    losses = 1 - torch.sigmoid(beta * ((ratio - kl) if kl is not None else ratio) * sign)
    rewards = beta * ratio
    return (
        losses.sum() / full_target.shape[0],
        (rewards * preference_labels_chunk).sum(),
        (rewards * ~preference_labels_chunk).sum(),
    )


def jsd_distillation_loss_fn(student_logits, teacher_logits, beta=0.5, target=None, ignore_index=-100):
    """Generalized JSD of the rows' distributions (logits already divided by the temperature), summed
    over the rows whose target is not ignore_index: beta 0 KL(teacher || student), beta 1
    KL(student || teacher), else beta KL(teacher || M) + (1 - beta) KL(student || M) with M = beta
    teacher + (1 - beta) student. float32 (float64 kept) whatever the logits' dtype."""
    s, t = log_softmax32(student_logits), log_softmax32(teacher_logits)
    if beta == 0:
        rows = F.kl_div(s, t, reduction="none", log_target=True).sum(-1)
    elif beta == 1:
        rows = F.kl_div(t, s, reduction="none", log_target=True).sum(-1)
    else:
        m = torch.logsumexp(torch.stack([s + math.log(1 - beta), t + math.log(beta)]), dim=0)
        rows = (
            beta * F.kl_div(m, t, reduction="none", log_target=True)
            + (1 - beta) * F.kl_div(m, s, reduction="none", log_target=True)
        ).sum(-1)
    if target is not None:
        rows = rows * (target != ignore_index)
    return rows.sum()


def cosine_distillation_loss_fn(student_logits, teacher_logits, target=None, ignore_index=None, beta=1.0):
    """beta (1 - s . t / (max(|s|, 1e-12) max(|t|, 1e-12))) of each row's student and teacher logits
    (already divided by the temperature: Liger normalises both, then takes their cosine), summed over
    the rows whose target is not ignore_index."""
    acc = torch.promote_types(student_logits.dtype, torch.float32)
    s, t = student_logits.to(acc), teacher_logits.to(acc)
    cos = (s * t).sum(-1) / (s.norm(dim=-1).clamp_min(1e-12) * t.norm(dim=-1).clamp_min(1e-12))
    rows = beta * (1 - cos)
    if target is not None and ignore_index is not None:
        rows = rows * (target != ignore_index)
    return rows.sum()
