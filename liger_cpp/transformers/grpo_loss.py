"""Liger's triton_grpo_loss: the GRPO family on materialised logits (liger_cpp.ops.grpo_logits), with
Liger's wrapper defaults (temperature 0.9, eps_high 0.4, inplace=True, loss_type "dapo", reduce=False).
VESPO's sequence weights are computed inside the op from the vespo_* options (vllm_is_ratio folded into
them, as Liger's wrapper does)."""

from typing import Optional, Union

from torch import Tensor

from liger_cpp.ops.grpo_logits import grpo_loss_on_logits


def triton_grpo_loss(
    logits: Tensor,
    old_logp: Optional[Tensor],
    ref_logp: Optional[Tensor],
    completion_ids: Tensor,
    advantages: Tensor,
    completion_mask: Optional[Tensor] = None,
    temperature: float = 0.9,
    beta: float = 0.04,
    eps_low: float = 0.2,
    eps_high: float = 0.4,
    inplace: bool = True,
    loss_type: str = "dapo",
    max_completion_length: Optional[int] = None,
    importance_sampling_level: str = "token",
    reduce: bool = False,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vllm_is_ratio: Optional[Tensor] = None,
    delta: Optional[float] = None,
    use_bias_correction_kl: bool = False,
    num_items_in_batch: Optional[Union[int, float, Tensor]] = None,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
):
    """logits (B, L + 1, V), completion_ids (B, L), advantages (B,), completion_mask / old_logp / ref_logp
    (B, L) or None. reduce=False: (per_token_loss, per_token_kl or None, is_clipped), each (B, L) times
    the mask, the first differentiable w.r.t. logits; reduce=True: (loss, metrics) with metrics
    [kl mean (beta != 0), clip ratio]."""
    loss, kl, clip = grpo_loss_on_logits(
        logits,
        old_logp,
        ref_logp,
        completion_ids,
        advantages,
        completion_mask,
        temperature,
        beta,
        eps_low,
        eps_high,
        inplace,
        loss_type,
        max_completion_length,
        reduce,
        importance_sampling_level,
        sapo_temperature_pos,
        sapo_temperature_neg,
        vllm_is_ratio,
        delta,
        use_bias_correction_kl,
        num_items_in_batch,
        None,
        vespo_k_pos,
        vespo_lambda_pos,
        vespo_k_neg,
        vespo_lambda_neg,
    )
    if not reduce:
        return loss, kl, clip
    return loss, ([kl] if kl is not None else []) + [clip]
