"""DyT ("Transformers without Normalization"), Liger's names: `liger_dyt`, `LigerDyT`,
`LigerDyTFunction`, and the Triton-level `liger_dyt_fwd` / `liger_dyt_bwd`, on liger_cpp's kernels
(liger::dyt_fwd / dyt_bwd: one pass over x forward, one over x and dy backward with the parameter
sums fused; float32 maths, deterministic sums)."""

import torch
from torch import Tensor, nn

from liger_cpp.ops.dyt import dyt


def liger_dyt(x, alpha, gamma, beta):
    """gamma * tanh(alpha * x) + beta (beta None: no shift), over x's last dimension."""
    if gamma.shape != (x.shape[-1],):
        raise ValueError(
            f"liger_cpp: argument 'gamma': expected shape ({x.shape[-1]},), got {tuple(gamma.shape)}"
        )
    return dyt(x, alpha, gamma, beta)


def liger_dyt_fwd(x, alpha, gamma, beta):
    """Liger's forward function: y."""
    return torch.ops.liger.dyt_fwd(x, alpha, gamma, beta)


def liger_dyt_bwd(dy, x, alpha, gamma, beta):
    """Liger's backward function: (dx, dalpha, dgamma, dbeta), dbeta None without beta."""
    dx, da, dg, db = torch.ops.liger.dyt_bwd(dy, x, alpha, gamma, beta)
    return dx, da, dg, (db if beta is not None else None)


class LigerDyT(nn.Module):
    """DyT (Liger's LigerDyT(hidden_size, beta=True, init_alpha=0.5)): alpha (1,), gamma ones,
    beta zeros (None without beta)."""

    def __init__(self, hidden_size, beta=True, init_alpha=0.5):
        super().__init__()
        self.hidden_size = hidden_size
        self.init_alpha = init_alpha
        self.alpha = nn.Parameter(torch.ones(1) * init_alpha)
        self.gamma = nn.Parameter(torch.ones(hidden_size))
        self.beta = nn.Parameter(torch.zeros(hidden_size)) if beta else None

    def forward(self, x: Tensor) -> Tensor:
        return dyt(x, self.alpha, self.gamma, self.beta)

    def extra_repr(self):
        return f"{self.hidden_size}, init_alpha={self.init_alpha}, beta={self.beta is not None}"


class LigerDyTFunction:
    @staticmethod
    def apply(x, alpha, gamma, beta):
        return liger_dyt(x, alpha, gamma, beta)
