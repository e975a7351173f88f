"""Post-training losses fused with the lm_head and chunked (Liger's chunked_loss): DPO (with its
loss variants), ORPO, CPO, SimPO (chunks of pairs) and KTO (unpaired, chunks of sequences).
Gradients are computed in the forward, chunk by chunk, in C++ (torch.ops.liger.fused_linear_preference_fwd,
fused_linear_kto_fwd); the (tokens x V) logits never exist at once.

RL and distillation: GRPO and its variants (LigerFusedLinearGRPOLoss), JSD and cosine-similarity
distillation (LigerFusedLinearJSDLoss, LigerFusedLinearCosineSimilarityLoss), in C++ too
(torch.ops.liger.fused_linear_grpo_fwd, fused_linear_distillation_fwd). A distillation loss of
one's own subclasses fused_linear_distillation.LigerFusedLinearDistillationBase (Liger's extension
point; its chunk loop is Python, as the loss is).
"""

from liger_cpp.chunked_loss.functional import (  # noqa: F401
    liger_fused_linear_cpo,
    liger_fused_linear_dpo,
    liger_fused_linear_kto,
    liger_fused_linear_orpo,
    liger_fused_linear_simpo,
)
from liger_cpp.chunked_loss.losses import (  # noqa: F401
    LigerFusedLinearCPOLoss,
    LigerFusedLinearDPOLoss,
    LigerFusedLinearKTOLoss,
    LigerFusedLinearORPOLoss,
    LigerFusedLinearSimPOLoss,
)

__all__ = [
    "LigerFusedLinearCPOLoss",
    "LigerFusedLinearDPOLoss",
    "LigerFusedLinearKTOLoss",
    "LigerFusedLinearORPOLoss",
    "LigerFusedLinearSimPOLoss",
    "liger_fused_linear_cpo",
    "liger_fused_linear_dpo",
    "liger_fused_linear_kto",
    "liger_fused_linear_orpo",
    "liger_fused_linear_simpo",
]

# ---- RL and distillation losses ----
from liger_cpp.chunked_loss.cosine_similarity_loss import (  # noqa: F401,E402
    LigerFusedLinearCosineSimilarityLoss,
    liger_fused_linear_cosine,
)
from liger_cpp.chunked_loss.grpo_loss import LigerFusedLinearGRPOLoss, liger_fused_linear_grpo  # noqa: F401,E402
from liger_cpp.chunked_loss.jsd_loss import LigerFusedLinearJSDLoss, liger_fused_linear_jsd  # noqa: F401,E402

__all__ += [
    "LigerFusedLinearCosineSimilarityLoss",
    "LigerFusedLinearGRPOLoss",
    "LigerFusedLinearJSDLoss",
    "liger_fused_linear_cosine",
    "liger_fused_linear_grpo",
    "liger_fused_linear_jsd",
]
