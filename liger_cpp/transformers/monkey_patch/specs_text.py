"""The ``Spec`` rows of the newer text families (Liger-Kernel 0.8.5's patchers from 0.6 on, and
DeepSeek-V2/V3 and Gemma 3n), each read from its transformers 5.24 modeling module: which RMSNorm
and MLP classes it has and how they compute, its RoPE function, its causal-LM classes and how they
transform the logits. Routed experts keep Hugging Face's forward (its grouped_mm path, or liger_cpp's
SwiGLU inside the eager loop where the experts class computes exactly Mixtral's loop); the shared
experts, dense MLPs, norms, RoPE and the loss are liger_cpp's."""

from liger_cpp.transformers.causal_lm import LossSpec
from liger_cpp.transformers.geglu import LigerGEGLUMLPForGemma3n, LigerGEGLUMLPForGemma4
from liger_cpp.transformers.monkey_patch.specs import (
    _LLAMA_NORMS,
    _M,
    _ROPE,
    _SANDWICH,
    _SOFTCAP,
    Spec,
    _lm,
    _simple,
)
from liger_cpp.transformers.relu_squared import LigerReLUSquaredMLP
from liger_cpp.transformers.rms_norm import (
    LigerL2Norm,
    LigerRMSNorm,
    LigerRMSNormForGemma4,
    LigerRMSNormForOlmo3,
    LigerRMSNormForQwen3Next,
    LigerRMSNormGated,
)
from liger_cpp.transformers.swiglu import (
    LigerDeepseekV4SwiGLUMLP,
    LigerFalconH1SwiGLUMLP,
    LigerGlm4VisionSwiGLUMLP,
    LigerHunyuanV1SwiGLUMLP,
    LigerSwiGLUMLPForMuseGlimmer,
)

# MLP kinds beyond specs.MLP_CLS's -> the liger_cpp class (drop-in for the HF class: same
# constructor, parameters and attributes). Instance patching checks each kind's projections and
# activation (instance.py).
MLP_KINDS = {
    "falcon_h1": LigerFalconH1SwiGLUMLP,  # gate / down multipliers
    "hunyuan": LigerHunyuanV1SwiGLUMLP,
    "deepseek_v4": LigerDeepseekV4SwiGLUMLP,  # clamped gate and up
    "glm4_vision": LigerGlm4VisionSwiGLUMLP,
    "relu2": LigerReLUSquaredMLP,  # Nemotron: down(relu(up(x))^2)
    "gemma4": LigerGEGLUMLPForGemma4,  # double-wide on KV-shared layers
    "gemma3n": LigerGEGLUMLPForGemma3n,  # per-layer width, Gaussian top-k gate sparsity
    "muse_glimmer": LigerSwiGLUMLPForMuseGlimmer,  # activation named config.hidden_activation
}

_QK = ("q_norm", "k_norm")
_POST_NORMS = ("post_attention_layernorm", "post_feedforward_layernorm")
_SINGLE_ROPE = (("apply_rotary_pos_emb", "single"),)


def _moe(name, prefix, experts, shared, **kw):
    """An MoE row: experts class `experts` ("experts" kind) and the SwiGLU MLP class `shared`
    (shared experts and dense layers)."""
    return Spec(
        _M.format(name),
        f"{prefix}RMSNorm",
        kw.pop("norm_cls", LigerRMSNorm),
        experts,
        "experts",
        kw.pop("norm_attrs", _LLAMA_NORMS),
        mlps=kw.pop("mlps", ((shared, "swiglu", None),) if shared else ()),
        rope=kw.pop("rope", _ROPE),
        lm=kw.pop("lm", _lm(f"{prefix}ForCausalLM")),
        **kw,
    )


def _qwen3_next_like(name, prefix, experts, lm, vision=True):
    """Qwen3-Next / Qwen3.5(-MoE): (1 + w) RMSNorm, the gated RMSNorm of the gated delta net, partial
    rotary (liger_rotary_pos_emb takes the rotated width from cos), SwiGLU MLPs (dense, shared
    expert); Qwen3.5's vision blocks call apply_rotary_pos_emb_vision."""
    rope = _ROPE + ((("apply_rotary_pos_emb_vision", "vision"),) if vision else ())
    norms = ((f"{prefix}RMSNormGated", LigerRMSNormGated),)
    if experts:
        return _moe(
            name,
            prefix,
            experts,
            f"{prefix}MLP",
            norm_cls=LigerRMSNormForQwen3Next,
            norms=norms,
            rope=rope,
            lm=lm,
        )
    return Spec(
        _M.format(name),
        f"{prefix}RMSNorm",
        LigerRMSNormForQwen3Next,
        f"{prefix}MLP",
        "swiglu",
        _LLAMA_NORMS,
        norms=norms,
        rope=rope,
        lm=lm,
    )


_GEMMA4_TEXT = dict(
    module=_M.format("gemma4"),
    norm="Gemma4RMSNorm",
    norm_cls=LigerRMSNormForGemma4,
    mlp="Gemma4TextMLP",
    mlp_kind="gemma4",
    norm_attrs=_SANDWICH,
    rope=_SINGLE_ROPE,
    mlp_flag="geglu",
)
_GEMMA3N_TEXT = dict(
    module=_M.format("gemma3n"),
    norm="Gemma3nRMSNorm",
    norm_cls=LigerRMSNormForGemma4,  # the same formula (with_scale, float32, no offset)
    mlp="Gemma3nTextMLP",
    mlp_kind="gemma3n",
    norm_attrs=_SANDWICH,
    rope=_SINGLE_ROPE,
    mlp_flag="geglu",
)

