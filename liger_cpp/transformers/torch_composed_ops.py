"""Liger-Kernel's less used ops, composed of PyTorch's own ops (no liger_cpp kernel of their own):
softmax, sparsemax, group norm, and modulated RMSNorm (liger_cpp's RMSNorm, then PyTorch's
elementwise modulation), with Liger's modules, functionals and autograd Function names, so code
written for Liger runs unchanged. The maths is exact (float32 statistics, one rounding to the
input's dtype at the end, PyTorch's autograd); the speed is PyTorch's eager ops', not a fused
kernel's (softmax and group norm are one PyTorch kernel each already; sparsemax is several). DyT
and PolyNorm have kernels of their own: liger_cpp/transformers/dyt.py, poly_norm.py.
- softmax over the last dimension; sparsemax (Martins & Astudillo, 2016) over `dim`: the Euclidean
  projection onto the simplex, max(x - tau, 0) with sum 1.
- group norm over (batch, channels, *): each group of channels normalised with its mean and
  variance, then a per-channel affine.
- modulated RMSNorm (adaLN): y = (1 + scale) * RMSNorm(x) + shift, scale / shift of R rows of the
  hidden size broadcast over consecutive blocks of x's rows (R must divide them), as Liger's.
- attention residuals (Kimi's AttnRes): of N block outputs V [N, ..., D], the softmax over the N
  blocks of w_query . RMSNorm(v_i; w_norm), then the weighted sum of the v_i.
- multi-token attention (arXiv 2504.00927): out = mask_0(conv2d(softmax(mask_-1e9(scores)))), the
  masks causal (a column after its row), sparsemax in place of softmax with sparse=True.
"""

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.modules.utils import _pair

from liger_cpp.ops.rms_norm import rms_norm
from liger_cpp.transformers.rms_norm import init_rms_norm


def _f32(x: Tensor) -> Tensor:
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def liger_softmax(x):
    """Softmax over x's last dimension (float32 accumulation: PyTorch's kernel)."""
    return torch.softmax(x, dim=-1)


def liger_sparsemax(input, dim=-1):  # noqa: A002 - Liger's argument name
    """Sparsemax over `dim`: max(x - tau, 0), tau chosen so that each slice sums to 1 (sorted
    cumulative sums, float32); gradients through PyTorch's autograd (the support's Jacobian)."""
    x = _f32(input).movedim(dim, -1)
    z, _ = torch.sort(x, dim=-1, descending=True)
    k = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype)
    cum = z.cumsum(-1)
    support = (1 + k * z) > cum  # prefix of the sorted values that stays positive
    size = support.sum(-1, keepdim=True).clamp(min=1)
    tau = (cum.gather(-1, size - 1) - 1) / size.to(x.dtype)
    return torch.clamp(x - tau, min=0).movedim(-1, dim).to(input.dtype)


def liger_group_norm(X, affine_scaling_weight, affine_shifting_bias, num_channels, num_groups, eps):
    """Group norm of X (batch, num_channels, *) in num_groups groups, then the per-channel affine
    (PyTorch's group_norm kernel: float32 statistics)."""
    if X.dim() < 3 or X.shape[1] != num_channels:
        raise ValueError(
            f"liger_cpp: argument 'X': expected shape (batch, {num_channels}, ...), at least 3 dimensions, "
            f"got {tuple(X.shape)}"
        )
    if num_channels % num_groups:
        raise ValueError(
            f"liger_cpp: argument 'num_groups': {num_groups} does not divide num_channels {num_channels}"
        )
    return F.group_norm(X, num_groups, affine_scaling_weight, affine_shifting_bias, eps)


