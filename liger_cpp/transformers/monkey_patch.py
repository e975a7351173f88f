"""Hugging Face transformers (5.x) integration with Liger-Kernel's names: ``apply_liger_kernel_to_*``.

What each flag patches (per model type, see ``_SPECS``):

* ``rms_norm``: every RMSNorm of the model (decoder, q/k norms, vision / projector norms of the
  same class) -> ``LigerRMSNorm`` (Gemma's offset / casting where the model has them);
* ``swiglu`` / ``geglu``: the gated MLP (SwiGLU, fused gate_up SwiGLU of Phi-3 / GLM-4, Gemma's GeGLU,
  the eager experts loop of Mixtral / Qwen3-MoE and Qwen3-MoE's dense MLP);
* ``layer_norm`` (mllama, gemma3, qwen2_vl): the vision tower's ``nn.LayerNorm`` ->
  ``LigerNNLayerNorm`` (class level: only inside the modeling module, never ``torch.nn`` itself);
* ``rope``: the modeling module's ``apply_rotary_pos_emb`` (and Qwen2-VL's
  ``apply_multimodal_rotary_pos_emb`` where the transformers version has it). Phi-3's partial rotary
  goes through ``liger_partial_rotary_pos_emb``; GLM-4's interleaved partial RoPE is not supported.
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
"""

import importlib
import inspect
import types
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from liger_cpp.transformers.causal_lm import LossSpec, liger_fn, make_forward
from liger_cpp.transformers.geglu import LigerGEGLUMLP, gelu_approximate
from liger_cpp.transformers.layer_norm import LigerNNLayerNorm
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
    LigerQwen3MoeSwiGLUMLP,
    LigerSwiGLUMLP,
    _check_act,
)


