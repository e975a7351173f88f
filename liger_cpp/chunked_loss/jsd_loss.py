"""Liger's LigerFusedLinearJSDLoss / liger_fused_linear_jsd (generalized Jensen-Shannon distillation
with a hard cross-entropy term), on liger_cpp's C++ distillation op.

loss = weight_hard_loss * CE(student logits, true_labels) + weight_soft_loss * JSD_beta(teacher ||
student at `temperature`), both summed over the rows whose label is not ignore_index and divided by
their count. beta 0: KL(teacher || student), beta 1: KL(student || teacher), otherwise
beta KL(teacher || M) + (1 - beta) KL(student || M) with M = beta teacher + (1 - beta) student. The
teacher and student hidden sizes may differ; a teacher vocabulary larger than the student's is
matched by zero-padding the student's logits (Liger's rule). `compiled` and `chunk_size` are
accepted and ignored: nothing is compiled, and the chunks follow the logits' memory budget.
"""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops.fused_linear_distillation import fused_linear_distillation


def _distill(
    loss,
    student_input,
    student_weight,
    teacher_input,
    teacher_weight,
    true_labels,
    student_bias,
    teacher_bias,
    weight_hard_loss,
    weight_soft_loss,
    beta,
    ignore_index,
    temperature,
    return_soft_hard_loss,
):
    total, soft, hard = fused_linear_distillation(
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        true_labels,
        student_bias,
        teacher_bias,
        loss=loss,
        weight_hard_loss=weight_hard_loss,
        weight_soft_loss=weight_soft_loss,
        beta=beta,
        ignore_index=ignore_index,
        temperature=temperature,
        mask_soft=True,  # both soft terms skip ignored rows (Liger 0.8.5's JSD and cosine loss functions)
        compute_hard=bool(return_soft_hard_loss),  # the op computes it anyway with a hard weight
    )
    return (total, soft, hard) if return_soft_hard_loss else total


def liger_fused_linear_jsd(
    student_input,
    student_weight,
    teacher_input,
    teacher_weight,
    true_labels,
    student_bias,
    teacher_bias,
    weight_hard_loss=0.5,
    weight_soft_loss=0.5,
    beta=0.5,
    ignore_index=-100,
    temperature=1.0,
    compiled=True,
    chunk_size=1024,
    return_soft_hard_loss=False,
):
    """Liger's LigerFusedLinearJSDFunction.apply, argument for argument."""
    return _distill(
        "jsd",
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        true_labels,
        student_bias,
        teacher_bias,
        weight_hard_loss,
        weight_soft_loss,
        beta,
        ignore_index,
        temperature,
        return_soft_hard_loss,
    )


class _FusedLinearDistillationLoss(torch.nn.Module):
    """The distillation modules' shared body: Liger's constructor and forward, `_loss` names the
    soft term ("jsd" or "cosine")."""

    _loss = ""

    def __init__(
        self,
        weight_hard_loss: float = 0.5,
        weight_soft_loss: float = 0.5,
        beta: float = 0.5,
        ignore_index: int = -100,
        temperature: float = 1.0,
        compiled: bool = True,
        chunk_size: int = 1024,
        return_soft_hard_loss: bool = False,
    ):
        super().__init__()
        if temperature == 0:
            raise ValueError("Temperature cannot be 0.")
        self.weight_hard_loss, self.weight_soft_loss, self.beta = weight_hard_loss, weight_soft_loss, beta
        self.ignore_index, self.temperature, self.compiled = ignore_index, temperature, compiled
        self.chunk_size, self.return_soft_hard_loss = chunk_size, return_soft_hard_loss

    def forward(
        self,
        student_input: Tensor,
        student_weight: Tensor,
        teacher_input: Tensor,
        teacher_weight: Tensor,
        true_labels: Tensor,
        student_bias: Optional[Tensor] = None,
        teacher_bias: Optional[Tensor] = None,
    ):
        return _distill(
            self._loss,
            student_input,
            student_weight,
            teacher_input,
            teacher_weight,
            true_labels,
            student_bias,
            teacher_bias,
            self.weight_hard_loss,
            self.weight_soft_loss,
            self.beta,
            self.ignore_index,
            self.temperature,
            self.return_soft_hard_loss,
        )


class LigerFusedLinearJSDLoss(_FusedLinearDistillationLoss):
    """Fused lm_heads + generalized JSD distillation loss (with a weighted hard CE term)."""

    _loss = "jsd"