TEXT_SPECS = {
    "ministral": _simple("ministral", "Ministral"),
    "smollm3": _simple("smollm3", "SmolLM3"),  # mlp_bias honoured; NoPE layers skip the RoPE call
    "olmo3": _simple(
        "olmo3", "Olmo3", norm_cls=LigerRMSNormForOlmo3, norm_attrs=_POST_NORMS, attn_norm_attrs=_QK
    ),
    "exaone4": _simple("exaone4", "Exaone4", norm_attrs=_POST_NORMS, attn_norm_attrs=_QK),
    "hunyuan_v1_dense": _simple(
        "hunyuan_v1_dense",
        "HunYuanDenseV1",
        "hunyuan",
        attn_norm_attrs=("query_layernorm", "key_layernorm"),
    ),
    "hunyuan_v1_moe": _moe(
        "hunyuan_v1_moe",
        "HunYuanMoEV1",
        "HunYuanMoEV1Experts",
        None,
        mlps=(("HunYuanMoEV1MLP", "hunyuan", None),),
        attn_norm_attrs=("query_layernorm", "key_layernorm"),
    ),
    # Nemotron: LayerNorm1P (weight + 1) stays Hugging Face's (Liger patches no norm either); its
    # partial rotary is liger_rotary_pos_emb's (cos' width).
    "nemotron": Spec(
        _M.format("nemotron"),
        "",
        LigerRMSNorm,
        "NemotronMLP",
        "relu2",
        (),
        rope=_ROPE,
        lm=_lm("NemotronForCausalLM"),
        mlp_flag="relu_squared",
    ),
    "falcon_h1": Spec(
        _M.format("falcon_h1"),
        "FalconH1RMSNorm",
        LigerRMSNorm,
        "FalconH1MLP",
        "falcon_h1",
        ("input_layernorm", "pre_ff_layernorm"),
        rope=_ROPE,
        lm=_lm("FalconH1ForCausalLM", spec=LossSpec(logit_scale=lambda c: float(c.lm_head_multiplier))),
        mlp_attr="feed_forward",
        final_norm="final_layernorm",
    ),
    "gpt_oss": Spec(
        _M.format("gpt_oss"),
        "GptOssRMSNorm",
        LigerRMSNormForOlmo3,
        "GptOssExperts",
        "experts_gpt_oss",
        _LLAMA_NORMS,
        rope=(("apply_rotary_pos_emb", "gpt_oss"),),
        lm=_lm("GptOssForCausalLM"),
    ),
    "deepseek_v2": _moe(
        "deepseek_v2",
        "DeepseekV2",
        "DeepseekV2Experts",
        "DeepseekV2MLP",
        rope=(("apply_rotary_emb", "deepseek_v2"),),
    ),
    # rope=True patches apply_rotary_pos_emb; with config.rope_interleave (DeepSeek-V3's default)
    # Hugging Face calls apply_rotary_pos_emb_interleave, which stays Hugging Face's.
    "deepseek_v3": _moe("deepseek_v3", "DeepseekV3", "DeepseekV3Experts", "DeepseekV3MLP"),
    # DeepSeek-V4: the weighted RMSNorm ((w * x).to(dtype), float32 weights) and, with swiglu=True,
    # the clamped shared-expert MLP; its routed experts (clamped GLU) and hyper-connections stay HF's.
    "deepseek_v4": Spec(
        _M.format("deepseek_v4"),
        "DeepseekV4RMSNorm",
        LigerRMSNormForOlmo3,
        "DeepseekV4MLP",
        "deepseek_v4",
        _LLAMA_NORMS,
        lm=_lm("DeepseekV4ForCausalLM"),
        no_rope=(
            "DeepSeek-V4 rotates the trailing rope slice of one tensor at a time with repeat-interleaved "
            "half-width tables; liger_cpp has no RoPE for that layout (Hugging Face's is kept)."
        ),
        rope_warns=True,  # as Liger-Kernel's patcher: a warned no-op
    ),
    "llama4": Spec(
        _M.format("llama4"),
        "Llama4TextRMSNorm",
        LigerRMSNorm,
        "Llama4TextMLP",  # dense layers and the MoE layers' shared expert
        "swiglu",
        _LLAMA_NORMS,
        norms=(("Llama4TextL2Norm", LigerL2Norm),),
        mlps=(("Llama4TextMoe", "moe_llama4", None),),  # its routed experts through the fused op
        rope=(("apply_rotary_emb", "llama4_text"), ("vision_apply_rotary_emb", "llama4_vision")),
        lm=_lm("Llama4ForCausalLM")
        + _lm("Llama4ForConditionalGeneration", spec=LossSpec(head="language_model.lm_head")),
        layer_norm=((_M.format("llama4"), "nn"),),
        mlp_attr="feed_forward",
    ),
    "qwen3_next": _qwen3_next_like(
        "qwen3_next", "Qwen3Next", "Qwen3NextExperts", _lm("Qwen3NextForCausalLM"), False
    ),
    "qwen3_5": _qwen3_next_like(
        "qwen3_5", "Qwen3_5", None, _lm("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration")
    ),
    "qwen3_5_moe": _qwen3_next_like(
        "qwen3_5_moe",
        "Qwen3_5Moe",
        "Qwen3_5MoeExperts",
        _lm("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"),
    ),
    "gemma4_text": Spec(**_GEMMA4_TEXT, lm=_lm("Gemma4ForCausalLM", spec=_SOFTCAP)),
    "gemma4": Spec(
        **_GEMMA4_TEXT,
        lm=_lm("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", spec=_SOFTCAP),
        layer_norm=((_M.format("gemma4"), "nn"),),  # the audio tower's LayerNorms
    ),
    "gemma3n": Spec(
        **_GEMMA3N_TEXT, lm=_lm("Gemma3nForCausalLM", "Gemma3nForConditionalGeneration", spec=_SOFTCAP)
    ),
}
