"""Liger's LigerFusedLinearGRPOLoss and liger_fused_linear_grpo (Liger 0.8.5's names, argument order and
defaults), on liger_cpp's C++ GRPO op (liger_cpp.ops.fused_linear_grpo).

Returns (loss, metrics) with metrics = (kl, clip_ratio) when beta != 0, else (clip_ratio,): TRL's
GRPOTrainer reads metrics[0] as the KL and metrics[-1] as the clip ratio. `compiled` is accepted and
ignored (nothing is compiled at run time) and `chunk_size` (sequences per chunk in Liger) is accepted:
the op plans its chunks itself from the logits' memory budget, whole sequences where they fit.
Semantics that follow Liger rather than TRL's own loss: `luspo` weights every position by its
sequence's token count without the mask (Liger's branch), and dapo / cispo / vespo divide by
num_items_in_batch / world size when given, else by the token count all-reduced over the process
group / world size.
"""

import math
from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops.fused_linear_grpo import check_loss_type, fused_linear_grpo


def _metrics(beta, kl, clip_ratio):
    return (kl, clip_ratio) if beta != 0.0 else (clip_ratio,)


def liger_fused_linear_grpo(
    _input,
    weight,
    selected_token_ids,
    attention_mask,
    advantages,
    bias=None,
    ref_per_token_logps=None,
    old_per_token_logps=None,
    ref_input=None,
    ref_weight=None,
    ref_bias=None,
    beta=0.04,
    epsilon_low=0.2,
    epsilon_high=0.2,
    loss_type="dapo",
    max_completion_length=None,
    importance_sampling_level="token",
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
    temperature=1.0,
    compiled=True,
    use_ref_model=True,
    chunk_size=1,
    vllm_is_ratio=None,
    delta=None,
    use_bias_correction_kl=False,
    vespo_k_pos=2.0,
    vespo_lambda_pos=3.0,
    vespo_k_neg=3.0,
    vespo_lambda_neg=2.0,
    num_items_in_batch=None,
):
    """Liger's LigerFusedLinearGRPOFunction.apply, argument for argument: (loss, metrics)."""
    loss, kl, clip_ratio, _ = fused_linear_grpo(
        _input,
        weight,
        selected_token_ids,
        attention_mask,
        advantages,
        bias,
        ref_per_token_logps,
        old_per_token_logps,
        ref_input,
        ref_weight,
        ref_bias,
        vllm_is_ratio,
        num_items_in_batch,
        beta=beta,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
        importance_sampling_level=importance_sampling_level,
        sapo_temperature_pos=sapo_temperature_pos,
        sapo_temperature_neg=sapo_temperature_neg,
        temperature=temperature,
        delta=delta,
        use_bias_correction_kl=use_bias_correction_kl,
        vespo_k_pos=vespo_k_pos,
        vespo_lambda_pos=vespo_lambda_pos,
        vespo_k_neg=vespo_k_neg,
        vespo_lambda_neg=vespo_lambda_neg,
        use_ref_model=use_ref_model,
    )
    return loss, _metrics(beta, kl, clip_ratio)


