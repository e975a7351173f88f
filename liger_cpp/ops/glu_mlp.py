"""GLU MLP as one op: fake kernels for torch.ops.liger.glu_mlp_*, and `glu_mlp`
(down(act(x gate^T) * (x up^T)), HF LlamaMLP / GemmaMLP without biases).

The three GEMMs are ATen's (cuBLAS on CUDA), the same calls nn.Linear makes, and the gated product
is liger_cpp's GLU op; what the op saves is one call and one autograd node for the whole MLP
instead of about sixty dispatcher calls and fifteen nodes (csrc/aten/composite/glu_mlp.cpp).
Autograd: csrc/aten/autograd/glu_mlp_autograd.cpp (C++, the Autograd dispatch key).
"""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device

ACTIVATIONS = ("silu", "gelu_tanh", "gelu")


def _check_fake(x, w_gate, w_up, w_down):
    torch._check(x.dim() >= 1, lambda: "liger_cpp: argument 'x': expected at least 1 dimension")
    torch._check(
        w_gate.dim() == 2 and w_gate.shape[1] == x.shape[-1],
        lambda: (
            f"liger_cpp: argument 'w_gate': expected shape (any, {x.shape[-1]}), got {tuple(w_gate.shape)}"
        ),
    )
    torch._check(
        w_up.shape == w_gate.shape,
        lambda: f"liger_cpp: argument 'w_up': expected shape {tuple(w_gate.shape)}, got {tuple(w_up.shape)}",
    )
    torch._check(
        w_down.dim() == 2 and w_down.shape[1] == w_gate.shape[0],
        lambda: (
            f"liger_cpp: argument 'w_down': expected shape (any, {w_gate.shape[0]}), "
            f"got {tuple(w_down.shape)}"
        ),
    )
    for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        torch._check(
            w.dtype == x.dtype, lambda name=name: f"liger_cpp: argument '{name}': expected x's dtype"
        )


def _rows(x):
    return x.numel() // x.shape[-1] if x.shape[-1] != 0 else 0


@torch.library.register_fake("liger::glu_mlp")
def _glu_mlp_fake(x, w_gate, w_up, w_down, activation="silu", in_place=False):
    _check_fake(x, w_gate, w_up, w_down)
    return x.new_empty((*x.shape[:-1], w_down.shape[0]))


@torch.library.register_fake("liger::glu_mlp_fwd")
def _glu_mlp_fwd_fake(x, w_gate, w_up, w_down, activation="silu"):
    _check_fake(x, w_gate, w_up, w_down)
    m, i = _rows(x), w_gate.shape[0]
    y = x.new_empty((*x.shape[:-1], w_down.shape[0]))
    return y, x.new_empty((m, i)), x.new_empty((m, i)), x.new_empty((m, i))


def _bwd_fake(dy, x, w_gate, w_up, w_down, a, b, c, output_mask):
    _check_fake(x, w_gate, w_up, w_down)
    mask = list(output_mask) if output_mask is not None else [True] * 4
    return (
        x.new_empty(x.shape) if mask[0] else x.new_empty((0,)),
        w_gate.new_empty(w_gate.shape) if mask[1] else x.new_empty((0,)),
        w_up.new_empty(w_up.shape) if mask[2] else x.new_empty((0,)),
        w_down.new_empty(w_down.shape) if mask[3] else x.new_empty((0,)),
    )


@torch.library.register_fake("liger::glu_mlp_bwd")
def _glu_mlp_bwd_fake(dy, x, w_gate, w_up, w_down, a, b, c, activation="silu", output_mask=None):
    return _bwd_fake(dy, x, w_gate, w_up, w_down, a, b, c, output_mask)


@torch.library.register_fake("liger::glu_mlp_bwd_")
def _glu_mlp_bwd_inplace_fake(dy, x, w_gate, w_up, w_down, a, b, c, activation="silu", output_mask=None):
    return _bwd_fake(dy, x, w_gate, w_up, w_down, a, b, c, output_mask)


@torch.library.register_fake("liger::glu_mlp_tiled")
def _glu_mlp_tiled_fake(x, w_gate, w_up, w_down, activation="silu", shards=1):
    _check_fake(x, w_gate, w_up, w_down)
    torch._check(
        shards >= 1, lambda: f"liger_cpp: argument 'shards': expected a positive number, got {shards}"
    )
    return x.new_empty((*x.shape[:-1], w_down.shape[0]))


@torch.library.register_fake("liger::glu_mlp_tiled_bwd")
def _glu_mlp_tiled_bwd_fake(dy, x, w_gate, w_up, w_down, activation="silu", shards=1, output_mask=None):
    return _bwd_fake(dy, x, w_gate, w_up, w_down, None, None, None, output_mask)


_op = torch.ops.liger.glu_mlp.default
_tiled_op = torch.ops.liger.glu_mlp_tiled.default


def glu_mlp(
    x: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    activation: str = "silu",
    in_place: bool = False,
) -> Tensor:
    """down(act(x w_gate^T) * (x w_up^T)) = (act(a) * b) w_down^T over the last dim of x.

    x: (..., H); w_gate, w_up: (I, H); w_down: (O, I) (nn.Linear's weight layout); one float dtype.
    activation: "silu" (SwiGLU, HF LlamaMLP), "gelu_tanh" or "gelu" (GeGLU, HF GemmaMLP). The
    forward is bitwise nn.Linear's and the GLU op's; the backward adds x's two gradients in one
    float32 accumulation. `in_place=True` lets the backward write dc, da and db into the op's own
    c, a and b (never a tensor the caller holds): the backward then allocates no (rows x I) buffer.
    Autograd in C++ (csrc/aten/autograd/glu_mlp_autograd.cpp).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"liger_cpp: argument 'activation': expected one of {ACTIVATIONS}, got {activation!r}"
        )
    check_device(x, "x")
    return _op(x, w_gate, w_up, w_down, activation, bool(in_place))


def glu_mlp_tiled(
    x: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    activation: str = "silu",
    shards: int = 1,
) -> Tensor:
    """glu_mlp over `shards` shards of x's rows (ceil(rows / shards) rows each), keeping nothing
    of a shard for the backward, which computes each shard's forward again: one shard's (rows x I)
    intermediates are ever alive instead of the whole sequence's. The weight gradients are summed
    over the shards in float32 (cuBLAS accumulating into a float32 C for 16-bit weights) and
    rounded once. What LigerTiledSwiGLUMLP / LigerTiledGEGLUMLP run for plain projections
    (liger_cpp.ops.tiled_mlp is the general path, for any module). Autograd in C++.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"liger_cpp: argument 'activation': expected one of {ACTIVATIONS}, got {activation!r}"
        )
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"liger_cpp: argument 'shards': expected a positive int, got {shards!r}")
    check_device(x, "x")
    return _tiled_op(x, w_gate, w_up, w_down, activation, shards)
