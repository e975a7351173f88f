"""Fused linear cross entropy module with Liger-Kernel's constructor arguments and call order
(`forward(lin_weight, _input, target, bias=None)`: the weight first, as Liger)."""

from typing import Optional

import torch
from torch import nn

from liger_cpp.ops.fused_linear_cross_entropy import REDUCTIONS
from liger_cpp.transformers.functional import liger_fused_linear_cross_entropy


class LigerFusedLinearCrossEntropyLoss(nn.Module):
    def __init__(
        self,
        ce_weight: Optional[torch.Tensor] = None,
        ignore_index: int = -100,
        lse_square_scale: float = 0.0,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
        softcap: Optional[float] = None,
        return_z_loss: bool = False,
        accum_dtype: Optional[torch.dtype] = None,
        return_token_accuracy: bool = False,
        return_predicted_tokens: bool = False,
        logit_scale: float = 1.0,
    ):
        super().__init__()
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(
                f"liger_cpp: argument 'label_smoothing': expected a value in [0, 1], got {label_smoothing}"
            )
        if reduction not in REDUCTIONS:
            raise ValueError(
                f"liger_cpp: argument 'reduction': expected one of {REDUCTIONS}, got {reduction!r}"
            )
        if softcap is not None and not softcap > 0:
            raise ValueError(
                f"liger_cpp: argument 'softcap': expected None or a positive value, got {softcap!r}"
            )
        # A plain attribute, as Liger (not a buffer: .to() does not move it).
        self.ce_weight = ce_weight
        self.ignore_index = ignore_index
        self.lse_square_scale = lse_square_scale
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.softcap = softcap
        self.return_z_loss = return_z_loss
        self.accum_dtype = accum_dtype
        self.return_token_accuracy = return_token_accuracy
        self.return_predicted_tokens = return_predicted_tokens
        self.logit_scale = logit_scale

    def forward(self, lin_weight, _input, target, bias=None):
        return liger_fused_linear_cross_entropy(
            _input,
            lin_weight,
            target,
            bias=bias,
            ce_weight=self.ce_weight,
            ignore_index=self.ignore_index,
            lse_square_scale=self.lse_square_scale,
            label_smoothing=self.label_smoothing,
            reduction=self.reduction,
            softcap=self.softcap,
            return_z_loss=self.return_z_loss,
            accum_dtype=self.accum_dtype,
            return_token_accuracy=self.return_token_accuracy,
            return_predicted_tokens=self.return_predicted_tokens,
            logit_scale=self.logit_scale,
        )

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}"
