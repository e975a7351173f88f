"""Hugging Face transformers (5.x) integration with Liger-Kernel's names: ``apply_liger_kernel_to_*``.

What each flag patches (per model type, see ``specs.SPECS``):

* ``rms_norm``: every RMSNorm of the model (decoder, q/k norms, vision / projector norms of the
  same class) -> ``LigerRMSNorm`` (Gemma's offset / casting where the model has them);
* ``swiglu`` / ``geglu``: the gated MLP (SwiGLU, fused gate_up SwiGLU of Phi-3 / GLM-4, Gemma's GeGLU,
  the eager experts loop of Mixtral / Qwen3-MoE and Qwen3-MoE's dense MLP);
* ``layer_norm`` (mllama, gemma3, qwen2_vl): the vision tower's ``nn.LayerNorm`` ->
  ``LigerNNLayerNorm`` (class level: only inside the modeling module, never ``torch.nn`` itself);
* ``rope``: the modeling module's ``apply_rotary_pos_emb`` (and Qwen2-VL's
  ``apply_multimodal_rotary_pos_emb`` where the transformers version has it); Phi-3's partial
  rotary is handled by ``liger_rotary_pos_emb``; GLM-4's interleaved partial RoPE is not supported.
  RoPE is a module function: ``rope=True`` patches it for every model of that type in the process,
  also with ``model=...`` (as Liger-Kernel does); ``revert_liger_kernel(model_type)`` restores it;
* ``fused_linear_cross_entropy``: ``*ForCausalLM.forward`` (and the multimodal
  ``*ForConditionalGeneration.forward``) computes the training loss without materialising the
  logits (see ``liger_cpp.transformers.causal_lm``); ``cross_entropy``: the same forward computes
  HF's loss with liger_cpp's cross entropy. Only the model's own loss path changes;
  ``torch.nn.functional.cross_entropy`` is never replaced.

Two ways, as in Liger-Kernel:

* class level (``model=None``): names in the modeling module are rebound, so models built afterwards
  get liger_cpp modules, and the model classes' ``forward`` is replaced; ``revert_liger_kernel()``
  restores everything;
* instance level (``model=...``): the modules of a built model are converted in place (their class is
  swapped, so the very same Parameter objects, hooks and PEFT wrappers stay) and the model's
  ``forward`` is replaced on the instance; ``revert_liger_kernel(model=model)`` undoes it.

Layout: ``specs`` (one data row per model type), ``class_level`` and ``instance`` (the two ways),
``revert`` (what was rebound, and undoing it). Adding a model type: a ``Spec`` row in specs.py, its
``apply_liger_kernel_to_<type>`` below and its MODEL_TYPE_TO_APPLY_LIGER_FN keys.

``_apply_liger_kernel`` / ``_apply_liger_kernel_to_instance`` (what Hugging Face's Trainer, TRL and
AutoLigerKernelForCausalLM call with one config for every model type) behave as Liger-Kernel's:
flags the model type's apply function does not take are dropped with one warning naming them, and an
unsupported model type is left unpatched with a warning. The apply functions themselves are strict
(an unknown flag is a TypeError).
"""

import inspect
import warnings
from typing import Callable

from liger_cpp.transformers.monkey_patch.apply_multimodal import (
    apply_liger_kernel_to_glm4v,
    apply_liger_kernel_to_glm4v_moe,
    apply_liger_kernel_to_internvl,
    apply_liger_kernel_to_llava,
    apply_liger_kernel_to_muse_glimmer,
    apply_liger_kernel_to_paligemma,
    apply_liger_kernel_to_pixtral,
    apply_liger_kernel_to_qwen3_vl,
    apply_liger_kernel_to_qwen3_vl_moe,
    apply_liger_kernel_to_smolvlm,
)
from liger_cpp.transformers.monkey_patch.apply_text import (
    apply_liger_kernel_to_deepseek_v2,
    apply_liger_kernel_to_deepseek_v3,
    apply_liger_kernel_to_deepseek_v4,
    apply_liger_kernel_to_exaone4,
    apply_liger_kernel_to_falcon_h1,
    apply_liger_kernel_to_gemma3n,
    apply_liger_kernel_to_gemma4,
    apply_liger_kernel_to_gemma4_text,
    apply_liger_kernel_to_gpt_oss,
    apply_liger_kernel_to_hunyuan_v1_dense,
    apply_liger_kernel_to_hunyuan_v1_moe,
    apply_liger_kernel_to_llama4,
    apply_liger_kernel_to_ministral,
    apply_liger_kernel_to_nemotron,
    apply_liger_kernel_to_olmo3,
    apply_liger_kernel_to_qwen3_5,
    apply_liger_kernel_to_qwen3_5_moe,
    apply_liger_kernel_to_qwen3_next,
    apply_liger_kernel_to_smollm3,
)
from liger_cpp.transformers.monkey_patch.core import _patch
from liger_cpp.transformers.monkey_patch.revert import revert_liger_kernel
from liger_cpp.transformers.rope import liger_partial_rotary_pos_emb

