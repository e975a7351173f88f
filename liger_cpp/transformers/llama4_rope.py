"""Llama 4's complex RoPE (``liger_kernel.transformers.llama4_rope``): drop-ins for HF Llama 4's
``apply_rotary_emb`` (text) and ``vision_apply_rotary_emb`` (vision), on liger_cpp's
``liger::llama4_rope_fwd`` (interleaved pairs times complex frequencies, float32 math, one rounding,
out of place)."""

from torch import Tensor

from liger_cpp.ops.llama4_rope import llama4_rope


def liger_llama4_text_rotary_pos_emb(xq: Tensor, xk: Tensor, freqs_cis: Tensor) -> tuple[Tensor, Tensor]:
    """HF Llama 4's apply_rotary_emb: xq, xk (B, S, H, D) (before the transpose to heads-first),
    freqs_cis complex (B, S, D/2) (or (S, D/2)), broadcast over the heads."""
    return llama4_rope(xq, xk, freqs_cis)


def liger_llama4_vision_rotary_pos_emb(query: Tensor, key: Tensor, freqs_ci: Tensor) -> tuple[Tensor, Tensor]:
    """HF Llama 4's vision_apply_rotary_emb: query, key (B, N, H, D) (N patches + the class token),
    freqs_ci complex (N, 1, D/2) (HF's reshape_for_broadcast view: one table for every image and
    head), or (N, D/2)."""
    if freqs_ci.dim() == 3 and freqs_ci.shape[1] == 1:
        freqs_ci = freqs_ci[:, 0]
    return llama4_rope(query, key, freqs_ci)


def liger_deepseek_v2_rotary_pos_emb(xq: Tensor, xk: Tensor, freqs_cis: Tensor) -> tuple[Tensor, Tensor]:
    """HF DeepSeek-V2's apply_rotary_emb: the same complex RoPE on heads-first xq, xk (B, H, S, D)
    with freqs_cis (B, S, D/2)."""
    return llama4_rope(xq, xk, freqs_cis, heads_first=True)


def apply_liger_llama4_rope_full(modeling_module) -> None:
    """Liger-Kernel's helper: bind both Llama 4 RoPE replacements in a modeling module (its
    ``apply_rotary_emb`` and ``vision_apply_rotary_emb``); revert_liger_kernel("llama4") restores them."""
    from liger_cpp.transformers.monkey_patch.revert import set_patched

    set_patched("llama4", modeling_module, "apply_rotary_emb", liger_llama4_text_rotary_pos_emb)
    set_patched("llama4", modeling_module, "vision_apply_rotary_emb", liger_llama4_vision_rotary_pos_emb)
