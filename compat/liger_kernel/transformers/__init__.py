"""Liger-Kernel's ``liger_kernel.transformers``: the modules, functional API, Hugging Face patching
(apply_liger_kernel_to_*, _apply_liger_kernel, _apply_liger_kernel_to_instance,
AutoLigerKernelForCausalLM) at Liger-Kernel's names, backed by liger_cpp.transformers. Every name
resolves on first use (importing this package imports neither transformers nor liger_cpp)."""

import importlib.util

from liger_kernel._surface import complete

_TRANSFORMERS_AVAILABLE = importlib.util.find_spec("transformers") is not None


def is_transformers_available() -> bool:
    """Whether the transformers package is installed."""
    return _TRANSFORMERS_AVAILABLE


complete(globals())
