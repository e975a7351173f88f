"""Hugging Face transformers (5.x) integration with Liger-Kernel's names: ``apply_liger_kernel_to_*``.

What is patched today: RMSNorm (every RMSNorm of the decoder, incl. Qwen3/OLMo2/Gemma3 q/k norms)
and the gated MLP (SwiGLU, Phi-3's fused SwiGLU, Gemma's GeGLU, Mixtral's eager experts loop).
RoPE, cross entropy and fused linear cross entropy have no liger_cpp kernel yet: asking for them
warns and keeps Hugging Face's implementation.

Two ways, as in Liger-Kernel:

* class level (``model=None``): the modeling module's RMSNorm / MLP classes are replaced, so models
  built afterwards get liger_cpp modules; ``revert_liger_kernel()`` restores the originals;
* instance level (``model=...``): the modules of an already built model are converted in place
  (their class is swapped, so the very same Parameter objects, hooks and PEFT wrappers stay).
"""

import importlib
import inspect
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

from torch import nn

from liger_cpp.transformers.geglu import LigerGEGLUMLP, gelu_approximate
from liger_cpp.transformers.rms_norm import (
    LigerRMSNorm,
    LigerRMSNormForGemma,
    LigerRMSNormForGemma2,
    LigerRMSNormForGemma3,
    LigerRMSNormForOlmo2,
)
from liger_cpp.transformers.swiglu import (
    LigerExpertsSwiGLUMixin,
    LigerPhi3SwiGLUMLP,
    LigerSwiGLUMLP,
    _check_act,
)

_UNAVAILABLE = ("rope", "cross_entropy", "fused_linear_cross_entropy")


@dataclass(frozen=True)
class _Spec:
    module: str  # transformers modeling module
    norm: str  # RMSNorm class name in that module
    norm_cls: type  # liger_cpp class replacing it
    mlp: str  # MLP (or experts) class name
    mlp_kind: str  # "swiglu" | "phi3" | "geglu" | "experts"
    mlp_flag: str  # "swiglu" | "geglu"
    norm_attrs: tuple  # decoder-layer norm attribute names
    attn_norm_attrs: tuple = ()  # self_attn norm attribute names (q_norm, k_norm)


_M = "transformers.models.{0}.modeling_{0}"
_LLAMA_NORMS = ("input_layernorm", "post_attention_layernorm")
_SANDWICH = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)

_SPECS = {
    "llama": _Spec(
        _M.format("llama"), "LlamaRMSNorm", LigerRMSNorm, "LlamaMLP", "swiglu", "swiglu", _LLAMA_NORMS
    ),
    "mistral": _Spec(
        _M.format("mistral"), "MistralRMSNorm", LigerRMSNorm, "MistralMLP", "swiglu", "swiglu", _LLAMA_NORMS
    ),
    "mixtral": _Spec(
        _M.format("mixtral"),
        "MixtralRMSNorm",
        LigerRMSNorm,
        "MixtralExperts",
        "experts",
        "swiglu",
        _LLAMA_NORMS,
    ),
    "gemma": _Spec(
        _M.format("gemma"), "GemmaRMSNorm", LigerRMSNormForGemma, "GemmaMLP", "geglu", "geglu", _LLAMA_NORMS
    ),
    "gemma2": _Spec(
        _M.format("gemma2"), "Gemma2RMSNorm", LigerRMSNormForGemma2, "Gemma2MLP", "geglu", "geglu", _SANDWICH
    ),
    "gemma3_text": _Spec(
        _M.format("gemma3"),
        "Gemma3RMSNorm",
        LigerRMSNormForGemma3,
        "Gemma3MLP",
        "geglu",
        "geglu",
        _SANDWICH,
        ("q_norm", "k_norm"),
    ),
    "qwen2": _Spec(
        _M.format("qwen2"), "Qwen2RMSNorm", LigerRMSNorm, "Qwen2MLP", "swiglu", "swiglu", _LLAMA_NORMS
    ),
    "qwen3": _Spec(
        _M.format("qwen3"),
        "Qwen3RMSNorm",
        LigerRMSNorm,
        "Qwen3MLP",
        "swiglu",
        "swiglu",
        _LLAMA_NORMS,
        ("q_norm", "k_norm"),
    ),
    "phi3": _Spec(_M.format("phi3"), "Phi3RMSNorm", LigerRMSNorm, "Phi3MLP", "phi3", "swiglu", _LLAMA_NORMS),
    "granite": _Spec(
        _M.format("granite"), "GraniteRMSNorm", LigerRMSNorm, "GraniteMLP", "swiglu", "swiglu", _LLAMA_NORMS
    ),
    "olmo2": _Spec(
        _M.format("olmo2"),
        "Olmo2RMSNorm",
        LigerRMSNormForOlmo2,
        "Olmo2MLP",
        "swiglu",
        "swiglu",
        ("post_attention_layernorm", "post_feedforward_layernorm"),
        ("q_norm", "k_norm"),
    ),
}

