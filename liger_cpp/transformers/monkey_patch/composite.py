"""Composite multimodal models built from other model types (LLaVA, InternVL, SmolVLM, PaliGemma):
their language model (and a vision tower of a type liger_cpp patches, e.g. Pixtral) are patched by
those types' own apply functions, with the flags those take (as Liger-Kernel does); the composite's
own vision norms and LayerNorms, and its ``*ForConditionalGeneration.forward`` (the fused linear
cross entropy), here.

Instance patching is all or nothing: when a tower's patching fails, everything already converted in
the model is reverted before the error propagates."""

import inspect
import types
import warnings
from dataclasses import dataclass

from torch import nn

from liger_cpp.transformers.causal_lm import LossSpec, make_forward
from liger_cpp.transformers.layer_norm import LigerNNLayerNorm
from liger_cpp.transformers.monkey_patch.class_level import _TorchNNWithLigerLayerNorm
from liger_cpp.transformers.monkey_patch.core import check_flags
from liger_cpp.transformers.monkey_patch.instance import _norm_convert, _swap_class
from liger_cpp.transformers.monkey_patch.revert import base_model, original, revert_instance, set_patched
from liger_cpp.transformers.monkey_patch.specs import _M, import_modeling
from liger_cpp.transformers.rms_norm import LigerRMSNorm


@dataclass(frozen=True)
class Composite:
    """A composite model type: its modeling module, the model class(es) with the loss path, and
    where its towers are (attributes of the inner ``*Model`` at ``model.model``)."""

    module: str
    lm: tuple  # ((class name, LossSpec), ...)
    text: str  # attribute of the inner model holding the language model
    vision: str  # attribute of the inner model holding the vision tower
    norms: tuple = ()  # ((module, class name), ...) RMSNorm classes of its own vision tower
    layer_norm: tuple = ()  # ((module, attr), ...) as Spec.layer_norm, for class-level layer_norm


# PaliGemma's forward applies the text config's softcap in transformers 5.24, not in 5.17: the probe decides.
_SOFTCAP_IF_ANY = LossSpec(
    softcap=lambda c: getattr(c.get_text_config(), "final_logit_softcapping", None), softcap_optional=True
)

COMPOSITES = {
    "llava": Composite(
        _M.format("llava"), (("LlavaForConditionalGeneration", LossSpec()),), "language_model", "vision_tower"
    ),
    "internvl": Composite(
        _M.format("internvl"),
        (("InternVLForConditionalGeneration", LossSpec()),),
        "language_model",
        "vision_tower",
        norms=((_M.format("internvl"), "InternVLVisionRMSNorm"),),
        layer_norm=((_M.format("internvl"), "nn"),),
    ),
    "smolvlm": Composite(
        _M.format("smolvlm"),
        (("SmolVLMForConditionalGeneration", LossSpec()),),
        "text_model",
        "vision_model",
        layer_norm=((_M.format("smolvlm"), "nn"),),
    ),
    "paligemma": Composite(
        _M.format("paligemma"),
        (("PaliGemmaForConditionalGeneration", _SOFTCAP_IF_ANY),),
        "language_model",
        "vision_tower",
        layer_norm=((_M.format("siglip"), "nn"),),
    ),
}


def _flags_of(fn) -> set:
    return {
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.name != "model" and p.kind is not p.VAR_KEYWORD
    }


def _call_tower(fn, tower, flags: dict, what: str) -> None:
    """fn(model=tower, **the flags fn takes), with the loss flags off (the composite owns the loss)."""
    takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    accepted = _flags_of(fn)
    kw = {k: v for k, v in flags.items() if takes_any or k in accepted}
    for loss_flag in ("cross_entropy", "fused_linear_cross_entropy"):
        if loss_flag in accepted:
            kw[loss_flag] = False
    dropped = sorted(set(flags) - set(kw) - {"cross_entropy", "fused_linear_cross_entropy"})
    if dropped:
        warnings.warn(
            f"liger_cpp: flag(s) {dropped} do not apply to the {what} ({fn.__name__}); ignored.", stacklevel=4
        )
    fn(model=tower, **kw)


