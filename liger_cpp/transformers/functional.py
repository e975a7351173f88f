"""Functional API with Liger-Kernel's names (``liger_kernel.transformers.functional``)."""

from typing import Optional

from torch import Tensor

from liger_cpp.ops.rms_norm import rms_norm as _rms_norm


def liger_rms_norm(
    X: Tensor,
    W: Optional[Tensor],
    eps: float,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = True,
) -> Tensor:
    """RMSNorm over the last dimension (see ``liger_cpp.ops.rms_norm``)."""
    return _rms_norm(X, W, eps, offset=offset, casting_mode=casting_mode, in_place=in_place)


__all__ = ["liger_rms_norm"]
