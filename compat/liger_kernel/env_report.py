"""Liger-Kernel's environment report (``python -m liger_kernel.env_report``, what its bug-report
template asks for), for liger_cpp: Liger's fields, the compatibility package's version, then
liger_cpp's own report (its build: CUDA kernels and architectures)."""

import importlib.metadata
import platform
import sys


def _version(package: str) -> str:
    try:
        return importlib.import_module(package).__version__
    except Exception:  # noqa: BLE001 - absent or broken: reported as such
        return "Not installed"


def print_env_report():
    """Prints a report of the environment (Liger-Kernel's fields and liger_cpp's build)."""
    import torch

    print("Environment Report:")
    print("-------------------")
    print(f"Operating System: {platform.platform()}")
    print(f"Python version: {sys.version.split()[0]}")
    try:
        ver = importlib.metadata.version("liger-kernel")
        print(f"Liger Kernel version: {ver} (liger_cpp's compatibility package)")
    except importlib.metadata.PackageNotFoundError:
        print("Liger Kernel version: liger_cpp's compatibility package (not installed as a distribution)")
    print(f"PyTorch version: {torch.__version__}")
    print(f"CUDA version: {torch.version.cuda if torch.cuda.is_available() else 'Not available'}")
    hip = torch.version.hip if torch.cuda.is_available() and torch.version.hip else "Not available"
    print(f"HIP(ROCm) version: {hip}")
    print(f"Triton version: {_version('triton')}")
    print(f"Transformers version: {_version('transformers')}")
    xpu = torch.version.xpu if hasattr(torch, "xpu") and torch.xpu.is_available() else "XPU Not Available"
    print(f"XPU version: {xpu}")
    from liger_cpp.env import env_report

    print("-------------------")
    print(env_report())


if __name__ == "__main__":
    print_env_report()