def _own_vision(tower, comp: Composite, rms_norm: bool, layer_norm: bool) -> None:
    """The composite's own vision tower: its RMSNorm classes -> LigerRMSNorm, nn.LayerNorm ->
    LigerNNLayerNorm (all checks first)."""
    classes = tuple(original(import_modeling(m), n) for m, n in comp.norms) if rms_norm else ()
    todo = []
    for name, m in tower.named_modules():
        if classes and type(m) in classes:
            try:
                todo.append(_norm_convert(m, LigerRMSNorm))
            except ValueError as e:
                raise ValueError(f"liger_cpp: {name}: {e}") from None
        elif layer_norm and type(m) is nn.LayerNorm:
            todo.append(lambda m=m: _swap_class(m, LigerNNLayerNorm))
    for apply in todo:
        apply()


def patch_composite(
    model_type: str,
    model,
    cross_entropy: bool,
    fused_linear_cross_entropy: bool,
    tower_flags: dict,
    rms_norm: bool = False,
    layer_norm: bool = False,
    class_types: tuple = (),
) -> None:
    """Class level (model None): the composite's forward, its own vision classes, and the class-level
    patches of `class_types` (the text types its configs can hold: PaliGemma's Gemma / Gemma 2).
    Instance: the language model and the vision tower through their types' apply functions (with
    `tower_flags`, filtered to what each takes), the own vision norms (rms_norm) and LayerNorms
    (layer_norm), the forward."""
    from liger_cpp.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN  # (cycle)

    mode = check_flags(model_type, cross_entropy, fused_linear_cross_entropy)
    comp = COMPOSITES[model_type]
    mod = import_modeling(comp.module)
    if model is None:
        for t in class_types:
            _call_tower(MODEL_TYPE_TO_APPLY_LIGER_FN[t], None, tower_flags, f"{t} text classes")
        if rms_norm:
            for m, n in comp.norms:
                set_patched(model_type, import_modeling(m), n, LigerRMSNorm)
        if layer_norm:
            for m, attr in comp.layer_norm:
                set_patched(model_type, import_modeling(m), attr, _TorchNNWithLigerLayerNorm())
        if model_type == "internvl" and (rms_norm or layer_norm):
            # NORM2FN maps config.norm_type to the class at import: rebind the table too.
            table = dict(mod.NORM2FN)
            if rms_norm:
                table["rms_norm"] = LigerRMSNorm
            if layer_norm:
                table["layer_norm"] = LigerNNLayerNorm
            set_patched(model_type, mod, "NORM2FN", table)
        if mode:
            for cls_name, loss_spec in comp.lm:
                cls = getattr(mod, cls_name)
                set_patched(
                    model_type, cls, "forward", make_forward(original(cls, "forward"), mode, loss_spec)
                )
        return
    base = base_model(model)
    cls_name, loss_spec = comp.lm[0]
    if not isinstance(base, original(mod, cls_name)):
        raise ValueError(f"liger_cpp: expected a transformers {cls_name}, got {type(model).__name__}")
    inner = base.model
    text, vision = getattr(inner, comp.text, None), getattr(inner, comp.vision, None)
    try:
        text_type = getattr(getattr(text, "config", None), "model_type", None)
        text_fn = MODEL_TYPE_TO_APPLY_LIGER_FN.get(text_type)
        if text_fn is None:
            warnings.warn(
                f"liger_cpp: no Liger kernels for the {model_type} language model type {text_type!r}; "
                "it stays Hugging Face's.",
                stacklevel=3,
            )
        else:
            _call_tower(text_fn, text, tower_flags, f"{model_type} language model ({text_type})")
        vision_type = getattr(getattr(vision, "config", None), "model_type", None)
        vision_fn = MODEL_TYPE_TO_APPLY_LIGER_FN.get(vision_type)
        if vision_fn is not None:
            _call_tower(vision_fn, vision, tower_flags, f"{model_type} vision tower ({vision_type})")
        if vision is not None and (comp.norms or layer_norm):
            _own_vision(vision, comp, rms_norm, layer_norm)
        if layer_norm and model_type == "internvl":
            _own_vision(inner.multi_modal_projector, comp, False, True)
        if mode is not None:
            fwd = make_forward(type(base).forward, mode, loss_spec)
            base.__dict__["forward"] = types.MethodType(fwd, base)
    except BaseException:
        revert_instance(model)
        raise
