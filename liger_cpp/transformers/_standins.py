"""TEMPORARY: replaced when the rope/ce/flce branches merge.

Pure-PyTorch stand-ins, with the final signatures, for the functional ops that other branches add to
``liger_cpp.transformers.functional``: ``liger_rotary_pos_emb``, ``liger_multimodal_rotary_pos_emb``,
``liger_cross_entropy`` and ``liger_fused_linear_cross_entropy``. The Hugging Face integration reaches
them only through ``liger_cpp.transformers.causal_lm.liger_fn``, which prefers ``functional``'s
version: once those names exist there, this file is unused and can be deleted.

The math follows Hugging Face / PyTorch (fp32 loss math), so the integration tests hold for the real
kernels too.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from liger_cpp.ops.ce_output import CrossEntropyOutput


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def liger_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """HF apply_rotary_pos_emb (rotate-half layout); position_ids is ignored, as in Liger."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def liger_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """HF apply_multimodal_rotary_pos_emb (Qwen2-VL): cos/sin are [3, B, S, D]; the rotary half is
    split into mrope_section (temporal, height, width) sections taken from the matching plane."""
    sections = list(mrope_section) * 2
    cos = torch.cat([c[i % 3] for i, c in enumerate(cos.split(sections, dim=-1))], dim=-1)
    sin = torch.cat([s[i % 3] for i, s in enumerate(sin.split(sections, dim=-1))], dim=-1)
    return liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


def _ce(
    logits: Tensor,
    target: Tensor,
    weight: Optional[Tensor],
    ignore_index: int,
    reduction: str,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: Optional[float],
    return_z_loss: bool,
    return_token_accuracy: bool,
    return_predicted_tokens: bool,
):
    x = logits.float()
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    loss = F.cross_entropy(
        x,
        target,
        weight=None if weight is None else weight.float(),
        ignore_index=ignore_index,
        reduction="none",
        label_smoothing=label_smoothing,
    )
    valid = target != ignore_index
    n = valid.sum()
    z = lse_square_scale * torch.logsumexp(x, dim=-1).pow(2) * valid
    loss = loss + z
    if reduction == "mean":
        denom = n if weight is None else weight.float()[target.clamp(min=0)].mul(valid).sum()
        loss, z = loss.sum() / denom, z.sum() / n
    elif reduction == "sum":
        loss, z = loss.sum(), z.sum()
    elif reduction != "none":
        raise ValueError(f"liger_cpp: argument 'reduction': expected mean, sum or none, got {reduction!r}")
    if not (return_z_loss or return_token_accuracy or return_predicted_tokens):
        return loss
    pred = x.detach().argmax(dim=-1)
    hit = ((pred == target) & valid).float()
    acc = hit if reduction == "none" else hit.sum() / n
    return CrossEntropyOutput(
        loss=loss,
        z_loss=z if return_z_loss else None,
        token_accuracy=acc if return_token_accuracy else None,
        predicted_tokens=torch.where(valid, pred, -1) if return_predicted_tokens else None,
    )


def liger_cross_entropy(
    input,
    target,
    weight=None,
    size_average=None,
    ignore_index=-100,
    reduce=None,
    reduction="mean",
    label_smoothing=0.0,
    lse_square_scale=0.0,
    softcap=None,
    return_z_loss=False,
    return_token_accuracy=False,
    return_predicted_tokens=False,
):
    """F.cross_entropy-compatible cross entropy (fp32 math) with Liger's extras."""
    return _ce(
        input,
        target,
        weight,
        ignore_index,
        reduction,
        label_smoothing,
        lse_square_scale,
        softcap,
        return_z_loss,
        return_token_accuracy,
        return_predicted_tokens,
    )


def liger_fused_linear_cross_entropy(
    input,
    weight,
    target,
    bias=None,
    ce_weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    return_z_loss=False,
    accum_dtype=None,
    return_token_accuracy=False,
    return_predicted_tokens=False,
    logit_scale=1.0,
):
    """cross_entropy(softcap(logit_scale * (input @ weight.T + bias)), target), unfused."""
    logits = F.linear(input, weight, bias).float()
    if logit_scale != 1.0:
        logits = logits * logit_scale
    return _ce(
        logits,
        target,
        ce_weight,
        ignore_index,
        reduction,
        label_smoothing,
        lse_square_scale,
        softcap,
        return_z_loss,
        return_token_accuracy,
        return_predicted_tokens,
    )
