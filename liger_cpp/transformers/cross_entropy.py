"""Cross-entropy loss module with Liger-Kernel's constructor (``LigerCrossEntropyLoss``)."""

from typing import Optional, Union

from torch import Tensor, nn

from liger_cpp.ops.ce_output import CrossEntropyOutput
from liger_cpp.ops.cross_entropy import REDUCTIONS, cross_entropy


class LigerCrossEntropyLoss(nn.Module):
    """Cross entropy over the last dimension of the logits (see ``liger_cpp.ops.cross_entropy``).

    Liger's arguments, plus `inplace` (default False: the logits are left intact; True writes the
    gradient into them, visibly to autograd). `weight` is a buffer, so it follows `.to()`.
    forward(input (..., V), target (...)) returns the loss, or a CrossEntropyOutput when any
    return_* flag is set.
    """

    def __init__(
        self,
        weight: Optional[Tensor] = None,
        ignore_index: int = -100,
        lse_square_scale: float = 0.0,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
        softcap: Optional[float] = None,
        return_z_loss: bool = False,
        return_token_accuracy: bool = False,
        return_predicted_tokens: bool = False,
        inplace: bool = False,
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
        if softcap is not None and not softcap >= 0:
            raise ValueError(f"liger_cpp: argument 'softcap': expected None or a value >= 0, got {softcap}")
        if not lse_square_scale >= 0:
            raise ValueError(
                f"liger_cpp: argument 'lse_square_scale': expected a value >= 0, got {lse_square_scale}"
            )
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.lse_square_scale = lse_square_scale
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.softcap = softcap
        self.return_z_loss = return_z_loss
        self.return_token_accuracy = return_token_accuracy
        self.return_predicted_tokens = return_predicted_tokens
        self.inplace = inplace

    def forward(self, _input: Tensor, target: Tensor) -> Union[Tensor, CrossEntropyOutput]:
        return cross_entropy(
            _input,
            target,
            self.weight,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
            lse_square_scale=self.lse_square_scale,
            softcap=self.softcap,
            reduction=self.reduction,
            return_z_loss=self.return_z_loss,
            return_token_accuracy=self.return_token_accuracy,
            return_predicted_tokens=self.return_predicted_tokens,
            inplace=self.inplace,
        )

    def extra_repr(self) -> str:
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
            f"label_smoothing={self.label_smoothing}, lse_square_scale={self.lse_square_scale}, "
            f"softcap={self.softcap}, inplace={self.inplace}"
        )
