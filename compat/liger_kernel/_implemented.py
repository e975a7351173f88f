"""What of Liger-Kernel's surface liger_cpp implements: Liger-Kernel's qualified name -> the object
("module:attribute") that stands for it. The modules of this package with code of their own
(transformers.functional, transformers.monkey_patch, transformers.model.loss_utils, ...) define their
names directly; everything else of the reference not listed here is a NotImplementedError stub.

liger_cpp's own modules and classes are used as they are (the same class objects: isinstance checks
and patched models agree with liger_cpp); where Liger-Kernel's calling convention differs from
liger_cpp's (the autograd Functions' ``.apply``), ``_functions`` adapts it.
"""

import importlib

_T = "liger_kernel.transformers"
_C = "liger_kernel.chunked_loss"
_O = "liger_kernel.ops"

IMPLEMENTED = {
    # modules (nn.Module classes), by Liger-Kernel's defining module
    f"{_T}.cross_entropy.LigerCrossEntropyLoss": "liger_cpp.transformers.cross_entropy:LigerCrossEntropyLoss",
    f"{_T}.fused_linear_cross_entropy.LigerFusedLinearCrossEntropyLoss": (
        "liger_cpp.transformers.fused_linear_cross_entropy:LigerFusedLinearCrossEntropyLoss"
    ),
    f"{_T}.rms_norm.LigerRMSNorm": "liger_cpp.transformers.rms_norm:LigerRMSNorm",
    f"{_T}.rms_norm.LigerRMSNormForGemma": "liger_cpp.transformers.rms_norm:LigerRMSNormForGemma",
    f"{_T}.rms_norm.LigerRMSNormForGemma2": "liger_cpp.transformers.rms_norm:LigerRMSNormForGemma2",
    f"{_T}.rms_norm.LigerRMSNormForGemma3": "liger_cpp.transformers.rms_norm:LigerRMSNormForGemma3",
    f"{_T}.rms_norm.LigerRMSNormForOlmo2": "liger_cpp.transformers.rms_norm:LigerRMSNormForOlmo2",
    # same constructor and defaults as Liger-Kernel's: llama casting, ones, never in place
    f"{_T}.rms_norm.LigerRMSNormForGlm4": "liger_cpp.transformers.rms_norm:LigerRMSNormForOlmo2",
    f"{_T}.rms_norm.LigerRMSNormForQwen3Next": "liger_cpp.transformers.rms_norm:LigerRMSNormForQwen3Next",
    f"{_T}.rms_norm.LigerRMSNormForGemma4": "liger_cpp.transformers.rms_norm:LigerRMSNormForGemma4",
    **{
        f"{_T}.rms_norm.{n}": f"liger_cpp.transformers.rms_norm:{n}"
        for n in ("LigerRMSNormForMuseGlimmer", "LigerRMSNormForMuseGlimmerTextCentered")
    },
    f"{_T}.layer_norm.LigerLayerNorm": "liger_cpp.transformers.layer_norm:LigerLayerNorm",
    f"{_T}.fused_add_rms_norm.LigerFusedAddRMSNorm": (
        "liger_cpp.transformers.fused_add_rms_norm:LigerFusedAddRMSNorm"
    ),
    f"{_T}.swiglu.LigerSwiGLUMLP": "liger_cpp.transformers.swiglu:LigerSwiGLUMLP",
    f"{_T}.swiglu.LigerPhi3SwiGLUMLP": "liger_cpp.transformers.swiglu:LigerPhi3SwiGLUMLP",
    f"{_T}.swiglu.LigerQwen3MoeSwiGLUMLP": "liger_cpp.transformers.swiglu:LigerQwen3MoeSwiGLUMLP",
    f"{_T}.swiglu.LigerBlockSparseTop2MLP": "liger_cpp.transformers.swiglu:LigerBlockSparseTop2MLP",
    f"{_T}.geglu.LigerGEGLUMLP": "liger_cpp.transformers.geglu:LigerGEGLUMLP",
    f"{_T}.geglu.LigerGEGLUMLPForGemma4": "liger_cpp.transformers.geglu:LigerGEGLUMLPForGemma4",
    f"{_T}.swiglu.LigerFalconH1SwiGLUMLP": "liger_cpp.transformers.swiglu:LigerFalconH1SwiGLUMLP",
    f"{_T}.mlp.LigerMLP": "liger_cpp.transformers.swiglu:LigerMLP",
    f"{_T}.mlp.LigerFalconH1MLP": "liger_cpp.transformers.swiglu:LigerFalconH1MLP",
    f"{_T}.swiglu.LigerHunyuanV1SwiGLUMLP": "liger_cpp.transformers.swiglu:LigerHunyuanV1SwiGLUMLP",
    f"{_T}.swiglu.LigerSwiGLUMLPForMuseGlimmer": "liger_cpp.transformers.swiglu:LigerSwiGLUMLPForMuseGlimmer",
    f"{_T}.relu_squared.LigerReLUSquared": "liger_cpp.transformers.relu_squared:LigerReLUSquared",
    f"{_T}.swiglu.LigerExperts": "liger_cpp.transformers.moe:LigerExperts",
    f"{_T}.moe.LigerExpertParallelFusedMoe": "liger_cpp.transformers.moe:LigerExpertParallelFusedMoe",
    **{
        f"{_T}.llama4_rope.{n}": f"liger_cpp.transformers.llama4_rope:{n}"
        for n in (
            "liger_llama4_text_rotary_pos_emb",
            "liger_llama4_vision_rotary_pos_emb",
            "apply_liger_llama4_rope_full",
        )
    },
    f"{_T}.qwen2vl_mrope.liger_multimodal_rotary_pos_emb": (
        "liger_cpp.transformers.qwen2vl_mrope:liger_multimodal_rotary_pos_emb"
    ),
    f"{_T}.auto_model.AutoLigerKernelForCausalLM": (
        "liger_cpp.transformers.auto_model:AutoLigerKernelForCausalLM"
    ),
    # chunked losses: liger_cpp's modules and functionals have Liger-Kernel's signatures
    **{
        f"{_C}.{m}.{cls}": f"liger_cpp.chunked_loss.losses:{cls}"
        for m, cls in [
            ("dpo_loss", "LigerFusedLinearDPOLoss"),
            ("orpo_loss", "LigerFusedLinearORPOLoss"),
            ("cpo_loss", "LigerFusedLinearCPOLoss"),
            ("simpo_loss", "LigerFusedLinearSimPOLoss"),
            ("kto_loss", "LigerFusedLinearKTOLoss"),
        ]
    },
    **{
        f"{_C}.functional.liger_fused_linear_{n}": f"liger_cpp.chunked_loss.functional:liger_fused_linear_{n}"
        for n in ("dpo", "orpo", "cpo", "simpo", "kto")
    },
    **{
        f"{_C}.{m}.{cls}": f"liger_kernel._functions:{cls}"
        for m, cls in [
            ("dpo_loss", "LigerFusedLinearDPOFunction"),
            ("orpo_loss", "LigerFusedLinearORPOFunction"),
            ("cpo_loss", "LigerFusedLinearCPOFunction"),
            ("simpo_loss", "LigerFusedLinearSimPOFunction"),
            ("kto_loss", "LigerFusedLinearKTOFunction"),
        ]
    },
    # RL and distillation losses (chunked_loss), the divergences of given distributions (transformers)
    **{
        f"{_C}.{m}.{cls}": f"liger_cpp.chunked_loss.{m}:{cls}"
        for m, cls in [
            ("grpo_loss", "LigerFusedLinearGRPOLoss"),
            ("jsd_loss", "LigerFusedLinearJSDLoss"),
            ("cosine_similarity_loss", "LigerFusedLinearCosineSimilarityLoss"),
        ]
    },
    **{
        f"{_C}.functional.liger_fused_linear_{n}": f"liger_cpp.chunked_loss.functional:liger_fused_linear_{n}"
        for n in ("grpo", "jsd", "cosine")
    },
    **{
        f"{_C}.{m}.{cls}": f"liger_kernel._functions:{cls}"
        for m, cls in [
            ("grpo_loss", "LigerFusedLinearGRPOFunction"),
            ("jsd_loss", "LigerFusedLinearJSDFunction"),
            ("cosine_similarity_loss", "LigerFusedLinearCosineSimilarityFunction"),
        ]
    },
    **{
        f"{_C}.grpo_loss.{n}": f"liger_cpp.chunked_loss.grpo_loss:{n}"
        for n in ("k3_loss_fn", "get_gamma_weights", "sapo_loss_fn", "clip_coef_fn")
    },
    # the extension points for one's own policy-gradient / preference / distillation loss (AgileRL
    # subclasses the first two, Axolotl's top-k KD the third)
    f"{_C}.fused_linear_ppo.LigerFusedLinearPPOBase": (
        "liger_cpp.chunked_loss.fused_linear_ppo:LigerFusedLinearPPOBase"
    ),
    f"{_C}.fused_linear_unpaired_preference.LigerFusedLinearUnpairedPreferenceBase": (
        "liger_cpp.chunked_loss.fused_linear_unpaired_preference:LigerFusedLinearUnpairedPreferenceBase"
    ),
    f"{_C}.fused_linear_preference.LigerFusedLinearPreferenceBase": (
        "liger_cpp.chunked_loss.fused_linear_preference:LigerFusedLinearPreferenceBase"
    ),
    f"{_C}.fused_linear_distillation.LigerFusedLinearDistillationBase": (
        "liger_cpp.chunked_loss.fused_linear_distillation:LigerFusedLinearDistillationBase"
    ),
    f"{_T}.jsd.LigerJSD": "liger_cpp.transformers.jsd:LigerJSD",
    f"{_T}.kl_div.LigerKLDIVLoss": "liger_cpp.transformers.kl_div:LigerKLDIVLoss",
    f"{_T}.tvd.LigerTVDLoss": "liger_cpp.transformers.tvd:LigerTVDLoss",
    f"{_T}.fused_linear_jsd.LigerFusedLinearJSD": (
        "liger_cpp.transformers.fused_linear_jsd:LigerFusedLinearJSD"
    ),
    f"{_T}.fused_linear_kl_div.LigerFusedLinearKLDivLoss": (
        "liger_cpp.transformers.fused_linear_kl_div:LigerFusedLinearKLDivLoss"
    ),
    f"{_O}.fused_linear_scaled_cross_entropy.LigerFusedLinearScaledCrossEntropyFunction": (
        "liger_cpp.ops.fused_linear_logprobs:LigerFusedLinearScaledCrossEntropyFunction"
    ),
    f"{_O}.LigerFusedLinearScaledCrossEntropyFunction": (
        "liger_cpp.ops.fused_linear_logprobs:LigerFusedLinearScaledCrossEntropyFunction"
    ),
    f"{_T}.fused_ce_tvd.LigerFusedCETVDLoss": "liger_cpp.transformers.fused_ce_tvd:LigerFusedCETVDLoss",
    f"{_T}.LigerFusedCETVDLoss": "liger_cpp.transformers.fused_ce_tvd:LigerFusedCETVDLoss",
    f"{_T}.grpo_loss.triton_grpo_loss": "liger_cpp.transformers.grpo_loss:triton_grpo_loss",
    f"{_T}.trainer.LigerORPOTrainer": "liger_cpp.transformers.orpo_trainer:LigerORPOTrainer",
    f"{_T}.trainer.orpo_trainer.LigerORPOTrainer": "liger_cpp.transformers.orpo_trainer:LigerORPOTrainer",
    f"{_O}.grpo_loss.fused_selective_log_softmax": (
        "liger_cpp.ops.selective_logprobs:fused_selective_log_softmax"
    ),
    f"{_O}.fused_linear_scaled_cross_entropy.LigerFusedLinearScaledCrossEntropyTPFunction": (
        "liger_cpp.ops.fused_linear_logprobs:LigerFusedLinearScaledCrossEntropyTPFunction"
    ),
    f"{_O}.LigerFusedLinearScaledCrossEntropyTPFunction": (
        "liger_cpp.ops.fused_linear_logprobs:LigerFusedLinearScaledCrossEntropyTPFunction"
    ),
    # DyT and PolyNorm (kernels of liger_cpp's: liger::dyt_*, liger::poly_norm_*)
    f"{_T}.dyt.LigerDyT": "liger_cpp.transformers.dyt:LigerDyT",
    f"{_T}.poly_norm.LigerPolyNorm": "liger_cpp.transformers.poly_norm:LigerPolyNorm",
    **{
        f"{_O}{where}.LigerDyTFunction": "liger_cpp.transformers.dyt:LigerDyTFunction"
        for where in (".dyt", "")
    },
    **{
        f"{_O}{where}.LigerPolyNormFunction": "liger_cpp.transformers.poly_norm:LigerPolyNormFunction"
        for where in (".poly_norm", "")
    },
    **{f"{_O}.dyt.{n}": f"liger_cpp.transformers.dyt:{n}" for n in ("liger_dyt_fwd", "liger_dyt_bwd")},
    **{
        f"{_O}{where}.{n}": f"liger_cpp.transformers.poly_norm:{n}"
        for n in ("poly_norm_forward", "poly_norm_backward")
        for where in (".poly_norm", "")
    },
    # ops composed of PyTorch's own (liger_cpp.transformers.torch_composed_ops: no kernel of ours)
    **{
        f"{_T}.{mod}.{cls}": f"liger_cpp.transformers.torch_composed_ops:{cls}"
        for mod, cls in (
            ("softmax", "LigerSoftmax"),
            ("sparsemax", "LigerSparsemax"),
            ("group_norm", "LigerGroupNorm"),
            ("modulated_rms_norm", "LigerModulatedRMSNorm"),
            ("multi_token_attention", "LigerMultiTokenAttention"),
        )
    },
    **{
        f"{_O}{where}.{cls}": f"liger_cpp.transformers.torch_composed_ops:{cls}"
        for mod, cls in (
            ("softmax", "LigerSoftmaxFunction"),
            ("sparsemax", "LigerSparsemaxFunction"),
            ("group_norm", "LigerGroupNormFunction"),
            ("modulated_rms_norm", "LigerModulatedRMSNormFunction"),
            ("attn_res", "LigerAttnResFunction"),
            ("multi_token_attention", "LigerMultiTokenAttentionFunction"),
        )
        for where in (f".{mod}", "")
    },
    # vocabulary-parallel cross entropy (torch.distributed collectives around PyTorch's ops)
    **{
        f"{_O}{where}.{name}": f"liger_cpp.transformers.vocab_parallel_cross_entropy:{name}"
        for name in ("LigerVocabParallelCEFunction", "validate_formula_and_mode")
        for where in (".vocab_parallel_cross_entropy", "")
    },
    f"{_T}.vocab_parallel_cross_entropy.LigerVocabParallelCrossEntropy": (
        "liger_cpp.transformers.vocab_parallel_cross_entropy:LigerVocabParallelCrossEntropy"
    ),
    # neighborhood attention (PyTorch's ops composed)
    **{
        f"{_T}.fused_neighborhood_attention.{n}": f"liger_cpp.transformers.neighborhood_attention:{n}"
        for n in (
            "LigerFusedNeighborhoodAttention",
            "LigerFusedNeighborhoodAttentionLayer",
            "LigerFusedNeighborhoodAttentionConfig",
        )
    },
    **{
        f"{_O}{where}.LigerFusedNeighborhoodAttentionFunction": (
            "liger_cpp.transformers.neighborhood_attention:LigerFusedNeighborhoodAttentionFunction"
        )
        for where in (".fused_neighborhood_attention", "")
    },
    f"{_T}.functional.CrossEntropyOutput": "liger_cpp.ops.ce_output:CrossEntropyOutput",
    **{
        f"{_T}{where}.LigerEmbedding": "liger_cpp.transformers.torch_composed_ops:LigerEmbedding"
        for where in (".experimental", ".experimental.embedding")
    },
    **{
        f"{_O}{where}.LigerEmbeddingFunction": (
            "liger_cpp.transformers.torch_composed_ops:LigerEmbeddingFunction"
        )
        for where in (".experimental.embedding", "")
    },
    # mHC (PyTorch's ops composed)
    f"{_T}.mhc.LigerMHC": "liger_cpp.transformers.mhc:LigerMHC",
    **{
        f"{_O}{where}.{n}": f"liger_cpp.transformers.mhc:{n}"
        for n in ("LigerMHCCoeffsFunction", "LigerMHCPreFunction", "LigerMHCPostResFunction")
        for where in (".mhc", "")
    },
    # the tiled MLP: liger_cpp's Function has Liger-Kernel's .apply order itself
    f"{_O}.tiled_mlp.LigerTiledMLPFunction": "liger_cpp.ops.tiled_mlp:TiledMLPFunction",
    f"{_O}.tiled_mlp.apply_tiled_mlp": "liger_cpp.ops.tiled_mlp:apply_tiled_mlp",
    f"{_T}.tiled_mlp.LigerTiledSwiGLUMLP": "liger_cpp.transformers.tiled_mlp:LigerTiledSwiGLUMLP",
    f"{_T}.tiled_mlp.LigerTiledGEGLUMLP": "liger_cpp.transformers.tiled_mlp:LigerTiledGEGLUMLP",
}

