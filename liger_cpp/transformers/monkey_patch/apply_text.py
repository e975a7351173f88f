"""apply_liger_kernel_to_* of the newer text families (Liger-Kernel 0.8.5's names, flags and
defaults; Gemma 3n beyond Liger-Kernel). What each patches is its ``Spec`` row (specs_text.py);
docs/models.md has the table."""

import warnings

from liger_cpp.transformers.monkey_patch.core import _patch


def apply_liger_kernel_to_ministral(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Ministral: RoPE, RMSNorm, MinistralMLP -> LigerSwiGLUMLP, FLCE or CE."""
    _patch("ministral", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_smollm3(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """SmolLM3: RoPE (its NoPE layers skip it, as in HF), RMSNorm, SmolLM3MLP -> LigerSwiGLUMLP
    (mlp_bias honoured), FLCE or CE."""
    _patch("smollm3", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_olmo3(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """OLMo 3: RoPE, RMSNorm (post-norms and q/k norms; HF's (w * x).to(dtype) rounding, never in
    place), Olmo3MLP -> LigerSwiGLUMLP, FLCE or CE."""
    _patch("olmo3", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_exaone4(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """EXAONE 4: RoPE, RMSNorm (post-norms and q/k norms, never in place), Exaone4MLP ->
    LigerSwiGLUMLP, FLCE or CE."""
    _patch("exaone4", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_hunyuan_v1_dense(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """HunYuan V1 dense: RoPE, RMSNorm (incl. the query / key layernorms), HunYuanDenseV1MLP ->
    LigerHunyuanV1SwiGLUMLP, FLCE or CE."""
    _patch("hunyuan_v1_dense", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_hunyuan_v1_moe(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """HunYuan V1 MoE: RoPE, RMSNorm (incl. query / key layernorms), the shared MLP ->
    LigerHunyuanV1SwiGLUMLP, the experts' eager loop with liger_cpp's SwiGLU (HF's grouped_mm path
    otherwise), FLCE or CE."""
    _patch("hunyuan_v1_moe", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_nemotron(
    relu_squared: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    model=None,
    **kwargs,
) -> None:
    """Nemotron: NemotronMLP -> LigerReLUSquaredMLP (down(relu(up(x))^2) with liger_cpp's ReLU^2),
    FLCE or CE. Of the other flags (Liger-Kernel's signature takes **kwargs) liger_cpp honours
    ``rope`` (default False, as Liger-Kernel patches no RoPE here; Nemotron's partial rotary is
    liger_rotary_pos_emb's); the rest are ignored with a warning: Nemotron's LayerNorm1P (weight + 1)
    stays Hugging Face's."""
    rope = bool(kwargs.pop("rope", False))
    if kwargs:
        warnings.warn(
            f"liger_cpp: apply_liger_kernel_to_nemotron ignores {sorted(kwargs)} (Nemotron has no "
            "RMSNorm or GLU; its LayerNorm1P stays Hugging Face's).",
            UserWarning,
            stacklevel=2,
        )
    _patch("nemotron", model, rope, cross_entropy, fused_linear_cross_entropy, False, relu_squared)


def apply_liger_kernel_to_falcon_h1(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Falcon-H1: RoPE, RMSNorm (decoder and final norms; the Mamba mixer's gated group norm stays
    HF's), FalconH1MLP -> LigerFalconH1SwiGLUMLP (gate / down multipliers), FLCE with the
    lm_head_multiplier logit scale, or CE."""
    _patch("falcon_h1", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_gpt_oss(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = False,
    model=None,
) -> None:
    """GPT-OSS: RoPE (half-width cos / sin), RMSNorm (HF's (w * x).to(dtype) rounding), FLCE or CE
    (the router auxiliary loss added as in HF). swiglu=True (off by default, as in Liger-Kernel,
    which has no kernel for these experts) replaces GptOssExperts' forward with liger_cpp's fused
    experts op (its interleaved gate / up, biases and clamped alpha-scaled GLU)."""
    _patch("gpt_oss", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_deepseek_v2(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """DeepSeek-V2: RMSNorm, the dense / shared-expert MLPs -> LigerSwiGLUMLP, the experts' eager
    loop with liger_cpp's SwiGLU, FLCE or CE; rope=True (off by default, as in Liger-Kernel) patches
    its complex apply_rotary_emb with liger_cpp's Llama 4 RoPE (heads-first)."""
    _patch("deepseek_v2", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_deepseek_v3(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """DeepSeek-V3: RMSNorm (incl. the q_a / kv_a norms), the dense / shared-expert MLPs ->
    LigerSwiGLUMLP, the experts' eager loop with liger_cpp's SwiGLU, FLCE or CE. rope=True (off by
    default) patches apply_rotary_pos_emb; config.rope_interleave (the default) calls
    apply_rotary_pos_emb_interleave instead, which stays Hugging Face's."""
    _patch("deepseek_v3", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_deepseek_v4(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = False,
    model=None,
) -> None:
    """DeepSeek-V4: RMSNorm (the weighted norms; the unweighted q_b norm stays HF's), FLCE or CE;
    swiglu=True (off by default, as in Liger-Kernel) patches the shared experts' clamped SwiGLU
    (LigerDeepseekV4SwiGLUMLP). rope=True is a warned no-op, as in Liger-Kernel (no kernel for its
    RoPE layout)."""
    _patch("deepseek_v4", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_llama4(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
    layer_norm: bool = True,
) -> None:
    """Llama 4 (text and multimodal): the complex RoPE of the text and vision attention
    (liger_llama4_text / vision_rotary_pos_emb), RMSNorm and the RoPE layers' L2 q/k norm, the dense
    MLPs and the MoE layers' shared expert -> LigerSwiGLUMLP, the MoE block's routed experts through
    the fused experts op (each token's top-k experts only; HF's bmm runs every expert), the
    vision encoder's LayerNorms, FLCE or CE (Llama4ForCausalLM; Llama4ForConditionalGeneration
    through its language model's lm_head)."""
    _patch("llama4", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu, layer_norm)


def apply_liger_kernel_to_qwen3_next(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen3-Next: RMSNorm ((1 + w), incl. q/k norms) and the gated delta net's gated RMSNorm, the
    dense and shared-expert MLPs -> LigerSwiGLUMLP, the experts' eager loop with liger_cpp's SwiGLU,
    FLCE or CE. rope=True (off by default, as in Liger-Kernel, which cannot do it) patches its
    partial-rotary RoPE."""
    _patch("qwen3_next", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_qwen3_5(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen3.5 (text and multimodal): as Qwen3-Next without experts; rope=True (off by default)
    patches the text RoPE and the vision blocks' apply_rotary_pos_emb_vision."""
    _patch("qwen3_5", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_qwen3_5_moe(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen3.5-MoE (text and multimodal): as Qwen3.5 plus the shared experts -> LigerSwiGLUMLP and
    the experts' eager loop with liger_cpp's SwiGLU (the router auxiliary loss added as in HF)."""
    _patch("qwen3_5_moe", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_gemma4_text(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma 4 text: RMSNorm (every Gemma4RMSNorm: sandwich, q/k, the scale-free v / router norms),
    Gemma4TextMLP -> LigerGEGLUMLPForGemma4 (double-wide on KV-shared layers), FLCE with the final
    logit softcapping, or CE. rope=True (off by default, as in Liger-Kernel) patches the one-tensor
    apply_rotary_pos_emb. The MoE block's experts (GELU) stay HF's."""
    _patch("gemma4_text", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, geglu)


def apply_liger_kernel_to_gemma4(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    layer_norm: bool = False,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma 4 multimodal: the text parts as gemma4_text, the vision and audio towers' Gemma4RMSNorm,
    the audio tower's LayerNorms with layer_norm=True (off by default), FLCE or CE for
    Gemma4ForCausalLM and Gemma4ForConditionalGeneration."""
    _patch("gemma4", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, geglu, layer_norm)


def apply_liger_kernel_to_gemma3n(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma 3n (beyond Liger-Kernel; text and multimodal): the one-tensor RoPE, every Gemma3nRMSNorm
    (LigerRMSNormForGemma4's formula), Gemma3nTextMLP -> LigerGEGLUMLPForGemma3n (per-layer width,
    Gaussian top-k sparsity), FLCE with the final logit softcapping, or CE."""
    _patch("gemma3n", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, geglu)
