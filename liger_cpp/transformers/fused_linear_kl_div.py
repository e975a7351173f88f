"""Liger's LigerFusedLinearKLDivLoss: the KL divergence of a given target distribution (cached teacher
probabilities, offline distillation) from the student head's softmax, fused with the head: its
logits never exist whole (liger_cpp.ops.fused_linear_kl_div, C++ chunk loop)."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops.fused_linear_kl_div import fused_linear_kl_div


class LigerFusedLinearKLDivLoss(torch.nn.Module):
    """KL(target || softmax(student_input @ student_weight^T / temperature)), Liger-Kernel 0.8.5's
    arguments and defaults: reduction "batchmean" (also "mean", "sum"; as torch.nn.KLDivLoss, over
    the rows whose shift_label is not ignore_index), ignore_index, temperature, eps (target clamped
    before its log, so q = 0 adds 0), accum_dtype (torch.float32: dW accumulated in float32 for
    bf16 / fp16 weights). forward(student_input (BT, H), student_weight (V, H), target (BT, V),
    shift_labels (BT,) or None) -> a float32 scalar with gradients to student_input and
    student_weight. liger_cpp's addition: `student_bias` (keyword) and `chunk_rows`."""

    def __init__(
        self,
        reduction: Optional[str] = "batchmean",
        ignore_index: int = -100,
        temperature: float = 1.0,
        eps: float = 1e-10,
        accum_dtype: Optional[torch.dtype] = None,
        chunk_rows: int = 0,
    ):
        super().__init__()
        if temperature == 0:
            raise ValueError("liger_cpp: argument 'temperature': cannot be 0")
        self.reduction = reduction
        self.ignore_index = ignore_index
        self.temperature = temperature
        self.eps = eps
        self.accum_dtype = accum_dtype
        self.chunk_rows = chunk_rows

    def forward(
        self,
        student_input: Tensor,
        student_weight: Tensor,
        target: Tensor,
        shift_labels: Optional[Tensor] = None,
        *,
        student_bias: Optional[Tensor] = None,
    ) -> Tensor:
        return fused_linear_kl_div(
            student_input,
            student_weight,
            target,
            shift_labels,
            student_bias,
            reduction=self.reduction,
            ignore_index=self.ignore_index,
            temperature=self.temperature,
            eps=self.eps,
            accum_dtype=self.accum_dtype,
            chunk_rows=self.chunk_rows,
        )

    def extra_repr(self) -> str:
        return (
            f"reduction={self.reduction}, ignore_index={self.ignore_index}, "
            f"temperature={self.temperature}, eps={self.eps}, accum_dtype={self.accum_dtype}"
        )
