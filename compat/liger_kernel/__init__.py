"""``liger_kernel`` backed by liger_cpp: Liger-Kernel's module paths, names and signatures, so code
written for Liger-Kernel (Hugging Face's Trainer with use_liger_kernel=True, TRL, Axolotl,
LLaMA-Factory, ms-swift, ...) runs on liger_cpp's kernels unchanged.

Installed from liger_cpp's repository with ``pip install ./compat`` (after liger_cpp); it takes
Liger-Kernel's place (distribution ``liger-kernel``, version ``<Liger API>+liger.cpp.<liger_cpp>``);
``pip uninstall liger-kernel`` removes it. What liger_cpp implements is liger_cpp itself (the same
classes and functions); the rest of Liger-Kernel's names import and raise NotImplementedError naming
the missing feature when used. See liger_kernel._surface and liger_kernel._implemented.
"""

from liger_kernel import _surface

_surface.install()


# Liger-Kernel's top-level implementation choice (from its liger_kernel.backends); read lazily
# from liger_kernel.functional, which imports torch.
_IMPL_CHOICE = ("set_impl", "get_impl", "available_impls", "set_backend", "get_backend", "available_backends")


def __getattr__(name):
    if name == "functional":
        import importlib

        return importlib.import_module("liger_kernel.functional")
    if name in _IMPL_CHOICE:
        from liger_kernel import functional

        return getattr(functional, name)
    if name == "__version__":  # read lazily: it imports liger_cpp (torch and the extension)
        from liger_kernel._surface import LIGER_VERSION, _liger_cpp_version

        return f"{LIGER_VERSION}+liger.cpp.{_liger_cpp_version()}"
    raise AttributeError(f"module 'liger_kernel' has no attribute {name!r}")
