"""Liger's LigerKLDIVLoss: nn.KLDivLoss on liger_cpp's C++ kernel (liger_cpp.ops.kl_div)."""

from torch import Tensor, nn

from liger_cpp.ops.divergence import kl_div


class LigerKLDIVLoss(nn.KLDivLoss):
    """nn.KLDivLoss (its reduction, default "mean", and log_target), with `eps` clamping the target
    before its log as Liger's. Only the input gets a gradient; the loss is float32."""

    def __init__(self, eps: float = 1e-10, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.eps = eps

    def forward(self, y_pred: Tensor, y_true: Tensor) -> Tensor:
        return kl_div(y_pred, y_true, self.reduction, self.log_target, self.eps)
