"""Liger-Kernel-compatible modules and functional API (``liger_kernel.transformers``)."""

from liger_cpp.transformers.functional import liger_rms_norm  # noqa: F401
from liger_cpp.transformers.rms_norm import (  # noqa: F401
    LigerRMSNorm,
    LigerRMSNormForGemma,
    LigerRMSNormForGemma2,
    LigerRMSNormForGemma3,
)

__all__ = [
    "LigerRMSNorm",
    "LigerRMSNormForGemma",
    "LigerRMSNormForGemma2",
    "LigerRMSNormForGemma3",
    "liger_rms_norm",
]
