"""Liger-Kernel's ``liger_kernel.transformers.model.loss_utils`` (Axolotl's custom forwards import
LigerForCausalLMLoss): Hugging Face's causal-LM loss through the fused linear cross entropy.

The fused loss is looked up in ``liger_kernel.transformers.functional`` at call time, so a
replacement there (Axolotl's use_token_scaling patch) applies, and the extra keyword arguments are
those of its signature (others are dropped), as Liger-Kernel does."""

import inspect
from typing import Optional

import torch
import torch.nn.functional as F

from liger_cpp.ops.ce_output import CrossEntropyOutput
from liger_kernel._surface import complete
from liger_kernel.transformers import functional


def unpack_cross_entropy_result(result):
    """(loss, z_loss, token_accuracy, predicted_tokens) of a loss, a CrossEntropyOutput or a tuple."""
    if isinstance(result, CrossEntropyOutput):
        return result.loss, result.z_loss, result.token_accuracy, result.predicted_tokens
    if isinstance(result, tuple):
        return tuple(result[:4]) + (None,) * (4 - min(len(result), 4))
    return result, None, None, None


def fixed_fused_linear_cross_entropy(
    hidden_states,
    lm_head_weight,
    target,
    num_items_in_batch: Optional[int] = None,
    ignore_index: int = -100,
    final_logit_softcapping: Optional[float] = None,
    accum_dtype: Optional[torch.dtype] = None,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    **kwargs,
):
    """The fused loss of flattened (hidden_states, target): mean over the non-ignored targets, or
    their sum divided by num_items_in_batch (gradient accumulation). A CrossEntropyOutput (loss,
    token_accuracy, predicted_tokens) when either is asked for, else the loss."""
    reduction = "mean" if num_items_in_batch is None else "sum"
    result = functional.liger_fused_linear_cross_entropy(
        hidden_states,
        lm_head_weight,
        target,
        reduction=reduction,
        ignore_index=ignore_index,
        softcap=final_logit_softcapping,
        accum_dtype=accum_dtype,
        return_token_accuracy=return_token_accuracy,
        return_predicted_tokens=return_predicted_tokens,
        **kwargs,
    )
    loss, _, accuracy, predicted = unpack_cross_entropy_result(result)
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    if return_token_accuracy or return_predicted_tokens:
        return CrossEntropyOutput(loss=loss, token_accuracy=accuracy, predicted_tokens=predicted)
    return loss


def LigerForCausalLMLoss(
    hidden_states,
    lm_head_weight,
    labels,
    hidden_size: int,
    num_items_in_batch: Optional[int] = None,
    ignore_index: int = -100,
    shift_labels: Optional[torch.Tensor] = None,
    final_logit_softcapping: Optional[float] = None,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    **kwargs,
):
    """Hugging Face's ForCausalLMLoss (labels shifted left by one, unless shift_labels is given)
    without materialising the logits. kwargs: further options of the fused loss (accum_dtype,
    use_token_scaling, ...); others are ignored."""
    accepted = inspect.signature(functional.liger_fused_linear_cross_entropy).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    hidden_states = hidden_states.reshape(-1, hidden_size)
    shift_labels = shift_labels.reshape(-1).to(hidden_states.device)
    return fixed_fused_linear_cross_entropy(
        hidden_states,
        lm_head_weight,
        shift_labels,
        num_items_in_batch,
        ignore_index,
        final_logit_softcapping,
        return_token_accuracy=return_token_accuracy,
        return_predicted_tokens=return_predicted_tokens,
        **kwargs,
    )


complete(globals())
