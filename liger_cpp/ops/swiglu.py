"""SwiGLU: fake kernels and autograd for torch.ops.liger.swiglu_*, and `swiglu`
(Liger's LigerSiLUMulFunction: c = silu(a) * b)."""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device, may_write_inputs


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


def _setup_context(ctx, inputs, output):
    a, b, in_place = inputs
    ctx.save_for_backward(a, b)
    # Writing into a or b is only considered for intermediates autograd owns (never a leaf
    # such as a parameter, never a tensor that does not require a gradient).
    ctx.in_place = bool(in_place) and all(t.requires_grad and t.grad_fn is not None for t in (a, b))


def _backward(ctx, dc):
    a, b = ctx.saved_tensors
    if not any(ctx.needs_input_grad[:2]):
        return None, None, None
    if ctx.in_place and dc.dtype == a.dtype and may_write_inputs(a, b):
        # da, db overwrite a, b through a mutating op: their version counters record it.
        torch.ops.liger.swiglu_bwd_(dc, a, b)
        da, db = a.detach(), b.detach()
    else:
        da, db = torch.ops.liger.swiglu_bwd(dc, a, b)
    return (da if ctx.needs_input_grad[0] else None), (db if ctx.needs_input_grad[1] else None), None


torch.library.register_autograd("liger::swiglu_fwd", _backward, setup_context=_setup_context)


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
    return torch.ops.liger.swiglu_fwd(a, b, bool(in_place))
