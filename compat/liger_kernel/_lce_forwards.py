"""Liger-Kernel's per-family forwards (``liger_kernel.transformers.model.<family>.lce_forward``,
``causal_forward``, ``multimodal_forward``, ...): each with Liger-Kernel's signature, all running
liger_cpp's implementation (liger_cpp.transformers.lce_forward: the patched forward of the model's
class, whatever family the name says)."""

import functools

from liger_kernel._surface import MODULES, signature

# The forwards of Liger-Kernel's model modules (lce_maybe_trainable_lm_head, a helper of theirs, stays
# a stub).
NAMES = frozenset(
    {
        "lce_forward",
        "causal_forward",
        "multimodal_forward",
        "lce_forward_for_multimodal",
        "lce_forward_conditional_generation",
    }
)
_PREFIX = "liger_kernel.transformers.model."


def is_forward(module: str, name: str) -> bool:
    return module.startswith(_PREFIX) and name in NAMES and name in MODULES.get(module, {})


@functools.cache
def make(module: str, name: str):
    """Liger-Kernel's `module`.`name`: its arguments bound by Liger-Kernel's signature, then passed
    by keyword (the model class's own forward may order them differently)."""
    from liger_cpp.transformers import lce_forward as impl

    impl.remember_hf_forwards()  # before the caller assigns it over a class's forward
    sig = signature(MODULES[module][name]["params"])
    params = sig.parameters

    def forward(*args, **kwargs):
        bound = sig.bind(*args, **kwargs).arguments
        self = bound.pop("self")
        kw = {}
        for key, value in bound.items():
            if params[key].kind is params[key].VAR_KEYWORD:
                kw.update(value)
            elif params[key].kind is params[key].VAR_POSITIONAL:
                if value:
                    raise TypeError(f"{name}() takes no extra positional arguments")
            else:
                kw[key] = value
        return impl.lce_forward(self, **kw)

    forward.__name__ = forward.__qualname__ = name
    forward.__module__ = module
    forward.__doc__ = f"Liger-Kernel's {module}.{name}, run by liger_cpp. " + (impl.lce_forward.__doc__ or "")
    forward.__signature__ = sig
    forward._liger_mode = "flce"
    return forward
