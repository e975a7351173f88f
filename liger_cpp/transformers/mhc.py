"""Manifold-constrained hyper-connections (mHC, arXiv 2512.24880; Liger's LigerMHC and its
functionals / Functions), composed of PyTorch's ops in float32 (no kernel of ours). x holds HC
residual streams, [..., HC, C]; a layer F: [..., C] -> [..., C] is wrapped as

  mix    = (x_flat phi) / rms(x_flat),  x_flat = x as [..., HC C], phi [HC C, HC^2 + 2 HC]
  h_pre  = sigmoid(alpha_pre mix[:HC] + b[:HC]) + pre_eps                       [..., HC]
  h_post = post_mult sigmoid(alpha_post mix[HC:2HC] + b[HC:2HC])                [..., HC]
  h_res  = Sinkhorn(alpha_res mix[2HC:] + b[2HC:] as [HC, HC])                  [..., HC, HC]
           (row softmax, + sinkhorn_eps, column normalisation, then tmax - 1 more row / column
           normalisations, each dividing by its sum + sinkhorn_eps: Liger's iteration)
  x_in   = sum_i h_pre[i] x[i];  f = F(x_in)
  x_out[o] = sum_i h_res[o, i] x[i] + h_post[o] f                                [..., HC, C]

The coefficients are float32; x_in and x_out are rounded once to x's dtype. Gradients through
PyTorch's autograd (the Sinkhorn iterations unrolled)."""

import warnings

import torch
from torch import nn


def _acc(t):
    return t if t.dtype == torch.float64 else t.float()


def liger_mhc_coeffs(
    x,
    phi,
    b,
    alpha_pre,
    alpha_post,
    alpha_res,
    *,
    allow_fp32=False,
    tmax=20,
    rms_eps=1e-6,
    pre_eps=0.0,
    sinkhorn_eps=1e-6,
    post_mult=2.0,
):
    """(h_pre [..., HC], h_post [..., HC], h_res [..., HC, HC]), float32 (float64 for float64 x)."""
    low = (torch.bfloat16, torch.float16)
    if x.dtype not in low and not (allow_fp32 and x.dtype in (torch.float32, torch.float64)):
        raise ValueError(
            "liger_cpp: argument 'x': expected bfloat16 or float16 (float32 with allow_fp32=True), "
            f"got {x.dtype}"
        )
    if x.dim() < 3:
        raise ValueError(f"liger_cpp: argument 'x': expected [..., HC, C], got {tuple(x.shape)}")
    hc, c = x.shape[-2], x.shape[-1]
    m = hc * hc + 2 * hc
    if phi.shape != (hc * c, m) or b.shape != (m,):
        raise ValueError(
            f"liger_cpp: arguments 'phi', 'b': expected ({hc * c}, {m}) and ({m},), got {tuple(phi.shape)} "
            f"and {tuple(b.shape)}"
        )
    xf = _acc(x.reshape(*x.shape[:-2], hc * c))
    mix = (xf @ _acc(phi)) * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + rms_eps)
    bf = _acc(b)
    h_pre = torch.sigmoid(mix[..., :hc] * _acc(alpha_pre) + bf[:hc]) + pre_eps
    h_post = torch.sigmoid(mix[..., hc : 2 * hc] * _acc(alpha_post) + bf[hc : 2 * hc]) * post_mult
    logits = (mix[..., 2 * hc :] * _acc(alpha_res) + bf[2 * hc :]).reshape(*mix.shape[:-1], hc, hc)
    mat = torch.softmax(logits, dim=-1) + sinkhorn_eps
    mat = mat / (mat.sum(-2, keepdim=True) + sinkhorn_eps)
    for _ in range(int(tmax) - 1):
        mat = mat / (mat.sum(-1, keepdim=True) + sinkhorn_eps)
        mat = mat / (mat.sum(-2, keepdim=True) + sinkhorn_eps)
    return h_pre, h_post, mat


def liger_mhc_pre(x, h_pre):
    """x_in = sum_i h_pre[i] x[i]: [..., HC, C] -> [..., C], float32 sums."""
    return (_acc(h_pre).unsqueeze(-1) * _acc(x)).sum(-2).to(x.dtype)


def liger_mhc_post_res(x, f_out, h_post, h_res):
    """x_out[o] = sum_i h_res[o, i] x[i] + h_post[o] f_out: [..., HC, C], float32 sums."""
    out = _acc(h_res) @ _acc(x) + _acc(h_post).unsqueeze(-1) * _acc(f_out).unsqueeze(-2)
    return out.to(x.dtype)


def liger_mhc_apply(x, f_out, h_pre, h_post, h_res, *, return_x_in=False):
    x_in = liger_mhc_pre(x, h_pre)
    x_out = liger_mhc_post_res(x, f_out, h_post, h_res)
    return (x_out, x_in) if return_x_in else x_out


def _layer_dtype(layer, default):
    try:
        return next(layer.parameters()).dtype
    except (AttributeError, StopIteration):
        return default


