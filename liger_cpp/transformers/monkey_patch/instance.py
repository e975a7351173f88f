"""Instance patching (``model=...``): the modules of a built model are converted in place (their
class is swapped, so the very same Parameter objects, hooks and PEFT wrappers stay) and the model's
``forward`` is replaced on the instance. Every check runs before any change: a model is never left
half-patched.

What is converted: the decoder layers' norms and MLP (checked to be there, so a model of another
type is a clear error), and every other module of a norm or MLP class the model type patches
(q / k norms, shared experts, vision and projector norms of the same classes)."""

import inspect
import types

from torch import nn

from liger_cpp.transformers.causal_lm import make_forward
from liger_cpp.transformers.geglu import gelu_approximate
from liger_cpp.transformers.layer_norm import LigerNNLayerNorm
from liger_cpp.transformers.moe import LigerExpertsSwiGLUMixin, LigerGptOssExpertsMixin, experts_activation
from liger_cpp.transformers.monkey_patch.class_level import liger_mlp_class
from liger_cpp.transformers.monkey_patch.revert import base_model, original
from liger_cpp.transformers.monkey_patch.specs import MLP_CLS, Spec, import_modeling
from liger_cpp.transformers.relu_squared import check_relu2
from liger_cpp.transformers.rms_norm import LigerL2Norm, LigerRMSNorm, LigerRMSNormGated
from liger_cpp.transformers.swiglu import SILU_NAMES, _check_act

# MLP kinds by what their HF modules hold and compute.
_GEGLU_KINDS = ("geglu", "gemma4", "gemma3n")
_PROJECTIONS = {"phi3": ("gate_up_proj", "down_proj"), "relu2": ("up_proj", "down_proj")}
_KIND_ATTRS = {"falcon_h1": ("gate_multiplier", "down_multiplier"), "deepseek_v4": ("limit",)}
_KIND_ATTRS["gemma3n"] = ("activation_sparsity",)
# When a liger class's constructor has no such default (LigerL2Norm): a weightless float32 norm.
_NORM_FALLBACK = {"offset": 0.0, "casting_mode": "gemma", "in_place": False}


def _unwrap_peft(module):
    """PEFT's ModulesToSaveWrapper keeps the original module and trainable copies: patch them all."""
    if hasattr(module, "original_module") and hasattr(module, "modules_to_save"):
        return [module.original_module, *module.modules_to_save.values()]
    return [module]


def _swap_class(module, cls) -> None:
    module.__dict__.setdefault("_liger_orig_class", type(module))
    module.__class__ = cls


def _norm_convert(module, liger_cls):
    if issubclass(liger_cls, LigerRMSNormGated):
        for a in ("weight", "variance_epsilon"):
            if not hasattr(module, a):
                raise ValueError(f"expected a gated RMSNorm with {a!r}, got {type(module).__name__}")
        return lambda: _swap_class(module, liger_cls)
    w = getattr(module, "weight", None)
    # HF's weightless norms: Gemma 4 / 3n's with_scale=False, Llama 4's L2 norm (-> LigerL2Norm).
    weightless = w is None and (
        getattr(module, "with_scale", None) is False or issubclass(liger_cls, LigerL2Norm)
    )
    if not weightless and (not isinstance(w, nn.Parameter) or w.dim() != 1):
        raise ValueError(f"expected an RMSNorm with a 1-D weight Parameter, got {type(module).__name__}")
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if eps is None:
        raise ValueError(f"{type(module).__name__} has no eps / variance_epsilon attribute")
    params = inspect.signature(liger_cls.__init__).parameters
    defaults = {k: (params[k].default if k in params else v) for k, v in _NORM_FALLBACK.items()}

    def apply():
        _swap_class(module, liger_cls)
        module.hidden_size = w.shape[0] if w is not None else 0
        module.elementwise_affine = w is not None
        if w is None:
            module.weight = None  # a plain attribute (HF's weightless norms have none)
        module.variance_epsilon = eps
        module.offset = defaults["offset"]
        module.casting_mode = defaults["casting_mode"]
        module.in_place = defaults["in_place"]

    return apply


def _linear_like(m) -> bool:
    """nn.Linear, or a PEFT adapter layer over one (LoRA's `base_layer`): called the same way, with
    in_features / out_features."""
    return isinstance(m, nn.Linear) or isinstance(getattr(m, "base_layer", None), nn.Linear)