def modulation_rows(X, scale, shift):
    """(R, rows per modulation) of the modulated RMSNorm: scale (and shift, None or scale's shape)
    hold R x hidden elements, R dividing X's rows; row r applies to a block of consecutive rows."""
    h = X.shape[-1]
    n = X.numel() // h if h else 0
    if scale.numel() == 0 or scale.numel() % h or n % (scale.numel() // h):
        raise ValueError(
            f"liger_cpp: argument 'scale': expected R x {h} elements with R dividing the {n} rows of X, "
            f"got shape {tuple(scale.shape)}"
        )
    r = scale.numel() // h
    if shift is not None and shift.numel() != scale.numel():
        raise ValueError(
            f"liger_cpp: argument 'shift': expected scale's {r} x {h} elements, got {tuple(shift.shape)}"
        )
    return r, n // r


def liger_modulated_rms_norm(
    X, W, scale, shift=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False
):
    """(1 + scale) * RMSNorm(X) + shift: liger_cpp's RMSNorm (weight W or None, offset, casting
    mode as LigerRMSNorm's), then the modulation in X's dtype. scale: R x hidden elements, R
    dividing X's rows, row r of scale applying to X's rows [r N / R, (r + 1) N / R); shift None or
    scale's shape. `in_place` is accepted (Liger's default True); nothing is written in place."""
    h = X.shape[-1]
    r, per = modulation_rows(X, scale, shift)
    y = rms_norm(X, W, eps, offset=offset, casting_mode=casting_mode).reshape(r, per, h)
    y = y * (1 + scale.reshape(r, 1, h))
    if shift is not None:
        y = y + shift.reshape(r, 1, h)
    return y.reshape(X.shape).to(X.dtype)


class LigerModulatedRMSNorm(nn.Module):
    """Liger's LigerModulatedRMSNorm(hidden_size, eps, offset, casting_mode, init_fn, in_place,
    elementwise_affine); forward(hidden_states, scale, shift=None). in_place defaults to False
    (liger_cpp's rule; nothing is written in place here either way)."""

    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=0.0,
        casting_mode="llama",
        init_fn="ones",
        in_place=False,
        elementwise_affine=True,
    ):
        super().__init__()
        init_rms_norm(self, hidden_size, eps, offset, casting_mode, init_fn, in_place, elementwise_affine)

    def forward(self, hidden_states, scale, shift=None):
        return liger_modulated_rms_norm(
            hidden_states, self.weight, scale, shift, self.variance_epsilon, self.offset, self.casting_mode
        )


class LigerModulatedRMSNormFunction:
    @staticmethod
    def apply(X, W, scale, shift, eps, offset=0.0, casting_mode="llama", in_place=False):
        return liger_modulated_rms_norm(X, W, scale, shift, eps, offset, casting_mode, in_place)


def liger_attn_res(V, w_query, w_norm, eps=1e-6):
    """Attention residuals: V [N, ..., D] (or a list of N tensors [..., D]) -> [..., D]:
    h = sum_i softmax_i(w_query . (v_i / rms(v_i) * w_norm)) v_i, float32 math."""
    if isinstance(V, (list, tuple)):
        V = torch.stack(list(V))
    d = V.shape[-1]
    if V.dim() < 2 or w_query.shape != (d,) or w_norm.shape != (d,):
        raise ValueError(
            f"liger_cpp: arguments 'V', 'w_query', 'w_norm': expected [N, ..., D], [D] and [D], got "
            f"{tuple(V.shape)}, {tuple(w_query.shape)} and {tuple(w_norm.shape)}"
        )
    v = _f32(V)
    k = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * _f32(w_norm)
    alpha = torch.softmax((k * _f32(w_query)).sum(-1), dim=0)
    return (alpha.unsqueeze(-1) * v).sum(0).to(V.dtype)


class LigerAttnResFunction:
    @staticmethod
    def apply(V_stacked, w_query, w_norm, eps):
        return liger_attn_res(V_stacked, w_query, w_norm, eps)


def _future(t: Tensor) -> Tensor:
    """True where a column comes after its row, over t's last two dimensions."""
    r, c = t.shape[-2], t.shape[-1]
    return torch.ones(r, c, dtype=torch.bool, device=t.device).triu(1)


def liger_multi_token_attention(
    scores, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, sparse=False
):
    """Multi-token attention on scores (B, C_in, L, L): the future masked to -1e9 (Liger's value),
    softmax (sparsemax with sparse=True) over the last dimension in float32, conv2d with weight
    (C_out, C_in / groups, K, K) and bias, the future of the result masked to 0."""
    if scores.dim() != 4:
        raise ValueError(f"liger_cpp: argument 'scores': expected (B, C_in, L, L), got {tuple(scores.shape)}")
    masked = _f32(scores).masked_fill(_future(scores), -1e9)
    probs = liger_sparsemax(masked, -1) if sparse else torch.softmax(masked, -1)
    out = F.conv2d(probs.to(scores.dtype), weight, bias, stride, padding, dilation, groups)
    return out.masked_fill(_future(out), 0.0)


