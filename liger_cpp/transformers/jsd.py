"""Liger's LigerJSD: generalized Jensen-Shannon divergence of log-probabilities (liger_cpp.ops.jsd)."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops.divergence import jsd


class LigerJSD(torch.nn.Module):
    """JSD_beta(P || Q) = beta KL(P || M) + (1 - beta) KL(Q || M), M = beta P + (1 - beta) Q, of the
    student's log-probs log_q and the teacher's log_p (rows along the last dimension); beta 0:
    KL(P || Q), beta 1: KL(Q || P). Averaged over the rows whose shift_labels is not ignore_index.
    The loss is float32 (Liger returns it in the input's dtype)."""

    def __init__(self, beta: float = 0.5, ignore_index: int = -100):
        super().__init__()
        self.beta, self.ignore_index = beta, ignore_index

    def forward(self, log_q: Tensor, log_p: Tensor, shift_labels: Optional[Tensor] = None) -> Tensor:
        return jsd(log_q, log_p, shift_labels, self.beta, self.ignore_index)
