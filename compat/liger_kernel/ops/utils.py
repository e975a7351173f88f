"""The helpers of Liger-Kernel's ``liger_kernel.ops.utils`` that other projects' Triton kernels
import (Axolotl's), where they need no Triton: ``ensure_contiguous``, ``calculate_settings``,
``compare_version``, ``is_hip``, ``torch_to_triton_dtype`` (empty without Triton). The rest are
NotImplementedError stubs."""

import functools
import importlib.metadata
import operator as _operator

import torch
from packaging.version import Version

from liger_kernel._surface import complete


def ensure_contiguous(fn):
    """Decorator: every tensor argument of fn made contiguous."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        kwargs = {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    return wrapper


def calculate_settings(n):
    """(BLOCK_SIZE, num_warps) for a row of n elements, as Liger-Kernel's row kernels choose them:
    the next power of two (at most 65536) and 4 / 8 / 16 / 32 warps from 2048 / 8192 / 32768."""
    block = 1 << (int(n) - 1).bit_length() if n > 1 else 1
    if block > 65536:
        raise RuntimeError(f"Cannot launch Triton kernel since n = {n} exceeds the maximum 65536.")
    warps = 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4
    if torch.version.hip is not None:
        warps = min(warps, 16)
    return block, warps


_SYMBOLS = {">=": _operator.ge, ">": _operator.gt, "<=": _operator.le, "<": _operator.lt, "==": _operator.eq}


def compare_version(package: str, operator, target: str) -> bool:
    """operator(installed version of package, target) (operator: a function such as operator.ge, or
    ">=" ...), False when the package is not installed."""
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return False
    op = _SYMBOLS[operator] if isinstance(operator, str) else operator
    return bool(op(Version(installed), Version(target)))


def is_hip() -> bool:
    return torch.version.hip is not None


def _triton_dtypes() -> dict:
    try:
        import triton.language as tl
    except ImportError:  # no Triton: nothing of Liger-Kernel's Triton code can run anyway
        return {}
    return {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


torch_to_triton_dtype = _triton_dtypes()


complete(globals())
