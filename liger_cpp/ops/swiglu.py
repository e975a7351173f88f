"""SwiGLU: fake kernels for torch.ops.liger.swiglu_*, and `swiglu`
(Liger's LigerSiLUMulFunction: c = silu(a) * b)."""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device


def _check_fake(a, b):
    torch._check(a.dim() >= 1, lambda: "liger_cpp: argument 'a': expected at least 1 dimension")
    torch._check(b.shape == a.shape, lambda: "liger_cpp: argument 'b': expected a's shape")
    torch._check(b.dtype == a.dtype, lambda: "liger_cpp: argument 'b': expected a's dtype")


@torch.library.register_fake("liger::swiglu_fwd")
def _swiglu_fwd_fake(a, b, in_place=False):
    _check_fake(a, b)
    return a.new_empty(a.shape)


@torch.library.register_fake("liger::swiglu_bwd")
def _swiglu_bwd_fake(dc, a, b):
    _check_fake(a, b)
    return a.new_empty(a.shape), a.new_empty(a.shape)


@torch.library.register_fake("liger::swiglu_bwd_")
def _swiglu_bwd_inplace_fake(dc, a, b):
    _check_fake(a, b)
    return None


# Autograd (and the in_place decision): csrc/aten/autograd/glu_autograd.cpp (C++, the Autograd
# dispatch key).
_fwd = torch.ops.liger.swiglu_fwd.default


def swiglu(a: Tensor, b: Tensor, in_place: bool = False) -> Tensor:
    """silu(a) * b with float32 math, for a and b of one shape (..., F) and dtype.

    a and b may have strided rows (e.g. the two halves of `gate_up.chunk(2, -1)`); their last
    stride must be 1. `in_place=True` lets the backward write da and db into a and b (saving
    two activation-sized buffers, as Liger does) when that is safe: both contiguous, separate,
    non-leaf tensors that require grad. The write is a declared mutation that bumps their
    version counters, so another user of a or b saved for backward raises instead of reading
    overwritten values.
    """
    check_device(a, "a")
    return _fwd(a, b, bool(in_place))
