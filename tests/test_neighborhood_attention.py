"""Neighborhood attention (liger_cpp.transformers.neighborhood_attention; Liger's
LigerFusedNeighborhoodAttention* names): against a float64 reference that loops over each query's
window (|j - i| <= (kernel_size // 2) * dilation, j - i a multiple of dilation, clipped at the
ends), float32 and bfloat16, gradients, gradcheck, the modules, errors."""

import math

import pytest
import torch
from conftest import DEVICES

from liger_cpp.transformers.neighborhood_attention import (
    LigerFusedNeighborhoodAttention,
    LigerFusedNeighborhoodAttentionConfig,
    LigerFusedNeighborhoodAttentionFunction,
    LigerFusedNeighborhoodAttentionLayer,
)


def reference(q, k, v, kernel_size, dilation, scale):
    """Each query's window written out, float64."""
    B, H, L, _ = q.shape
    out = torch.zeros(B, H, L, v.shape[-1], dtype=torch.float64)
    half = kernel_size // 2
    for i in range(L):
        js = [
            j
            for j in range(max(0, i - half * dilation), min(L, i + half * dilation + 1))
            if (j - i) % dilation == 0
        ]
        s = torch.einsum("bhd,bhjd->bhj", q[:, :, i].double(), k[:, :, js].double()) * scale
        out[:, :, i] = torch.einsum("bhj,bhjd->bhd", torch.softmax(s, -1), v[:, :, js].double())
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("L,kernel_size,dilation", [(13, 7, 1), (20, 5, 2), (3, 7, 1), (9, 1, 1), (16, 3, 4)])
def test_matches_reference(device, dtype, L, kernel_size, dilation):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, L, 8, generator=g) for _ in range(3))
    scale = 1 / math.sqrt(8)
    want = reference(q, k, v, kernel_size, dilation, scale)
    got = LigerFusedNeighborhoodAttentionFunction.apply(
        *(t.to(device, dtype) for t in (q, k, v)), kernel_size, dilation, None
    )
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.double().cpu(), want, rtol=tol, atol=tol)


def test_gradients():
    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(1, 2, 11, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3)
    )
    assert torch.autograd.gradcheck(
        lambda a, b, c: LigerFusedNeighborhoodAttentionFunction.apply(a, b, c, 5, 2, 0.7), (q, k, v)
    )
    dy = torch.randn(1, 2, 11, 4, generator=g, dtype=torch.float64)
    LigerFusedNeighborhoodAttentionFunction.apply(q, k, v, 5, 2, 0.7).backward(dy)
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    reference(q, k, v, 5, 2, 0.7).backward(dy)
    for a, t in zip(got, (q, k, v)):
        torch.testing.assert_close(a, t.grad, rtol=1e-10, atol=1e-10)


def test_modules():
    torch.manual_seed(0)
    m = LigerFusedNeighborhoodAttention(16, 4, kernel_size=3)
    x = torch.randn(2, 9, 16)
    q, k, v = (p(x).view(2, 9, 4, 4).transpose(1, 2) for p in (m.q_proj, m.k_proj, m.v_proj))
    want = m.out_proj(reference(q, k, v, 3, 1, 0.5).float().transpose(1, 2).reshape(2, 9, 16))
    torch.testing.assert_close(m(x), want, rtol=1e-5, atol=1e-5)
    layer = LigerFusedNeighborhoodAttentionLayer(16, 4, kernel_size=3)
    y = layer(x)
    assert y.shape == x.shape
    y.sum().backward()
    assert layer.attention.q_proj.weight.grad is not None
    cfg = LigerFusedNeighborhoodAttentionConfig(hidden_size=32, kernel_size=5)
    assert cfg.to_dict()["kernel_size"] == 5 and cfg.to_dict()["num_heads"] == 12
    with pytest.raises(NotImplementedError):
        m(x, attention_mask=torch.ones(2, 9))
    with pytest.raises(ValueError, match="argument 'kernel_size'"):
        LigerFusedNeighborhoodAttention(16, 4, kernel_size=4)
    with pytest.raises(ValueError, match="argument 'num_heads'"):
        LigerFusedNeighborhoodAttention(16, 3)
