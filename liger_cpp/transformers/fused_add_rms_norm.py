"""FusedAddRMSNorm module with Liger-Kernel's constructor arguments: forward(hidden_states,
residual) -> (RMSNorm(hidden_states + residual), hidden_states + residual)."""

import torch
from torch import nn

from liger_cpp.ops.fused_add_rms_norm import fused_add_rms_norm
from liger_cpp.ops.rms_norm import CASTING_MODES


class LigerFusedAddRMSNorm(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        offset: float = 0.0,
        casting_mode: str = "llama",
        init_fn: str = "ones",
        in_place: bool = False,
    ):
        super().__init__()
        if init_fn not in ("ones", "zeros"):
            raise ValueError(f"liger_cpp: argument 'init_fn': expected 'ones' or 'zeros', got {init_fn!r}")
        if casting_mode not in CASTING_MODES:
            raise ValueError(
                f"liger_cpp: argument 'casting_mode': expected one of {CASTING_MODES}, got {casting_mode!r}"
            )
        self.hidden_size = hidden_size
        init = torch.ones if init_fn == "ones" else torch.zeros
        self.weight = nn.Parameter(init(hidden_size))
        self.variance_epsilon = eps
        self.offset = offset
        self.casting_mode = casting_mode
        self.in_place = in_place

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
