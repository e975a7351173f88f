"""LayerNorm module with Liger-Kernel's constructor arguments and nn.LayerNorm's parameter
names (`weight`, `bias`) and HF's `variance_epsilon` attribute."""

import torch
from torch import nn

from liger_cpp.ops.layer_norm import layer_norm


class LigerLayerNorm(nn.Module):
    """LayerNorm over the last dimension with Liger-Kernel's constructor. `impl`, `mode` and
    `backend` (Liger-Kernel's choice among its own kernel implementations) are accepted and kept as
    attributes; liger_cpp has one implementation per device."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        bias: bool = False,
        init_fn: str = "ones",
        impl=None,
        mode=None,
        backend=None,
    ):
        super().__init__()
        if init_fn not in ("ones", "zeros"):
            raise ValueError(f"liger_cpp: argument 'init_fn': expected 'ones' or 'zeros', got {init_fn!r}")
        self.hidden_size = hidden_size
        self.eps = eps
        init = torch.ones if init_fn == "ones" else torch.zeros
        self.weight = nn.Parameter(init(hidden_size))
        # Liger-Kernel: a bias parameter (random-initialised when bias=True, else zeros, as Liger does).
        self.bias = nn.Parameter(torch.randn(hidden_size) if bias else torch.zeros(hidden_size))
        self.variance_epsilon = eps
        self.impl = backend if impl is None else impl
        self.mode = mode

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return layer_norm(hidden_states, self.weight, self.bias, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.variance_epsilon}"


class LigerNNLayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm with liger_cpp's kernel: same constructor, parameters and state dict (and
    still an ``nn.LayerNorm`` for isinstance checks), so it replaces the LayerNorms that transformers
    modeling code builds (vision towers). LayerNorms over more than one trailing dimension keep
    PyTorch's implementation."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if len(self.normalized_shape) != 1:
            return super().forward(input)
        return layer_norm(input, self.weight, self.bias, self.eps)
