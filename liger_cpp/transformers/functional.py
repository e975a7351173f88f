"""Functional API with Liger-Kernel's names (``liger_kernel.transformers.functional``)."""

from typing import Optional

from torch import Tensor

from liger_cpp.ops.geglu import geglu as _geglu
from liger_cpp.ops.rms_norm import rms_norm as _rms_norm
from liger_cpp.ops.swiglu import swiglu as _swiglu


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


def liger_swiglu(a: Tensor, b: Tensor, in_place: bool = False) -> Tensor:
    """silu(a) * b (Liger's LigerSiLUMulFunction; see ``liger_cpp.ops.swiglu``)."""
    return _swiglu(a, b, in_place=in_place)


def liger_geglu(a: Tensor, b: Tensor, approximate: str = "tanh", in_place: bool = False) -> Tensor:
    """gelu(a, approximate) * b (Liger's LigerGELUMulFunction; see ``liger_cpp.ops.geglu``)."""
    return _geglu(a, b, approximate=approximate, in_place=in_place)


__all__ = ["liger_geglu", "liger_rms_norm", "liger_swiglu"]
