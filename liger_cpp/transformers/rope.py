"""HF rotary embedding replacement (``liger_kernel.transformers.rope``)."""

from typing import Optional

from torch import Tensor

from liger_cpp.ops.rope import rope


def liger_rotary_pos_emb(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Optional[Tensor] = None,
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """Drop-in for HF's apply_rotary_pos_emb (Llama and its copies): returns (q_embed, k_embed).

    Out of place (Liger-Kernel rotates q and k in place); exact HF formula for any cos/sin;
    `position_ids` is ignored. See ``liger_cpp.ops.rope.rope``.
    """
    return rope(q, k, cos, sin, position_ids=position_ids, unsqueeze_dim=unsqueeze_dim)
