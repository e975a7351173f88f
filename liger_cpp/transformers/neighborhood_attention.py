"""Neighborhood attention (Liger's LigerFusedNeighborhoodAttention* names, arXiv 2504.16922),
composed of PyTorch's ops (no kernel of ours): each query position i attends to the keys j with
|j - i| <= (kernel_size // 2) * dilation and (j - i) a multiple of dilation, clipped at the
sequence's ends (not causal), as Liger's mask defines it. Scores, softmax and the weighted sum in
float32, one rounding to the inputs' dtype; like Liger's it materialises the (L x L) scores of
each head."""

import math
from typing import Optional

import torch
from torch import nn


def _neighborhood(L: int, kernel_size: int, dilation: int, device) -> torch.Tensor:
    rel = torch.arange(L, device=device)[None, :] - torch.arange(L, device=device)[:, None]
    return (rel.abs() <= (kernel_size // 2) * dilation) & (rel % dilation == 0)


def _check(kernel_size, dilation):
    if kernel_size <= 0 or kernel_size % 2 == 0:
        raise ValueError(
            f"liger_cpp: argument 'kernel_size': expected a positive odd number, got {kernel_size}"
        )
    if dilation < 1:
        raise ValueError(f"liger_cpp: argument 'dilation': expected a positive number, got {dilation}")


def liger_fused_neighborhood_attention(query, key, value, kernel_size=7, dilation=1, scale=None):
    """query, key, value [B, heads, L, head_dim] -> [B, heads, L, head_dim]; scale None:
    1 / sqrt(head_dim)."""
    if value.dim() != 4 or value.shape[:3] != query.shape[:3]:
        raise ValueError(
            "liger_cpp: arguments 'query', 'key', 'value': expected [B, heads, L, head_dim] each, got "
            f"{tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}"
        )
    probs = neighborhood_attention_probs(query, key, kernel_size, dilation, scale)
    return torch.matmul(probs, value.to(probs.dtype)).to(query.dtype)


def neighborhood_attention_probs(query, key, kernel_size=7, dilation=1, scale=None):
    """The attention weights [B, heads, L, L] (float32, float64 for float64 inputs): the softmax of
    scale q.k over each position's neighborhood (|i - j| <= (kernel_size // 2) dilation, j - i a
    multiple of dilation), 0 elsewhere."""
    _check(kernel_size, dilation)
    if query.dim() != 4 or key.shape != query.shape:
        raise ValueError(
            "liger_cpp: arguments 'query', 'key': expected [B, heads, L, head_dim] each, got "
            f"{tuple(query.shape)} and {tuple(key.shape)}"
        )
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = torch.matmul(query.to(acc), key.to(acc).transpose(-1, -2)) * scale
    allowed = _neighborhood(query.shape[-2], kernel_size, dilation, query.device)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


class LigerFusedNeighborhoodAttentionFunction:
    @staticmethod
    def apply(query, key, value, kernel_size=7, dilation=1, scale=None):
        return liger_fused_neighborhood_attention(query, key, value, kernel_size, dilation, scale)


class LigerFusedNeighborhoodAttention(nn.Module):
    """Liger's module: q / k / v / out projections around neighborhood attention over
    [batch, seq, hidden]; attention_mask is not supported (as Liger's: NotImplementedError)."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        kernel_size: int = 7,
        dilation: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        scale: Optional[float] = None,
    ):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(
                f"liger_cpp: argument 'num_heads': {num_heads} does not divide hidden_size {hidden_size}"
            )
        _check(kernel_size, dilation)
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.head_dim = hidden_size // num_heads
        self.kernel_size, self.dilation = kernel_size, dilation
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.dropout_p = dropout
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.out_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.dropout = nn.Dropout(dropout) if dropout > 0.0 else None

    def forward(self, hidden_states, attention_mask=None):
        if attention_mask is not None:
            raise NotImplementedError(
                "liger_cpp: LigerFusedNeighborhoodAttention takes no attention_mask (as Liger's)"
            )
        b, L, h = hidden_states.shape

        def heads(t):
            return t.view(b, L, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = (heads(p(hidden_states)) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = liger_fused_neighborhood_attention(q, k, v, self.kernel_size, self.dilation, self.scale)
        out = out.transpose(1, 2).reshape(b, L, h)
        if self.dropout is not None:
            out = self.dropout(out)
        return self.out_proj(out)


class LigerFusedNeighborhoodAttentionLayer(nn.Module):
    """Pre-norm residual layer: x + dropout(attention(LayerNorm(x)))."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        kernel_size: int = 7,
        dilation: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        layer_norm_eps: float = 1e-5,
        scale: Optional[float] = None,
    ):
        super().__init__()
        self.attention = LigerFusedNeighborhoodAttention(
            hidden_size, num_heads, kernel_size, dilation, bias, dropout, scale
        )
        self.layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout) if dropout > 0.0 else None

    def forward(self, hidden_states, attention_mask=None):
        out = self.attention(self.layer_norm(hidden_states), attention_mask)
        if self.dropout is not None:
            out = self.dropout(out)
        return hidden_states + out


class LigerFusedNeighborhoodAttentionConfig:
    """The modules' arguments in one object (Liger's), with to_dict()."""

    def __init__(
        self,
        hidden_size: int = 768,
        num_heads: int = 12,
        kernel_size: int = 7,
        dilation: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        layer_norm_eps: float = 1e-5,
        scale: Optional[float] = None,
    ):
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.kernel_size, self.dilation = kernel_size, dilation
        self.bias, self.dropout = bias, dropout
        self.layer_norm_eps, self.scale = layer_norm_eps, scale

    def to_dict(self):
        return dict(vars(self))


__all__ = [
    "LigerFusedNeighborhoodAttention",
    "LigerFusedNeighborhoodAttentionConfig",
    "LigerFusedNeighborhoodAttentionFunction",
    "LigerFusedNeighborhoodAttentionLayer",
    "liger_fused_neighborhood_attention",
]
