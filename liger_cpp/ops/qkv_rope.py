"""Attention input projections with RoPE as one op: fake kernels for torch.ops.liger.qkv_rope*,
and `qkv_rope` (HF LlamaAttention's q/k/v_proj(x).view(B, S, -1, D).transpose(1, 2) and
apply_rotary_pos_emb on q and k, bias-free).

The GEMMs are ATen's (cuBLAS on CUDA), the calls nn.Linear makes, and the rotation is liger_cpp's
RoPE kernel; what the op saves is host work: one call and one autograd node per attention layer for
what HF spends three linears, six views and transposes and their backward nodes on
(csrc/aten/composite/qkv_rope.cpp). Autograd: csrc/aten/autograd/qkv_rope_autograd.cpp (C++).
"""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device


def _check_fake(x, w_q, w_k, w_v, cos, head_dim):
    torch._check(x.dim() == 3, lambda: "liger_cpp: argument 'x': expected (batch, sequence, hidden)")
    torch._check(head_dim > 0 and head_dim % 2 == 0, lambda: "liger_cpp: argument 'head_dim': expected even")
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        torch._check(
            w.dim() == 2 and w.shape[1] == x.shape[-1] and w.shape[0] % head_dim == 0,
            lambda name=name: f"liger_cpp: argument '{name}': expected (heads * head_dim, hidden)",
        )
        torch._check(
            w.dtype == x.dtype, lambda name=name: f"liger_cpp: argument '{name}': expected x's dtype"
        )
    torch._check(w_v.shape == w_k.shape, lambda: "liger_cpp: argument 'w_v': expected w_k's shape")
    torch._check(cos.shape[-1] == head_dim, lambda: "liger_cpp: argument 'cos': expected width head_dim")


def _heads_like(x, weight, head_dim):
    """(B, heads, S, D) with the memory of HF's view(B, S, heads, D).transpose(1, 2)."""
    b, s = x.shape[0], x.shape[1]
    return torch.empty_like(x.new_empty((b, s, weight.shape[0] // head_dim, head_dim)).transpose(1, 2))


@torch.library.register_fake("liger::qkv_rope")
def _qkv_rope_fake(x, w_q, w_k, w_v, cos, sin, head_dim, b_q=None, b_k=None, b_v=None):
    _check_fake(x, w_q, w_k, w_v, cos, head_dim)
    for name, b, w in (("b_q", b_q, w_q), ("b_k", b_k, w_k), ("b_v", b_v, w_v)):
        torch._check(
            b is None or (b.shape == (w.shape[0],) and b.dtype == x.dtype),
            lambda name=name: f"liger_cpp: argument '{name}': expected (rows,) of x's dtype",
        )
    return _heads_like(x, w_q, head_dim), _heads_like(x, w_k, head_dim), _heads_like(x, w_v, head_dim)


@torch.library.register_fake("liger::qkv_rope_bwd")
def _qkv_rope_bwd_fake(dq, dk, dv, x, w_q, w_k, w_v, cos, sin, head_dim, output_mask=None):
    _check_fake(x, w_q, w_k, w_v, cos, head_dim)
    mask = list(output_mask) if output_mask is not None else [True] * 4 + [False] * 3
    shapes = [x.shape, w_q.shape, w_k.shape, w_v.shape, w_q.shape[:1], w_k.shape[:1], w_v.shape[:1]]
    return tuple(x.new_empty(sh) if m else x.new_empty((0,)) for sh, m in zip(shapes, mask))


_op = torch.ops.liger.qkv_rope.default


def qkv_rope(
    x: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    cos: Tensor,
    sin: Tensor,
    head_dim: int,
    b_q: Tensor | None = None,
    b_k: Tensor | None = None,
    b_v: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(rope(q), rope(k), v) with q = (x w_q^T + b_q).view(B, S, -1, D).transpose(1, 2), likewise
    k, v.

    x: (B, S, H); w_q: (Hq * D, H); w_k, w_v: (Hk * D, H) (nn.Linear's weight layout); optional
    biases (Qwen2's); one float dtype. cos, sin: HF's position embeddings ((S, D), (1, S, D) or
    (B, S, D)), full rotary (width D), without gradient. Outputs (B, heads, S, D) laid out as HF's
    transposed views, bitwise HF's with liger_cpp's RoPE; the backward adds x's three gradients in
    one float32 accumulation.
    """
    check_device(x, "x")
    if b_q is None and b_k is None and b_v is None:
        return _op(x, w_q, w_k, w_v, cos, sin, int(head_dim))
    return _op(x, w_q, w_k, w_v, cos, sin, int(head_dim), b_q, b_k, b_v)
