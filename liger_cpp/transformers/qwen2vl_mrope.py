"""Qwen2-VL multimodal rotary embedding replacement (``liger_kernel.transformers.qwen2vl_mrope``)."""

from collections.abc import Sequence

from torch import Tensor

from liger_cpp.ops.rope import mrope


def liger_multimodal_rotary_pos_emb(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """Drop-in for Qwen2-VL's apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section,
    unsqueeze_dim=1) with cos, sin of shape (3, B, S, D): returns (q_embed, k_embed), out of place.

    (transformers >= 5.x folds the sections into Qwen2VLRotaryEmbedding and calls the plain
    apply_rotary_pos_emb, which ``liger_rotary_pos_emb`` replaces.) See ``liger_cpp.ops.rope.mrope``.
    """
    return mrope(q, k, cos, sin, mrope_section, unsqueeze_dim=unsqueeze_dim)
