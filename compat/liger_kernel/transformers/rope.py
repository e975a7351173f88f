"""Liger-Kernel's ``liger_kernel.transformers.rope``: the RoPE replacements, on liger_cpp's rope."""

from liger_cpp.transformers.rope import liger_rotary_pos_emb
from liger_kernel._surface import complete


def liger_rotary_pos_emb_gpt_oss(q, k, cos, sin):
    """GPT-OSS's apply_rotary_pos_emb: the whole head rotated, cos / sin of width head_dim / 2."""
    return liger_rotary_pos_emb(q, k, cos, sin, rotary_dim=q.shape[-1])


def liger_rotary_pos_emb_vision(q, k, cos, sin):
    """Qwen3-VL's apply_rotary_pos_emb_vision: q, k (seq, heads, head_dim), cos / sin (seq,
    head_dim); float32 math, results in q's / k's dtype and layout."""
    q32 = q.float().unsqueeze(0).transpose(1, 2)
    k32 = k.float().unsqueeze(0).transpose(1, 2)
    q_out, k_out = liger_rotary_pos_emb(q32, k32, cos.float(), sin.float())
    return q_out.transpose(1, 2).squeeze(0).to(q.dtype), k_out.transpose(1, 2).squeeze(0).to(k.dtype)


__all__ = ["liger_rotary_pos_emb", "liger_rotary_pos_emb_gpt_oss", "liger_rotary_pos_emb_vision"]
complete(globals())
