"""The forward that patching by hand assigns: Liger-Kernel's per-family ``lce_forward`` (and
``causal_forward`` / ``multimodal_forward`` ...), used as ``SomeForCausalLM.forward = lce_forward``
or ``model.forward = MethodType(lce_forward, model)``, for the family it is named after or for any
other causal LM with an ``lm_head`` (code that adds a family Liger-Kernel lacks reuses qwen2's).

liger_cpp has one implementation behind every such name: the model class's patched forward
(``causal_lm.make_forward``: the fused linear cross entropy when training with labels, logits
otherwise) around Hugging Face's own forward of that class, with the class's logit transform
(Gemma's softcap, Granite's scale) from the patchers' tables.

Hugging Face's forward is the class's own unless a patch replaced it. Then it is the one liger_cpp's
patchers saved, or the one recorded here before the hand patch: every model class's own forward is
recorded when the class is created (a wrapper of ``PreTrainedModel.__init_subclass__`` that only
records, installed on this module's import) and, for the classes created before that, on this
module's import and again when one of these names is looked up (``from
liger_kernel.transformers.model.qwen2 import lce_forward``), which comes before any assignment."""

import sys
import weakref

from torch import nn

from liger_cpp.transformers.causal_lm import LossSpec, make_forward
from liger_cpp.transformers.monkey_patch.revert import original

# class -> Hugging Face's forward, recorded while it was still the class's, or None for a class
# defined with liger's forward (weak: classes made on the fly, e.g. by tests or remote code, stay
# collectable)
_HF = weakref.WeakKeyDictionary()
_PATCHED = weakref.WeakKeyDictionary()  # class -> liger_cpp's patched forward of that class


def is_liger_forward(fn) -> bool:
    """A forward of liger_cpp's (the patchers' or one of these), not a model's own."""
    return getattr(fn, "_liger_mode", None) is not None


def remember_hf_forwards() -> None:
    """Record the forward of every class of the transformers modeling modules imported so far."""
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith("transformers.models.") or ".modeling_" not in name:
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, type) and obj.__module__ == name and issubclass(obj, nn.Module):
                fn = vars(obj).get("forward")
                if fn is not None and not is_liger_forward(fn):
                    _HF[obj] = fn  # the class's latest forward of its own


def _record_new_classes() -> None:
    """Wrap PreTrainedModel.__init_subclass__ so that each model class created from now on has its
    own forward recorded (transformers imports its modeling modules lazily: after this module, often)."""
    from transformers import PreTrainedModel

    if PreTrainedModel.__dict__.get("_liger_cpp_records_forwards"):
        return
    own = PreTrainedModel.__dict__.get("__init_subclass__")
    inner = own.__func__ if isinstance(own, classmethod) else None

    def __init_subclass__(cls, **kwargs):
        if inner is not None:
            inner(cls, **kwargs)
        else:
            super(PreTrainedModel, cls).__init_subclass__(**kwargs)
        fn = cls.__dict__.get("forward")
        if fn is not None:  # None: the class was defined with liger's forward (its base's is HF's)
            _HF[cls] = None if is_liger_forward(fn) else fn

    PreTrainedModel.__init_subclass__ = classmethod(__init_subclass__)
    PreTrainedModel._liger_cpp_records_forwards = True


def hf_forward(cls):
    """Hugging Face's forward of model class `cls` (the nearest class in its MRO defining one)."""
    for base in cls.__mro__:
        fn = vars(base).get("forward")
        if fn is None:
            continue
        if fn is nn.Module.forward:
            break
        if not is_liger_forward(fn):
            return fn
        if base in _HF and _HF[base] is None:
            continue  # defined with liger's forward from the start: its base's forward is HF's
        for saved in (_HF.get(base), original(base, "forward"), getattr(fn, "_liger_original", None)):
            if saved is not None and not is_liger_forward(saved):
                return saved
        break  # replaced, and its own forward was never seen: not guessed from a base
    raise TypeError(
        f"liger_cpp: lce_forward cannot find Hugging Face's forward of {cls.__module__}.{cls.__qualname__}: "
        "the class's forward was replaced before lce_forward was imported. Patch the model with "
        "model.forward = MethodType(lce_forward, model) or an apply_liger_kernel_to_* function instead."
    )


def _loss_spec(cls) -> LossSpec:
    """The logit transform of `cls` (or of the nearest base) from the patchers' tables."""
    from liger_cpp.transformers.monkey_patch.composite import COMPOSITES
    from liger_cpp.transformers.monkey_patch.specs import SPECS

    tables = [*SPECS.values(), *COMPOSITES.values()]
    for base in cls.__mro__:
        for spec in tables:
            if spec.module == base.__module__:
                for name, loss_spec in spec.lm:
                    if name == base.__name__:
                        return loss_spec
    return LossSpec()


def lce_forward(self, *args, **kwargs):
    """liger_cpp's patched forward of ``type(self)`` (Liger-Kernel's lce_forward contract:
    ``skip_logits``, ``return_token_accuracy``, ``return_predicted_tokens``, ``use_token_scaling``,
    ``accum_dtype``; logits skipped when training with labels)."""
    cls = type(self)
    fwd = _PATCHED.get(cls)
    if fwd is None:
        fwd = _PATCHED[cls] = make_forward(hf_forward(cls), "flce", _loss_spec(cls))
    return fwd(self, *args, **kwargs)


lce_forward._liger_mode = "flce"
remember_hf_forwards()  # the classes that exist now; those created later, by the wrapper below
_record_new_classes()