# liger_kernel.ops autograd Functions (adapters with Liger-Kernel's .apply order), in liger_kernel.ops
# and in their defining modules.
_OPS_FUNCTIONS = {
    "cross_entropy": "LigerCrossEntropyFunction",
    "fused_linear_cross_entropy": "LigerFusedLinearCrossEntropyFunction",
    "rms_norm": "LigerRMSNormFunction",
    "fused_add_rms_norm": "LigerFusedAddRMSNormFunction",
    "layer_norm": "LigerLayerNormFunction",
    "rope": "LigerRopeFunction",
    "qwen2vl_mrope": "LigerQwen2VLMRopeFunction",
    "swiglu": "LigerSiLUMulFunction",
    "geglu": "LigerGELUMulFunction",
    "jsd": "LigerJSDFunction",
    "kl_div": "LigerKLDivLossFunction",
    "tvd": "LigerTVDLossFunction",
    "relu_squared": "LigerReLUSquaredFunction",
    "llama4_rope": "LigerLlama4RopeFunction",
    "fused_moe": "LigerFusedMoEFunction",
    "mlp": "LigerMLPFunction",
    "fused_ce_tvd": "LigerFusedCETVDFunction",
    "grpo_loss": "GrpoLossFunction",
}
for _fn in ("fused_ce_tvd_forward", "fused_ce_tvd_backward"):
    IMPLEMENTED[f"{_O}.fused_ce_tvd.{_fn}"] = f"liger_kernel._functions:{_fn}"
