"""Liger-Kernel's ``liger_kernel.triton``: its Triton cache manager switch (for whatever compiles
Triton kernels in the process: torch.compile, other libraries; liger_cpp's own kernels are CUDA
C++ and use no Triton cache)."""

from liger_kernel.triton.monkey_patch import apply_liger_triton_cache_manager

__all__ = ["apply_liger_triton_cache_manager"]
