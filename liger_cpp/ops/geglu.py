"""GeGLU: fake kernels and autograd for torch.ops.liger.geglu_*, and `geglu`
(Liger's LigerGELUMulFunction: c = gelu(a, approximate="tanh") * b; also exact GELU)."""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device, may_write_inputs
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


def _setup_context(ctx, inputs, output):
    a, b, approximate, in_place = inputs
    ctx.save_for_backward(a, b)
    ctx.approximate = approximate
    ctx.in_place = bool(in_place) and all(t.requires_grad and t.grad_fn is not None for t in (a, b))


def _backward(ctx, dc):
    a, b = ctx.saved_tensors
    if not any(ctx.needs_input_grad[:2]):
        return None, None, None, None
    if ctx.in_place and dc.dtype == a.dtype and may_write_inputs(a, b):
        torch.ops.liger.geglu_bwd_(dc, a, b, ctx.approximate)
        da, db = a.detach(), b.detach()
    else:
        da, db = torch.ops.liger.geglu_bwd(dc, a, b, ctx.approximate)
    return (da if ctx.needs_input_grad[0] else None), (db if ctx.needs_input_grad[1] else None), None, None


torch.library.register_autograd("liger::geglu_fwd", _backward, setup_context=_setup_context)


def geglu(a: Tensor, b: Tensor, approximate: str = "tanh", in_place: bool = False) -> Tensor:
    """gelu(a, approximate) * b with float32 math (see `liger_cpp.ops.swiglu.swiglu` for the
    layout and the `in_place` option). approximate "tanh" is Liger's and HF's
    gelu_pytorch_tanh; "none" is the exact erf GELU."""
    if approximate not in APPROXIMATE:
        raise ValueError(
            f"liger_cpp: argument 'approximate': expected one of {APPROXIMATE}, got {approximate!r}"
        )
    check_device(a, "a")
    return torch.ops.liger.geglu_fwd(a, b, approximate, bool(in_place))