def liger_mhc_forward(
    x,
    layer,
    phi,
    b,
    alpha_pre,
    alpha_post,
    alpha_res,
    *,
    allow_fp32=False,
    tmax=20,
    rms_eps=1e-6,
    pre_eps=0.0,
    sinkhorn_eps=1e-6,
    post_mult=2.0,
    return_coeffs=False,
):
    """Coefficients, pre-aggregation, the layer (its input cast to its parameters' dtype), post +
    residual."""
    coeffs = liger_mhc_coeffs(
        x,
        phi,
        b,
        alpha_pre,
        alpha_post,
        alpha_res,
        allow_fp32=allow_fp32,
        tmax=tmax,
        rms_eps=rms_eps,
        pre_eps=pre_eps,
        sinkhorn_eps=sinkhorn_eps,
        post_mult=post_mult,
    )
    h_pre, h_post, h_res = coeffs
    x_in = liger_mhc_pre(x, h_pre)
    f_out = layer(x_in.to(_layer_dtype(layer, x_in.dtype)))
    x_out = liger_mhc_post_res(x, f_out, h_post, h_res)
    return (x_out, coeffs) if return_coeffs else x_out


class LigerMHCCoeffsFunction:
    @staticmethod
    def apply(
        x,
        phi,
        b,
        alpha_pre,
        alpha_post,
        alpha_res,
        allow_fp32,
        tmax,
        rms_eps,
        pre_eps,
        sinkhorn_eps,
        post_mult,
    ):
        return liger_mhc_coeffs(
            x,
            phi,
            b,
            alpha_pre,
            alpha_post,
            alpha_res,
            allow_fp32=allow_fp32,
            tmax=tmax,
            rms_eps=rms_eps,
            pre_eps=pre_eps,
            sinkhorn_eps=sinkhorn_eps,
            post_mult=post_mult,
        )


class LigerMHCPreFunction:
    @staticmethod
    def apply(x, h_pre):
        return liger_mhc_pre(x, h_pre)


class LigerMHCPostResFunction:
    @staticmethod
    def apply(x, f_out, h_post, h_res):
        return liger_mhc_post_res(x, f_out, h_post, h_res)


class LigerMHC(nn.Module):
    """Liger's LigerMHC(layer, *, hc, c, tmax, rms_eps, pre_eps, sinkhorn_eps, post_mult, phi_dtype,
    allow_fp32): phi [HC C, HC^2 + 2 HC] ~ 0.02 N(0, 1) in phi_dtype, b zeros (float32), the three
    alphas 1 (float32), on the layer's device."""

    def __init__(
        self,
        layer,
        *,
        hc,
        c,
        tmax=20,
        rms_eps=1e-6,
        pre_eps=0.0,
        sinkhorn_eps=1e-6,
        post_mult=2.0,
        phi_dtype=torch.float16,
        allow_fp32=False,
    ):
        super().__init__()
        self.layer = layer
        self.hc, self.c = int(hc), int(c)
        if hc > 16:
            warnings.warn(f"liger_cpp: hc={hc} is above the range mHC recommends, [2, 16]", stacklevel=2)
        self.tmax, self.rms_eps, self.pre_eps = int(tmax), float(rms_eps), float(pre_eps)
        self.sinkhorn_eps, self.post_mult, self.allow_fp32 = (
            float(sinkhorn_eps),
            float(post_mult),
            bool(allow_fp32),
        )
        m, k = hc * hc + 2 * hc, hc * c
        try:
            device = next(layer.parameters()).device
        except StopIteration:
            device = torch.device("cpu")
        self.phi = nn.Parameter(torch.randn(k, m, dtype=phi_dtype, device=device) * 0.02)
        self.b = nn.Parameter(torch.zeros(m, dtype=torch.float32, device=device))
        self.alpha_pre = nn.Parameter(torch.tensor(1.0, device=device))
        self.alpha_post = nn.Parameter(torch.tensor(1.0, device=device))
        self.alpha_res = nn.Parameter(torch.tensor(1.0, device=device))

    def forward(self, x):
        if x.shape[-2:] != (self.hc, self.c):
            raise ValueError(
                f"liger_cpp: argument 'x': expected [..., {self.hc}, {self.c}], got {tuple(x.shape)}"
            )
        return liger_mhc_forward(
            x,
            self.layer,
            self.phi,
            self.b,
            self.alpha_pre,
            self.alpha_post,
            self.alpha_res,
            allow_fp32=self.allow_fp32,
            tmax=self.tmax,
            rms_eps=self.rms_eps,
            pre_eps=self.pre_eps,
            sinkhorn_eps=self.sinkhorn_eps,
            post_mult=self.post_mult,
        )

    def extra_repr(self):
        return f"hc={self.hc}, c={self.c}, tmax={self.tmax}"


__all__ = [
    "LigerMHC",
    "LigerMHCCoeffsFunction",
    "LigerMHCPostResFunction",
    "LigerMHCPreFunction",
    "liger_mhc_apply",
    "liger_mhc_coeffs",
    "liger_mhc_forward",
    "liger_mhc_post_res",
    "liger_mhc_pre",
]
