"""Liger-Kernel-compatible modules, functional API and Hugging Face patching
(``liger_kernel.transformers``). The transformers integration (apply_liger_kernel_to_*,
AutoLigerKernelForCausalLM) needs the `transformers` package; it is imported lazily."""

from liger_cpp.transformers.causal_lm import liger_for_causal_lm_loss  # noqa: F401
from liger_cpp.transformers.cross_entropy import LigerCrossEntropyLoss  # noqa: F401
from liger_cpp.transformers.dyt import LigerDyT  # noqa: F401,E402
from liger_cpp.transformers.functional import (  # noqa: F401
    CrossEntropyOutput,
    liger_cross_entropy,
    liger_fused_add_rms_norm,
    liger_fused_linear_cross_entropy,
    liger_geglu,
    liger_layer_norm,
    liger_qwen2vl_mrope,
    liger_relu_squared,
    liger_rms_norm,
    liger_rope,
    liger_swiglu,
)
from liger_cpp.transformers.fused_add_rms_norm import LigerFusedAddRMSNorm  # noqa: F401
from liger_cpp.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss  # noqa: F401

# ---- the newer model families' modules, functions and patchers (Liger-Kernel's names) ----
from liger_cpp.transformers.geglu import (  # noqa: F401,E402
    LigerGEGLUMLP,  # noqa: F401
    LigerGEGLUMLPForGemma3n,
    LigerGEGLUMLPForGemma4,
)
from liger_cpp.transformers.layer_norm import LigerLayerNorm, LigerNNLayerNorm  # noqa: F401
from liger_cpp.transformers.llama4_rope import (  # noqa: F401,E402
    liger_llama4_text_rotary_pos_emb,
    liger_llama4_vision_rotary_pos_emb,
)
from liger_cpp.transformers.mhc import LigerMHC  # noqa: F401,E402
from liger_cpp.transformers.moe import (  # noqa: F401,E402
    LigerExpertParallelFusedMoe,
    LigerExperts,
    LigerGptOssExpertsMixin,
)
from liger_cpp.transformers.monkey_patch import (  # noqa: F401
    MODEL_TYPE_TO_APPLY_LIGER_FN,
    _apply_liger_kernel,
    _apply_liger_kernel_to_instance,
    apply_liger_kernel_to_deepseek_v2,
    apply_liger_kernel_to_deepseek_v3,
    apply_liger_kernel_to_deepseek_v4,
    apply_liger_kernel_to_exaone4,
    apply_liger_kernel_to_falcon_h1,
    apply_liger_kernel_to_gemma,
    apply_liger_kernel_to_gemma2,
    apply_liger_kernel_to_gemma3,
    apply_liger_kernel_to_gemma3_text,
    apply_liger_kernel_to_gemma3n,
    apply_liger_kernel_to_gemma4,
    apply_liger_kernel_to_gemma4_text,
    apply_liger_kernel_to_glm4,
    apply_liger_kernel_to_glm4v,
    apply_liger_kernel_to_glm4v_moe,
    apply_liger_kernel_to_gpt_oss,
    apply_liger_kernel_to_granite,
    apply_liger_kernel_to_hunyuan_v1_dense,
    apply_liger_kernel_to_hunyuan_v1_moe,
    apply_liger_kernel_to_internvl,
    apply_liger_kernel_to_llama,
    apply_liger_kernel_to_llama4,
    apply_liger_kernel_to_llava,
    apply_liger_kernel_to_ministral,
    apply_liger_kernel_to_mistral,
    apply_liger_kernel_to_mixtral,
    apply_liger_kernel_to_mllama,
    apply_liger_kernel_to_muse_glimmer,
    apply_liger_kernel_to_nemotron,
    apply_liger_kernel_to_olmo2,
    apply_liger_kernel_to_olmo3,
    apply_liger_kernel_to_paligemma,
    apply_liger_kernel_to_phi3,
    apply_liger_kernel_to_pixtral,
    apply_liger_kernel_to_qwen2,
    apply_liger_kernel_to_qwen2_5_vl,
    apply_liger_kernel_to_qwen2_vl,
    apply_liger_kernel_to_qwen3,
    apply_liger_kernel_to_qwen3_5,
    apply_liger_kernel_to_qwen3_5_moe,
    apply_liger_kernel_to_qwen3_moe,
    apply_liger_kernel_to_qwen3_next,
    apply_liger_kernel_to_qwen3_vl,
    apply_liger_kernel_to_qwen3_vl_moe,
    apply_liger_kernel_to_smollm3,
    apply_liger_kernel_to_smolvlm,
    revert_liger_kernel,
)
from liger_cpp.transformers.neighborhood_attention import LigerFusedNeighborhoodAttention  # noqa: F401,E402
from liger_cpp.transformers.poly_norm import LigerPolyNorm  # noqa: F401,E402
from liger_cpp.transformers.qwen2vl_mrope import liger_multimodal_rotary_pos_emb  # noqa: F401
from liger_cpp.transformers.relu_squared import LigerReLUSquared, LigerReLUSquaredMLP  # noqa: F401,E402
from liger_cpp.transformers.rms_norm import (  # noqa: F401  # noqa: F401,E402
    LigerL2Norm,
    LigerRMSNorm,
    LigerRMSNormForGemma,
    LigerRMSNormForGemma2,
    LigerRMSNormForGemma3,
    LigerRMSNormForGemma4,
    LigerRMSNormForMuseGlimmer,
    LigerRMSNormForMuseGlimmerTextCentered,
    LigerRMSNormForOlmo2,
    LigerRMSNormForOlmo3,
    LigerRMSNormForQwen3Next,
    LigerRMSNormGated,
)
from liger_cpp.transformers.rope import (  # noqa: F401  # noqa: F401,E402
    liger_partial_rotary_pos_emb,
    liger_rotary_pos_emb,
    liger_rotary_pos_emb_gpt_oss,
    liger_rotary_pos_emb_single,
    liger_rotary_pos_emb_vision,
)
from liger_cpp.transformers.swiglu import (  # noqa: F401  # noqa: F401,E402
    LigerBlockSparseTop2MLP,
    LigerDeepseekV4SwiGLUMLP,
    LigerExpertsSwiGLUMixin,
    LigerFalconH1MLP,
    LigerFalconH1SwiGLUMLP,
    LigerGlm4VisionSwiGLUMLP,
    LigerHunyuanV1SwiGLUMLP,
    LigerMLP,
    LigerPhi3SwiGLUMLP,
    LigerQwen3MoeSwiGLUMLP,
    LigerSwiGLUMLP,
    LigerSwiGLUMLPForMuseGlimmer,
)
from liger_cpp.transformers.tiled_mlp import LigerTiledGEGLUMLP, LigerTiledSwiGLUMLP  # noqa: F401,E402
from liger_cpp.transformers.torch_composed_ops import (  # noqa: F401,E402
    LigerGroupNorm,
    LigerModulatedRMSNorm,
    LigerMultiTokenAttention,
    LigerSoftmax,
    LigerSparsemax,
)
from liger_cpp.transformers.vocab_parallel_cross_entropy import LigerVocabParallelCrossEntropy  # noqa: F401,E402


