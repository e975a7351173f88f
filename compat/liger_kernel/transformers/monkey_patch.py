"""Liger-Kernel's ``liger_kernel.transformers.monkey_patch``: liger_cpp's patching.

MODEL_TYPE_TO_APPLY_LIGER_FN is liger_cpp's table itself (the model types liger_cpp patches; Axolotl
and LLaMA-Factory look model types up in it and introspect the functions' flags). Every
apply_liger_kernel_to_<type> liger_cpp has is liger_cpp's function; Liger-Kernel's others are
NotImplementedError stubs. _apply_liger_kernel / _apply_liger_kernel_to_instance (Hugging Face's
Trainer, TRL, oumi, verl) drop the flags a model type does not take, with a warning, and leave an
unsupported model type unpatched, with a warning."""

from liger_cpp.transformers.monkey_patch import (  # noqa: F401
    MODEL_TYPE_TO_APPLY_LIGER_FN,
    _apply_liger_kernel,
    _apply_liger_kernel_to_instance,
)
from liger_kernel._surface import complete

complete(globals())
