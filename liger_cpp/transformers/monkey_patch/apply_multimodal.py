"""apply_liger_kernel_to_* of the newer multimodal families (Liger-Kernel 0.8.5's names, flags and
defaults). Types with their towers in one modeling module are ``Spec`` rows (specs_multimodal.py);
the composites built from other model types go through composite.py."""

from liger_cpp.transformers.monkey_patch.composite import patch_composite
from liger_cpp.transformers.monkey_patch.core import _patch


def apply_liger_kernel_to_qwen3_vl(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = False,
    model=None,
) -> None:
    """Qwen3-VL: the text RoPE and the vision blocks' apply_rotary_pos_emb_vision, the text RMSNorm
    (incl. q/k norms), FLCE or CE (Qwen3VLForConditionalGeneration); swiglu=True (off by default, as
    in Liger-Kernel) patches Qwen3VLTextMLP -> LigerSwiGLUMLP."""
    _patch("qwen3_vl", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_qwen3_vl_moe(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen3-VL-MoE: as Qwen3-VL, plus the dense layers' MLP -> LigerSwiGLUMLP and the experts'
    eager loop with liger_cpp's SwiGLU (the router auxiliary loss added as in HF)."""
    _patch("qwen3_vl_moe", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_glm4v(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """GLM-4V: RMSNorm (text, four a layer, and vision), the fused gate_up text MLP ->
    LigerPhi3SwiGLUMLP and the vision SwiGLU MLP, FLCE or CE. rope=True is a NotImplementedError:
    GLM-4V's text RoPE is interleaved and partial."""
    _patch("glm4v", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_glm4v_moe(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """GLM-4V-MoE: RMSNorm (text and vision), the dense / shared-expert text MLPs and the vision MLP
    -> liger_cpp's SwiGLU, the experts' eager loop with liger_cpp's SwiGLU, FLCE or CE. rope=True
    (off by default, as in Liger-Kernel) patches the text RoPE (rotate-half, partial) and the vision
    RoPE."""
    _patch("glm4v_moe", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_muse_glimmer(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    layer_norm: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """MuseGlimmer: the text RoPE, every RMSNorm (the decoder layers' (1 + w) norms, the final norm,
    the weightless qk / embedding / vision-feature norms), MuseGlimmerTextMLP -> SwiGLU, the vision
    tower's LayerNorms (layer_norm; also at class level, inside the modeling module only), FLCE with
    the head's output multiplier and final softcapping, or CE
    (MuseGlimmerForConditionalGeneration). ``model`` may also be a MuseGlimmerModel or
    MuseGlimmerTextModel (no head: its layers only). The vision RoPE, MLP and adapter stay HF's."""
    _patch(
        "muse_glimmer",
        model,
        rope,
        cross_entropy,
        fused_linear_cross_entropy,
        rms_norm,
        swiglu,
        layer_norm=layer_norm,
    )


def apply_liger_kernel_to_pixtral(
    rope: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Pixtral's vision encoder (PixtralVisionModel, also inside LLaVA-style models): RoPE, RMSNorm,
    PixtralMLP -> LigerSwiGLUMLP. It has no loss of its own."""
    _patch("pixtral", model, rope, False, False, rms_norm, swiglu)


def apply_liger_kernel_to_llava(
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    model=None,
    **kwargs,
) -> None:
    """LLaVA: FLCE or CE for LlavaForConditionalGeneration. With ``model``, its language model and
    its vision tower are patched by their own model types' apply functions with the flags of
    ``kwargs`` each takes (e.g. rope, rms_norm, swiglu; a type liger_cpp does not patch, such as
    CLIP, stays Hugging Face's)."""
    patch_composite("llava", model, cross_entropy, fused_linear_cross_entropy, kwargs)


def apply_liger_kernel_to_internvl(
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    layer_norm: bool = True,
    model=None,
    **kwargs,
) -> None:
    """InternVL: FLCE or CE for InternVLForConditionalGeneration, the vision tower's RMSNorm
    (rms_norm) and LayerNorms (layer_norm, incl. the projector's); with ``model``, the language model
    through its type's apply function (rms_norm and ``kwargs``)."""
    flags = dict(kwargs, rms_norm=rms_norm)
    patch_composite("internvl", model, cross_entropy, fused_linear_cross_entropy, flags, rms_norm, layer_norm)


def apply_liger_kernel_to_smolvlm(
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    layer_norm: bool = True,
    model=None,
    **kwargs,
) -> None:
    """SmolVLM: FLCE or CE for SmolVLMForConditionalGeneration, the vision encoder's LayerNorms
    (layer_norm); with ``model``, the language model through its type's apply function (rms_norm and
    ``kwargs``)."""
    flags = dict(kwargs, rms_norm=rms_norm)
    patch_composite("smolvlm", model, cross_entropy, fused_linear_cross_entropy, flags, False, layer_norm)


def apply_liger_kernel_to_paligemma(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    layer_norm: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """PaliGemma 1 / 2: FLCE (with Gemma 2's final softcapping when the text config has it) or CE
    for PaliGemmaForConditionalGeneration, the SigLIP vision tower's LayerNorms, and the Gemma /
    Gemma 2 language model's RoPE, RMSNorm and GeGLU (class level: both types' classes; with
    ``model``: its language model's type)."""
    flags = dict(rope=rope, rms_norm=rms_norm, geglu=geglu)
    patch_composite(
        "paligemma",
        model,
        cross_entropy,
        fused_linear_cross_entropy,
        flags,
        False,
        layer_norm,
        class_types=("gemma", "gemma2"),
    )
