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