_MLP_CLS = {"swiglu": LigerSwiGLUMLP, "phi3": LigerPhi3SwiGLUMLP, "geglu": LigerGEGLUMLP}

# (module name, attribute) -> original object, for revert_liger_kernel().
_ORIGINALS: dict = {}
# (module name, class name) -> liger subclass of HF's experts class (made once, reused).
_EXPERT_CLASSES: dict = {}


def _import(spec: _Spec):
    try:
        return importlib.import_module(spec.module)
    except ImportError as e:  # pragma: no cover - depends on the installed transformers
        raise ImportError(
            f"liger_cpp: cannot import {spec.module} (is transformers>=5 installed?): {e}"
        ) from e


def _original(mod, name):
    return _ORIGINALS.get((mod.__name__, name), getattr(mod, name))


def _set(mod, name, value):
    _ORIGINALS.setdefault((mod.__name__, name), getattr(mod, name))
    setattr(mod, name, value)


def _experts_class(mod, name):
    key = (mod.__name__, name)
    if key not in _EXPERT_CLASSES:
        base = _original(mod, name)
        _EXPERT_CLASSES[key] = type(
            f"Liger{base.__name__}",
            (LigerExpertsSwiGLUMixin, base),
            {"__module__": __name__, "__doc__": LigerExpertsSwiGLUMixin.__doc__},
        )
    return _EXPERT_CLASSES[key]


def _warn_unavailable(model_type: str, flags: dict) -> None:
    if flags.get("cross_entropy") and flags.get("fused_linear_cross_entropy"):
        raise ValueError("cross_entropy and fused_linear_cross_entropy cannot both be True.")
    asked = [f for f in _UNAVAILABLE if flags.get(f)]
    if asked:
        warnings.warn(
            f"liger_cpp: {', '.join(asked)} requested for {model_type}, but this liger_cpp version has "
            f"no such kernel; Hugging Face's implementation is kept (not patched). Pass "
            f"{', '.join(f + '=False' for f in asked)} to silence this warning.",
            UserWarning,
            stacklevel=3,
        )


# --------------------------------------------------------------------------------------------
# instance patching


def _unwrap_peft(module):
    """PEFT's ModulesToSaveWrapper keeps the original module and trainable copies: patch them all."""
    if hasattr(module, "original_module") and hasattr(module, "modules_to_save"):
        return [module.original_module, *module.modules_to_save.values()]
    return [module]


def _norm_convert(module, liger_cls):
    w = getattr(module, "weight", None)
    if not isinstance(w, nn.Parameter) or w.dim() != 1:
        raise ValueError(f"expected an RMSNorm with a 1-D weight Parameter, got {type(module).__name__}")
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if eps is None:
        raise ValueError(f"{type(module).__name__} has no eps / variance_epsilon attribute")
    defaults = {k: p.default for k, p in inspect.signature(liger_cls.__init__).parameters.items()}

    def apply():
        module.__class__ = liger_cls
        module.hidden_size = w.shape[0]
        module.elementwise_affine = True
        module.variance_epsilon = eps
        module.offset = defaults["offset"]
        module.casting_mode = defaults["casting_mode"]
        module.in_place = defaults["in_place"]

    return apply


def _mlp_convert(module, kind, config, experts_cls=None):
    if kind == "experts":
        for a in ("gate_up_proj", "down_proj", "num_experts"):
            if not hasattr(module, a):
                raise ValueError(f"expected fused experts with {a!r}, got {type(module).__name__}")
        _check_act(config)
        return lambda: setattr(module, "__class__", experts_cls)
    names = ("gate_up_proj", "down_proj") if kind == "phi3" else ("gate_proj", "up_proj", "down_proj")
    for a in names:
        if not isinstance(getattr(module, a, None), nn.Module):
            raise ValueError(f"expected an MLP with {names}, got {type(module).__name__}")
    if kind == "geglu":
        approximate = gelu_approximate(config)
    else:
        _check_act(config)
    liger_cls = _MLP_CLS[kind]

    def apply():
        module.__class__ = liger_cls
        module.config = config
        module.hidden_size = config.hidden_size
        module.intermediate_size = config.intermediate_size
        if kind != "phi3":
            module.in_place = False
        if kind == "geglu":
            module.approximate = approximate

    return apply


def _decoder(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, getattr(base, "base_model_prefix", "model"), base)
    if not isinstance(getattr(inner, "layers", None), nn.ModuleList):
        inner = base
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"liger_cpp: {type(model).__name__} has no decoder `layers` ModuleList to patch")
    return inner, layers


