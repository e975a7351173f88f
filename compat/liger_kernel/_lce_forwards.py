"""Liger-Kernel's per-family forwards (``liger_kernel.transformers.model.<family>.lce_forward``,
``causal_forward``, ``multimodal_forward``, ...): each with Liger-Kernel's signature, all running
liger_cpp's implementation (liger_cpp.transformers.lce_forward: the patched forward of the model's
class, whatever family the name says)."""

import functools

from liger_kernel._surface import MODULES, signature

# The forwards of Liger-Kernel's model modules.
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


def lce_maybe_trainable_lm_head(self, hidden_states, hidden_size, labels, shift_labels, **loss_kwargs):
    """Liger-Kernel's helper of its llama / smollm3 forwards: LigerForCausalLMLoss with the model's
    lm_head (PEFT's ModulesToSaveWrapper unwrapped; an FSDP1-wrapped lm_head called through its own
    forward, so that FSDP gathers its weight for the fused loss)."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    from liger_cpp.transformers.causal_lm import _unwrap_peft_head
    from liger_kernel.transformers.fsdp import _FSDPForwardRedirection
    from liger_kernel.transformers.model.loss_utils import LigerForCausalLMLoss

    def loss(head, hidden_states, hidden_size, labels, shift_labels, **kw):
        return LigerForCausalLMLoss(
            hidden_states=hidden_states,
            lm_head_weight=head.weight,
            labels=labels,
            hidden_size=hidden_size,
            shift_labels=shift_labels,
            **kw,
        )

    head = _unwrap_peft_head(self.lm_head)
    if isinstance(head, FullyShardedDataParallel):
        return _FSDPForwardRedirection()(
            head, loss, head.module, hidden_states, hidden_size, labels, shift_labels, **loss_kwargs
        )
    return loss(head, hidden_states, hidden_size, labels, shift_labels, **loss_kwargs)


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
