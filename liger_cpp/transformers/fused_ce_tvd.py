"""Liger's LigerFusedCETVDLoss: per-token cross entropy and total variation distance against a teacher,
unreduced (liger_cpp.ops.ce_tvd)."""

import torch
from torch import Tensor

from liger_cpp.ops.ce_tvd import fused_ce_tvd


class LigerFusedCETVDLoss(torch.nn.Module):
    """forward(student_logits (BT, V), teacher_logits (BT, V), target (BT,)) -> (ce, tvd), each float32
    (BT,): the caller owns masking, per-token weighting and normalisation. Rows whose target is
    ignore_index give 0 for both and no gradient; the teacher gets no gradient."""

    def __init__(self, ignore_index: int = -100):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(
        self, student_logits: Tensor, teacher_logits: Tensor, target: Tensor
    ) -> tuple[Tensor, Tensor]:
        return fused_ce_tvd(student_logits, teacher_logits, target, self.ignore_index)
