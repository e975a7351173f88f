"""RMSNorm: fake kernels and autograd for torch.ops.liger.rms_norm_*, and `rms_norm`."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import acc_dtype, check_device, may_write_into

CASTING_MODES = ("llama", "gemma", "none")


def _out_dtype(X: Tensor, W: Optional[Tensor], casting_mode: str) -> torch.dtype:
    # HF LlamaRMSNorm returns weight * x.to(x.dtype): promoted with the weight's dtype.
    if casting_mode == "llama" and W is not None:
        return torch.promote_types(X.dtype, W.dtype)
    return X.dtype


@torch.library.register_fake("liger::rms_norm_fwd")
def _rms_norm_fwd_fake(X, W, eps, offset=0.0, casting_mode="llama", in_place=False):
    torch._check(X.dim() >= 1 and X.shape[-1] > 0, lambda: "liger_cpp: argument 'X': empty last dimension")
    if W is not None:
        torch._check(W.shape == (X.shape[-1],), lambda: "liger_cpp: argument 'W': shape mismatch")
    Y = X.new_empty(X.shape, dtype=_out_dtype(X, W, casting_mode))
    RSTD = X.new_empty(X.shape[:-1], dtype=acc_dtype(X))
    return Y, RSTD


@torch.library.register_fake("liger::rms_norm_bwd")
def _rms_norm_bwd_fake(dY, X, W, RSTD, offset=0.0, casting_mode="llama", compute_dw=True):
    dX = X.new_empty(X.shape)
    want = W is not None and compute_dw
    dW = X.new_empty((X.shape[-1] if want else 0,), dtype=W.dtype if W is not None else X.dtype)
    return dX, dW


@torch.library.register_fake("liger::rms_norm_bwd_")
def _rms_norm_bwd_inplace_fake(dY, X, W, RSTD, offset=0.0, casting_mode="llama", compute_dw=True):
    want = W is not None and compute_dw
    return X.new_empty((X.shape[-1] if want else 0,), dtype=W.dtype if W is not None else X.dtype)


def _setup_context(ctx, inputs, output):
    X, W, eps, offset, casting_mode, in_place = inputs
    _, RSTD = output
    ctx.save_for_backward(X, W, RSTD)
    ctx.offset = offset
    ctx.casting_mode = casting_mode
    ctx.in_place = in_place
    ctx.mark_non_differentiable(RSTD)
    # No zero tensor for RSTD's gradient (a fill kernel per backward otherwise).
    ctx.set_materialize_grads(False)


def _backward(ctx, dY, _dRSTD):
    X, W, RSTD = ctx.saved_tensors
    compute_dw = W is not None and ctx.needs_input_grad[1]
    if dY is None or (not ctx.needs_input_grad[0] and not compute_dw):
        return None, None, None, None, None, None
    if ctx.in_place and may_write_into(dY, X):
        # dX overwrites dY through a mutating op: the version counter records it.
        dW = torch.ops.liger.rms_norm_bwd_(dY, X, W, RSTD, ctx.offset, ctx.casting_mode, compute_dw)
        dX = dY
    else:
        dX, dW = torch.ops.liger.rms_norm_bwd(dY, X, W, RSTD, ctx.offset, ctx.casting_mode, compute_dw)
    return dX, (dW if compute_dw else None), None, None, None, None


torch.library.register_autograd("liger::rms_norm_fwd", _backward, setup_context=_setup_context)


def rms_norm(
    X: Tensor,
    W: Optional[Tensor],
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> Tensor:
    """RMSNorm of X over its last dimension, with Liger's options.

    casting_mode "llama" matches HF LlamaRMSNorm (x normalised in fp32, cast to X's dtype, then
    times the weight; output dtype promoted with the weight's); "gemma" matches GemmaRMSNorm
    (fp32 throughout, output in X's dtype); "none" skips the intermediate casts. `offset` is
    added to the weight (Gemma uses 1.0). `in_place=True` lets the backward write dX into the
    incoming gradient's storage when that is safe (dense, same dtype); it is never done silently
    to a tensor autograd does not own: the op that does it is a declared mutation.
    """
    if casting_mode not in CASTING_MODES:
        raise ValueError(
            f"liger_cpp: argument 'casting_mode': expected one of {CASTING_MODES}, got {casting_mode!r}"
        )
    check_device(X, "X")
    Y, _ = torch.ops.liger.rms_norm_fwd(X, W, float(eps), float(offset), casting_mode, bool(in_place))
    return Y
