"""PolyNorm (PolyCom), Liger's names: `liger_poly_norm`, `LigerPolyNorm`, `LigerPolyNormFunction`,
and the Triton-level `poly_norm_forward` / `poly_norm_backward`, on liger_cpp's kernels
(liger::poly_norm_fwd / poly_norm_bwd: one read of each row forward, one of x and dy backward, the
three statistics a row in float32, deterministic parameter sums)."""

import torch
from torch import Tensor, nn

from liger_cpp.ops.poly_norm import poly_norm


def liger_poly_norm(X, W, B, eps=1e-6, in_place=False):
    """W[0] norm(X^3) + W[1] norm(X^2) + W[2] norm(X) + B over X's last dimension.
    `in_place` is Liger's option to overwrite the output gradient in its backward; here nothing is
    written in place (accepted for its signature)."""
    if W.shape != (3,):
        raise ValueError(f"liger_cpp: argument 'W': expected shape (3,), got {tuple(W.shape)}")
    if B.numel() != 1:
        raise ValueError(f"liger_cpp: argument 'B': expected one element, got shape {tuple(B.shape)}")
    return poly_norm(X, W, B, eps)


def poly_norm_forward(X, W, B, eps=1e-6):
    """Liger's forward function: (Y, X as rows, RSTD (rows, 3), BLOCK_SIZE, num_warps); the last
    two are Triton launch settings, returned as None here (poly_norm_backward ignores them)."""
    x = X.reshape(-1, X.shape[-1])
    y, rstd = torch.ops.liger.poly_norm_fwd(x, W, B, eps)
    return y.view(X.shape), x, rstd, None, None


def poly_norm_backward(dY, X, W, RSTD, BLOCK_SIZE, num_warps, in_place):
    """Liger's backward function: (dX, dW, dB) from poly_norm_forward's X and RSTD; dB a 0-dim
    tensor in W's dtype, as Liger's. Nothing is written in place."""
    x = X.reshape(-1, X.shape[-1])
    dx, dw, db = torch.ops.liger.poly_norm_bwd(dY.reshape(x.shape), x, W, W.new_empty(()), RSTD)
    return dx.view(dY.shape), dw, db


class LigerPolyNorm(nn.Module):
    """PolyNorm (Liger's LigerPolyNorm(eps=1e-6, in_place=False)): weight (1/3, 1/3, 1/3), bias 1,
    PolyCom's initialisation."""

    def __init__(self, eps=1e-6, in_place=False):
        super().__init__()
        self.weight = nn.Parameter(torch.full((3,), 1.0 / 3.0))
        self.bias = nn.Parameter(torch.tensor(1.0))
        self.variance_epsilon = eps
        self.in_place = in_place

    def forward(self, hidden_states: Tensor) -> Tensor:
        return poly_norm(hidden_states, self.weight, self.bias, self.variance_epsilon)

    def extra_repr(self):
        return f"weight_shape={tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class LigerPolyNormFunction:
    @staticmethod
    def apply(X, W, B, eps=1e-6, in_place=False):
        return liger_poly_norm(X, W, B, eps, in_place)