def _check_silu(module, config) -> None:
    """The MLP's activation is SiLU: by its own config when it has one (HF's MLPs keep the config
    they were built with), else by its act_fn module (vision MLPs), else by the model's config."""
    own = getattr(module, "config", None)
    if own is not None and getattr(own, "hidden_act", None) is not None:
        return _check_act(own)
    act = getattr(module, "act_fn", None)
    if isinstance(act, nn.Module):
        if type(act).__name__ not in ("SiLU", "SiLUActivation"):
            raise ValueError(
                f"liger_cpp: activation {type(act).__name__} is not supported; SwiGLU needs SiLU"
            )
        return None
    return _check_act(config)


def _mlp_convert(module, kind, config, liger_cls):
    if kind == "moe_llama4":
        experts = getattr(module, "experts", None)
        for owner, a in ((module, "router"), (module, "shared_expert"), (module, "hidden_dim")) + tuple(
            (experts, a) for a in ("gate_up_proj", "down_proj", "act_fn")
        ):
            if not hasattr(owner, a):
                raise ValueError(f"expected Llama 4's MoE block with {a!r}, got {type(module).__name__}")
        experts_activation(None, experts)
        return lambda: _swap_class(module, liger_cls)
    if kind in ("experts", "experts_gpt_oss"):
        need = ("gate_up_proj", "down_proj", "num_experts")
        if kind == "experts_gpt_oss":
            need += ("gate_up_proj_bias", "down_proj_bias", "alpha", "limit")
        for a in need:
            if not hasattr(module, a):
                raise ValueError(f"expected fused experts with {a!r}, got {type(module).__name__}")
        if kind == "experts":
            experts_activation(config, module)
        return lambda: _swap_class(module, liger_cls)
    names = _PROJECTIONS.get(kind, ("gate_proj", "up_proj", "down_proj"))
    for a in names:
        if not _linear_like(getattr(module, a, None)):
            raise ValueError(
                f"expected an MLP whose {names} are nn.Linear (or PEFT layers over one), got "
                f"{type(module).__name__} with {a}={type(getattr(module, a, None)).__name__}"
            )
    for a in _KIND_ATTRS.get(kind, ()):
        if not hasattr(module, a):
            raise ValueError(f"expected a {kind} MLP with {a!r}, got {type(module).__name__}")
    cfg = getattr(module, "config", None) or config
    approximate = None
    if kind in _GEGLU_KINDS:
        approximate = gelu_approximate(cfg)
    elif kind == "relu2":
        check_relu2(cfg)
    elif kind == "muse_glimmer":
        _check_act(cfg, "hidden_activation")
    elif kind != "phi3":
        _check_silu(module, config)
    else:
        _check_act(cfg)
    liger_cls = liger_cls or MLP_CLS[kind]

    def apply():
        _swap_class(module, liger_cls)
        module.__dict__.setdefault("config", cfg)
        module.hidden_size = module.down_proj.out_features
        module.intermediate_size = module.down_proj.in_features
        if kind not in ("phi3", "relu2"):
            module.in_place = None  # in place when the projections' outputs are private
        if approximate is not None:
            module.approximate = approximate

    return apply


def _is_text_model(m) -> bool:
    return isinstance(getattr(m, "layers", None), nn.ModuleList) and hasattr(m, "embed_tokens")


def _text_model(base, spec=None):
    """(the module holding the decoder layers, the layers): spec.layers when given, else the text
    model (base, base.model, their language_model; else the first module with `layers` and
    `embed_tokens`, breadth first: composite models nest it deeper)."""
    if spec is not None and spec.layers:
        owner = base
        *path, last = spec.layers.split(".")
        for p in path:
            owner = getattr(owner, p, None)
        layers = getattr(owner, last, None)
        if isinstance(layers, nn.ModuleList):
            return owner, layers
        raise ValueError(f"liger_cpp: {type(base).__name__} has no {spec.layers} ModuleList to patch")
    outer = (
        getattr(base, getattr(base, "base_model_prefix", "model"), None),
        getattr(base, "model", None),
        base,
    )
    for cand in [c for o in outer for c in (o, getattr(o, "language_model", None))]:
        if cand is not None and isinstance(getattr(cand, "layers", None), nn.ModuleList):
            return cand, cand.layers
    level = [base]
    for _ in range(4):
        level = [c for m in level for c in m.children()]
        for cand in level:
            if _is_text_model(cand):
                return cand, cand.layers
    raise ValueError(f"liger_cpp: {type(base).__name__} has no decoder `layers` ModuleList to patch")


