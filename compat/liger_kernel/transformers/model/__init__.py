"""Liger-Kernel's ``liger_kernel.transformers.model``: loss_utils (LigerForCausalLMLoss) and
output_classes are liger_cpp-backed; the per-model ``lce_forward`` modules are stubs (liger_cpp
patches Hugging Face's own forward: use apply_liger_kernel_to_<model>)."""

from liger_kernel._surface import complete

complete(globals())
