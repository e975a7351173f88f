"""What each model type's apply_liger_kernel_to_* patches, as data: one ``Spec`` row per model type
(the modeling module, its RMSNorm / MLP class names and the liger_cpp classes replacing them, the
decoder-layer norm attributes, the RoPE functions, the model classes whose forward gets liger_cpp's
loss path, the vision LayerNorms)."""

import importlib
from dataclasses import dataclass
from typing import Optional

from liger_cpp.transformers.causal_lm import LossSpec
from liger_cpp.transformers.geglu import LigerGEGLUMLP
from liger_cpp.transformers.llama4_rope import (
    liger_deepseek_v2_rotary_pos_emb,
    liger_llama4_text_rotary_pos_emb,
    liger_llama4_vision_rotary_pos_emb,
)
from liger_cpp.transformers.qwen2vl_mrope import liger_multimodal_rotary_pos_emb
from liger_cpp.transformers.rms_norm import (
    LigerRMSNorm,
    LigerRMSNormForGemma,
    LigerRMSNormForGemma2,
    LigerRMSNormForGemma3,
    LigerRMSNormForOlmo2,
)
from liger_cpp.transformers.rope import (
    liger_rotary_pos_emb,
    liger_rotary_pos_emb_gpt_oss,
    liger_rotary_pos_emb_single,
    liger_rotary_pos_emb_vision,
)
from liger_cpp.transformers.swiglu import LigerPhi3SwiGLUMLP, LigerQwen3MoeSwiGLUMLP, LigerSwiGLUMLP

# RoPE kinds of Spec.rope -> the liger_cpp function bound in place of the modeling module's.
ROPE_IMPLS = {
    "rope": liger_rotary_pos_emb,  # rotate-half (partial rotary from cos' width)
    "mrope": liger_multimodal_rotary_pos_emb,
    "gpt_oss": liger_rotary_pos_emb_gpt_oss,  # cos / sin of half the head's width
    "vision": liger_rotary_pos_emb_vision,  # apply_rotary_pos_emb_vision: (S, H, D), float32 math
    "single": liger_rotary_pos_emb_single,  # Gemma 3n / 4: one tensor at a time
    "llama4_text": liger_llama4_text_rotary_pos_emb,  # complex frequencies, interleaved pairs
    "llama4_vision": liger_llama4_vision_rotary_pos_emb,
    "deepseek_v2": liger_deepseek_v2_rotary_pos_emb,
}


@dataclass(frozen=True)
class Spec:
    """How one model type is patched: which classes and functions of its modeling module."""

    module: str  # transformers modeling module
    norm: str  # RMSNorm class name in that module ("" when the type has none to patch)
    norm_cls: type  # liger_cpp class replacing it
    mlp: str  # MLP (or experts) class name ("" when the type has none to patch)
    mlp_kind: str  # "swiglu" | "phi3" | "geglu" | "experts" | a kind of MLP_KINDS
    norm_attrs: tuple  # decoder-layer norm attribute names
    attn_norm_attrs: tuple = ()  # self_attn norm attribute names (q_norm, k_norm)
    dense_mlp: Optional[tuple] = None  # MoE models: (class name, liger class) of the dense-layer MLP
    rope: tuple = ()  # (function name, kind in ROPE_IMPLS); () = RoPE not supported
    lm: tuple = ()  # (model class name, LossSpec) whose forward gets the loss path
    layer_norm: tuple = ()  # (module, name) bound to nn.LayerNorm ("nn": the module's torch.nn)
    # The newer families (specs_text.py, specs_multimodal.py):
    norms: tuple = ()  # more norm classes: ((class name, liger class), ...), in `module`
    mlps: tuple = ()  # more MLP classes: ((class name, kind, liger class or None), ...)
    mlp_attr: str = "mlp"  # the decoder layer's MLP attribute ("feed_forward": Llama 4, Falcon-H1)
    final_norm: str = "norm"  # the text model's final norm attribute ("" : none to check)
    layers: str = ""  # dotted path of the decoder-layer ModuleList from the model ("": found)
    no_rope: str = ""  # why rope=True cannot be honoured (NotImplementedError), when rope is ()
    rope_warns: bool = False  # rope=True is a warned no-op instead (as Liger-Kernel's patcher)
    no_mlp: str = ""  # why the MLP flag cannot be honoured (NotImplementedError), when mlp is ""
    mlp_flag: str = "swiglu"  # the apply function's name of the MLP flag (for messages)

    def norm_classes(self) -> tuple:
        """((class name, liger class), ...) of every norm class this type patches."""
        return (((self.norm, self.norm_cls),) if self.norm else ()) + self.norms

    def mlp_classes(self) -> tuple:
        """((class name, kind, liger class or None), ...) of every MLP class this type patches."""
        main = ((self.mlp, self.mlp_kind, None),) if self.mlp else ()
        dense = ((self.dense_mlp[0], "swiglu", self.dense_mlp[1]),) if self.dense_mlp else ()
        return main + dense + self.mlps


