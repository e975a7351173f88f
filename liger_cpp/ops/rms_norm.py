"""RMSNorm: fake kernels for torch.ops.liger.rms_norm_* (autograd: csrc/aten/autograd/rms_norm_autograd.cpp),
and `rms_norm`."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import acc_dtype, check_device

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


# Autograd: csrc/aten/autograd/rms_norm_autograd.cpp (C++, the Autograd dispatch key).
_fwd = torch.ops.liger.rms_norm_fwd.default


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
    return _fwd(X, W, float(eps), float(offset), casting_mode, bool(in_place))[0]
