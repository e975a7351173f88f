"""What liger_cpp rebinds, and undoing it: every class-level change goes through ``set_patched``,
which remembers Hugging Face's value; ``revert_liger_kernel`` restores them (class level, RoPE) or
undoes one model's instance patching."""

import types
from typing import Optional

_MISSING = object()
# (owner key, attribute) -> (owner, original value or _MISSING), for revert_liger_kernel().
_ORIGINALS: dict = {}
# model_type -> keys of _ORIGINALS its apply function set.
_PATCHED_BY: dict = {}


def _key(owner) -> str:
    return (
        owner.__name__ if isinstance(owner, types.ModuleType) else f"{owner.__module__}.{owner.__qualname__}"
    )


def original(owner, name):
    """HF's value of owner.name, also when liger_cpp has rebound it; a clear error when this
    transformers' module has no such class or function (HF renames and adds them between versions)."""
    saved = _ORIGINALS.get((_key(owner), name))
    if saved is None:
        if isinstance(owner, types.ModuleType) and not hasattr(owner, name):
            import transformers

            raise AttributeError(
                f"liger_cpp: {owner.__name__} has no {name} in the installed transformers "
                f"{transformers.__version__}; liger_cpp's patching follows transformers 5.17-5.24 (tested). "
                "Upgrade transformers, or turn off the flag that patches it."
            )
        return getattr(owner, name)
    return getattr(owner, name) if saved[1] is _MISSING else saved[1]


def set_patched(model_type: str, owner, name, value) -> None:
    """owner.name = value, remembering HF's value for revert_liger_kernel(model_type)."""
    key = (_key(owner), name)
    if key not in _ORIGINALS:
        _ORIGINALS[key] = (owner, vars(owner).get(name, _MISSING))
    _PATCHED_BY.setdefault(model_type, set()).add(key)
    setattr(owner, name, value)


def base_model(model):
    """The transformers model under a PEFT wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def revert_instance(model) -> None:
    """Undo instance patching: every converted module gets its class back, the forward its own."""
    base = base_model(model)
    for m in base.modules():
        cls = m.__dict__.pop("_liger_orig_class", None)
        if cls is not None:
            m.__class__ = cls
    if getattr(base.__dict__.get("forward"), "_liger_mode", None) is not None:
        del base.__dict__["forward"]


def revert_liger_kernel(model_type: Optional[str] = None, model=None) -> None:
    """Undo patching: with ``model``, that model's instance patching (module classes and forward);
    otherwise class-level patching (and RoPE) of every model type, or of one."""
    if model is not None:
        revert_instance(model)
        return
    if model_type is not None:
        from liger_cpp.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN  # (cycle)

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
