"""Liger-Kernel-compatible modules and functional API (``liger_kernel.transformers``)."""

from liger_cpp.transformers.functional import (  # noqa: F401
    liger_fused_add_rms_norm,
    liger_layer_norm,
    liger_rms_norm,
)
from liger_cpp.transformers.fused_add_rms_norm import LigerFusedAddRMSNorm  # noqa: F401
from liger_cpp.transformers.layer_norm import LigerLayerNorm  # noqa: F401
from liger_cpp.transformers.rms_norm import (  # noqa: F401
    LigerRMSNorm,
    LigerRMSNormForGemma,
    LigerRMSNormForGemma2,
    LigerRMSNormForGemma3,
)

__all__ = [
    "LigerFusedAddRMSNorm",
    "LigerLayerNorm",
    "LigerRMSNorm",
    "LigerRMSNormForGemma",
    "LigerRMSNormForGemma2",
    "LigerRMSNormForGemma3",
    "liger_fused_add_rms_norm",
    "liger_layer_norm",
    "liger_rms_norm",
]
