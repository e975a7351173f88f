"""The result type of the cross-entropy family when more than the loss is asked for
(Liger's ``CrossEntropyOutput``), shared by cross entropy and fused linear cross entropy."""

from dataclasses import dataclass
from typing import Optional

from torch import Tensor


@dataclass
class CrossEntropyOutput:
    loss: Tensor
    z_loss: Optional[Tensor] = None
    token_accuracy: Optional[Tensor] = None
    predicted_tokens: Optional[Tensor] = None
