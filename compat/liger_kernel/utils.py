"""Liger-Kernel's ``liger_kernel.utils`` helpers that integrations import (PEFT_AVAILABLE,
is_peft_available, infer_device, is_npu_available, transformers_version_dispatch); the rest are
NotImplementedError stubs."""

import importlib.util

import torch

from liger_kernel._surface import complete

PEFT_AVAILABLE = importlib.util.find_spec("peft") is not None


def is_peft_available() -> bool:
    return PEFT_AVAILABLE


def is_npu_available() -> bool:
    return hasattr(torch, "npu") and torch.npu.is_available()


def infer_device() -> str:
    """The accelerator liger_cpp runs on here: "cuda" or "cpu" (liger_cpp has no NPU / XPU build)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def transformers_version_dispatch(
    required_version,
    before_fn,
    after_fn,
    before_args=(),
    after_args=(),
    before_kwargs=None,
    after_kwargs=None,
):
    """after_fn(*after_args, **after_kwargs) when the installed transformers is at least
    required_version, else before_fn(*before_args, **before_kwargs)."""
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) >= Version(required_version):
        return after_fn(*after_args, **(after_kwargs or {}))
    return before_fn(*before_args, **(before_kwargs or {}))


complete(globals())