class LigerFusedLinearGRPOLoss(torch.nn.Module):
    """Fused lm_head + GRPO-family loss (``loss_type``: grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo,
    vespo; ``importance_sampling_level``: token or sequence)."""

    def __init__(
        self,
        beta: float = 0.04,
        compiled: bool = True,
        use_ref_model: bool = True,
        chunk_size: int = 1,
        epsilon_low: float = 0.2,
        epsilon_high: float = 0.2,
        loss_type: str = "dapo",
        max_completion_length: Optional[int] = None,
        importance_sampling_level: str = "token",
        sapo_temperature_pos: float = 1.0,
        sapo_temperature_neg: float = 1.05,
        temperature: float = 1.0,
        delta: Optional[float] = None,
        use_bias_correction_kl: bool = False,
        vespo_k_pos: float = 2.0,
        vespo_lambda_pos: float = 3.0,
        vespo_k_neg: float = 3.0,
        vespo_lambda_neg: float = 2.0,
    ):
        super().__init__()
        check_loss_type(loss_type)
        if sapo_temperature_pos <= 0:
            raise ValueError(f"sapo_temperature_pos must be positive, got {sapo_temperature_pos}")
        if sapo_temperature_neg <= 0:
            raise ValueError(f"sapo_temperature_neg must be positive, got {sapo_temperature_neg}")
        if delta is not None and delta <= 0:
            raise ValueError(f"delta must be positive, got {delta}")
        self.beta, self.compiled, self.use_ref_model, self.chunk_size = (
            beta,
            compiled,
            use_ref_model,
            chunk_size,
        )
        self.epsilon_low, self.epsilon_high, self.loss_type = epsilon_low, epsilon_high, loss_type
        self.max_completion_length = max_completion_length
        self.importance_sampling_level = importance_sampling_level
        self.sapo_temperature_pos, self.sapo_temperature_neg = sapo_temperature_pos, sapo_temperature_neg
        self.temperature, self.delta, self.use_bias_correction_kl = temperature, delta, use_bias_correction_kl
        self.vespo_k_pos, self.vespo_lambda_pos = vespo_k_pos, vespo_lambda_pos
        self.vespo_k_neg, self.vespo_lambda_neg = vespo_k_neg, vespo_lambda_neg

    def forward(
        self,
        _input: Tensor,
        lin_weight: Tensor,
        selected_token_ids: Tensor,
        attention_mask: Tensor,
        advantages: Tensor,
        bias: Optional[Tensor] = None,
        ref_per_token_logps: Optional[Tensor] = None,
        old_per_token_logps: Optional[Tensor] = None,
        ref_input: Optional[Tensor] = None,
        ref_weight: Optional[Tensor] = None,
        ref_bias: Optional[Tensor] = None,
        vllm_is_ratio: Optional[Tensor] = None,
        num_items_in_batch=None,
    ):
        loss, kl, clip_ratio, _ = fused_linear_grpo(
            _input,
            lin_weight,
            selected_token_ids,
            attention_mask,
            advantages,
            bias,
            ref_per_token_logps,
            old_per_token_logps,
            ref_input,
            ref_weight,
            ref_bias,
            vllm_is_ratio,
            num_items_in_batch,
            beta=self.beta,
            epsilon_low=self.epsilon_low,
            epsilon_high=self.epsilon_high,
            loss_type=self.loss_type,
            max_completion_length=self.max_completion_length,
            importance_sampling_level=self.importance_sampling_level,
            sapo_temperature_pos=self.sapo_temperature_pos,
            sapo_temperature_neg=self.sapo_temperature_neg,
            temperature=self.temperature,
            delta=self.delta,
            use_bias_correction_kl=self.use_bias_correction_kl,
            vespo_k_pos=self.vespo_k_pos,
            vespo_lambda_pos=self.vespo_lambda_pos,
            vespo_k_neg=self.vespo_k_neg,
            vespo_lambda_neg=self.vespo_lambda_neg,
            use_ref_model=self.use_ref_model,
        )
        return loss, _metrics(self.beta, kl, clip_ratio)


# ---- Liger's per-token helpers of chunked_loss.grpo_loss, for code that imports them ----
# The fused loss above computes all of this in C++; these are the same formulas in PyTorch on given
# per-token tensors (TRL's GRPOTrainer has them too), with Liger's names, arguments and results.


