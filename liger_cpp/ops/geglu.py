"""GeGLU: fake kernels for torch.ops.liger.geglu_*, and `geglu`
(Liger's LigerGELUMulFunction: c = gelu(a, approximate="tanh") * b; also exact GELU)."""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device
from liger_cpp.ops.swiglu import _check_fake

APPROXIMATE = ("tanh", "none")


@torch.library.register_fake("liger::geglu_fwd")
def _geglu_fwd_fake(a, b, approximate="tanh", in_place=False):
    _check_fake(a, b)
    return a.new_empty(a.shape)


@torch.library.register_fake("liger::geglu_bwd")
def _geglu_bwd_fake(dc, a, b, approximate="tanh"):
    _check_fake(a, b)
    return a.new_empty(a.shape), a.new_empty(a.shape)


@torch.library.register_fake("liger::geglu_bwd_")
def _geglu_bwd_inplace_fake(dc, a, b, approximate="tanh"):
    _check_fake(a, b)
    return None


# Autograd (and the in_place decision): csrc/aten/autograd/glu_autograd.cpp (C++, the Autograd
# dispatch key).
_fwd = torch.ops.liger.geglu_fwd.default


def geglu(a: Tensor, b: Tensor, approximate: str = "tanh", in_place: bool = False) -> Tensor:
    """gelu(a, approximate) * b with float32 math (see `liger_cpp.ops.swiglu.swiglu` for the
    layout and the `in_place` option). approximate "tanh" is Liger's and HF's
    gelu_pytorch_tanh; "none" is the exact erf GELU."""
    if approximate not in APPROXIMATE:
        raise ValueError(
            f"liger_cpp: argument 'approximate': expected one of {APPROXIMATE}, got {approximate!r}"
        )
    check_device(a, "a")
    return _fwd(a, b, approximate, bool(in_place))
