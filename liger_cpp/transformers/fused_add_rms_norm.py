"""FusedAddRMSNorm module with Liger-Kernel's constructor arguments: forward(hidden_states,
residual) -> (RMSNorm(hidden_states + residual), hidden_states + residual)."""

import torch

from liger_cpp.ops.fused_add_rms_norm import fused_add_rms_norm
from liger_cpp.transformers.rms_norm import LigerRMSNorm


class LigerFusedAddRMSNorm(LigerRMSNorm):
    """LigerRMSNorm's parameters and checks, with the residual add fused into the forward."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        offset: float = 0.0,
        casting_mode: str = "llama",
        init_fn: str = "ones",
        in_place: bool = False,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor):
        return fused_add_rms_norm(
            hidden_states,
            residual,
            self.weight,
            self.variance_epsilon,
            offset=self.offset,
            casting_mode=self.casting_mode,
            in_place=self.in_place,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.hidden_size}, eps={self.variance_epsilon}, offset={self.offset}, "
            f"casting_mode={self.casting_mode}, in_place={self.in_place}"
        )
