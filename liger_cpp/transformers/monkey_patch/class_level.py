"""Class-level patching (``model=None``): names in the transformers modeling module are rebound, so
models built afterwards get liger_cpp's modules and the model classes' forward gets liger_cpp's loss
path. Also RoPE (a module function, patched this way in both modes) and the liger subclasses of
Hugging Face's fused experts classes, shared with instance patching."""

import types
import warnings

import torch

from liger_cpp.transformers.attention import fused_projections_forward, structure
from liger_cpp.transformers.causal_lm import make_forward
from liger_cpp.transformers.layer_norm import LigerNNLayerNorm
from liger_cpp.transformers.moe import (
    LigerExpertsSwiGLUMixin,
    LigerGptOssExpertsMixin,
    LigerLlama4TextMoeMixin,
)
from liger_cpp.transformers.monkey_patch.revert import original, set_patched
from liger_cpp.transformers.monkey_patch.specs import MLP_CLS, ROPE_IMPLS, Spec, import_modeling

# (module name, class name) -> liger subclass of HF's experts class (made once, reused).
_EXPERT_CLASSES: dict = {}
# experts kinds -> the mixin whose forward runs liger_cpp's fused experts op
EXPERT_MIXINS = {
    "experts": LigerExpertsSwiGLUMixin,
    "experts_gpt_oss": LigerGptOssExpertsMixin,
    "moe_llama4": LigerLlama4TextMoeMixin,  # the whole MoE block: HF's experts run every token
}


def experts_class(mod, name, kind="experts"):
    """The liger_cpp subclass of the modeling module's fused experts class `name`."""
    key = (mod.__name__, name)
    if key not in _EXPERT_CLASSES:
        base = original(mod, name)
        mixin = EXPERT_MIXINS[kind]
        _EXPERT_CLASSES[key] = type(
            f"Liger{base.__name__}",
            (mixin, base),
            {"__module__": __name__, "__doc__": mixin.__doc__},
        )
    return _EXPERT_CLASSES[key]


class _TorchNNWithLigerLayerNorm(types.ModuleType):
    """``torch.nn`` as one modeling module sees it after class-level ``layer_norm=True``: LayerNorm
    is LigerNNLayerNorm, every other name is torch.nn's. torch.nn itself is untouched."""

    def __init__(self):
        super().__init__("torch.nn")
        self.LayerNorm = LigerNNLayerNorm

    def __getattr__(self, name):
        return getattr(torch.nn, name)


def check_rope(model_type: str, spec: Spec) -> None:
    if not spec.rope:
        raise NotImplementedError(
            f"liger_cpp: rope=True is not supported for {model_type}: "
            + (
                spec.no_rope
                or "its RoPE is interleaved / partial, unlike liger_cpp's rotate-half kernel; "
                "pass rope=False."
            )
        )


def liger_mlp_class(mod, name: str, kind: str, cls):
    """The liger_cpp class replacing the modeling module's MLP class `name` of this kind."""
    if cls is not None:
        return cls
    return experts_class(mod, name, kind) if kind in EXPERT_MIXINS else MLP_CLS[kind]


def patch_rope(model_type: str, spec: Spec, mod) -> None:
    check_rope(model_type, spec)
    found = [(fn, kind) for fn, kind in spec.rope if callable(vars(mod).get(fn))]
    if not found:
        warnings.warn(
            f"liger_cpp: {spec.module} has none of {[fn for fn, _ in spec.rope]}; RoPE is not patched.",
            UserWarning,
            stacklevel=4,
        )
    for fn, kind in found:
        set_patched(model_type, mod, fn, ROPE_IMPLS[kind])
    if ("apply_rotary_pos_emb", "rope") in found:
        patch_llama_attention(model_type, mod)


def patch_llama_attention(model_type: str, mod) -> None:
    """The module's Llama-structured attention classes get the forward that computes q, k, v with
    liger_cpp's qkv_rope op where it applies (liger_cpp/transformers/attention.py)."""
    for name, cls in list(vars(mod).items()):
        if not (isinstance(cls, type) and name.endswith("Attention") and cls.__module__ == mod.__name__):
            continue
        hf_forward = original(cls, "forward")
        kind = structure(name, hf_forward) if "forward" in vars(cls) else None
        if kind is not None:
            set_patched(model_type, cls, "forward", fused_projections_forward(hf_forward, mod, kind))


def patch_classes(model_type: str, spec: Spec, mod, rms_norm, mlp, layer_norm, mode) -> None:
    """Rebind the modeling module's classes (and the model classes' forward) for later models."""
    if rms_norm:
        for name, cls in spec.norm_classes():
            set_patched(model_type, mod, name, cls)
    if mlp:
        for name, kind, cls in spec.mlp_classes():
            set_patched(model_type, mod, name, liger_mlp_class(mod, name, kind, cls))
    if layer_norm:
        for mod_name, attr in spec.layer_norm:
            owner = import_modeling(mod_name)
            value = _TorchNNWithLigerLayerNorm() if attr == "nn" else LigerNNLayerNorm
            set_patched(model_type, owner, attr, value)
    if mode:
        for cls_name, loss_spec in spec.lm:
            cls = getattr(mod, cls_name)
            set_patched(model_type, cls, "forward", make_forward(original(cls, "forward"), mode, loss_spec))
