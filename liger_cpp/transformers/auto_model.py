"""AutoLigerKernelForCausalLM: AutoModelForCausalLM that applies liger_cpp's kernels by
config.model_type (Liger-Kernel's name). The built model is patched in place (instance patching):
its modules and its forward, not the classes; only RoPE, a module function in transformers, is
patched module-wide (pass rope=False to avoid it). An unsupported model_type warns and returns an
unpatched model."""

import warnings

from transformers import AutoConfig, AutoModelForCausalLM

from liger_cpp.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN, _flags

_HUB_KWARGS = (
    "cache_dir",
    "force_download",
    "local_files_only",
    "revision",
    "subfolder",
    "token",
    "trust_remote_code",
)


def _all_flags() -> set:
    return set().union(*(_flags(fn) for fn in MODEL_TYPE_TO_APPLY_LIGER_FN.values()))


def _split(model_type, kwargs):
    """(liger flags for this model_type, the remaining kwargs for transformers)."""
    apply_fn = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
    names = _flags(apply_fn) if apply_fn is not None else set()
    liger = {k: v for k, v in kwargs.items() if k in names}
    rest = {k: v for k, v in kwargs.items() if k not in _all_flags()}
    ignored = sorted(set(kwargs) & _all_flags() - names)
    if ignored:
        warnings.warn(
            f"liger_cpp: flag(s) {ignored} do not apply to model_type {model_type!r}; ignored.", stacklevel=3
        )
    return liger, rest


def _patched(model, model_type, liger_kwargs):
    apply_fn = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
    if apply_fn is None:
        warnings.warn(
            f"liger_cpp: no Liger kernels for model_type {model_type!r}; the model is returned unpatched. "
            f"Supported: {sorted(MODEL_TYPE_TO_APPLY_LIGER_FN)}",
            UserWarning,
            stacklevel=3,
        )
        return model
    apply_fn(model=model, **liger_kwargs)
    return model


class AutoLigerKernelForCausalLM(AutoModelForCausalLM):
    """from_pretrained / from_config like AutoModelForCausalLM, plus the Liger flags of the
    model's apply_liger_kernel_to_<model_type> (e.g. rms_norm=False, swiglu=False)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        config = kwargs.get("config")
        if config is None:
            hub = {k: kwargs[k] for k in _HUB_KWARGS if k in kwargs}
            config = AutoConfig.from_pretrained(pretrained_model_name_or_path, **hub)
        liger, rest = _split(config.model_type, kwargs)
        model = AutoModelForCausalLM.from_pretrained(pretrained_model_name_or_path, *model_args, **rest)
        return _patched(model, config.model_type, liger)

    @classmethod
    def from_config(cls, config, **kwargs):
        liger, rest = _split(config.model_type, kwargs)
        model = AutoModelForCausalLM.from_config(config, **rest)
        return _patched(model, config.model_type, liger)