for _mod, _cls in _OPS_FUNCTIONS.items():
    IMPLEMENTED[f"{_O}.{_mod}.{_cls}"] = f"liger_kernel._functions:{_cls}"
    IMPLEMENTED[f"{_O}.{_cls}"] = f"liger_kernel._functions:{_cls}"
for _where in (f"{_O}.swiglu", _O):  # a second Function of liger_kernel.ops.swiglu
    IMPLEMENTED[f"{_where}.LigerFusedGateUpSiLUMulFunction"] = (
        "liger_kernel._functions:LigerFusedGateUpSiLUMulFunction"
    )
# liger_kernel.ops' LigerFusedLinearJSDFunction (not chunked_loss's, of the same name)
IMPLEMENTED[f"{_O}.fused_linear_jsd.LigerFusedLinearJSDFunction"] = (
    "liger_kernel._functions:LigerFusedLinearJSDOps"
)
IMPLEMENTED[f"{_O}.LigerFusedLinearJSDFunction"] = "liger_kernel._functions:LigerFusedLinearJSDOps"
for _where in (f"{_O}.fused_linear_kl_div", _O):
    IMPLEMENTED[f"{_where}.LigerFusedLinearKLDivFunction"] = (
        "liger_kernel._functions:LigerFusedLinearKLDivFunction"
    )

