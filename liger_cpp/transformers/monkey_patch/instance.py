"""Instance patching (``model=...``): the modules of a built model are converted in place (their
class is swapped, so the very same Parameter objects, hooks and PEFT wrappers stay) and the model's
``forward`` is replaced on the instance. Every check runs before any change: a model is never left
half-patched."""

import inspect
import types
import warnings

from torch import nn

from liger_cpp.transformers.causal_lm import make_forward
from liger_cpp.transformers.geglu import gelu_approximate
from liger_cpp.transformers.layer_norm import LigerNNLayerNorm
from liger_cpp.transformers.monkey_patch.class_level import experts_class
from liger_cpp.transformers.monkey_patch.revert import base_model, original
from liger_cpp.transformers.monkey_patch.specs import MLP_CLS, Spec, import_modeling
from liger_cpp.transformers.swiglu import LigerExpertsSwiGLUMixin, _check_act


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
    liger_cls = liger_cls or MLP_CLS[kind]

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
    inner, layers = _text_model(base)
    experts_cls = experts_class(mod, spec.mlp) if spec.mlp_kind == "experts" else None
    dense_cls = original(mod, spec.dense_mlp[0]) if spec.dense_mlp else None
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
            if isinstance(sub, (LigerExpertsSwiGLUMixin, *MLP_CLS.values())):
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
        hf_norm = original(mod, spec.norm)
        for name, m in base.named_modules():  # the same RMSNorm class elsewhere (q/k, vision, projector)
            if type(m) is hf_norm:
                add(m, lambda m=m: _norm_convert(m, spec.norm_cls), name)
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
