"""The GRPO family on given logits (Liger's GrpoLossFunction and triton_grpo_loss): the fake kernels of
torch.ops.liger.grpo_logits_fwd / _bwd / _bwd_ and `grpo_loss_on_logits`.

logits (B, L + 1, V), position l predicting completion_ids[:, l]; the loss types, options and reductions
are those of the fused loss (liger_cpp.ops.fused_linear_grpo), with Liger's Triton semantics where they
differ: tokens whose mask is 0 count for nothing (also for luspo), dr_grpo's length defaults to L,
delta only for the standard types, beta != 0 needs ref_logp. One pass over the logits forward (the
token log-probs, read at 1 / temperature) and one backward (dlogits, optionally over the logits
themselves: Liger's inplace=True).
"""

from typing import Optional, Union

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device
from liger_cpp.ops.fused_linear_grpo import (
    _DAPO_NORMALIZED,
    LOSS_TYPES,
    check_level,
    check_loss_type,
    dapo_normalizer,
    option_args,
)


@torch.library.register_fake("liger::grpo_logits_fwd")
def _fwd_fake(logits, completion_ids, advantages, completion_mask=None, old_logp=None, ref_logp=None,
              vllm_is_ratio=None, phi_seq=None, loss_normalizer=None, loss_type="dapo",
              importance_sampling_level="token", beta=0.04, eps_low=0.2, eps_high=0.4, delta=None,
              temperature=0.9, max_completion_length=None, use_bias_correction_kl=False,
              sapo_temperature_pos=1.0, sapo_temperature_neg=1.05, vespo_k_pos=2.0, vespo_lambda_pos=3.0,
              vespo_k_neg=3.0, vespo_lambda_neg=2.0, reduce=False, inplace=False):  # fmt: skip
    torch._check(logits.dim() == 3, lambda: "liger_cpp: argument 'logits': expected (B, L + 1, V)")
    torch._check(loss_type in LOSS_TYPES, lambda: "liger_cpp: argument 'loss_type': unknown loss type")
    B, L = logits.shape[0], logits.shape[1] - 1
    f32 = torch.float32
    per_token = logits.new_empty((B, L), dtype=f32)
    out = logits.new_empty((), dtype=f32) if reduce else per_token
    grad_scale = logits.new_empty((B, L) if reduce else (0,), dtype=f32)
    stats = logits.new_empty((B * (L + 1), 2), dtype=f32)
    return out, out.clone(), out.clone(), per_token.clone(), grad_scale, stats


@torch.library.register_fake("liger::grpo_logits_bwd")
def _bwd_fake(grad, logits, *args):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


@torch.library.register_fake("liger::grpo_logits_bwd_")
def _bwd_inplace_fake(grad, logits, *args):
    return None


def grpo_loss_on_logits(
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
    reduce: bool = True,
    importance_sampling_level: str = "token",
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vllm_is_ratio: Optional[Tensor] = None,
    delta: Optional[float] = None,
    use_bias_correction_kl: bool = False,
    num_items_in_batch: Optional[Union[int, float, Tensor]] = None,
    phi_seq: Optional[Tensor] = None,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
) -> tuple[Tensor, Optional[Tensor], Tensor]:
    """Liger's GrpoLossFunction.apply (its argument order, then the VESPO options, which compute phi_seq
    when it is not given). reduce: (loss, kl mean or None when beta == 0, clip ratio), float32
    scalars; else (per-token loss, KL or None, clipping), each float32 (B, L) and times the mask. Only
    the loss is differentiable, w.r.t. logits; inplace (eager, contiguous logits): the backward writes
    dlogits over the logits, as Liger's does, and bumps their version."""
    check_device(logits, "logits")
    check_loss_type(loss_type)
    check_level(loss_type, importance_sampling_level)
    if delta is not None and loss_type in ("cispo", "sapo", "vespo"):
        raise ValueError(
            f"liger_cpp: argument 'delta': two-sided clipping is not supported for loss_type={loss_type!r} "
            "(Liger's rule)"
        )
    for name, value in (
        ("sapo_temperature_pos", sapo_temperature_pos),
        ("sapo_temperature_neg", sapo_temperature_neg),
    ):
        if loss_type == "sapo" and not value > 0:
            raise ValueError(f"liger_cpp: argument '{name}': expected a positive value, got {value}")
    normalizer = None
    if loss_type in _DAPO_NORMALIZED:
        mask = completion_mask
        if mask is None:
            mask = torch.ones(completion_ids.shape, device=completion_ids.device)
        normalizer = dapo_normalizer(mask, num_items_in_batch)
    loss, kl, clip, _, _, _ = torch.ops.liger.grpo_logits_fwd(
        logits,
        completion_ids,
        advantages,
        completion_mask,
        old_logp,
        ref_logp,
        vllm_is_ratio,
        phi_seq,
        normalizer,
        loss_type,
        importance_sampling_level,
        *option_args(
            beta,
            eps_low,
            eps_high,
            delta,
            temperature,
            max_completion_length,
            use_bias_correction_kl,
            sapo_temperature_pos,
            sapo_temperature_neg,
            vespo_k_pos,
            vespo_lambda_pos,
            vespo_k_neg,
            vespo_lambda_neg,
        ),
        bool(reduce),
        bool(inplace),
    )
    return loss, (kl if beta != 0.0 else None), clip