_M = "transformers.models.{0}.modeling_{0}"
_LLAMA_NORMS = ("input_layernorm", "post_attention_layernorm")
_SANDWICH = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)
_ROPE = (("apply_rotary_pos_emb", "rope"),)
# Qwen2-VL family: transformers 5.x folds the multimodal sections into cos/sin and calls the plain
# apply_rotary_pos_emb; versions that still call apply_multimodal_rotary_pos_emb get the mRoPE op.
_MROPE = (("apply_rotary_pos_emb", "rope"), ("apply_multimodal_rotary_pos_emb", "mrope"))
_PLAIN = LossSpec()
_SOFTCAP = LossSpec(softcap=lambda c: c.get_text_config().final_logit_softcapping)


def _lm(*names, spec=_PLAIN):
    return tuple((n, spec) for n in names)


def _simple(name, prefix, mlp_kind="swiglu", norm_cls=LigerRMSNorm, norm_attrs=_LLAMA_NORMS, **kw):
    return Spec(
        _M.format(name),
        f"{prefix}RMSNorm",
        norm_cls,
        f"{prefix}MLP",
        mlp_kind,
        norm_attrs,
        rope=kw.pop("rope", _ROPE),
        lm=kw.pop("lm", _lm(f"{prefix}ForCausalLM")),
        **kw,
    )


_GEMMA3_TEXT = dict(
    norm_cls=LigerRMSNormForGemma3, norm_attrs=_SANDWICH, attn_norm_attrs=("q_norm", "k_norm")
)