def k3_loss_fn(log_p: Tensor, log_q: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(q || p) per element: exp(log_p - log_q) - (log_p - log_q) - 1
    (GRPO's KL term with log_p the reference's log-probs and log_q the policy's)."""
    d = log_p - log_q
    return torch.exp(d) - d - 1.0


@torch.no_grad()
def get_gamma_weights(
    advantages: Tensor,
    log_ratio_per_token: Tensor,
    mask: Tensor,
    importance_sampling_ratio: Optional[Tensor] = None,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> Tensor:
    """VESPO's sequence weight phi(w) = exp(lambda) w^k exp(-lambda w) (phi(1) = 1 at k = lambda), as a
    (B, 1) tensor without gradient. w is the sequence's importance ratio: the masked sum of the
    per-token log-ratios (each clamped to [-20, 20]), plus the sum of log(importance_sampling_ratio)
    (vLLM's correction, each clamped to [log 1e-8, 20]) when given, clamped to [log 1e-8, 20] and
    exponentiated. (k, lambda) = (k_pos, lambda_pos) where the advantage is >= 0, else the negatives;
    lambda is at least 1e-4. Non-finite weights become 0."""
    floor = math.log(1e-8)
    log_w = (log_ratio_per_token.clamp(-20.0, 20.0) * mask).sum(-1, keepdim=True)
    if importance_sampling_ratio is not None:
        log_w = log_w + importance_sampling_ratio.log().clamp(floor, 20.0).sum(-1, keepdim=True)
    log_w = log_w.clamp(floor, 20.0)
    nonneg = advantages.unsqueeze(-1) >= 0
    # filled in log_w's dtype and device (no host copy; float64 stays float64)
    k = torch.where(nonneg, torch.full_like(log_w, k_pos), torch.full_like(log_w, k_neg))
    lam = torch.where(nonneg, torch.full_like(log_w, lambda_pos), torch.full_like(log_w, lambda_neg)).clamp(
        min=1e-4
    )
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def sapo_loss_fn(importance_ratio: Tensor, temperature: float) -> Tensor:
    """SAPO's soft gate in place of clipping: sigmoid(temperature (ratio - 1)) 4 / temperature (the
    per-token objective is minus this times the advantage)."""
    if temperature <= 0:
        raise ValueError(f"sapo_temperature must be > 0, got {temperature}")
    return torch.sigmoid(temperature * (importance_ratio - 1)) * (4.0 / temperature)


def clip_coef_fn(coef: Tensor, epsilon_low: float, epsilon_high: float, loss_type: str):
    """(clipped coefficient, lower-clipped flags, upper-clipped flags) of the importance ratio `coef`:
    cispo clamps it above at epsilon_high and detaches it (never lower-clipped); sapo and vespo do not
    clip (None and all-False flags); the rest clamp it to [1 - epsilon_low, 1 + epsilon_high]."""
    if loss_type == "cispo":
        return coef.clamp(max=epsilon_high).detach(), False, coef > epsilon_high
    if loss_type in ("sapo", "vespo"):
        none = torch.zeros_like(coef, dtype=torch.bool)
        return None, none, none.clone()
    lo, hi = 1 - epsilon_low, 1 + epsilon_high
    return coef.clamp(lo, hi), coef < lo, coef > hi


def grpo_ppo_loss_fn(
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
    max_completion_length=None,
    importance_sampling_level="token",
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
    vllm_is_ratio=None,
    delta=None,
    use_bias_correction_kl=False,
    vespo_k_pos=2.0,
    vespo_lambda_pos=3.0,
    vespo_k_neg=3.0,
    vespo_lambda_neg=2.0,
    num_items_in_batch=None,
    **kwargs,
):
    """Liger's GRPO-family ``ppo_loss_fn`` for LigerFusedLinearPPOBase, in PyTorch: a chunk's (loss,
    metrics) from its per-token log-probs, metrics ``[kl (beta != 0), clip_ratio]`` over the whole
    batch's tokens. The C++ GRPO op computes the same (csrc/aten/composite/fused_linear_grpo.cpp
    states the formulas); this exists for subclasses of the base that reuse it."""
    from liger_cpp.chunked_loss.fused_linear_ppo import (
        LigerFusedLinearPPOBase,
    )  # the base imports this module

    if importance_sampling_level == "sequence" and loss_type in ("cispo", "sapo", "vespo"):
        raise ValueError(f"Sequence-level importance sampling is not supported for loss_type='{loss_type}'")
    ref = ref_per_token_logps if ref_per_token_logps is not None else per_token_logps.detach()
    old = old_per_token_logps if old_per_token_logps is not None else per_token_logps.detach()
    log_ratio = per_token_logps - old
    if importance_sampling_level == "token":
        log_w = log_ratio
    elif importance_sampling_level == "sequence":
        log_w = ((log_ratio * attention_mask).sum(-1) / attention_mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    else:
        raise ValueError(f"Unknown importance sampling level: {importance_sampling_level}")
    A = advantages.unsqueeze(1)
    coef = torch.exp(log_w)
    clipped_coef, lower, upper = clip_coef_fn(coef, epsilon_low, epsilon_high, loss_type)
    if loss_type == "cispo":
        ptl = -clipped_coef * A * per_token_logps
    elif loss_type == "sapo":
        A_full = A.expand_as(coef)
        gate = torch.where(
            A_full > 0, sapo_loss_fn(coef, sapo_temperature_pos), sapo_loss_fn(coef, sapo_temperature_neg)
        )
        ptl = -gate * A_full
    elif loss_type == "vespo":
        phi = get_gamma_weights(
            advantages,
            log_ratio,
            attention_mask,
            vllm_is_ratio,
            vespo_k_pos,
            vespo_lambda_pos,
            vespo_k_neg,
            vespo_lambda_neg,
        )
        ptl = -phi * A * per_token_logps
    else:
        unclipped = coef.clamp(max=delta) if delta is not None else coef
        ptl = -torch.min(unclipped * A, clipped_coef * A)
    if vllm_is_ratio is not None and loss_type != "vespo":
        ptl = ptl * vllm_is_ratio
    kl = None
    if beta != 0.0:
        kl = k3_loss_fn(ref, per_token_logps)
        if use_bias_correction_kl:
            kl = kl * torch.exp(log_w)
        ptl = ptl + beta * kl
    m = attention_mask
    n_tokens = full_attention_mask.sum().clamp(min=1.0)
    B = full_attention_mask.shape[0]
    if loss_type in ("grpo", "sapo"):
        loss = ((ptl * m).sum(-1) / m.sum(-1).clamp(min=1.0)).sum() / B
    elif loss_type == "bnpo":
        loss = (ptl * m).sum() / n_tokens
    elif loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("max_completion_length must be provided for loss_type 'dr_grpo'")
        loss = (ptl * m).sum() / (B * max_completion_length)
    elif loss_type in ("dapo", "cispo", "vespo"):
        loss = (ptl * m).sum() / LigerFusedLinearPPOBase._compute_dapo_normalizer(
            full_attention_mask, num_items_in_batch
        )
    elif loss_type == "luspo":
        weighted = ptl * m.sum(1, keepdim=True)
        loss = weighted.sum() / (B * weighted.shape[1])
    else:
        raise ValueError(f"Unknown loss type: {loss_type}")
    metrics = [] if kl is None else [(kl * m).sum() / n_tokens]
    clipped = ((lower & (A < 0)) | (upper & (A > 0))).expand_as(m)
    metrics.append((clipped * m).sum() / n_tokens)
    return loss, metrics