@dataclass(frozen=True)
class _Spec:
    module: str  # transformers modeling module
    norm: str  # RMSNorm class name in that module
    norm_cls: type  # liger_cpp class replacing it
    mlp: str  # MLP (or experts) class name
    mlp_kind: str  # "swiglu" | "phi3" | "geglu" | "experts"
    norm_attrs: tuple  # decoder-layer norm attribute names
    attn_norm_attrs: tuple = ()  # self_attn norm attribute names (q_norm, k_norm)
    dense_mlp: Optional[tuple] = None  # MoE models: (class name, liger class) of the dense-layer MLP
    rope: tuple = ()  # (function name, "rope" | "partial" | "mrope"); () = RoPE not supported
    lm: tuple = ()  # (model class name, LossSpec) whose forward gets the loss path
    layer_norm: tuple = ()  # (module, name) bound to nn.LayerNorm ("nn": the module's torch.nn)


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
    return _Spec(
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

_SPECS = {
    "llama": _simple("llama", "Llama"),
    "mllama": _Spec(
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
    "mixtral": _Spec(
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
    "qwen2_vl": _Spec(
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
    "qwen2_5_vl": _Spec(
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
    "qwen3_moe": _Spec(
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
    "phi3": _simple("phi3", "Phi3", "phi3", rope=(("apply_rotary_pos_emb", "partial"),)),
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

_MLP_CLS = {"swiglu": LigerSwiGLUMLP, "phi3": LigerPhi3SwiGLUMLP, "geglu": LigerGEGLUMLP}

_MISSING = object()
# (owner key, attribute) -> (owner, original value or _MISSING), for revert_liger_kernel().
_ORIGINALS: dict = {}
# model_type -> keys of _ORIGINALS its apply function set.
_PATCHED_BY: dict = {}
# (module name, class name) -> liger subclass of HF's experts class (made once, reused).
_EXPERT_CLASSES: dict = {}


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:  # pragma: no cover - depends on the installed transformers
        raise ImportError(f"liger_cpp: cannot import {name} (is transformers>=5 installed?): {e}") from e


def _key(owner) -> str:
    return (
        owner.__name__ if isinstance(owner, types.ModuleType) else f"{owner.__module__}.{owner.__qualname__}"
    )


def _original(owner, name):
    """HF's value of owner.name, also when liger_cpp has rebound it."""
    saved = _ORIGINALS.get((_key(owner), name))
    if saved is None:
        return getattr(owner, name)
    return getattr(owner, name) if saved[1] is _MISSING else saved[1]


def _set(model_type: str, owner, name, value) -> None:
    key = (_key(owner), name)
    if key not in _ORIGINALS:
        _ORIGINALS[key] = (owner, vars(owner).get(name, _MISSING))
    _PATCHED_BY.setdefault(model_type, set()).add(key)
    setattr(owner, name, value)


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


class _TorchNNWithLigerLayerNorm(types.ModuleType):
    """``torch.nn`` as one modeling module sees it after class-level ``layer_norm=True``: LayerNorm
    is LigerNNLayerNorm, every other name is torch.nn's. torch.nn itself is untouched."""

    def __init__(self):
        super().__init__("torch.nn")
        self.LayerNorm = LigerNNLayerNorm

    def __getattr__(self, name):
        return getattr(torch.nn, name)


# --------------------------------------------------------------------------------------------
# RoPE


def liger_partial_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """HF Phi-3's apply_rotary_pos_emb: RoPE on the first cos.shape[-1] dims of the head, the rest
    passed through (partial_rotary_factor < 1); the plain liger RoPE when the head is fully rotary."""
    rope = liger_fn("liger_rotary_pos_emb")
    d = cos.shape[-1]
    if d == q.shape[-1]:
        return rope(q, k, cos, sin, position_ids, unsqueeze_dim)
    q_rot, k_rot = rope(
        q[..., :d].contiguous(), k[..., :d].contiguous(), cos, sin, position_ids, unsqueeze_dim
    )
    return torch.cat([q_rot, q[..., d:]], dim=-1), torch.cat([k_rot, k[..., d:]], dim=-1)


def _rope_impl(kind: str) -> Callable:
    if kind == "partial":
        return liger_partial_rotary_pos_emb
    return liger_fn("liger_multimodal_rotary_pos_emb" if kind == "mrope" else "liger_rotary_pos_emb")


def _patch_rope(model_type: str, spec: _Spec, mod) -> None:
    if not spec.rope:
        raise NotImplementedError(
            f"liger_cpp: rope=True is not supported for {model_type} (its RoPE is interleaved / partial, "
            "unlike liger_cpp's rotate-half kernel); pass rope=False."
        )
    found = [(fn, kind) for fn, kind in spec.rope if callable(vars(mod).get(fn))]
    if not found:
        warnings.warn(
            f"liger_cpp: {spec.module} has none of {[fn for fn, _ in spec.rope]}; RoPE is not patched.",
            UserWarning,
            stacklevel=4,
        )
    for fn, kind in found:
        _set(model_type, mod, fn, _rope_impl(kind))


# --------------------------------------------------------------------------------------------
# instance patching


def _unwrap_peft(module):
    """PEFT's ModulesToSaveWrapper keeps the original module and trainable copies: patch them all."""
    if hasattr(module, "original_module") and hasattr(module, "modules_to_save"):
        return [module.original_module, *module.modules_to_save.values()]
    return [module]


def _swap_class(module, cls) -> None:
    module.__dict__.setdefault("_liger_orig_class", type(module))
    module.__class__ = cls


def _norm_convert(module, liger_cls):
    w = getattr(module, "weight", None)
    if not isinstance(w, nn.Parameter) or w.dim() != 1:
        raise ValueError(f"expected an RMSNorm with a 1-D weight Parameter, got {type(module).__name__}")
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if eps is None:
        raise ValueError(f"{type(module).__name__} has no eps / variance_epsilon attribute")
    defaults = {k: p.default for k, p in inspect.signature(liger_cls.__init__).parameters.items()}

    def apply():
        _swap_class(module, liger_cls)
        module.hidden_size = w.shape[0]
        module.elementwise_affine = True
        module.variance_epsilon = eps
        module.offset = defaults["offset"]
        module.casting_mode = defaults["casting_mode"]
        module.in_place = defaults["in_place"]

    return apply


def _linear_like(m) -> bool:
    """nn.Linear, or a PEFT adapter layer over one (LoRA's `base_layer`): called the same way, with
    in_features / out_features."""
    return isinstance(m, nn.Linear) or isinstance(getattr(m, "base_layer", None), nn.Linear)


def _mlp_convert(module, kind, config, liger_cls=None):
    if kind == "experts":
        for a in ("gate_up_proj", "down_proj", "num_experts"):
            if not hasattr(module, a):
                raise ValueError(f"expected fused experts with {a!r}, got {type(module).__name__}")
        _check_act(config)
        return lambda: _swap_class(module, liger_cls)
    names = ("gate_up_proj", "down_proj") if kind == "phi3" else ("gate_proj", "up_proj", "down_proj")
    for a in names:
        if not _linear_like(getattr(module, a, None)):
            raise ValueError(
                f"expected an MLP whose {names} are nn.Linear (or PEFT layers over one), got "
                f"{type(module).__name__} with {a}={type(getattr(module, a, None)).__name__}"
            )
    if kind == "geglu":
        approximate = gelu_approximate(config)
    else:
        _check_act(config)
    liger_cls = liger_cls or _MLP_CLS[kind]

    def apply():
        _swap_class(module, liger_cls)
        module.config = config
        module.hidden_size = module.down_proj.out_features
        module.intermediate_size = module.down_proj.in_features
        if kind != "phi3":
            module.in_place = None  # in place when the projections' outputs are private
        if kind == "geglu":
            module.approximate = approximate

    return apply


def _text_model(base):
    outer = (
        getattr(base, getattr(base, "base_model_prefix", "model"), None),
        getattr(base, "model", None),
        base,
    )
    for cand in [c for o in outer for c in (o, getattr(o, "language_model", None))]:
        if cand is not None and isinstance(getattr(cand, "layers", None), nn.ModuleList):
            return cand, cand.layers
    raise ValueError(f"liger_cpp: {type(base).__name__} has no decoder `layers` ModuleList to patch")


def _base(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _patch_instance(model_type: str, spec: _Spec, model, rms_norm, mlp, layer_norm, mode) -> None:
    base = _base(model)
    config = getattr(base, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if text_config is None or not hasattr(text_config, "hidden_size"):
        raise ValueError(
            f"liger_cpp: expected a transformers {model_type} model (with .config and decoder `layers`), "
            f"got {type(model).__name__}"
        )
    mod = _import(spec.module)
    inner, layers = _text_model(base)
    experts_cls = _experts_class(mod, spec.mlp) if spec.mlp_kind == "experts" else None
    dense_cls = _original(mod, spec.dense_mlp[0]) if spec.dense_mlp else None
    todo = []  # every check first, then every change: never a half-patched model
    seen = set()

    def add(m, convert, where):
        if id(m) in seen:
            return
        seen.add(id(m))
        try:
            todo.append(convert())
        except ValueError as e:
            raise ValueError(f"liger_cpp: {where}: {e}") from None

    def norm(owner, attr, where):
        m = getattr(owner, attr, None)
        if not isinstance(m, nn.Module):
            raise ValueError(
                f"liger_cpp: {type(model).__name__}: {where}.{attr} is missing; not a {model_type} model?"
            )
        for sub in _unwrap_peft(m):
            if not isinstance(sub, spec.norm_cls):
                add(sub, lambda sub=sub: _norm_convert(sub, spec.norm_cls), f"{where}.{attr}")

    def mlp_of(layer, where):
        m, attr = getattr(layer, "mlp", None), "mlp"
        if spec.mlp_kind == "experts" and (dense_cls is None or hasattr(m, "experts")):  # MoE layer
            where, m, attr = where + ".mlp", getattr(m, "experts", None), "experts"
        if not isinstance(m, nn.Module):
            raise ValueError(
                f"liger_cpp: {type(model).__name__}: {where}.{attr} is missing; not a {model_type} model?"
            )
        for sub in _unwrap_peft(m):
            if isinstance(sub, (LigerExpertsSwiGLUMixin, *_MLP_CLS.values())):
                continue
            if dense_cls is not None and isinstance(sub, dense_cls):
                convert = lambda sub=sub: _mlp_convert(sub, "swiglu", text_config, spec.dense_mlp[1])  # noqa: E731
            else:
                convert = lambda sub=sub: _mlp_convert(sub, spec.mlp_kind, text_config, experts_cls)  # noqa: E731
            add(sub, convert, f"{where}.{attr}")

    for i, layer in enumerate(layers):
        where = f"layers[{i}]"
        if rms_norm:
            for attr in spec.norm_attrs:
                norm(layer, attr, where)
            for attr in spec.attn_norm_attrs:
                norm(getattr(layer, "self_attn", None), attr, where + ".self_attn")
        if mlp:
            mlp_of(layer, where)
    if rms_norm:
        norm(inner, "norm", "model")
        hf_norm = _original(mod, spec.norm)
        for name, m in base.named_modules():  # the same RMSNorm class elsewhere (q/k, vision, projector)
            if type(m) is hf_norm:
                add(m, lambda m=m: _norm_convert(m, spec.norm_cls), name)
    if layer_norm:
        for name, m in base.named_modules():
            if type(m) is nn.LayerNorm:
                add(m, lambda m=m: lambda: _swap_class(m, LigerNNLayerNorm), name)
    if mode is not None:
        for cls_name, loss_spec in spec.lm:
            cls = _original(mod, cls_name)
            if isinstance(base, cls):
                fwd = make_forward(type(base).forward, mode, loss_spec)
                todo.append(lambda fwd=fwd: base.__dict__.__setitem__("forward", types.MethodType(fwd, base)))
                break
    if (
        mlp
        and spec.mlp_kind == "experts"
        and getattr(text_config, "_experts_implementation", None)
        not in (
            None,
            "eager",
        )
    ):
        warnings.warn(
            f"liger_cpp: this model uses experts_implementation={text_config._experts_implementation!r}; "
            "the liger_cpp SwiGLU runs only in the eager experts loop, so Hugging Face's experts "
            "forward is kept (load with experts_implementation='eager' to use it).",
            UserWarning,
            stacklevel=4,
        )
    for apply in todo:
        apply()


def _revert_instance(model) -> None:
    base = _base(model)
    for m in base.modules():
        cls = m.__dict__.pop("_liger_orig_class", None)
        if cls is not None:
            m.__class__ = cls
    if getattr(base.__dict__.get("forward"), "_liger_mode", None) is not None:
        del base.__dict__["forward"]


# --------------------------------------------------------------------------------------------
# class-level patching and the common entry point


def _patch(
    model_type: str,
    model,
    *,
    rope,
    cross_entropy,
    fused_linear_cross_entropy,
    rms_norm,
    mlp,
    layer_norm=False,
):
    if cross_entropy and fused_linear_cross_entropy:
        raise ValueError(
            "liger_cpp: cross_entropy and fused_linear_cross_entropy cannot both be True "
            f"(apply_liger_kernel_to_{model_type}: pass one of them False)."
        )
    spec = _SPECS[model_type]
    mod = _import(spec.module)
    mode = "flce" if fused_linear_cross_entropy else "ce" if cross_entropy else None
    names = ((spec.norm,) if rms_norm else ()) + ((spec.mlp,) if mlp else ())
    names += (spec.dense_mlp[0],) if mlp and spec.dense_mlp else ()
    names += tuple(n for n, _ in spec.lm) if mode else ()
    for name in names:
        if not isinstance(_original(mod, name), type):
            raise ValueError(
                f"liger_cpp: {spec.module}.{name} is not a class; unsupported transformers version?"
            )
    if rope and not spec.rope:
        _patch_rope(model_type, spec, mod)  # raises: checked before anything changes
    if model is not None:
        _patch_instance(model_type, spec, model, rms_norm, mlp, layer_norm, mode)
    else:
        if rms_norm:
            _set(model_type, mod, spec.norm, spec.norm_cls)
        if mlp:
            liger_mlp = (
                _experts_class(mod, spec.mlp) if spec.mlp_kind == "experts" else _MLP_CLS[spec.mlp_kind]
            )
            _set(model_type, mod, spec.mlp, liger_mlp)
            if spec.dense_mlp:
                _set(model_type, mod, *spec.dense_mlp)
        if layer_norm:
            for mod_name, attr in spec.layer_norm:
                owner = _import(mod_name)
                _set(
                    model_type,
                    owner,
                    attr,
                    _TorchNNWithLigerLayerNorm() if attr == "nn" else LigerNNLayerNorm,
                )
        if mode:
            for cls_name, loss_spec in spec.lm:
                cls = getattr(mod, cls_name)
                _set(model_type, cls, "forward", make_forward(_original(cls, "forward"), mode, loss_spec))
    if rope:
        _patch_rope(model_type, spec, mod)


def revert_liger_kernel(model_type: Optional[str] = None, model=None) -> None:
    """Undo patching: with ``model``, that model's instance patching (module classes and forward);
    otherwise class-level patching (and RoPE) of every model type, or of one."""
    if model is not None:
        _revert_instance(model)
        return
    if model_type is not None:
        if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
            known = sorted(MODEL_TYPE_TO_APPLY_LIGER_FN)
            raise ValueError(f"liger_cpp: unknown model_type {model_type!r}; supported: {known}")
        model_type = MODEL_TYPE_TO_APPLY_LIGER_FN[model_type].__name__[len("apply_liger_kernel_to_") :]
    keys = _PATCHED_BY.pop(model_type, set()) if model_type else set(_ORIGINALS)
    if not model_type:
        _PATCHED_BY.clear()
    for key in keys:
        saved = _ORIGINALS.pop(key, None)
        if saved is None:
            continue
        owner, value = saved
        if value is _MISSING:
            delattr(owner, key[1])
        else:
            setattr(owner, key[1], value)


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
    _patch(
        "llama",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


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
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
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
    _patch(
        "mistral",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


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
    _patch(
        "mixtral",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


def apply_liger_kernel_to_gemma(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    geglu: bool = True,
    model=None,
) -> None:
    """Gemma: RoPE, RMSNorm (offset 1, casting "gemma"), GemmaMLP -> LigerGEGLUMLP, FLCE or CE."""
    _patch(
        "gemma",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=geglu,
    )


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
    _patch(
        "gemma2",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=geglu,
    )


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
    _patch(
        "gemma3_text",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=geglu,
    )


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
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=geglu,
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
    _patch(
        "qwen2",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


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
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
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
    _patch(
        "qwen2_5_vl",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


def apply_liger_kernel_to_qwen3(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Qwen3: RoPE, RMSNorm (incl. q/k norms), Qwen3MLP -> LigerSwiGLUMLP, FLCE or CE."""
    _patch(
        "qwen3",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


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
    _patch(
        "qwen3_moe",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


def apply_liger_kernel_to_phi3(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """Phi-3: RoPE (partial rotary handled), RMSNorm, Phi3MLP -> LigerPhi3SwiGLUMLP, FLCE or CE."""
    _patch(
        "phi3",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


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
    _patch(
        "granite",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


def apply_liger_kernel_to_olmo2(
    rope: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    model=None,
) -> None:
    """OLMo 2: RoPE, RMSNorm (incl. q/k norms; never in place), Olmo2MLP -> LigerSwiGLUMLP, FLCE or CE."""
    _patch(
        "olmo2",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


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
    _patch(
        "glm4",
        model,
        rope=rope,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        rms_norm=rms_norm,
        mlp=swiglu,
    )


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
    "liger_partial_rotary_pos_emb",
    "revert_liger_kernel",
    *sorted({fn.__name__ for fn in MODEL_TYPE_TO_APPLY_LIGER_FN.values()}),
]