# --------------------------------------------------------------------------------------------
# public apply functions (Liger-Kernel's names, flags and defaults)


def apply_liger_kernel_to_llama(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Llama 2 / 3: RoPE, RMSNorm (casting_mode "llama"), LlamaMLP -> LigerSwiGLUMLP, FLCE or CE."""
    _patch("llama", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_mllama(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    layer_norm: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Llama 3.2-Vision: text RoPE, RMSNorm (incl. cross-attention q/k norms), MllamaTextMLP ->
    LigerSwiGLUMLP, the vision encoder's LayerNorms, FLCE or CE (MllamaForCausalLM and
    MllamaForConditionalGeneration)."""
    _patch(
        "mllama",
        model,
        rope,
        cross_entropy,
        fused_linear_cross_entropy,
        rms_norm,
        swiglu,
        layer_norm=layer_norm,
    )


def apply_liger_kernel_to_mistral(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Mistral: RoPE, RMSNorm, MistralMLP -> LigerSwiGLUMLP, FLCE or CE."""
    _patch("mistral", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_mixtral(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Mixtral: RoPE, RMSNorm, the fused MixtralExperts (eager experts loop with liger_cpp's SwiGLU),
    FLCE or CE (the router auxiliary loss is added as in HF)."""
    _patch("mixtral", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_gemma(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma: RoPE, RMSNorm (offset 1, casting "gemma"), GemmaMLP -> LigerGEGLUMLP, FLCE or CE."""
    _patch("gemma", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, geglu)


def apply_liger_kernel_to_gemma2(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma 2: RoPE, RMSNorm (Gemma's, never in place), Gemma2MLP -> LigerGEGLUMLP, FLCE with the
    final logit softcapping, or CE."""
    _patch("gemma2", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, geglu)


def apply_liger_kernel_to_gemma3_text(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma 3 text: RoPE, RMSNorm (incl. q/k norms; Gemma's, never in place), Gemma3MLP ->
    LigerGEGLUMLP, FLCE (with final softcapping when configured) or CE."""
    _patch("gemma3_text", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, geglu)


def apply_liger_kernel_to_gemma3(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    layer_norm: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma 3 multimodal: the text parts as gemma3_text (plus the projector's RMSNorm), the SigLIP
    vision tower's LayerNorms, FLCE or CE for Gemma3ForCausalLM and Gemma3ForConditionalGeneration."""
    _patch(
        "gemma3",
        model,
        rope,
        cross_entropy,
        fused_linear_cross_entropy,
        rms_norm,
        geglu,
        layer_norm=layer_norm,
    )


def apply_liger_kernel_to_qwen2(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen2 / Qwen2.5: RoPE, RMSNorm, Qwen2MLP -> LigerSwiGLUMLP, FLCE or CE."""
    _patch("qwen2", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_qwen2_vl(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    layer_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen2-VL: text (m)RoPE, RMSNorm, Qwen2MLP -> LigerSwiGLUMLP, the vision blocks' LayerNorms,
    FLCE or CE (Qwen2VLForConditionalGeneration)."""
    _patch(
        "qwen2_vl",
        model,
        rope,
        cross_entropy,
        fused_linear_cross_entropy,
        rms_norm,
        swiglu,
        layer_norm=layer_norm,
    )


def apply_liger_kernel_to_qwen2_5_vl(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen2.5-VL: text (m)RoPE, RMSNorm (text and vision), Qwen2MLP -> LigerSwiGLUMLP, FLCE or CE
    (Qwen2_5_VLForConditionalGeneration)."""
    _patch("qwen2_5_vl", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_qwen3(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen3: RoPE, RMSNorm (incl. q/k norms), Qwen3MLP -> LigerSwiGLUMLP, FLCE or CE."""
    _patch("qwen3", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_qwen3_moe(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen3-MoE: RoPE, RMSNorm (incl. q/k norms), the eager experts loop and the dense MLPs with
    liger_cpp's SwiGLU, FLCE or CE (the router auxiliary loss is added as in HF)."""
    _patch("qwen3_moe", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_phi3(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Phi-3: RoPE (partial rotary handled), RMSNorm, Phi3MLP -> LigerPhi3SwiGLUMLP, FLCE or CE."""
    _patch("phi3", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_granite(
    rope: bool = True,
    cross_entropy: bool = True,
    fused_linear_cross_entropy: bool = False,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Granite: RoPE, RMSNorm, GraniteMLP -> LigerSwiGLUMLP, CE (Liger's default) or FLCE, which
    liger_cpp supports (logits / config.logits_scaling inside the fused op; Liger refuses it):
    pass cross_entropy=False, fused_linear_cross_entropy=True."""
    _patch("granite", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_olmo2(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """OLMo 2: RoPE, RMSNorm (incl. q/k norms; never in place), Olmo2MLP -> LigerSwiGLUMLP, FLCE or CE."""
    _patch("olmo2", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


def apply_liger_kernel_to_glm4(
    rope: bool = False,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """GLM-4: RMSNorm (4 per layer, never in place), Glm4MLP (fused gate_up) -> LigerPhi3SwiGLUMLP,
    FLCE or CE. rope=True raises NotImplementedError: GLM-4's RoPE is interleaved and partial."""
    _patch("glm4", model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, swiglu)


# model_type (config.model_type) -> apply function; several types may share one.
MODEL_TYPE_TO_APPLY_LIGER_FN: dict[str, Callable] = {
    "llama": apply_liger_kernel_to_llama,
    "mllama": apply_liger_kernel_to_mllama,
    "mllama_text_model": apply_liger_kernel_to_mllama,
    "mistral": apply_liger_kernel_to_mistral,
    "mixtral": apply_liger_kernel_to_mixtral,
    "gemma": apply_liger_kernel_to_gemma,
    "gemma2": apply_liger_kernel_to_gemma2,
    "gemma3_text": apply_liger_kernel_to_gemma3_text,
    "gemma3": apply_liger_kernel_to_gemma3,
    "qwen2": apply_liger_kernel_to_qwen2,
    "qwen2_vl": apply_liger_kernel_to_qwen2_vl,
    "qwen2_vl_text": apply_liger_kernel_to_qwen2_vl,
    "qwen2_5_vl": apply_liger_kernel_to_qwen2_5_vl,
    "qwen2_5_vl_text": apply_liger_kernel_to_qwen2_5_vl,
    "qwen3": apply_liger_kernel_to_qwen3,
    "qwen3_moe": apply_liger_kernel_to_qwen3_moe,
    "phi3": apply_liger_kernel_to_phi3,
    "granite": apply_liger_kernel_to_granite,
    "olmo2": apply_liger_kernel_to_olmo2,
    "glm4": apply_liger_kernel_to_glm4,
    # the newer families (apply_text.py, apply_multimodal.py)
    "deepseek_v2": apply_liger_kernel_to_deepseek_v2,
    "deepseek_v3": apply_liger_kernel_to_deepseek_v3,
    "deepseek_v4": apply_liger_kernel_to_deepseek_v4,
    "exaone4": apply_liger_kernel_to_exaone4,
    "falcon_h1": apply_liger_kernel_to_falcon_h1,
    "gemma3n": apply_liger_kernel_to_gemma3n,  # beyond Liger-Kernel
    "gemma3n_text": apply_liger_kernel_to_gemma3n,  # beyond Liger-Kernel
    "gemma4": apply_liger_kernel_to_gemma4,
    "gemma4_text": apply_liger_kernel_to_gemma4_text,
    "glm4v": apply_liger_kernel_to_glm4v,
    "glm4v_moe": apply_liger_kernel_to_glm4v_moe,
    "gpt_oss": apply_liger_kernel_to_gpt_oss,
    "hunyuan_v1_dense": apply_liger_kernel_to_hunyuan_v1_dense,
    "hunyuan_v1_moe": apply_liger_kernel_to_hunyuan_v1_moe,
    "internvl": apply_liger_kernel_to_internvl,
    "llama4": apply_liger_kernel_to_llama4,
    "llama4_text": apply_liger_kernel_to_llama4,
    "llava": apply_liger_kernel_to_llava,
    "ministral": apply_liger_kernel_to_ministral,
    "muse_glimmer": apply_liger_kernel_to_muse_glimmer,
    "nemotron": apply_liger_kernel_to_nemotron,
    "olmo3": apply_liger_kernel_to_olmo3,
    "paligemma": apply_liger_kernel_to_paligemma,
    "pixtral": apply_liger_kernel_to_pixtral,
    "qwen3_5": apply_liger_kernel_to_qwen3_5,
    "qwen3_5_text": apply_liger_kernel_to_qwen3_5,
    "qwen3_5_moe": apply_liger_kernel_to_qwen3_5_moe,
    "qwen3_5_moe_text": apply_liger_kernel_to_qwen3_5_moe,
    "qwen3_next": apply_liger_kernel_to_qwen3_next,
    "qwen3_vl": apply_liger_kernel_to_qwen3_vl,
    "qwen3_vl_text": apply_liger_kernel_to_qwen3_vl,
    "qwen3_vl_moe": apply_liger_kernel_to_qwen3_vl_moe,
    "qwen3_vl_moe_text": apply_liger_kernel_to_qwen3_vl_moe,
    "smollm3": apply_liger_kernel_to_smollm3,
    "smolvlm": apply_liger_kernel_to_smolvlm,
}
# Model types liger_cpp patches that Liger-Kernel 0.8.5 does not.
BEYOND_LIGER = ("gemma3n", "gemma3n_text")


def _flags(apply_fn) -> set:
    """The patch flags an apply function takes (its keyword parameters but `model`)."""
    params = inspect.signature(apply_fn).parameters.values()
    return {p.name for p in params if p.name != "model" and p.kind is not p.VAR_KEYWORD}


def _takes_any_flag(apply_fn) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(apply_fn).parameters.values())


def _apply_fn_for(model_type, kwargs: dict, outcome: str):
    """(apply function, the flags of kwargs it takes) for model_type, or (None, {}) with a warning
    when the type is unsupported. Flags it does not take are dropped with one warning (Hugging
    Face's Trainer passes one liger_kernel_config to every model type, as to Liger-Kernel)."""
    if not model_type or model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        warnings.warn(
            f"liger_cpp: no Liger kernels for model_type {model_type!r}; {outcome}. "
            f"Supported: {sorted(MODEL_TYPE_TO_APPLY_LIGER_FN)}",
            UserWarning,
            stacklevel=3,
        )
        return None, {}
    apply_fn = MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]
    if _takes_any_flag(apply_fn):
        return apply_fn, dict(kwargs)
    accepted = _flags(apply_fn)
    dropped = sorted(set(kwargs) - accepted)
    if dropped:
        warnings.warn(
            f"liger_cpp: flag(s) {dropped} do not apply to model_type {model_type!r} "
            f"({apply_fn.__name__} takes {sorted(accepted)}); ignored.",
            UserWarning,
            stacklevel=3,
        )
    return apply_fn, {k: v for k, v in kwargs.items() if k in accepted}


def _apply_liger_kernel(model_type: str, **kwargs) -> None:
    """Class-level patching by model_type (before the model is built), with the flags of kwargs
    that its apply function takes. Unsupported types warn and patch nothing."""
    apply_fn, flags = _apply_fn_for(model_type, kwargs, "nothing patched")
    if apply_fn is not None:
        apply_fn(**flags)


def _apply_liger_kernel_to_instance(model, **kwargs) -> None:
    """Instance patching of a built model by model.config.model_type, with the flags of kwargs
    that its apply function takes. Unsupported types warn and leave the model unchanged."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    apply_fn, flags = _apply_fn_for(model_type, kwargs, "model left unpatched")
    if apply_fn is not None:
        apply_fn(model=model, **flags)


__all__ = [
    "MODEL_TYPE_TO_APPLY_LIGER_FN",
    "_apply_liger_kernel",
    "_apply_liger_kernel_to_instance",
    "liger_partial_rotary_pos_emb",
    "revert_liger_kernel",
    *sorted({fn.__name__ for fn in MODEL_TYPE_TO_APPLY_LIGER_FN.values()}),
]
