"""Fused linear cross entropy module with Liger-Kernel's constructor arguments and call order
(`forward(lin_weight, _input, target, bias=None)`: the weight first, as Liger)."""

from typing import Optional

import torch
from torch import nn

from liger_cpp.ops.fused_linear_cross_entropy import REDUCTIONS
from liger_cpp.transformers.functional import liger_fused_linear_cross_entropy


class LigerFusedLinearCrossEntropyLoss(nn.Module):
    """Fused lm_head + cross entropy with Liger's constructor (its parameters in its order, then
    liger_cpp's `logit_scale` and `chunk_budget_mib`): see
    ``liger_cpp.transformers.functional.liger_fused_linear_cross_entropy``. `use_token_scaling`
    multiplies each token's loss by the detached probability of its target (TRL's DFT loss);
    `chunk_budget_mib` is the logits held per chunk in MiB (None: the environment variable
    LIGER_CPP_FLCE_CHUNK_MB, read once, else automatic). A bad target on CUDA is a device-side
    assertion unless ``liger_cpp.set_check_targets(True)`` is on (then a ValueError)."""

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
        use_token_scaling: bool = False,
        return_token_accuracy: bool = False,
        return_predicted_tokens: bool = False,
        logit_scale: float = 1.0,
        chunk_budget_mib: Optional[float] = None,
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
        if chunk_budget_mib is not None and not chunk_budget_mib > 0:
            raise ValueError(
                "liger_cpp: argument 'chunk_budget_mib': expected None or a positive number of MiB, "
                f"got {chunk_budget_mib!r}"
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
        self.use_token_scaling = use_token_scaling
        self.return_token_accuracy = return_token_accuracy
        self.return_predicted_tokens = return_predicted_tokens
        self.logit_scale = logit_scale
        self.chunk_budget_mib = chunk_budget_mib

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
            use_token_scaling=self.use_token_scaling,
            return_token_accuracy=self.return_token_accuracy,
            return_predicted_tokens=self.return_predicted_tokens,
            logit_scale=self.logit_scale,
            chunk_budget_mib=self.chunk_budget_mib,
        )

    def extra_repr(self) -> str:
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
            f"use_token_scaling={self.use_token_scaling}"
        )
