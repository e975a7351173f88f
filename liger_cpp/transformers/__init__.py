"""Liger-Kernel-compatible modules and functional API (``liger_kernel.transformers``)."""

from liger_cpp.transformers.functional import liger_geglu, liger_rms_norm, liger_swiglu  # noqa: F401
from liger_cpp.transformers.geglu import LigerGEGLUMLP  # noqa: F401
from liger_cpp.transformers.rms_norm import (  # noqa: F401
    LigerRMSNorm,
    LigerRMSNormForGemma,
    LigerRMSNormForGemma2,
    LigerRMSNormForGemma3,
)
from liger_cpp.transformers.swiglu import (  # noqa: F401
    LigerBlockSparseTop2MLP,
    LigerPhi3SwiGLUMLP,
    LigerSwiGLUMLP,
)

__all__ = [
    "LigerBlockSparseTop2MLP",
    "LigerGEGLUMLP",
    "LigerPhi3SwiGLUMLP",
    "LigerRMSNorm",
    "LigerRMSNormForGemma",
    "LigerRMSNormForGemma2",
    "LigerRMSNormForGemma3",
    "LigerSwiGLUMLP",
    "liger_geglu",
    "liger_rms_norm",
    "liger_swiglu",
]
