"""DyT: fake kernels for torch.ops.liger.dyt_{fwd,bwd} (the autograd is in C++,
csrc/aten/autograd/dyt_autograd.cpp), and `dyt` (Liger's LigerDyTFunction:
y = gamma * tanh(alpha * x) + beta)."""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device

_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check(x, alpha, gamma, beta):
    torch._check(x.dim() >= 1, lambda: "liger_cpp: argument 'x': expected at least 1 dimension")
    torch._check(
        x.dtype in _FLOATS, lambda: f"liger_cpp: argument 'x': expected a float tensor, got {x.dtype}"
    )
    torch._check(alpha.numel() == 1, lambda: "liger_cpp: argument 'alpha': expected one element")
    torch._check(
        gamma.shape == (x.shape[-1],), lambda: "liger_cpp: argument 'gamma': expected shape (x.shape[-1],)"
    )
    if beta is not None:
        torch._check(beta.shape == gamma.shape, lambda: "liger_cpp: argument 'beta': expected gamma's shape")


@torch.library.register_fake("liger::dyt_fwd")
def _dyt_fwd_fake(x, alpha, gamma, beta=None):
    _check(x, alpha, gamma, beta)
    return x.new_empty(x.shape)


@torch.library.register_fake("liger::dyt_bwd")
def _dyt_bwd_fake(dy, x, alpha, gamma, beta=None):
    _check(x, alpha, gamma, beta)
    torch._check(dy.shape == x.shape, lambda: "liger_cpp: argument 'dy': expected x's shape")
    torch._check(dy.dtype == x.dtype, lambda: "liger_cpp: argument 'dy': expected x's dtype")
    dbeta = (beta if beta is not None else gamma).new_empty(gamma.shape)
    return x.new_empty(x.shape), alpha.new_empty(alpha.shape), gamma.new_empty(gamma.shape), dbeta


_fwd = torch.ops.liger.dyt_fwd.default


def dyt(x: Tensor, alpha: Tensor, gamma: Tensor, beta: Tensor | None = None) -> Tensor:
    """gamma * tanh(alpha * x) + beta over x's last dimension (beta None: no shift): float32 maths,
    one rounding to x's dtype; gradients of all four (each in its parameter's dtype), the parameter
    sums deterministic. Any shape and strides; the result is dense."""
    check_device(x, "x")
    return _fwd(x, alpha, gamma) if beta is None else _fwd(x, alpha, gamma, beta)
