"""Tiny random configs of the newer model families (tests/hf_models.py's protocol: hidden 32, 2
layers, vocabulary 96, 4 experts for MoE, a one- or two-block vision tower for multimodal), with the
options that exercise liger_cpp's paths: MoE and dense layers mixed, shared experts, partial rotary,
KV-shared Gemma 4 layers with the double-wide MLP, Gemma 3n's activation sparsity, Falcon-H1's
multipliers and logit scale, Llama 4's L2 q/k norm and NoPE layer."""

import transformers

VOCAB = 96
TEXT = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
_PARTIAL = dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5)
_GATED_DELTA = dict(
    linear_conv_kernel_dim=2,
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    layer_types=["linear_attention", "full_attention"],
    rope_parameters=_PARTIAL,
)
_MOE4 = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48)
_QWEN3VL_VISION = dict(
    depth=1,
    hidden_size=32,
    intermediate_size=64,
    num_heads=4,
    out_hidden_size=32,
    patch_size=4,
    temporal_patch_size=2,
    spatial_merge_size=2,
    num_position_embeddings=16,
)
_MROPE3 = dict(rope_type="default", rope_theta=10000.0, mrope_section=[1, 1, 2])

TEXT_TYPES = [
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v4",
    "exaone4",
    "falcon_h1",
    "gemma3n_text",
    "gemma4_text",
    "gpt_oss",
    "hunyuan_v1_dense",
    "hunyuan_v1_moe",
    "llama4_text",
    "ministral",
    "nemotron",
    "olmo3",
    "qwen3_5_moe_text",
    "qwen3_5_text",
    "qwen3_next",
    "smollm3",
]
# Built with AutoModelForImageTextToText (the *ForConditionalGeneration class), trained on text.
VLM_TYPES = [
    "gemma4",
    "glm4v",
    "glm4v_moe",
    "internvl",
    "llama4",
    "llava",
    "muse_glimmer",
    "paligemma",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_vl",
    "qwen3_vl_moe",
    "smolvlm",
]
NEW_MODEL_TYPES = TEXT_TYPES + VLM_TYPES
NEW_MOE = {
    "gemma4",
    "gemma4_text",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v4",
    "gpt_oss",
    "hunyuan_v1_moe",
    "llama4_text",
    "llama4",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "qwen3_next",
    "qwen3_vl_moe",
    "glm4v_moe",
}


def _text(model_type):
    t = dict(TEXT)
    if model_type == "deepseek_v2":
        t.update(
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=48,
            first_k_dense_replace=1,
            kv_lora_rank=16,
            q_lora_rank=None,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            n_group=1,
            topk_group=1,
            num_key_value_heads=4,
        )
        t.pop("head_dim")
    elif model_type == "deepseek_v3":
        t.update(
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=48,
            first_k_dense_replace=1,
            kv_lora_rank=16,
            q_lora_rank=24,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            n_group=1,
            topk_group=1,
            rope_interleave=False,
            num_key_value_heads=4,
        )
        t.pop("head_dim")
    elif model_type == "deepseek_v4":
        t.update(
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=48,
            q_lora_rank=24,
            o_lora_rank=16,
            o_groups=2,
            index_n_heads=2,
            index_head_dim=8,
            index_topk=4,
            layer_types=["sliding_attention", "sliding_attention"],
            mlp_layer_types=["moe", "moe"],
            sliding_window=8,
            hc_mult=2,
            num_nextn_predict_layers=0,
            num_key_value_heads=1,
            head_dim=16,
        )
    elif model_type == "falcon_h1":
        t.update(
            mamba_d_ssm=32,
            mamba_n_heads=4,
            mamba_d_head=8,
            mamba_n_groups=1,
            mamba_d_state=8,
            mamba_d_conv=2,
            mamba_chunk_size=8,
            mlp_multipliers=[0.5, 2.0],
            lm_head_multiplier=0.7,
            embedding_multiplier=1.3,
        )
    elif model_type == "gemma3n_text":
        t.update(
            intermediate_size=[64, 48],
            activation_sparsity_pattern=[0.95, 0.0],
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=VOCAB,
            num_kv_shared_layers=0,
            laurel_rank=4,
            altup_num_inputs=2,
            layer_types=["sliding_attention", "full_attention"],
            sliding_window=8,
            final_logit_softcapping=3.0,
        )
    elif model_type in ("gemma4_text", "gemma4"):
        t.update(
            layer_types=["sliding_attention", "full_attention", "full_attention"],
            num_hidden_layers=3,
            sliding_window=8,
            final_logit_softcapping=3.0,
            num_kv_shared_layers=1,
            use_double_wide_mlp=True,
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=VOCAB,
            enable_moe_block=True,
            num_experts=4,
            top_k_experts=2,
            moe_intermediate_size=16,
            global_head_dim=8,
        )
    elif model_type == "gpt_oss":
        t.update(
            num_local_experts=4,
            num_experts_per_tok=2,
            layer_types=["sliding_attention", "full_attention"],
            sliding_window=8,
        )
    elif model_type == "hunyuan_v1_moe":
        t.update(num_experts=4, moe_topk=2)
    elif model_type in ("llama4_text", "llama4"):
        t.update(
            num_local_experts=4,
            num_experts_per_tok=1,
            intermediate_size_mlp=48,
            moe_layers=[1],
            no_rope_layers=[1, 0],
            use_qk_norm=True,
            attention_chunk_size=64,
        )
    elif model_type == "nemotron":
        t.update(partial_rotary_factor=0.5, hidden_act="relu2")
    elif model_type in ("qwen3_next",):
        t.update(_GATED_DELTA, **_MOE4, shared_expert_intermediate_size=40, mlp_only_layers=[0])
    elif model_type in ("qwen3_5_text", "qwen3_5"):
        t.update(_GATED_DELTA)
    elif model_type in ("qwen3_5_moe_text", "qwen3_5_moe"):
        t.update(_GATED_DELTA, **_MOE4, shared_expert_intermediate_size=40)
        t.pop("intermediate_size")
    elif model_type == "smollm3":
        t.update(no_rope_layers=[1, 0], mlp_bias=True)
    elif model_type in ("qwen3_vl", "qwen3_vl_moe"):
        t.update(rope_parameters=_MROPE3)
        if model_type == "qwen3_vl_moe":
            t.update(**_MOE4, mlp_only_layers=[0])
    elif model_type == "glm4v_moe":
        t.update(
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=48,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            rope_parameters=dict(_MROPE3, partial_rotary_factor=0.5),
        )
        t["rope_parameters"]["mrope_section"] = [1, 1, 0]
    elif model_type == "muse_glimmer":
        # layer 1 is a NoPE full-attention layer (HF's default pattern), layer 0 sliding; a small
        # softcap and a multiplier != 1 so that T * tanh(m * logits / T) changes the loss visibly.
        t.update(
            hidden_activation="silu",
            sliding_window=8,
            final_logit_softcapping=3.0,
            output_multiplier=1.7,
            qk_scale_factor=1.3,
            post_norm_eps=1e-6,
        )
    elif model_type == "glm4v":
        t.update(rope_parameters=dict(_MROPE3, partial_rotary_factor=0.5))
        t["rope_parameters"]["mrope_section"] = [1, 1, 0]
    return t


