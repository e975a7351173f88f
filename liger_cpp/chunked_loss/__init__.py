"""Post-training losses fused with the lm_head and chunked over pairs (Liger's chunked_loss):
DPO (with its loss variants), ORPO, CPO, SimPO. Gradients are computed in the forward, chunk by
chunk, in C++ (torch.ops.liger.fused_linear_preference_fwd); the (2B*T x V) logits never exist.

Not implemented yet: KTO, JSD, cosine-similarity distillation, GRPO.
"""

from liger_cpp.chunked_loss.functional import (  # noqa: F401
    liger_fused_linear_cpo,
    liger_fused_linear_dpo,
    liger_fused_linear_orpo,
    liger_fused_linear_simpo,
)
from liger_cpp.chunked_loss.losses import (  # noqa: F401
    LigerFusedLinearCPOLoss,
    LigerFusedLinearDPOLoss,
    LigerFusedLinearORPOLoss,
    LigerFusedLinearSimPOLoss,
)

__all__ = [
    "LigerFusedLinearCPOLoss",
    "LigerFusedLinearDPOLoss",
    "LigerFusedLinearORPOLoss",
    "LigerFusedLinearSimPOLoss",
    "liger_fused_linear_cpo",
    "liger_fused_linear_dpo",
    "liger_fused_linear_orpo",
    "liger_fused_linear_simpo",
]
