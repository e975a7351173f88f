"""Liger-Kernel's ``liger_kernel.utils`` helpers that integrations and scripts import
(PEFT_AVAILABLE, is_peft_available, infer_device, is_npu_available, transformers_version_dispatch,
infer_comm_backend, infer_device_arch, get_total_gpu_memory), with Liger's results on the devices
liger_cpp runs on (CUDA and the CPU)."""

import functools
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


def infer_comm_backend() -> str:
    """The torch.distributed backend for this machine: "nccl" where NCCL is built in, else "mpi",
    else "gloo" (Liger's order, without the NPU / XPU backends liger_cpp has no build for)."""
    import torch.distributed as dist

    if dist.is_nccl_available():
        return "nccl"
    if dist.is_mpi_available():
        return "mpi"
    if dist.is_gloo_available():
        return "gloo"
    raise RuntimeError("There is no distributed backend available.")


# CUDA compute capability -> Liger's coarse family names
_NVIDIA_ARCH = {
    (7, 0): "volta_turing",
    (7, 5): "volta_turing",
    (8, 0): "ampere_ada",
    (8, 6): "ampere_ada",
    (8, 9): "ampere_ada",
    (9, 0): "hopper",
    (10, 0): "blackwell",
    (10, 3): "blackwell_ultra",
    (12, 0): "blackwell_consumer",
}


@functools.cache
def infer_device_arch(device_id: int = 0) -> str:
    """Liger's coarse device generation: "hopper", "ampere_ada", ... for an NVIDIA GPU (else
    "sm_<major><minor>"), the gfx target on ROCm, "cpu" without a GPU. Cached, as Liger's."""
    if not torch.cuda.is_available():
        return infer_device()
    try:
        if torch.version.hip:
            return torch.cuda.get_device_properties(device_id).gcnArchName.split(":")[0] or "cuda"
        major, minor = torch.cuda.get_device_capability(device_id)
        return _NVIDIA_ARCH.get((major, minor), f"sm_{major}{minor}")
    except Exception:  # noqa: BLE001 - Liger falls back to the device type
        return infer_device()


def get_total_gpu_memory() -> int:
    """Total memory of GPU 0 in whole GiB (Liger's "GBs"); a RuntimeError without a GPU."""
    if not torch.cuda.is_available():
        raise RuntimeError(f"Unsupported device: {infer_device()}")
    return torch.cuda.get_device_properties(0).total_memory // (1024**3)


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
