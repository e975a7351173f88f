"""Test configuration: every op test runs on the CPU (CI) and, where this build has CUDA
kernels and a GPU is visible, on CUDA too (the GPU script)."""

import pytest
import torch

import liger_cpp
from liger_cpp.env import has_cuda_kernels

CUDA_OK = torch.cuda.is_available() and has_cuda_kernels()
DEVICES = ["cpu"] + (["cuda"] if CUDA_OK else [])


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(42)
    yield


def pytest_report_header(config):
    return liger_cpp.env_report()