# Function-level forward / backward entry points (liger_kernel._entry_points), by defining module;
# liger_kernel.ops' re-exports of them are aliases of these.
_ENTRY_POINTS = {
    "rms_norm": ("rms_norm_forward", "rms_norm_backward"),
    "modulated_rms_norm": ("modulated_rms_norm_forward", "modulated_rms_norm_backward"),
    "attn_res": ("attn_res_forward", "attn_res_backward"),
    "mhc": (
        "mhc_mm_norm_fwd",
        "mhc_mm_norm_bwd",
        "mhc_split_sinkhorn_fwd",
        "mhc_sinkhorn_bwd",
        "mhc_pre_fwd",
        "mhc_pre_bwd",
        "mhc_post_res_fwd",
        "mhc_post_res_bwd",
    ),
    "fused_moe": ("compute_routing_metadata",),
    "experimental.mm_int8int2": ("unpack_weights", "pack_weights", "get_autotune_config", "matmul"),
    "mlp": ("get_bucket_m", "gemm_swiglu", "swiglu_backward_dGU", "swiglu_backward_dI"),
    "fused_neighborhood_attention": ("fused_neighborhood_attention_forward",),
    "fused_add_rms_norm": ("fused_add_rms_norm_forward", "fused_add_rms_norm_backward"),
    "layer_norm": ("layer_norm_forward", "layer_norm_backward"),
    "group_norm": ("group_norm_forward", "group_norm_backward"),
    "swiglu": (
        "swiglu_forward",
        "swiglu_backward",
        "swiglu_fused_gate_up_forward",
        "swiglu_fused_gate_up_backward",
    ),
    "geglu": ("geglu_forward", "geglu_backward"),
    "relu_squared": ("relu_squared_forward", "relu_squared_backward"),
    "rope": ("rope_forward", "rope_backward"),
    "qwen2vl_mrope": ("qwen2vl_mrope_forward", "qwen2vl_mrope_backward"),
    "llama4_rope": ("llama4_rope_forward",),
    "cross_entropy": ("cross_entropy_forward", "cross_entropy_backward"),
    "jsd": ("jsd_forward", "jsd_backward"),
    "kl_div": ("kldiv_forward_triton", "kldiv_backward_triton", "get_num_warps"),
    "tvd": ("tv_distance_forward_triton", "tvd_backward_triton", "get_num_warps"),
    "fused_ce_tvd": ("get_num_warps",),
    "fused_linear_cross_entropy": (
        "fused_linear_cross_entropy_forward",
        "fused_linear_cross_entropy_backward",
    ),
    "fused_linear_jsd": ("fused_linear_jsd_forward", "fused_linear_jsd_backward"),
    "fused_linear_kl_div": ("fused_linear_kl_div_forward", "fused_linear_kl_div_backward", "get_num_warps"),
    "utils": ("device_context", "get_amp_custom_fwd_bwd", "get_npu_core_count", "set_large_grf_mode"),
}
for _mod, _names in _ENTRY_POINTS.items():
    for _fn in _names:
        IMPLEMENTED[f"{_O}.{_mod}.{_fn}"] = f"liger_kernel._entry_points:{_fn}"


def _load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def implementation(module: str, name: str):
    """liger_cpp's object for Liger-Kernel's `module`.`name`, or None."""
    target = IMPLEMENTED.get(f"{module}.{name}")
    if target is not None:
        return _load(target)
    from liger_kernel import _lce_forwards

    if _lce_forwards.is_forward(module, name):
        return _lce_forwards.make(module, name)
    if module.startswith(f"{_T}.model.") and name == "lce_maybe_trainable_lm_head":
        return _lce_forwards.lce_maybe_trainable_lm_head
    if module == f"{_T}.monkey_patch" and name.startswith("apply_liger_kernel_to_"):
        # Every model type liger_cpp patches, as soon as liger_cpp has it.
        from liger_cpp.transformers import monkey_patch

        return getattr(monkey_patch, name, None)
    return None