def _patch_instance(model_type: str, model, rms_norm: bool, mlp: bool) -> None:
    spec = _SPECS[model_type]
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "hidden_size"):
        raise ValueError(
            f"liger_cpp: expected a transformers {model_type} model (with .config and decoder `layers`), "
            f"got {type(model).__name__}"
        )
    inner, layers = _decoder(model)
    experts_cls = _experts_class(_import(spec), spec.mlp) if spec.mlp_kind == "experts" else None
    todo = []  # every check first, then every change: never a half-patched model

    def norm(owner, attr, where):
        m = getattr(owner, attr, None)
        if not isinstance(m, nn.Module):
            raise ValueError(
                f"liger_cpp: {type(model).__name__}: {where}.{attr} is missing; not a {model_type} model?"
            )
        for sub in _unwrap_peft(m):
            if not isinstance(sub, spec.norm_cls):
                try:
                    todo.append(_norm_convert(sub, spec.norm_cls))
                except ValueError as e:
                    raise ValueError(f"liger_cpp: {where}.{attr}: {e}") from None

    for i, layer in enumerate(layers):
        where = f"layers[{i}]"
        if rms_norm:
            for attr in spec.norm_attrs:
                norm(layer, attr, where)
            for attr in spec.attn_norm_attrs:
                norm(getattr(layer, "self_attn", None), attr, where + ".self_attn")
        if mlp:
            owner, attr = layer, "mlp"
            if spec.mlp_kind == "experts":
                owner = getattr(layer, "mlp", None)
                attr = "experts"
                where += ".mlp"
            m = getattr(owner, attr, None)
            if not isinstance(m, nn.Module):
                raise ValueError(
                    f"liger_cpp: {type(model).__name__}: {where}.{attr} is missing; not a {model_type} model?"
                )
            for sub in _unwrap_peft(m):
                if isinstance(sub, (LigerExpertsSwiGLUMixin, *_MLP_CLS.values())):
                    continue
                try:
                    todo.append(_mlp_convert(sub, spec.mlp_kind, config, experts_cls))
                except ValueError as e:
                    raise ValueError(f"liger_cpp: {where}.{attr}: {e}") from None
    if rms_norm:
        norm(inner, "norm", "model")
    if (
        mlp
        and spec.mlp_kind == "experts"
        and getattr(config, "_experts_implementation", None) not in (None, "eager")
    ):
        warnings.warn(
            f"liger_cpp: this model uses experts_implementation={config._experts_implementation!r}; "
            "the liger_cpp SwiGLU runs only in the eager experts loop, so Hugging Face's experts "
            "forward is kept (load with experts_implementation='eager' to use it).",
            UserWarning,
            stacklevel=3,
        )
    for apply in todo:
        apply()


# --------------------------------------------------------------------------------------------
# class-level patching


def _patch(model_type: str, flags: dict, model, rms_norm: bool, mlp: bool) -> None:
    _warn_unavailable(model_type, flags)
    spec = _SPECS[model_type]
    if model is not None:
        _patch_instance(model_type, model, rms_norm, mlp)
        return
    mod = _import(spec)
    for name in ((spec.norm,) if rms_norm else ()) + ((spec.mlp,) if mlp else ()):
        if not isinstance(_original(mod, name), type):
            raise ValueError(
                f"liger_cpp: {spec.module}.{name} is not a class; unsupported transformers version?"
            )
    if rms_norm:
        _set(mod, spec.norm, spec.norm_cls)
    if mlp:
        _set(
            mod,
            spec.mlp,
            _experts_class(mod, spec.mlp) if spec.mlp_kind == "experts" else _MLP_CLS[spec.mlp_kind],
        )


def revert_liger_kernel(model_type: Optional[str] = None) -> None:
    """Undo class-level patching (all model types, or one). Instance-patched models stay patched."""
    if model_type is not None and model_type not in _SPECS:
        raise ValueError(f"liger_cpp: unknown model_type {model_type!r}; supported: {sorted(_SPECS)}")
    modules = {_SPECS[model_type].module} if model_type else {k[0] for k in _ORIGINALS}
    for key in [k for k in _ORIGINALS if k[0] in modules]:
        setattr(importlib.import_module(key[0]), key[1], _ORIGINALS.pop(key))


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
    """Llama: RMSNorm (casting_mode "llama") and LlamaMLP -> LigerSwiGLUMLP."""
    _patch("llama", locals(), model, rms_norm, swiglu)