def __getattr__(name):
    # AutoLigerKernelForCausalLM imports transformers; keep `import liger_cpp.transformers` light.
    if name == "AutoLigerKernelForCausalLM":
        from liger_cpp.transformers.auto_model import AutoLigerKernelForCausalLM

        return AutoLigerKernelForCausalLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "_apply_liger_kernel",
    "_apply_liger_kernel_to_instance",
    "apply_liger_kernel_to_deepseek_v2",
    "apply_liger_kernel_to_deepseek_v3",
    "apply_liger_kernel_to_deepseek_v4",
    "apply_liger_kernel_to_exaone4",
    "apply_liger_kernel_to_falcon_h1",
    "apply_liger_kernel_to_gemma",
    "apply_liger_kernel_to_gemma2",
    "apply_liger_kernel_to_gemma3",
    "apply_liger_kernel_to_gemma3_text",
    "apply_liger_kernel_to_gemma3n",
    "apply_liger_kernel_to_gemma4",
    "apply_liger_kernel_to_gemma4_text",
    "apply_liger_kernel_to_glm4",
    "apply_liger_kernel_to_glm4v",
    "apply_liger_kernel_to_glm4v_moe",
    "apply_liger_kernel_to_gpt_oss",
    "apply_liger_kernel_to_granite",
    "apply_liger_kernel_to_hunyuan_v1_dense",
    "apply_liger_kernel_to_hunyuan_v1_moe",
    "apply_liger_kernel_to_internvl",
    "apply_liger_kernel_to_llama",
    "apply_liger_kernel_to_llama4",
    "apply_liger_kernel_to_llava",
    "apply_liger_kernel_to_ministral",
    "apply_liger_kernel_to_mistral",
    "apply_liger_kernel_to_mixtral",
    "apply_liger_kernel_to_mllama",
    "apply_liger_kernel_to_muse_glimmer",
    "apply_liger_kernel_to_nemotron",
    "apply_liger_kernel_to_olmo2",
    "apply_liger_kernel_to_olmo3",
    "apply_liger_kernel_to_paligemma",
    "apply_liger_kernel_to_phi3",
    "apply_liger_kernel_to_pixtral",
    "apply_liger_kernel_to_qwen2",
    "apply_liger_kernel_to_qwen2_5_vl",
    "apply_liger_kernel_to_qwen2_vl",
    "apply_liger_kernel_to_qwen3",
    "apply_liger_kernel_to_qwen3_5",
    "apply_liger_kernel_to_qwen3_5_moe",
    "apply_liger_kernel_to_qwen3_moe",
    "apply_liger_kernel_to_qwen3_next",
    "apply_liger_kernel_to_qwen3_vl",
    "apply_liger_kernel_to_qwen3_vl_moe",
    "apply_liger_kernel_to_smollm3",
    "apply_liger_kernel_to_smolvlm",
    "AutoLigerKernelForCausalLM",
    "CrossEntropyOutput",
    "liger_cross_entropy",
    "liger_for_causal_lm_loss",
    "liger_fused_add_rms_norm",
    "liger_fused_linear_cross_entropy",
    "liger_geglu",
    "liger_layer_norm",
    "liger_llama4_text_rotary_pos_emb",
    "liger_llama4_vision_rotary_pos_emb",
    "liger_multimodal_rotary_pos_emb",
    "liger_partial_rotary_pos_emb",
    "liger_qwen2vl_mrope",
    "liger_relu_squared",
    "liger_rms_norm",
    "liger_rope",
    "liger_rotary_pos_emb",
    "liger_rotary_pos_emb_gpt_oss",
    "liger_rotary_pos_emb_single",
    "liger_rotary_pos_emb_vision",
    "liger_swiglu",
    "LigerBlockSparseTop2MLP",
    "LigerCrossEntropyLoss",
    "LigerDeepseekV4SwiGLUMLP",
    "LigerExperts",
    "LigerExpertParallelFusedMoe",
    "LigerExpertsSwiGLUMixin",
    "LigerGptOssExpertsMixin",
    "LigerFalconH1MLP",
    "LigerFalconH1SwiGLUMLP",
    "LigerMLP",
    "LigerFusedAddRMSNorm",
    "LigerFusedLinearCrossEntropyLoss",
    "LigerGEGLUMLP",
    "LigerGEGLUMLPForGemma3n",
    "LigerGEGLUMLPForGemma4",
    "LigerGlm4VisionSwiGLUMLP",
    "LigerHunyuanV1SwiGLUMLP",
    "LigerL2Norm",
    "LigerLayerNorm",
    "LigerNNLayerNorm",
    "LigerPhi3SwiGLUMLP",
    "LigerQwen3MoeSwiGLUMLP",
    "LigerReLUSquared",
    "LigerReLUSquaredMLP",
    "LigerRMSNorm",
    "LigerRMSNormForGemma",
    "LigerRMSNormForGemma2",
    "LigerRMSNormForGemma3",
    "LigerRMSNormForGemma4",
    "LigerRMSNormForMuseGlimmer",
    "LigerRMSNormForMuseGlimmerTextCentered",
    "LigerRMSNormForOlmo2",
    "LigerRMSNormForOlmo3",
    "LigerRMSNormForQwen3Next",
    "LigerRMSNormGated",
    "LigerSwiGLUMLP",
    "LigerTiledGEGLUMLP",
    "LigerTiledSwiGLUMLP",
    "LigerDyT",
    "LigerGroupNorm",
    "LigerModulatedRMSNorm",
    "LigerMultiTokenAttention",
    "LigerPolyNorm",
    "LigerSoftmax",
    "LigerSparsemax",
    "LigerVocabParallelCrossEntropy",
    "LigerMHC",
    "LigerFusedNeighborhoodAttention",
    "LigerSwiGLUMLPForMuseGlimmer",
    "MODEL_TYPE_TO_APPLY_LIGER_FN",
    "revert_liger_kernel",
]

