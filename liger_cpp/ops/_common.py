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


def head_grads_fake(input, weight, bias, compute_dx, compute_dw, compute_db):
    """The (dX, dW, dB) outputs of a fused-head op's fake kernel, as its C++ returns them: the
    gradients asked for in their tensors' shapes and dtypes, distinct (0,) tensors for the rest (an
    op's outputs must not alias each other)."""
    dx = input.new_empty(input.shape if compute_dx else (0,))
    dw = weight.new_empty(weight.shape) if compute_dw else input.new_empty((0,))
    db = bias.new_empty(bias.shape) if (compute_db and bias is not None) else input.new_empty((0,))
    return dx, dw, db