def patch_instance(model_type: str, spec: Spec, model, rms_norm, mlp, layer_norm, mode) -> None:
    base = base_model(model)
    config = getattr(base, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if text_config is None or not hasattr(text_config, "hidden_size"):
        raise ValueError(
            f"liger_cpp: expected a transformers {model_type} model (with .config and decoder `layers`), "
            f"got {type(model).__name__}"
        )
    mod = import_modeling(spec.module)
    inner, layers = _text_model(base, spec)
    norm_map = {original(mod, n): c for n, c in spec.norm_classes()} if rms_norm else {}
    mlp_map = {}
    if mlp:
        for n, kind, cls in spec.mlp_classes():
            mlp_map[original(mod, n)] = (kind, liger_mlp_class(mod, n, kind, cls))
    liger_mlps = (
        LigerExpertsSwiGLUMixin,
        LigerGptOssExpertsMixin,
        *MLP_CLS.values(),
        *(c for _, c in mlp_map.values()),
    )
    todo = []  # every check first, then every change: never a half-patched model
    seen = set()

    def add(m, convert, where):
        if id(m) in seen:
            return
        seen.add(id(m))
        try:
            todo.append(convert())
        except ValueError as e:
            msg = str(e).removeprefix("liger_cpp: ")
            raise ValueError(f"liger_cpp: {where}: {msg}") from None

    def convert_norm(m, where):
        if isinstance(m, (LigerRMSNorm, LigerRMSNormGated)):
            return
        cls = norm_map.get(type(m), spec.norm_cls)
        add(m, lambda: _norm_convert(m, cls), where)

    def norm(owner, attr, where):
        m = getattr(owner, attr, None)
        if not isinstance(m, nn.Module):
            raise ValueError(
                f"liger_cpp: {type(model).__name__}: {where}.{attr} is missing; not a {model_type} model?"
            )
        for sub in _unwrap_peft(m):
            convert_norm(sub, f"{where}.{attr}")

    def convert_mlp(m, where):
        kind, cls = mlp_map[type(m)]
        add(m, lambda: _mlp_convert(m, kind, text_config, cls), where)

    def mlp_of(layer, where):
        m = getattr(layer, spec.mlp_attr, None)
        where = f"{where}.{spec.mlp_attr}"
        if not isinstance(m, nn.Module):
            raise ValueError(
                f"liger_cpp: {type(model).__name__}: {where} is missing; not a {model_type} model?"
            )
        found = False
        for name, sub in m.named_modules():
            if isinstance(sub, liger_mlps):
                found = True
            elif type(sub) in mlp_map:
                found = True
                convert_mlp(sub, f"{where}.{name}" if name else where)
        if not found:
            names = sorted(n for n, _, _ in spec.mlp_classes())
            raise ValueError(
                f"liger_cpp: {where}: expected a {model_type} MLP (one of {names}) in it, "
                f"got {type(m).__name__}"
            )

    for i, layer in enumerate(layers):
        where = f"layers[{i}]"
        if rms_norm and spec.norm:
            for attr in spec.norm_attrs:
                norm(layer, attr, where)
            for attr in spec.attn_norm_attrs:
                norm(getattr(layer, "self_attn", None), attr, where + ".self_attn")
        if mlp:
            mlp_of(layer, where)
    if rms_norm and spec.norm:
        if spec.final_norm:
            norm(inner, spec.final_norm, "model")
        for name, m in base.named_modules():  # the same norm classes elsewhere (q/k, vision, projector)
            if type(m) in norm_map:
                convert_norm(m, name)
    if mlp:
        for name, m in base.named_modules():  # shared experts, vision MLPs of the patched classes
            if type(m) in mlp_map:
                convert_mlp(m, name)
    if layer_norm:
        for name, m in base.named_modules():
            if type(m) is nn.LayerNorm:
                add(m, lambda m=m: lambda: _swap_class(m, LigerNNLayerNorm), name)
    if mode is not None:
        for cls_name, loss_spec in spec.lm:
            cls = original(mod, cls_name)
            if isinstance(base, cls):
                fwd = make_forward(type(base).forward, mode, loss_spec)
                todo.append(lambda fwd=fwd: base.__dict__.__setitem__("forward", types.MethodType(fwd, base)))
                break
    for apply in todo:
        apply()


__all__ = ["SILU_NAMES", "patch_instance"]