# model_type -> Spec. A new model type is one row here, its apply_liger_kernel_to_<type> in
# __init__.py and its MODEL_TYPE_TO_APPLY_LIGER_FN entries.
SPECS = {
    "llama": _simple("llama", "Llama"),
    "mllama": Spec(
        _M.format("mllama"),
        "MllamaTextRMSNorm",
        LigerRMSNorm,
        "MllamaTextMLP",
        "swiglu",
        _LLAMA_NORMS,
        rope=_ROPE,
        lm=_lm("MllamaForCausalLM", "MllamaForConditionalGeneration"),
        layer_norm=((_M.format("mllama"), "nn"),),
    ),
    "mistral": _simple("mistral", "Mistral"),
    "mixtral": Spec(
        _M.format("mixtral"),
        "MixtralRMSNorm",
        LigerRMSNorm,
        "MixtralExperts",
        "experts",
        _LLAMA_NORMS,
        rope=_ROPE,
        lm=_lm("MixtralForCausalLM"),
    ),
    "gemma": _simple("gemma", "Gemma", "geglu", LigerRMSNormForGemma),
    "gemma2": _simple(
        "gemma2",
        "Gemma2",
        "geglu",
        LigerRMSNormForGemma2,
        _SANDWICH,
        lm=_lm("Gemma2ForCausalLM", spec=_SOFTCAP),
    ),
    "gemma3_text": _simple(
        "gemma3", "Gemma3", "geglu", lm=_lm("Gemma3ForCausalLM", spec=_SOFTCAP), **_GEMMA3_TEXT
    ),
    "gemma3": _simple(
        "gemma3",
        "Gemma3",
        "geglu",
        lm=_lm("Gemma3ForCausalLM", spec=_SOFTCAP)
        + _lm("Gemma3ForConditionalGeneration", spec=LossSpec(_SOFTCAP.softcap, softcap_optional=True)),
        layer_norm=((_M.format("siglip"), "nn"),),
        **_GEMMA3_TEXT,
    ),
    "qwen2": _simple("qwen2", "Qwen2"),
    "qwen2_vl": Spec(
        _M.format("qwen2_vl"),
        "Qwen2VLRMSNorm",
        LigerRMSNorm,
        "Qwen2MLP",
        "swiglu",
        _LLAMA_NORMS,
        rope=_MROPE,
        lm=_lm("Qwen2VLForConditionalGeneration"),
        layer_norm=((_M.format("qwen2_vl"), "LayerNorm"),),
    ),
    "qwen2_5_vl": Spec(
        _M.format("qwen2_5_vl"),
        "Qwen2_5_VLRMSNorm",
        LigerRMSNorm,
        "Qwen2MLP",
        "swiglu",
        _LLAMA_NORMS,
        rope=_MROPE,
        lm=_lm("Qwen2_5_VLForConditionalGeneration"),
    ),
    "qwen3": _simple("qwen3", "Qwen3", attn_norm_attrs=("q_norm", "k_norm")),
    "qwen3_moe": Spec(
        _M.format("qwen3_moe"),
        "Qwen3MoeRMSNorm",
        LigerRMSNorm,
        "Qwen3MoeExperts",
        "experts",
        _LLAMA_NORMS,
        ("q_norm", "k_norm"),
        dense_mlp=("Qwen3MoeMLP", LigerQwen3MoeSwiGLUMLP),
        rope=_ROPE,
        lm=_lm("Qwen3MoeForCausalLM"),
    ),
    "phi3": _simple("phi3", "Phi3", "phi3"),  # partial rotary: liger_rotary_pos_emb handles it
    "granite": _simple(
        "granite",
        "Granite",
        lm=_lm("GraniteForCausalLM", spec=LossSpec(logit_scale=lambda c: 1.0 / c.logits_scaling)),
    ),
    "olmo2": _simple(
        "olmo2",
        "Olmo2",
        norm_cls=LigerRMSNormForOlmo2,
        norm_attrs=("post_attention_layernorm", "post_feedforward_layernorm"),
        attn_norm_attrs=("q_norm", "k_norm"),
    ),
    "glm4": _simple(
        "glm4",
        "Glm4",
        "phi3",
        LigerRMSNormForOlmo2,
        _LLAMA_NORMS + ("post_self_attn_layernorm", "post_mlp_layernorm"),
        rope=(),
    ),
}

MLP_CLS = {"swiglu": LigerSwiGLUMLP, "phi3": LigerPhi3SwiGLUMLP, "geglu": LigerGEGLUMLP}


def import_modeling(name: str):
    """A transformers modeling module, with a clear error when this transformers lacks it."""
    try:
        return importlib.import_module(name)
    except ImportError as e:  # pragma: no cover - depends on the installed transformers
        try:
            import transformers

            have = f"transformers {transformers.__version__} is installed"
        except ImportError:
            have = "transformers is not installed"
        raise ImportError(
            f"liger_cpp: cannot import {name} ({have}; liger_cpp's patching follows transformers "
            f"5.17-5.24, and a model type newer than the installed transformers is absent): {e}"
        ) from e


# The newer families' rows (imported here, after Spec and the helpers they use are defined).
from liger_cpp.transformers.monkey_patch.specs_multimodal import MULTIMODAL_SPECS  # noqa: E402
from liger_cpp.transformers.monkey_patch.specs_text import MLP_KINDS, TEXT_SPECS  # noqa: E402

SPECS.update(TEXT_SPECS)
SPECS.update(MULTIMODAL_SPECS)
MLP_CLS.update(MLP_KINDS)
