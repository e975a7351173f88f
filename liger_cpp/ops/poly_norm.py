"""PolyNorm: fake kernels for torch.ops.liger.poly_norm_{fwd,bwd} (the autograd is in C++,
csrc/aten/autograd/poly_norm_autograd.cpp), and `poly_norm` (Liger's LigerPolyNormFunction:
y = w[0] norm(x^3) + w[1] norm(x^2) + w[2] norm(x) + b, norm(u) = u / sqrt(mean(u^2) + eps) over
the last dimension)."""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device

_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check(x, weight, bias):
    torch._check(x.dim() >= 1, lambda: "liger_cpp: argument 'x': expected at least 1 dimension")
    torch._check(
        x.dtype in _FLOATS, lambda: f"liger_cpp: argument 'x': expected a float tensor, got {x.dtype}"
    )
    torch._check(weight.shape == (3,), lambda: "liger_cpp: argument 'weight': expected shape (3,)")
    torch._check(bias.numel() == 1, lambda: "liger_cpp: argument 'bias': expected one element")


def _rstd_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


@torch.library.register_fake("liger::poly_norm_fwd")
def _poly_norm_fwd_fake(x, weight, bias, eps=1e-6):
    _check(x, weight, bias)
    return x.new_empty(x.shape), x.new_empty((*x.shape[:-1], 3), dtype=_rstd_dtype(x))


@torch.library.register_fake("liger::poly_norm_bwd")
def _poly_norm_bwd_fake(dy, x, weight, bias, rstd):
    _check(x, weight, bias)
    torch._check(dy.shape == x.shape, lambda: "liger_cpp: argument 'dy': expected x's shape")
    torch._check(dy.dtype == x.dtype, lambda: "liger_cpp: argument 'dy': expected x's dtype")
    return x.new_empty(x.shape), weight.new_empty(weight.shape), bias.new_empty(bias.shape)


_fwd = torch.ops.liger.poly_norm_fwd.default


def poly_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-6) -> Tensor:
    """PolyNorm over x's last dimension: float32 maths and statistics, one rounding to x's dtype;
    gradients of x, weight (3,) and bias (one element), the parameter sums deterministic. Any shape
    and strides; the result is dense."""
    check_device(x, "x")
    return _fwd(x, weight, bias, eps)[0]
