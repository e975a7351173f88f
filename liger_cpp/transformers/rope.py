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
    if unsqueeze_dim == 0 and cos.dim() == 2 and q.dim() == 4:
        # HF's (S, D) tables unsqueezed at 0 broadcast over (B, H, S, D) (Pixtral): heads-first.
        unsqueeze_dim = 1
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


def liger_rotary_pos_emb_gpt_oss(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1):
    """HF GPT-OSS's apply_rotary_pos_emb: the whole head rotated (first half with the second), with
    cos / sin of width head_dim / 2 (one entry per pair, used for both halves)."""
    return liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, rotary_dim=q.shape[-1])


def liger_rotary_pos_emb_vision(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """HF's apply_rotary_pos_emb_vision (Qwen3-VL, Qwen3.5, GLM-4V): q, k (S, H, D), cos / sin (S, D);
    float32 math and one rounding to q's / k's dtype (HF computes in float32 and casts back), read in
    place (no float32 copies of q and k)."""
    if cos.dtype not in (torch.float32, q.dtype):
        cos, sin = cos.float(), sin.float()
    q_out, k_out = rope(q.unsqueeze(0), k.unsqueeze(0), cos, sin, unsqueeze_dim=2)
    return q_out.squeeze(0), k_out.squeeze(0)


def liger_rotary_pos_emb_single(x: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> Tensor:
    """HF Gemma 3n / Gemma 4's one-tensor apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim): x * cos +
    rotate_half(x) * sin on x (B, S, H, D) (unsqueeze_dim=2) or (B, H, S, D) (unsqueeze_dim=1)."""
    hdim = 2 if unsqueeze_dim in (2, -2) else 1
    out, _ = rope(x, x.narrow(hdim, 0, 0), cos, sin, unsqueeze_dim=unsqueeze_dim)
    return out
