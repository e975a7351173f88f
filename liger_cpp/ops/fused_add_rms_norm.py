"""FusedAddRMSNorm: fake kernels for torch.ops.liger.fused_add_rms_norm_* (autograd:
csrc/aten/autograd/fused_add_rms_norm_autograd.cpp), and `fused_add_rms_norm`."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import acc_dtype, check_device
from liger_cpp.ops.rms_norm import CASTING_MODES, _out_dtype


@torch.library.register_fake("liger::fused_add_rms_norm_fwd")
def _fwd_fake(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=False):
    torch._check(X.dim() >= 1 and X.shape[-1] > 0, lambda: "liger_cpp: argument 'X': empty last dimension")
    torch._check(R.shape == X.shape, lambda: "liger_cpp: argument 'R': shape mismatch")
    if W is not None:
        torch._check(W.shape == (X.shape[-1],), lambda: "liger_cpp: argument 'W': shape mismatch")
    Y = X.new_empty(X.shape, dtype=_out_dtype(X, W, casting_mode))
    S = X.new_empty(X.shape)
    RSTD = X.new_empty(X.shape[:-1], dtype=acc_dtype(X))
    return Y, S, RSTD


@torch.library.register_fake("liger::fused_add_rms_norm_bwd")
def _bwd_fake(dY, dS_out, S, W, RSTD, offset=0.0, casting_mode="llama", compute_dw=True):
    dS = S.new_empty(S.shape)
    want = W is not None and compute_dw
    dW = S.new_empty((S.shape[-1] if want else 0,), dtype=W.dtype if W is not None else S.dtype)
    return dS, dW


# Autograd: csrc/aten/autograd/fused_add_rms_norm_autograd.cpp (C++, the Autograd dispatch key).
_fwd = torch.ops.liger.fused_add_rms_norm_fwd.default


def fused_add_rms_norm(
    X: Tensor,
    R: Tensor,
    W: Optional[Tensor],
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> tuple[Tensor, Tensor]:
    """s = X + R (in X's dtype), y = RMSNorm(s) with RMSNorm's options; returns (y, s).

    The backward gives X and R the same gradient dS = dS_out + RMSNorm's dX, where dS_out is
    the gradient reaching s directly (the residual stream). `in_place` is accepted for
    Liger-Kernel's signature; dS is always a fresh tensor.
    """
    if casting_mode not in CASTING_MODES:
        raise ValueError(
            f"liger_cpp: argument 'casting_mode': expected one of {CASTING_MODES}, got {casting_mode!r}"
        )
    check_device(X, "X")
    Y, S, _ = _fwd(X, R, W, float(eps), float(offset), casting_mode, bool(in_place))
    return Y, S
