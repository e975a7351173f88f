"""Liger's LigerFusedLinearJSD: generalized JSD between a teacher and a student lm_head fused with
both GEMMs (liger_cpp.ops.fused_linear_distillation with the soft loss only)."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops.fused_linear_distillation import fused_linear_distillation


def liger_fused_linear_jsd(
    student_input: Tensor,
    student_weight: Tensor,
    teacher_input: Tensor,
    teacher_weight: Tensor,
    shift_labels: Optional[Tensor] = None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
    accum_dtype=None,
) -> Tensor:
    """JSD_beta of softmax(teacher logits / T) and softmax(student logits / T) (Liger's ops.jsd
    convention: beta weighs the teacher; beta 0 / 1: forward / reverse KL), summed over the rows whose
    shift_labels is not ignore_index and divided by their count (all rows without labels). dW
    accumulates over the chunks inside the GEMM in the weight's dtype (accum_dtype is accepted)."""
    return fused_linear_distillation(
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        shift_labels,
        loss="jsd",
        weight_hard_loss=0.0,
        weight_soft_loss=1.0,
        beta=jsd_beta,
        ignore_index=ignore_index,
        temperature=temperature,
        compute_hard=False,
    )[0]


class LigerFusedLinearJSD(torch.nn.Module):
    def __init__(
        self, jsd_beta: float = 0.5, ignore_index: int = -100, temperature: float = 1.0, accum_dtype=None
    ):
        super().__init__()
        if temperature == 0:
            raise ValueError("temperature must not be 0")
        self.jsd_beta, self.ignore_index, self.temperature, self.accum_dtype = (
            jsd_beta,
            ignore_index,
            temperature,
            accum_dtype,
        )

    def forward(
        self,
        student_input: Tensor,
        student_weight: Tensor,
        teacher_input: Tensor,
        teacher_weight: Tensor,
        shift_labels: Optional[Tensor],
    ) -> Tensor:
        return liger_fused_linear_jsd(
            student_input,
            student_weight,
            teacher_input,
            teacher_weight,
            shift_labels,
            self.jsd_beta,
            self.ignore_index,
            self.temperature,
        )
