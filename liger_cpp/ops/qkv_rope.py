"""Attention input projections with RoPE as one op: fake kernels for torch.ops.liger.qkv_rope*,
and `qkv_rope` (HF LlamaAttention's q/k/v_proj(x).view(B, S, -1, D).transpose(1, 2) and
apply_rotary_pos_emb on q and k; optional biases (Qwen2) and q / k norms (Qwen3, Gemma 3, OLMo).

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


def _check_fake_extras(x, w_q, w_k, w_v, head_dim, b_q, b_k, b_v, n_q, n_k):
    for name, b, w in (("b_q", b_q, w_q), ("b_k", b_k, w_k), ("b_v", b_v, w_v)):
        torch._check(
            b is None or (b.shape == (w.shape[0],) and b.dtype == x.dtype),
            lambda name=name: f"liger_cpp: argument '{name}': expected (rows,) of x's dtype",
        )
    torch._check((n_q is None) == (n_k is None), lambda: "liger_cpp: argument 'n_k': expected with n_q")
    for name, n, w in (("n_q", n_q, w_q), ("n_k", n_k, w_k)):
        torch._check(
            n is None or (n.dim() == 1 and n.shape[0] in (head_dim, w.shape[0]) and n.dtype == x.dtype),
            lambda name=name: f"liger_cpp: argument '{name}': expected (head_dim,) or (heads * head_dim,)",
        )


@torch.library.register_fake("liger::qkv_rope")
def _qkv_rope_fake(
    x, w_q, w_k, w_v, cos, sin, head_dim, b_q=None, b_k=None, b_v=None, n_q=None, n_k=None, *args
):
    _check_fake(x, w_q, w_k, w_v, cos, head_dim)
    _check_fake_extras(x, w_q, w_k, w_v, head_dim, b_q, b_k, b_v, n_q, n_k)
    return _heads_like(x, w_q, head_dim), _heads_like(x, w_k, head_dim), _heads_like(x, w_v, head_dim)


@torch.library.register_fake("liger::qkv_rope_fwd")
def _qkv_rope_fwd_fake(x, w_q, w_k, w_v, cos, sin, head_dim, b_q, b_k, b_v, n_q, n_k, *args):
    q, k, v = _qkv_rope_fake(x, w_q, w_k, w_v, cos, sin, head_dim, b_q, b_k, b_v, n_q, n_k)
    m = x.shape[0] * x.shape[1]

    def rstd_rows(n, w):
        return m * (w.shape[0] // head_dim) if n.shape[0] == head_dim else m

    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # rms_norm_fwd's RSTD
    return (
        q,
        k,
        v,
        x.new_empty((m, w_q.shape[0])),
        x.new_empty((m, w_k.shape[0])),
        x.new_empty((rstd_rows(n_q, w_q),), dtype=acc),
        x.new_empty((rstd_rows(n_k, w_k),), dtype=acc),
    )


@torch.library.register_fake("liger::qkv_rope_bwd")
def _qkv_rope_bwd_fake(
    dq,
    dk,
    dv,
    x,
    w_q,
    w_k,
    w_v,
    cos,
    sin,
    head_dim,
    output_mask=None,
    q_pre=None,
    k_pre=None,
    n_q=None,
    n_k=None,
    *args,
):
    _check_fake(x, w_q, w_k, w_v, cos, head_dim)
    mask = list(output_mask) if output_mask is not None else [True] * 4 + [False] * 5
    torch._check(
        n_q is not None or not (mask[7] or mask[8]),
        lambda: "liger_cpp: argument 'output_mask': asks for dn_q / dn_k without n_q, n_k",
    )
    nq_shape = n_q.shape if n_q is not None else (0,)
    nk_shape = n_k.shape if n_k is not None else (0,)
    shapes = [x.shape, w_q.shape, w_k.shape, w_v.shape, w_q.shape[:1], w_k.shape[:1], w_v.shape[:1]]
    shapes += [nq_shape, nk_shape]
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
    n_q: Tensor | None = None,
    n_k: Tensor | None = None,
    norm_eps: float = 1e-6,
    norm_offset: float = 0.0,
    norm_casting: str = "llama",
) -> tuple[Tensor, Tensor, Tensor]:
    """(rope(q), rope(k), v) with q = (x w_q^T + b_q).view(B, S, -1, D).transpose(1, 2), likewise
    k, v.

    x: (B, S, H); w_q: (Hq * D, H); w_k, w_v: (Hk * D, H) (nn.Linear's weight layout); optional
    biases (Qwen2's); one float dtype. cos, sin: HF's position embeddings ((S, D), (1, S, D) or
    (B, S, D)), full rotary (width D), without gradient. Outputs (B, heads, S, D) laid out as HF's
    transposed views, bitwise HF's with liger_cpp's RoPE; the backward adds x's three gradients in
    one float32 accumulation.

    n_q, n_k: q / k norm weights (Qwen3, Gemma 3, OLMo 2 / 3; both or neither, x's dtype): q and k
    pass through liger_cpp's RMSNorm (`rms_norm(rows, n, norm_eps, offset=norm_offset,
    casting_mode=norm_casting)`, LigerRMSNorm's call) before RoPE, per head for (head_dim,) weights,
    over the whole projection for (heads * head_dim,) ones; their gradients come with the others.
    """
    check_device(x, "x")
    if n_q is not None or n_k is not None:
        return _op(
            x,
            w_q,
            w_k,
            w_v,
            cos,
            sin,
            int(head_dim),
            b_q,
            b_k,
            b_v,
            n_q,
            n_k,
            float(norm_eps),
            float(norm_offset),
            norm_casting,
        )
    if b_q is None and b_k is None and b_v is None:
        return _op(x, w_q, w_k, w_v, cos, sin, int(head_dim))
    return _op(x, w_q, w_k, w_v, cos, sin, int(head_dim), b_q, b_k, b_v)