def apply_liger_kernel_to_mistral(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Mistral: RMSNorm and MistralMLP -> LigerSwiGLUMLP."""
    _patch("mistral", locals(), model, rms_norm, swiglu)


def apply_liger_kernel_to_mixtral(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Mixtral: RMSNorm and the fused MixtralExperts (eager experts loop with liger_cpp's SwiGLU)."""
    _patch("mixtral", locals(), model, rms_norm, swiglu)


def apply_liger_kernel_to_gemma(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma: RMSNorm (offset 1, casting "gemma") and GemmaMLP -> LigerGEGLUMLP."""
    _patch("gemma", locals(), model, rms_norm, geglu)


def apply_liger_kernel_to_gemma2(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma 2: RMSNorm (Gemma's, never in place) and Gemma2MLP -> LigerGEGLUMLP."""
    _patch("gemma2", locals(), model, rms_norm, geglu)


def apply_liger_kernel_to_gemma3_text(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma 3 text: RMSNorm (incl. q/k norms; Gemma's, never in place) and Gemma3MLP -> LigerGEGLUMLP."""
    _patch("gemma3_text", locals(), model, rms_norm, geglu)


def apply_liger_kernel_to_qwen2(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen2: RMSNorm and Qwen2MLP -> LigerSwiGLUMLP."""
    _patch("qwen2", locals(), model, rms_norm, swiglu)


def apply_liger_kernel_to_qwen3(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen3: RMSNorm (incl. q/k norms) and Qwen3MLP -> LigerSwiGLUMLP."""
    _patch("qwen3", locals(), model, rms_norm, swiglu)


def apply_liger_kernel_to_phi3(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Phi-3: RMSNorm and Phi3MLP -> LigerPhi3SwiGLUMLP."""
    _patch("phi3", locals(), model, rms_norm, swiglu)


def apply_liger_kernel_to_granite(
    rope: bool = True,
    cross_entropy: bool = True,
    fused_linear_cross_entropy: bool = False,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Granite: RMSNorm and GraniteMLP -> LigerSwiGLUMLP. (Liger's defaults: cross_entropy=True,
    fused_linear_cross_entropy=False, since Granite scales its logits.)"""
    _patch("granite", locals(), model, rms_norm, swiglu)


def apply_liger_kernel_to_olmo2(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """OLMo 2: RMSNorm (incl. q/k norms; never in place) and Olmo2MLP -> LigerSwiGLUMLP."""
    _patch("olmo2", locals(), model, rms_norm, swiglu)


MODEL_TYPE_TO_APPLY_LIGER_FN: dict[str, Callable] = {
    "llama": apply_liger_kernel_to_llama,
    "mistral": apply_liger_kernel_to_mistral,
    "mixtral": apply_liger_kernel_to_mixtral,
    "gemma": apply_liger_kernel_to_gemma,
    "gemma2": apply_liger_kernel_to_gemma2,
    "gemma3_text": apply_liger_kernel_to_gemma3_text,
    "qwen2": apply_liger_kernel_to_qwen2,
    "qwen3": apply_liger_kernel_to_qwen3,
    "phi3": apply_liger_kernel_to_phi3,
    "granite": apply_liger_kernel_to_granite,
    "olmo2": apply_liger_kernel_to_olmo2,
}


def _flags(apply_fn) -> set:
    return {k for k in inspect.signature(apply_fn).parameters if k != "model"}


def _check_flags(model_type: str, apply_fn, kwargs: dict) -> None:
    unknown = sorted(set(kwargs) - _flags(apply_fn))
    if unknown:
        raise TypeError(
            f"liger_cpp: unknown flag(s) {unknown} for {model_type}; accepted: {sorted(_flags(apply_fn))}"
        )


def _apply_fn_for(model_type, kwargs: dict, outcome: str):
    """The apply function for model_type after checking the flags, or None (with a warning)
    when the type is unsupported."""
    if not model_type or model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        warnings.warn(
            f"liger_cpp: no Liger kernels for model_type {model_type!r}; {outcome}. "
            f"Supported: {sorted(MODEL_TYPE_TO_APPLY_LIGER_FN)}",
            UserWarning,
            stacklevel=3,
        )
        return None
    apply_fn = MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]
    _check_flags(model_type, apply_fn, kwargs)
    return apply_fn


def _apply_liger_kernel(model_type: str, **kwargs) -> None:
    """Class-level patching by model_type. Unsupported types warn and patch nothing; unknown flags
    are a TypeError."""
    apply_fn = _apply_fn_for(model_type, kwargs, "nothing patched")
    if apply_fn is not None:
        apply_fn(**kwargs)


def _apply_liger_kernel_to_instance(model, **kwargs) -> None:
    """Instance patching of a built model, by model.config.model_type."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    apply_fn = _apply_fn_for(model_type, kwargs, "model left unpatched")
    if apply_fn is not None:
        apply_fn(model=model, **kwargs)


__all__ = [
    "MODEL_TYPE_TO_APPLY_LIGER_FN",
    "_apply_liger_kernel",
    "_apply_liger_kernel_to_instance",
    "revert_liger_kernel",
    *(fn.__name__ for fn in MODEL_TYPE_TO_APPLY_LIGER_FN.values()),
]
