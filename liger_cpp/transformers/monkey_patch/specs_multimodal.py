"""The ``Spec`` rows of the newer multimodal families whose text and vision towers live in one
modeling module (Qwen3-VL(-MoE), GLM-4V(-MoE), Pixtral's vision encoder), read from transformers
5.24. The composite models built from other model types (LLaVA, InternVL, SmolVLM, PaliGemma) are
patched through their towers' own apply functions (composite.py)."""

from liger_cpp.transformers.causal_lm import LossSpec
from liger_cpp.transformers.monkey_patch.specs import _LLAMA_NORMS, _M, _ROPE, _SANDWICH, Spec, _lm
from liger_cpp.transformers.rms_norm import (
    LigerRMSNorm,
    LigerRMSNormForMuseGlimmer,
    LigerRMSNormForMuseGlimmerTextCentered,
)

_VISION_ROPE = (("apply_rotary_pos_emb_vision", "vision"),)
_GLM4V_ROPE = (
    "GLM-4V's text RoPE rotates interleaved pairs of a partial rotary slice (rotate_half_llm on "
    "repeat-interleaved tables), which liger_cpp's RoPE does not implement. Pass rope=False."
)

MULTIMODAL_SPECS = {
    # Qwen3-VL: text RMSNorm (incl. q/k norms), SwiGLU text MLP (Liger's swiglu default is off),
    # text RoPE (the interleaved mRoPE is folded into cos / sin by the rotary embedding) and the
    # vision blocks' RoPE; the vision MLP (GELU, not gated) and LayerNorms stay HF's.
    "qwen3_vl": Spec(
        _M.format("qwen3_vl"),
        "Qwen3VLTextRMSNorm",
        LigerRMSNorm,
        "Qwen3VLTextMLP",
        "swiglu",
        _LLAMA_NORMS,
        rope=_ROPE + _VISION_ROPE,
        lm=_lm("Qwen3VLForConditionalGeneration"),
    ),
    "qwen3_vl_moe": Spec(
        _M.format("qwen3_vl_moe"),
        "Qwen3VLMoeTextRMSNorm",
        LigerRMSNorm,
        "Qwen3VLMoeTextExperts",
        "experts",
        _LLAMA_NORMS,
        mlps=(("Qwen3VLMoeTextMLP", "swiglu", None),),
        rope=_ROPE + _VISION_ROPE,
        lm=_lm("Qwen3VLMoeForConditionalGeneration"),
    ),
    # GLM-4V: RMSNorm of the text (four a layer) and vision blocks, the fused gate_up text MLP
    # (LigerPhi3SwiGLUMLP) and the vision SwiGLU MLP.
    "glm4v": Spec(
        _M.format("glm4v"),
        "Glm4vRMSNorm",
        LigerRMSNorm,
        "Glm4vTextMLP",
        "phi3",
        _LLAMA_NORMS + ("post_self_attn_layernorm", "post_mlp_layernorm"),
        mlps=(("Glm4VisionMlp", "glm4_vision", None),),
        lm=_lm("Glm4vForConditionalGeneration"),
        no_rope=_GLM4V_ROPE,
    ),
    # GLM-4V-MoE: its text RoPE is the plain rotate-half (partial) one, so rope=True works here.
    "glm4v_moe": Spec(
        _M.format("glm4v_moe"),
        "Glm4vMoeTextRMSNorm",
        LigerRMSNorm,
        "Glm4vMoeTextExperts",
        "experts",
        _LLAMA_NORMS,
        norms=(("Glm4vMoeRMSNorm", LigerRMSNorm),),
        mlps=(("Glm4vMoeTextMLP", "swiglu", None), ("Glm4vMoeisionMlp", "glm4_vision", None)),
        rope=_ROPE + _VISION_ROPE,
        lm=_lm("Glm4vMoeForConditionalGeneration"),
    ),
    # MuseGlimmer: the decoder layers' four (1 + w) norms, the weighted final norm and the weightless
    # qk_norm / embed_norm / perception_emb_norm (MuseGlimmerRMSNorm, float32, no offset), the SwiGLU
    # text MLP (its activation is config.hidden_activation), the text RoPE (NoPE layers skip it, as
    # HF), the vision tower's nn.LayerNorms, and the head's T * tanh(m * logits / T) (m =
    # output_multiplier, T = final_logit_softcapping) inside the fused loss. The vision RoPE (4-D,
    # (1, S, H, D)), the vision MLP and the vision adapter (GELU) stay HF's, as in Liger-Kernel.
    "muse_glimmer": Spec(
        _M.format("muse_glimmer"),
        "MuseGlimmerTextCenteredRMSNorm",
        LigerRMSNormForMuseGlimmerTextCentered,
        "MuseGlimmerTextMLP",
        "muse_glimmer",
        _SANDWICH,
        attn_norm_attrs=("qk_norm",),
        norms=(("MuseGlimmerRMSNorm", LigerRMSNormForMuseGlimmer),),
        rope=_ROPE,
        lm=_lm(
            "MuseGlimmerForConditionalGeneration",
            spec=LossSpec(
                softcap=lambda c: c.get_text_config().final_logit_softcapping,
                logit_scale=lambda c: float(c.get_text_config().output_multiplier),
            ),
        ),
        layer_norm=((_M.format("muse_glimmer"), "nn"),),
    ),
    # Pixtral's vision encoder (the vision tower of Mistral's multimodal LLaVA models).
    "pixtral": Spec(
        _M.format("pixtral"),
        "PixtralRMSNorm",
        LigerRMSNorm,
        "PixtralMLP",
        "swiglu",
        ("attention_norm", "ffn_norm"),
        rope=_ROPE,  # unsqueeze_dim=0 with (S, D) tables: handled by liger_rotary_pos_emb
        mlp_attr="feed_forward",
        final_norm="",
        layers="transformer.layers",
    ),
}
