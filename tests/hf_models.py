"""Tiny random Hugging Face models (CPU, fp32) for the transformers-integration tests: one per
model type of apply_liger_kernel_to_*, with the options that exercise liger_cpp's paths (softcaps,
Granite's logit scaling, Phi-3's partial rotary, MoE dense layers)."""

import pytest
import torch
import transformers
from hf_models_new import NEW_MODEL_TYPES, NEW_MOE, TEXT, VLM_TYPES, VOCAB, tiny_config_new

MODEL_TYPES = [
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "glm4",
    "granite",
    "llama",
    "mistral",
    "mixtral",
    "mllama",
    "olmo2",
    "phi3",
    "qwen2",
    "qwen2_5_vl",
    "qwen2_vl",
    "qwen3",
    "qwen3_moe",
]
VLM = {"gemma3", "mllama", "qwen2_vl", "qwen2_5_vl", *VLM_TYPES}
MOE = {"mixtral", "qwen3_moe", *NEW_MOE}
_MROPE = dict(rope_type="default", mrope_section=[1, 1, 2], rope_theta=10000.0)


def tiny_config(model_type, attn="eager", **extra):
    if model_type in NEW_MODEL_TYPES:
        return _finish(tiny_config_new(model_type), model_type, attn, extra)
    text = dict(TEXT, **extra)
    if model_type == "mixtral":
        text.update(num_local_experts=4, num_experts_per_tok=2)
    elif model_type == "qwen3_moe":
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, mlp_only_layers=[1])
    elif model_type == "gemma2":
        text.update(final_logit_softcapping=3.0)  # small: the softcap changes the loss visibly
    elif model_type in ("gemma3_text", "gemma3"):
        text.update(final_logit_softcapping=3.0)
    elif model_type == "granite":
        text.update(logits_scaling=4.0)
    elif model_type == "phi3":
        text.update(partial_rotary_factor=0.5)
    cm = transformers.CONFIG_MAPPING
    if model_type == "mllama":
        cfg = cm["mllama"](
            text_config=dict(text, cross_attention_layers=[1]),
            vision_config=dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_global_layers=1,
                attention_heads=4,
                intermediate_layers_indices=[0],
                vision_output_dim=64,
                image_size=28,
                patch_size=14,
                max_num_tiles=2,
                supported_aspect_ratios=[[1, 1], [1, 2]],
            ),
        )
    elif model_type == "gemma3":
        cfg = cm["gemma3"](
            text_config=text,
            vision_config=dict(
                model_type="siglip_vision_model",
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=4,
                image_size=28,
                patch_size=14,
            ),
            mm_tokens_per_image=4,
        )
    elif model_type == "qwen2_vl":
        cfg = cm["qwen2_vl"](
            text_config=dict(text, rope_parameters=_MROPE),
            vision_config=dict(
                depth=2,
                embed_dim=32,
                hidden_size=32,
                num_heads=4,
                mlp_ratio=2,
                patch_size=4,
                temporal_patch_size=2,
            ),
            image_token_id=5,
            video_token_id=6,
            vision_start_token_id=7,
        )
    elif model_type == "qwen2_5_vl":
        cfg = cm["qwen2_5_vl"](
            text_config=dict(text, rope_parameters=_MROPE),
            vision_config=dict(
                depth=2,
                hidden_size=32,
                intermediate_size=64,
                num_heads=4,
                out_hidden_size=32,
                patch_size=4,
                temporal_patch_size=2,
                fullatt_block_indexes=[1],
                window_size=16,
            ),
            image_token_id=5,
            video_token_id=6,
            vision_start_token_id=7,
        )
    else:
        cfg = cm[model_type](**text)
    return _finish(cfg, model_type, attn, {})


def _finish(cfg, model_type, attn, extra):
    for k, v in extra.items():
        setattr(cfg.get_text_config(), k, v)
    cfg._attn_implementation = attn
    for sub in ("text_config", "vision_config"):
        if getattr(cfg, sub, None) is not None:
            getattr(cfg, sub)._attn_implementation = attn
    if model_type in MOE:
        cfg._experts_implementation = "eager"
        if getattr(cfg, "text_config", None) is not None:
            cfg.text_config._experts_implementation = "eager"
    return cfg


def build(model_type, seed=0, attn="eager", **extra):
    """A tiny random model in train mode with non-trivial 1-D weights (Gemma's norms start at 0)."""
    torch.manual_seed(seed)
    cfg = tiny_config(model_type, attn, **extra)
    auto = (
        transformers.AutoModelForImageTextToText if model_type in VLM else transformers.AutoModelForCausalLM
    )
    model = auto.from_config(cfg)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.float().train()


def batch(seed=123, b=2, t=9, ignore=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, VOCAB, (b, t), generator=g)
    labels = ids.clone()
    if ignore:
        labels[0, :2] = -100  # prompt tokens ignored, as in SFT
    return ids, labels


def grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def run(model, ids, labels, **kw):
    """(output, grads) of one forward + backward with labels."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=labels, **kw)
    out.loss.backward()
    return out, grads(model)


@pytest.fixture(autouse=True)
def single_thread():
    """One intra-op thread for these tiny models: thread start-up and spinning cost far more than the
    matmuls (100x on a busy 2-core machine). Imported by the HF test modules."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