class LigerMultiTokenAttention(nn.Module):
    """Liger's LigerMultiTokenAttention(in_channels, out_channels, kernel_size, stride, padding,
    dilation, groups, bias, sparse): the conv's weight kaiming-uniform, bias zeros, as Liger's."""

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias=True,
        sparse=False,
    ):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = _pair(kernel_size), _pair(stride)
        self.padding, self.dilation = _pair(padding), _pair(dilation)
        self.groups, self.sparse = groups, sparse
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, *self.kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, scores):
        return liger_multi_token_attention(
            scores, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups, self.sparse
        )


class LigerMultiTokenAttentionFunction:
    @staticmethod
    def apply(scores, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, sparse=False):
        return liger_multi_token_attention(scores, weight, bias, stride, padding, dilation, groups, sparse)


class LigerEmbeddingFunction:
    """Liger's experimental embedding Function: apply(embeddings, indices) = embeddings[indices]
    (PyTorch's embedding; its backward accumulates rows in the weight's dtype as PyTorch's does)."""

    @staticmethod
    def apply(embeddings, indices):
        return F.embedding(indices, embeddings)


class LigerEmbedding(nn.Module):
    """Liger's experimental LigerEmbedding(num_embeddings, embedding_dim, padding_idx=None): weight
    N(0, 1) with the padding row zeroed; the padding positions' output is zero (and, as Liger's,
    their rows still receive gradient)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].fill_(0)

    def forward(self, indices):
        out = F.embedding(indices, self.weight)
        if self.padding_idx is not None:
            out = out.masked_fill((indices == self.padding_idx).unsqueeze(-1), 0.0)
        return out


class LigerSoftmax(nn.Module):
    def forward(self, x: Tensor):
        return liger_softmax(x)


class LigerSparsemax(nn.Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return liger_sparsemax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LigerGroupNorm(nn.Module):
    """Group norm (Liger's LigerGroupNorm(num_channels, num_groups, eps=1e-6, bias=False,
    init_fn="ones")): weight ones (or zeros), bias random normal with bias=True, zeros otherwise
    (trainable either way, as Liger's)."""

    def __init__(self, num_channels, num_groups, eps=1e-6, bias=False, init_fn="ones"):
        super().__init__()
        if init_fn not in ("ones", "zeros"):
            raise ValueError(f"liger_cpp: argument 'init_fn': expected 'ones' or 'zeros', got {init_fn!r}")
        if num_channels % num_groups:
            raise ValueError(
                f"liger_cpp: argument 'num_groups': {num_groups} does not divide num_channels {num_channels}"
            )
        self.num_channels = num_channels
        self.num_groups = num_groups
        self.eps = self.variance_epsilon = eps
        self.weight = nn.Parameter(
            torch.ones(num_channels) if init_fn == "ones" else torch.zeros(num_channels)
        )
        self.bias = nn.Parameter(torch.randn(num_channels) if bias else torch.zeros(num_channels))

    def forward(self, hidden_states):
        return liger_group_norm(
            hidden_states, self.weight, self.bias, self.num_channels, self.num_groups, self.variance_epsilon
        )

    def extra_repr(self):
        return f"num_channels={self.num_channels}, num_groups={self.num_groups}, eps={self.eps}"


class LigerSoftmaxFunction:
    @staticmethod
    def apply(input_):
        return liger_softmax(input_)


class LigerSparsemaxFunction:
    @staticmethod
    def apply(x, dim):
        return liger_sparsemax(x, dim)


class LigerGroupNormFunction:
    @staticmethod
    def apply(X, affine_scaling_weight, affine_shifting_bias, num_channels, num_groups, eps):
        return liger_group_norm(X, affine_scaling_weight, affine_shifting_bias, num_channels, num_groups, eps)


__all__ = [
    "LigerEmbedding",
    "LigerEmbeddingFunction",
    "LigerMultiTokenAttention",
    "LigerMultiTokenAttentionFunction",
    "liger_multi_token_attention",
    "LigerAttnResFunction",
    "liger_attn_res",
    "LigerModulatedRMSNorm",
    "LigerModulatedRMSNormFunction",
    "liger_modulated_rms_norm",
    "LigerGroupNorm",
    "LigerGroupNormFunction",
    "LigerSoftmax",
    "LigerSoftmaxFunction",
    "LigerSparsemax",
    "LigerSparsemaxFunction",
    "liger_group_norm",
    "liger_softmax",
    "liger_sparsemax",
]
