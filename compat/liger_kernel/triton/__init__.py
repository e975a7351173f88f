"""Liger-Kernel's ``liger_kernel.triton``: its Triton cache manager switch (for whatever compiles
Triton kernels in the process: torch.compile, other libraries; liger_cpp's own kernels are CUDA
C++ and use no Triton cache). Its names resolve on first use (importing this package does not
import Triton)."""

from liger_kernel._surface import complete

complete(globals())
