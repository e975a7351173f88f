"""Liger-Kernel-compatible modules and functional API (``liger_kernel.transformers``)."""

from liger_cpp.transformers.functional import (  # noqa: F401
    liger_fused_add_rms_norm,
    liger_geglu,
    liger_layer_norm,
    liger_rms_norm,
    liger_swiglu,
)
from liger_cpp.transformers.fused_add_rms_norm import LigerFusedAddRMSNorm  # noqa: F401
from liger_cpp.transformers.geglu import LigerGEGLUMLP  # noqa: F401
from liger_cpp.transformers.layer_norm import LigerLayerNorm  # noqa: F401
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
    "LigerFusedAddRMSNorm",
    "LigerGEGLUMLP",
    "LigerLayerNorm",
    "LigerPhi3SwiGLUMLP",
    "LigerRMSNorm",
    "LigerRMSNormForGemma",
    "LigerRMSNormForGemma2",
    "LigerRMSNormForGemma3",
    "LigerSwiGLUMLP",
    "liger_fused_add_rms_norm",
    "liger_geglu",
    "liger_layer_norm",
    "liger_rms_norm",
    "liger_swiglu",
]
