"""LayerNorm: fake kernels for torch.ops.liger.layer_norm_* (autograd:
csrc/aten/autograd/layer_norm_autograd.cpp), and `layer_norm`."""

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


# Autograd: csrc/aten/autograd/layer_norm_autograd.cpp (C++, the Autograd dispatch key).
_fwd = torch.ops.liger.layer_norm_fwd.default


def layer_norm(X: Tensor, W: Optional[Tensor], B: Optional[Tensor], eps: float = 1e-6) -> Tensor:
    """LayerNorm of X over its last dimension: (x - mean) * rstd * W + B, each of W and B optional.

    Mean and rstd are computed (two passes, float32 or better) and saved in float32; Y has X's
    dtype. dW and dB are summed over rows in float32, deterministically.
    """
    check_device(X, "X")
    return _fwd(X, W, B, float(eps))[0]
