"""Liger-Kernel's ``liger_kernel.ops``: the autograd Function names with their ``.apply`` order
(liger_kernel._functions for the ops liger_cpp implements, NotImplementedError stubs for the rest)
and the kernel-level ``*_forward`` / ``*_backward`` names (stubs: liger_cpp's ops are
``torch.ops.liger.*``). Submodules (``liger_kernel.ops.rms_norm``, ...) hold the same names."""

from liger_kernel._surface import complete

complete(globals())
