"""Helpers shared by the op modules."""

import torch

# Read once at import: calling build_info() inside a torch.compile'd region would break the graph.
_HAS_CUDA_KERNELS = "cuda: yes" in torch.ops.liger.build_info()


def check_device(t: torch.Tensor, name: str) -> None:
    """A clear error for CUDA tensors on a build without CUDA kernels."""
    if t.is_cuda and not _HAS_CUDA_KERNELS:
        raise RuntimeError(
            f"liger_cpp: argument '{name}' is on {t.device}, but this liger_cpp build has no CUDA "
            "kernels (see `python -m liger_cpp.env`); reinstall where nvcc and a CUDA torch are present."
        )


def acc_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def may_write_into(grad: torch.Tensor, like: torch.Tensor) -> bool:
    """Whether a backward may reuse `grad`'s storage for a gradient shaped and typed like `like`.

    Never under torch.compile (the functional op is traced instead) and only for a dense,
    non-overlapping tensor of the same dtype and shape (an expanded gradient, say from
    `.sum()`, has stride 0 and must not be written).
    """
    return (
        not torch.compiler.is_compiling()
        and grad.dtype == like.dtype
        and grad.shape == like.shape
        and grad.is_contiguous()
    )


def may_write_inputs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a GLU backward may write da, db into its saved inputs a, b.

    Never under torch.compile or while tracing (fake tensors: the functional op is traced
    instead); only for contiguous tensors of one dtype that do not share memory.
    """
    from torch._subclasses.fake_tensor import is_fake

    if torch.compiler.is_compiling() or is_fake(a) or is_fake(b) or a.dtype != b.dtype:
        return False
    if not (a.is_contiguous() and b.is_contiguous()):
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    na, nb = a.numel() * a.element_size(), b.numel() * b.element_size()
    return a0 + na <= b0 or b0 + nb <= a0
