"""HF rotary embedding replacement (``liger_kernel.transformers.rope``)."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops.rope import rope


def liger_rotary_pos_emb(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Optional[Tensor] = None,
    unsqueeze_dim: int = 1,
    rotary_dim: Optional[int] = None,
) -> tuple[Tensor, Tensor]:
    """Drop-in for HF's apply_rotary_pos_emb (Llama and its copies): returns (q_embed, k_embed).

    Out of place (Liger-Kernel rotates q and k in place); exact HF formula for any cos/sin;
    `position_ids` is ignored. See ``liger_cpp.ops.rope.rope``.

    Partial rotary (Phi-3's partial_rotary_factor < 1, as Liger-Kernel's `rotary_dim`): the first
    `rotary_dim` entries of each head are rotated and the rest passed through. `rotary_dim=None`
    takes it from cos's width; cos / sin of width rotary_dim / 2 (GPT-OSS: `freqs`, not
    `cat(freqs, freqs)`) are used for both halves of the rotated part.
    """
    head_dim = q.shape[-1]
    if rotary_dim is None:
        rotary_dim = cos.shape[-1]
    else:
        rotary_dim = int(rotary_dim)
        if cos.shape[-1] * 2 == rotary_dim:
            cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
        elif cos.shape[-1] != rotary_dim:
            raise ValueError(
                f"liger_cpp: argument 'rotary_dim': cos has width {cos.shape[-1]}; expected rotary_dim "
                f"to equal it or twice it, got {rotary_dim}"
            )
    if rotary_dim > head_dim or rotary_dim <= 0 or rotary_dim % 2:
        raise ValueError(
            f"liger_cpp: argument 'rotary_dim': expected an even width in (0, {head_dim}] (the head "
            f"size), got {rotary_dim}"
        )
    if rotary_dim == head_dim:
        return rope(q, k, cos, sin, position_ids=position_ids, unsqueeze_dim=unsqueeze_dim)
    d = rotary_dim
    q_rot, k_rot = rope(
        q[..., :d].contiguous(), k[..., :d].contiguous(), cos, sin, unsqueeze_dim=unsqueeze_dim
    )
    return torch.cat([q_rot, q[..., d:]], dim=-1), torch.cat([k_rot, k[..., d:]], dim=-1)


def liger_partial_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """HF Phi-3's apply_rotary_pos_emb: RoPE on the first cos.shape[-1] dims of the head, the rest
    passed through (partial_rotary_factor < 1). Kept for liger_cpp <= 0.2 callers; the same as
    ``liger_rotary_pos_emb``."""
    return liger_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim)