def tiny_config_new(model_type, attn="eager"):
    cm = transformers.CONFIG_MAPPING
    t = _text(model_type)
    if model_type in TEXT_TYPES:
        cfg = cm[model_type](**t)
    elif model_type == "llama4":
        cfg = cm["llama4"](
            text_config=t,
            vision_config=dict(
                hidden_size=32,
                intermediate_size=128,  # the pixel-shuffled width (32 x 4)
                num_hidden_layers=1,
                num_attention_heads=4,
                image_size=28,
                patch_size=14,
                vision_output_dim=32,
                projector_input_dim=32,
                projector_output_dim=32,
                pixel_shuffle_ratio=0.5,
            ),
            image_token_index=5,
        )
    elif model_type in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        vision = dict(_QWEN3VL_VISION)
        if model_type.startswith("qwen3_vl"):
            vision["deepstack_visual_indexes"] = [0]
        cfg = cm[model_type](
            text_config=t, vision_config=vision, image_token_id=5, video_token_id=6, vision_start_token_id=7
        )
    elif model_type in ("glm4v", "glm4v_moe"):
        cfg = cm[model_type](
            text_config=t,
            vision_config=dict(
                depth=1,
                hidden_size=32,
                intermediate_size=64,
                num_heads=4,
                out_hidden_size=32,
                patch_size=4,
                temporal_patch_size=2,
                spatial_merge_size=2,
                image_size=16,
            ),
            image_token_id=5,
            video_token_id=6,
            image_start_token_id=7,
            image_end_token_id=8,
        )
    elif model_type == "muse_glimmer":
        # 4x4 patches of 2 frames x 3 channels (96 values), 2x2 merged: 128 features a token
        cfg = cm["muse_glimmer"](
            text_config=t,
            vision_config=dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,  # one window-attention block, one full-attention block
                num_attention_heads=4,
                patch_size=4,
                patch_temporal=2,
                pos_emb_height=4,
                pos_emb_width=4,
                merge_size=2,
            ),
            out_hidden_size=128,
            projector_hidden_size=32,
            image_token_id=5,
            video_token_id=6,
        )
    elif model_type == "gemma4":
        cfg = cm["gemma4"](
            text_config=t,
            vision_config=dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=4,
                num_key_value_heads=4,
                head_dim=8,
                patch_size=4,
                position_embedding_size=64,
                pooling_kernel_size=2,
            ),
            audio_config=None,
        )
    elif model_type == "internvl":
        cfg = cm["internvl"](
            text_config=dict(TEXT, model_type="qwen2"),
            vision_config=dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=4,
                image_size=[28, 28],
                patch_size=[14, 14],
                norm_type="rms_norm",
                use_qk_norm=True,
            ),
            image_token_id=5,
            image_seq_length=1,
            downsample_ratio=0.5,
        )
    elif model_type == "llava":
        cfg = cm["llava"](
            text_config=dict(TEXT, model_type="mistral"),
            vision_config=dict(
                model_type="pixtral",
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=4,
                image_size=28,
                patch_size=14,
                head_dim=8,
                hidden_act="silu",  # Pixtral-12B's SwiGLU
            ),
            image_token_index=5,
            projector_hidden_act="gelu",
            vision_feature_layer=-1,
            vision_feature_select_strategy="full",  # Pixtral has no CLS token to drop
        )
    elif model_type == "smolvlm":
        cfg = cm["smolvlm"](
            text_config=dict(TEXT, model_type="llama"),
            vision_config=dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=4,
                # 16 patches, 4 image tokens after the pixel shuffle: a multiple of patch_size, which
                # transformers 5.20's inputs_merger (the newest for Python 3.10) groups them by
                image_size=8,
                patch_size=2,
            ),
            image_token_id=5,
            scale_factor=2,
        )
    elif model_type == "paligemma":
        cfg = cm["paligemma"](
            text_config=dict(TEXT, model_type="gemma2", final_logit_softcapping=3.0, sliding_window=8),
            vision_config=dict(
                model_type="siglip_vision_model",
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=4,
                image_size=28,
                patch_size=14,
                projection_dim=32,
            ),
            image_token_index=5,
            projection_dim=32,
        )
    else:
        raise KeyError(model_type)
    return cfg
