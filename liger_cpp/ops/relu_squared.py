"""ReLU squared: fake kernels for torch.ops.liger.relu_squared_{fwd,bwd} (the autograd is in C++,
csrc/aten/autograd/relu_squared_autograd.cpp), and `relu_squared` (Liger's
LigerReLUSquaredFunction: y = relu(x)^2, Nemotron's relu2 activation)."""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device

_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@torch.library.register_fake("liger::relu_squared_fwd")
def _relu_squared_fwd_fake(x):
    torch._check(
        x.dtype in _FLOATS, lambda: f"liger_cpp: argument 'x': expected a float tensor, got {x.dtype}"
    )
    return x.new_empty(x.shape)


@torch.library.register_fake("liger::relu_squared_bwd")
def _relu_squared_bwd_fake(dy, x):
    torch._check(dy.shape == x.shape, lambda: "liger_cpp: argument 'dy': expected x's shape")
    torch._check(dy.dtype == x.dtype, lambda: "liger_cpp: argument 'dy': expected x's dtype")
    return x.new_empty(x.shape)


def relu_squared(x: Tensor) -> Tensor:
    """relu(x)^2 with float32 math and one rounding (the exact result of HF's ReLUSquaredActivation
    in x's dtype); the backward is dy * 2 relu(x). Any shape and strides; the result is dense."""
    check_device(x, "x")
    return torch.ops.liger.relu_squared_fwd(x)