# ---- Divergences and distillation (the RL / distillation losses) ----
from liger_cpp.transformers.functional import liger_fused_linear_jsd, liger_jsd, liger_kl_div, liger_tvd  # noqa: F401,E402
from liger_cpp.transformers.fused_ce_tvd import LigerFusedCETVDLoss  # noqa: F401,E402
from liger_cpp.transformers.fused_linear_jsd import LigerFusedLinearJSD  # noqa: F401,E402
from liger_cpp.transformers.fused_linear_kl_div import LigerFusedLinearKLDivLoss  # noqa: F401,E402
from liger_cpp.transformers.grpo_loss import triton_grpo_loss  # noqa: F401,E402
from liger_cpp.transformers.jsd import LigerJSD  # noqa: F401,E402
from liger_cpp.transformers.kl_div import LigerKLDIVLoss  # noqa: F401,E402
from liger_cpp.transformers.tvd import LigerTVDLoss  # noqa: F401,E402

__all__ += [
    "LigerFusedCETVDLoss",
    "triton_grpo_loss",
    "LigerFusedLinearJSD",
    "LigerFusedLinearKLDivLoss",
    "LigerJSD",
    "LigerKLDIVLoss",
    "LigerTVDLoss",
    "liger_fused_linear_jsd",
    "liger_jsd",
    "liger_kl_div",
    "liger_tvd",
]
