"""LayerNorm: fake kernels and autograd for torch.ops.liger.layer_norm_*, and `layer_norm`."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import acc_dtype, check_device


@torch.library.register_fake("liger::layer_norm_fwd")
def _fwd_fake(X, W, B, eps):
    torch._check(X.dim() >= 1 and X.shape[-1] > 0, lambda: "liger_cpp: argument 'X': empty last dimension")
    for t, name in ((W, "W"), (B, "B")):
        if t is not None:
            torch._check(
                t.shape == (X.shape[-1],), lambda name=name: f"liger_cpp: argument '{name}': shape mismatch"
            )
    Y = X.new_empty(X.shape)
    MEAN = X.new_empty(X.shape[:-1], dtype=acc_dtype(X))
    RSTD = X.new_empty(X.shape[:-1], dtype=acc_dtype(X))
    return Y, MEAN, RSTD


@torch.library.register_fake("liger::layer_norm_bwd")
def _bwd_fake(dY, X, W, MEAN, RSTD, compute_dw=True, compute_db=True):
    n = X.shape[-1]
    # without W, dB in float32 for 16-bit X (the bias may be wider than X; see the schema)
    half = X.dtype in (torch.float16, torch.bfloat16)
    pdt = W.dtype if W is not None else (torch.float32 if half else X.dtype)
    dX = X.new_empty(X.shape)
    dW = X.new_empty((n if (W is not None and compute_dw) else 0,), dtype=pdt)
    dB = X.new_empty((n if compute_db else 0,), dtype=pdt)
    return dX, dW, dB


def _setup_context(ctx, inputs, output):
    X, W, B, eps = inputs
    _, MEAN, RSTD = output
    ctx.save_for_backward(X, W, MEAN, RSTD)
    ctx.b_dtype = B.dtype if B is not None else None
    ctx.mark_non_differentiable(MEAN, RSTD)
    # No zero tensors for the gradients of MEAN and RSTD (two fill kernels per backward otherwise).
    ctx.set_materialize_grads(False)


def _backward(ctx, dY, _dMEAN, _dRSTD):
    X, W, MEAN, RSTD = ctx.saved_tensors
    compute_dw = W is not None and ctx.needs_input_grad[1]
    compute_db = ctx.b_dtype is not None and ctx.needs_input_grad[2]
    if dY is None or (not ctx.needs_input_grad[0] and not compute_dw and not compute_db):
        return None, None, None, None
    # Without W the op returns dB in float32 for 16-bit X (a wider bias's gradient is not rounded
    # to X's dtype); cast to B's dtype here, once.
    dX, dW, dB = torch.ops.liger.layer_norm_bwd(dY, X, W, MEAN, RSTD, compute_dw, compute_db)
    return (
        dX if ctx.needs_input_grad[0] else None,
        dW if compute_dw else None,
        dB.to(ctx.b_dtype) if compute_db else None,
        None,
    )


torch.library.register_autograd("liger::layer_norm_fwd", _backward, setup_context=_setup_context)


def layer_norm(X: Tensor, W: Optional[Tensor], B: Optional[Tensor], eps: float = 1e-6) -> Tensor:
    """LayerNorm of X over its last dimension: (x - mean) * rstd * W + B, each of W and B optional.

    Mean and rstd are computed (two passes, float32 or better) and saved in float32; Y has X's
    dtype. dW and dB are summed over rows in float32, deterministically.
    """
    check_device(X, "X")
    Y, _, _ = torch.ops.liger.layer_norm_fwd(X, W, B, float(eps))
    return Y
