"""Liger's LigerTVDLoss: total variation distance (liger_cpp.ops.tvd)."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops.divergence import tvd


class LigerTVDLoss(torch.nn.Module):
    """0.5 |p - q| summed per row and reduced ("batchmean": / rows counted, "mean": / (rows counted x V),
    "sum", "none"), rows whose shift_labels is ignore_index excluded. The gradient goes to p
    (0.5 sign(p - q): 0 where p == q, where Liger's kernel gives -0.5)."""

    def __init__(self, reduction: str = "batchmean", ignore_index: int = -100):
        super().__init__()
        self.reduction, self.ignore_index = reduction, ignore_index

    def forward(self, p: Tensor, q: Tensor, shift_labels: Optional[Tensor] = None) -> Tensor:
        return tvd(p, q, shift_labels, self.reduction, self.ignore_index)
