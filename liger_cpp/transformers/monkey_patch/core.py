"""The one entry of every apply function (``_patch``): the flag checks, then instance or class-level
patching of one model type's ``Spec``."""

import warnings

from liger_cpp.transformers.monkey_patch.class_level import check_rope, patch_classes, patch_rope
from liger_cpp.transformers.monkey_patch.instance import patch_instance
from liger_cpp.transformers.monkey_patch.revert import original
from liger_cpp.transformers.monkey_patch.specs import SPECS, import_modeling


def check_flags(model_type: str, cross_entropy, fused_linear_cross_entropy) -> str:
    """The loss mode ("flce", "ce" or None); both True is a ValueError."""
    if cross_entropy and fused_linear_cross_entropy:
        raise ValueError(
            "liger_cpp: cross_entropy and fused_linear_cross_entropy cannot both be True "
            f"(apply_liger_kernel_to_{model_type}: pass one of them False)."
        )
    return "flce" if fused_linear_cross_entropy else "ce" if cross_entropy else None


def _patch(
    model_type: str, model, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, mlp, layer_norm=False
):
    """Checks every flag against what the model type's modeling module has (a flag it cannot honour
    is a NotImplementedError naming it, before anything changes), then instance or class-level
    patching, then RoPE (a module function)."""
    mode = check_flags(model_type, cross_entropy, fused_linear_cross_entropy)
    spec = SPECS[model_type]
    mod = import_modeling(spec.module)
    if mlp and not spec.mlp_classes():
        raise NotImplementedError(
            f"liger_cpp: {spec.mlp_flag}=True is not supported for {model_type}: "
            + (spec.no_mlp or f"it has no MLP liger_cpp patches. Pass {spec.mlp_flag}=False.")
        )
    if layer_norm and not spec.layer_norm:
        raise NotImplementedError(f"liger_cpp: layer_norm=True is not supported for {model_type}")
    names = tuple(n for n, _ in spec.norm_classes()) if rms_norm else ()
    names += tuple(n for n, _, _ in spec.mlp_classes()) if mlp else ()
    names += tuple(n for n, _ in spec.lm) if mode else ()
    for name in names:
        if not isinstance(original(mod, name), type):
            raise ValueError(
                f"liger_cpp: {spec.module}.{name} is not a class; unsupported transformers version?"
            )
    if rope and not spec.rope and spec.rope_warns:
        warnings.warn(
            f"liger_cpp: rope=True does nothing for {model_type}: {spec.no_rope}", UserWarning, stacklevel=3
        )
        rope = False
    if rope:
        check_rope(model_type, spec)  # raises before anything changes
    if model is not None:
        patch_instance(model_type, spec, model, rms_norm, mlp, layer_norm, mode)
    else:
        patch_classes(model_type, spec, mod, rms_norm, mlp, layer_norm, mode)
    if rope:
        patch_rope(model_type, spec, mod)
