"""Liger-Kernel's function-level forward / backward entry points (``liger_kernel.ops.rms_norm.
rms_norm_forward`` ... ``liger_kernel.ops.tvd.tvd_backward_triton``): what its autograd Functions
call, and what other projects import to build Functions of their own (kernel dispatchers, mHC
integrations, benchmarks). Each takes Liger-Kernel's arguments and returns its tuple, in the same
order, computed by liger_cpp's ops (their CUDA kernels, or the CPU twins), without autograd.

Where the tuple holds launch settings (BLOCK_SIZE, num_warps, num_stages) they are the values
Liger-Kernel's launcher would pick for the shape, returned for the caller to pass back; liger_cpp's
backward ignores them. Deliberate differences, as in _functions.py:
- no input of the caller's is written over (output buffers it passes, mHC's `out_*`, are filled,
  as Liger-Kernel's): Liger-Kernel's entry points overwrite their inputs
  (swiglu's and geglu's a and b, cross entropy's logits, rope's q and k, the fused gate-up tensor)
  and return them; these return new tensors with the same values, so callers that use the returned
  tensors (every caller in Liger) behave the same, at the cost of one more buffer of that size. The
  fused-linear cross entropy's backward scales the gradient buffers its forward returned in place,
  and the fused MLP's swiglu_backward_dGU writes over gemm_swiglu's AGU buffer, as Liger-Kernel's:
  those are the forward's outputs, not the caller's data, and copies would raise the peak;
- statistics stay float32 (RSTD of casting mode "none", cross entropy's per-row losses), where
  Liger-Kernel keeps some in the input's dtype.
"""

import contextlib
import math

import torch

from liger_cpp.ops.llama4_rope import as_real_freqs
from liger_cpp.transformers.qwen2vl_mrope import liger_multimodal_rotary_pos_emb
from liger_cpp.transformers.rope import liger_rotary_pos_emb

_CASTING = {"llama": 0, "gemma": 1, "none": -1}
_CASTING_NAME = {v: k for k, v in _CASTING.items()}


def _casting(casting_mode):
    """(name for liger_cpp, Liger-Kernel's integer) of a casting mode given as either."""
    if isinstance(casting_mode, str):
        if casting_mode not in _CASTING:
            raise ValueError(
                f"liger_cpp: argument 'casting_mode': expected one of {sorted(_CASTING)}, "
                f"got {casting_mode!r}"
            )
        return casting_mode, _CASTING[casting_mode]
    if int(casting_mode) not in _CASTING_NAME:
        raise ValueError(
            f"liger_cpp: argument 'casting_mode': expected one of {sorted(_CASTING_NAME)}, "
            f"got {casting_mode!r}"
        )
    return _CASTING_NAME[int(casting_mode)], int(casting_mode)


def _rows(x):
    return x.reshape(-1, x.shape[-1])


def _settings(n):
    """Liger-Kernel's (BLOCK_SIZE, num_warps) for rows of n elements, without its 65536-element
    limit (liger_cpp's kernels have none): the block capped at 65536."""
    block = min(65536, 1 << max(0, int(n) - 1).bit_length())
    return block, get_num_warps(block)


# ---- RMSNorm, FusedAddRMSNorm, LayerNorm, GroupNorm -------------------------------------------


@torch.no_grad()
def rms_norm_forward(X, W, eps, offset, casting_mode, row_mode):
    """(Y, X as rows, RSTD (rows,), BLOCK_SIZE, num_warps, casting mode as Liger's integer)."""
    name, code = _casting(casting_mode)
    Y, rstd = torch.ops.liger.rms_norm_fwd(X, W, float(eps), float(offset), name, False)
    block, warps = _settings(X.shape[-1])
    return Y, _rows(X), rstd.reshape(-1), block, warps, code


@torch.no_grad()
def rms_norm_backward(
    dY, X, W, RSTD, offset, casting_mode, BLOCK_SIZE, num_warps, in_place, row_mode, needs_dw=None
):
    """(dX in dY's shape, dW in W's dtype or None). `in_place` is accepted; dX is a new tensor."""
    name, _ = _casting(casting_mode)
    compute_dw = W is not None and (needs_dw is None or bool(needs_dw))
    x = X.reshape(dY.shape)
    dX, dW = torch.ops.liger.rms_norm_bwd(
        dY, x, W, RSTD.reshape(dY.shape[:-1]), float(offset), name, compute_dw
    )
    return dX, (dW if compute_dw else None)


@torch.no_grad()
def fused_add_rms_norm_forward(X, R, W, eps, offset, casting_mode):
    """(Y, S = X + R, RSTD (rows,), BLOCK_SIZE, num_warps, num_stages, casting mode's integer)."""
    name, code = _casting(casting_mode)
    Y, S, rstd = torch.ops.liger.fused_add_rms_norm_fwd(X, R, W, float(eps), float(offset), name, False)
    block, warps = _settings(X.shape[-1])
    return Y, S, rstd.reshape(-1), block, warps, 2, code


@torch.no_grad()
def fused_add_rms_norm_backward(
    dY, dS_out, S, W, RSTD, offset, casting_mode, BLOCK_SIZE, num_warps, num_stages, in_place, needs_dw=None
):
    """(dX, dR, dW): dX and dR are the same tensor (the gradient of S), as Liger-Kernel's."""
    name, _ = _casting(casting_mode)
    compute_dw = W is not None and (needs_dw is None or bool(needs_dw))
    s = S.reshape(dY.shape)
    d_s = None if dS_out is None else dS_out.reshape(dY.shape)
    dS, dW = torch.ops.liger.fused_add_rms_norm_bwd(
        dY, d_s, s, W, RSTD.reshape(dY.shape[:-1]), float(offset), name, compute_dw
    )
    return dS, dS, (dW if compute_dw else None)


@torch.no_grad()
def layer_norm_forward(X, W, B, eps):
    """(Y, X as rows, Mean (rows,), RSTD (rows,), BLOCK_SIZE, num_warps)."""
    Y, mean, rstd = torch.ops.liger.layer_norm_fwd(X, W, B, float(eps))
    block, warps = _settings(X.shape[-1])
    return Y, _rows(X), mean.reshape(-1), rstd.reshape(-1), block, warps


@torch.no_grad()
def layer_norm_backward(dY, X, W, B, Mean, RSTD, needs_dw=None, needs_db=None):
    """(dX in dY's shape, dW in W's dtype or None, dB in B's dtype or None)."""
    compute_dw = W is not None and (needs_dw is None or bool(needs_dw))
    compute_db = B is not None and (needs_db is None or bool(needs_db))
    lead = dY.shape[:-1]
    dX, dW, dB = torch.ops.liger.layer_norm_bwd(
        dY, X.reshape(dY.shape), W, Mean.reshape(lead), RSTD.reshape(lead), compute_dw, compute_db
    )
    return dX, (dW if compute_dw else None), (dB.to(B.dtype) if compute_db else None)


@torch.no_grad()
def group_norm_forward(X, num_channels, num_groups, W, B, eps):
    """(Y, X, Mean (batch, groups), RSTD (batch, groups), BLOCK_SIZE): PyTorch's group norm kernel
    (float32 statistics), as liger_cpp's LigerGroupNorm."""
    if X.dim() < 2 or X.shape[1] != num_channels or num_channels % num_groups:
        raise ValueError(
            f"liger_cpp: argument 'X': expected (batch, {num_channels}, ...) with num_groups {num_groups} "
            f"dividing the channels, got {tuple(X.shape)}"
        )
    n, hw = X.shape[0], X[0, 0].numel()
    Y, mean, rstd = torch.native_group_norm(X, W, B, n, num_channels, hw, num_groups, float(eps))
    return Y, X, mean, rstd, _settings(num_channels // num_groups * hw)[0]


@torch.no_grad()
def group_norm_backward(dY, X, W, B, Mean, RSTD, num_channels, num_groups):
    """(dX, dW, dB) of group_norm_forward."""
    n, hw = X.shape[0], X[0, 0].numel()
    mask = [True, W is not None, B is not None]
    dX, dW, dB = torch.ops.aten.native_group_norm_backward(
        dY.contiguous(), X.contiguous(), Mean, RSTD, W, n, num_channels, hw, num_groups, mask
    )
    return dX, dW, dB


@torch.no_grad()
def modulated_rms_norm_forward(X, W, scale, shift, eps, offset, casting_mode):
    """(Y = (1 + scale) * RMSNorm(X) + shift, RSTD (rows,), BLOCK_SIZE, num_warps, casting mode's
    integer, rows per modulation), as liger_cpp's LigerModulatedRMSNorm computes Y."""
    from liger_cpp.transformers.torch_composed_ops import liger_modulated_rms_norm, modulation_rows

    name, code = _casting(casting_mode)
    _, per = modulation_rows(X, scale, shift)
    Y = liger_modulated_rms_norm(X, W, scale, shift, float(eps), float(offset), name)
    rstd = torch.ops.liger.rms_norm_fwd(X, W, float(eps), float(offset), name, False)[1]
    block, warps = _settings(X.shape[-1])
    return Y, rstd.reshape(-1), block, warps, code, per


@torch.no_grad()
def modulated_rms_norm_backward(
    dY, X, W, scale, shift, RSTD, offset, casting_mode, BLOCK_SIZE, num_warps, rows_per_modulation, in_place
):
    """(dX, dW or None, dScale, dShift or None) of modulated_rms_norm_forward from its RSTD: dX and dW
    through liger_cpp's RMSNorm backward with dY (1 + scale) coming in, dScale / dShift the sums of
    dY RMSNorm(X) / dY over each modulation's rows, in float32."""
    from liger_cpp.transformers.torch_composed_ops import modulation_rows

    name, _ = _casting(casting_mode)
    d = X.shape[-1]
    r, per = modulation_rows(X, scale, shift)
    x = X.reshape(-1, d)
    rstd = RSTD.reshape(-1, 1).float()
    # RMSNorm(X) again from RSTD, in the casting mode's arithmetic (csrc/schema.cpp, rms_norm_fwd)
    normed = x.float() * rstd
    if W is None:
        out = normed.to(X.dtype)
    elif name == "llama":
        out = normed.to(X.dtype) * (W + offset)
    else:
        out = (normed * (W.float() + offset)).to(X.dtype)
    g = dY.reshape(r, per, d).float()
    up = (g * (1 + scale.reshape(r, 1, d).float())).reshape(-1, d).to(out.dtype)
    dX, dW = torch.ops.liger.rms_norm_bwd(up, x, W, RSTD.reshape(-1), float(offset), name, W is not None)
    d_scale = (g * out.reshape(r, per, d).float()).sum(1).to(scale.dtype).reshape(scale.shape)
    d_shift = None if shift is None else g.sum(1).to(shift.dtype).reshape(shift.shape)
    return dX.reshape(X.shape).to(X.dtype), (dW if W is not None else None), d_scale, d_shift


@torch.no_grad()
def attn_res_forward(blocks, w_query, w_norm, eps=1e-6):
    """(h [..., D], V as [N, tokens, D], Alpha [tokens, N], RSTD [tokens, N]; both float32) of
    Kimi's attention residuals over N blocks (a list of [..., D] or stacked [N, ..., D])."""
    from liger_cpp.transformers.torch_composed_ops import liger_attn_res

    V = torch.stack(list(blocks)) if isinstance(blocks, (list, tuple)) else blocks
    n, d = V.shape[0], V.shape[-1]
    v3 = V.reshape(n, -1, d).contiguous()
    h = liger_attn_res(v3, w_query, w_norm, eps)
    vf = v3.float()
    rstd = torch.rsqrt(vf.square().mean(-1) + eps)
    alpha = torch.softmax((vf * rstd.unsqueeze(-1) * w_norm.float() * w_query.float()).sum(-1), dim=0)
    return h.reshape(V.shape[1:]), v3, alpha.T.contiguous(), rstd.T.contiguous()


def attn_res_backward(dh, V_3d, w_query, w_norm, Alpha, RSTD, eps=1e-6):
    """(dV [N, tokens, D], dw_query, dw_norm): liger_cpp's attention residuals' gradients (PyTorch's
    autograd over the float32 formula; Alpha and RSTD are not needed to recompute it)."""
    from liger_cpp.transformers.torch_composed_ops import liger_attn_res

    v = V_3d.detach().requires_grad_()
    wq = w_query.detach().requires_grad_()
    wn = w_norm.detach().requires_grad_()
    with torch.enable_grad():
        h = liger_attn_res(v, wq, wn, eps)
    with torch.no_grad():
        return torch.autograd.grad(h, (v, wq, wn), dh.reshape(h.shape).to(h.dtype))


# ---- mHC (manifold-constrained hyper-connections): Liger-Kernel's Triton-level steps ------------
# float32 PyTorch, as liger_cpp's mHC (liger_cpp/transformers/mhc.py); each writes into the `out_*`
# buffers a caller passes (those are outputs) and returns them; block / warp arguments are accepted.


def _into(out, value):
    return value if out is None else out.copy_(value)


@torch.no_grad()
def mhc_mm_norm_fwd(
    x, phi, eps, *, out_mix=None, out_invr=None, block_n=32, block_k=256, block_m=32, num_warps=4
):
    """(mix = (x phi) invr [N, M], invr = rsqrt(mean(x^2) + eps) [N]), both float32."""
    xf = x.float()
    invr = torch.rsqrt(xf.square().mean(-1) + eps)
    return _into(out_mix, (xf @ phi.float()) * invr.unsqueeze(-1)), _into(out_invr, invr)


@torch.no_grad()
def mhc_mm_norm_bwd(
    x,
    phi,
    mix,
    invr,
    grad_mix,
    *,
    out_grad_x=None,
    out_grad_phi=None,
    block_n=32,
    block_k=256,
    block_m=32,
    num_warps=4,
):
    """(grad_x in x's dtype, grad_phi float32) of mhc_mm_norm_fwd, from its invr (no eps needed):
    grad_x = invr (g phi^T) - invr^2 x sum_m(g mix) / K, grad_phi = x^T (g invr)."""
    xf, g, r = x.float(), grad_mix.float(), invr.float().unsqueeze(-1)
    gx = r * (g @ phi.float().T) - (r * r) * xf * (g * mix.float()).sum(-1, keepdim=True) / x.shape[-1]
    return _into(out_grad_x, gx.to(x.dtype)), _into(out_grad_phi, xf.T @ (g * r))


def _sinkhorn(logits, tmax, sinkhorn_eps, hist=None):
    mat = torch.softmax(logits, dim=-1) + sinkhorn_eps
    mat = mat / (mat.sum(-2, keepdim=True) + sinkhorn_eps)
    if hist is not None:
        hist[:, 0] = mat
    for t in range(int(tmax) - 1):
        mat = mat / (mat.sum(-1, keepdim=True) + sinkhorn_eps)
        mat = mat / (mat.sum(-2, keepdim=True) + sinkhorn_eps)
        if hist is not None:
            hist[:, t + 1] = mat
    return mat


def _hc(m):
    hc = (math.isqrt(4 + 4 * m) - 2) // 2
    if hc * hc + 2 * hc != m:
        raise ValueError(f"liger_cpp: argument 'mix': expected HC^2 + 2 HC columns, got {m}")
    return hc


@torch.no_grad()
def mhc_split_sinkhorn_fwd(
    mix,
    b,
    alpha_pre,
    alpha_post,
    alpha_res,
    *,
    tmax,
    pre_eps,
    sinkhorn_eps,
    post_mult,
    out_hpre=None,
    out_hpost=None,
    out_hres=None,
    out_hist=None,
    return_hist=False,
    num_warps=1,
):
    """(h_pre [N, HC], h_post [N, HC], h_res [N, HC, HC][, hist [N, tmax, HC, HC]: the Sinkhorn
    matrix after each iteration]), float32, from mix [N, HC^2 + 2 HC]."""
    n, hc = mix.shape[0], _hc(mix.shape[1])
    m, bf = mix.float(), b.float()
    h_pre = torch.sigmoid(m[:, :hc] * alpha_pre.float() + bf[:hc]) + pre_eps
    h_post = torch.sigmoid(m[:, hc : 2 * hc] * alpha_post.float() + bf[hc : 2 * hc]) * post_mult
    logits = (m[:, 2 * hc :] * alpha_res.float() + bf[2 * hc :]).reshape(n, hc, hc)
    hist = None
    if return_hist:
        hist = (
            out_hist if out_hist is not None else mix.new_empty((n, int(tmax), hc, hc), dtype=torch.float32)
        )
    h_res = _sinkhorn(logits, tmax, sinkhorn_eps, hist)
    out = (_into(out_hpre, h_pre), _into(out_hpost, h_post), _into(out_hres, h_res))
    return (*out, hist) if return_hist else out


def mhc_sinkhorn_bwd(
    mix, b, alpha_res, grad_hres, *, tmax, sinkhorn_eps, hist=None, out_grad_logits=None, num_warps=1
):
    """The gradient w.r.t. the Sinkhorn's logits (alpha_res mix_res + b_res) [N, HC, HC], float32,
    through autograd of the iterations recomputed from mix (hist is accepted, not needed)."""
    n, hc = mix.shape[0], _hc(mix.shape[1])
    with torch.no_grad():
        logits = (mix.float()[:, 2 * hc :] * alpha_res.float() + b.float()[2 * hc :]).reshape(n, hc, hc)
    logits.requires_grad_()
    with torch.enable_grad():
        mat = _sinkhorn(logits, tmax, sinkhorn_eps)
    (grad,) = torch.autograd.grad(mat, logits, grad_hres.float())
    with torch.no_grad():
        return _into(out_grad_logits, grad)


@torch.no_grad()
def mhc_pre_fwd(x, h_pre, *, out=None, block_n=32, block_c=128, num_warps=4):
    """sum_i h_pre[n, i] x[n, i, :]: [N, HC, C] -> [N, C], float32."""
    return _into(out, (h_pre.float().unsqueeze(-1) * x.float()).sum(1))


@torch.no_grad()
def mhc_pre_bwd(
    x, h_pre, grad_out, *, out_grad_x=None, out_grad_h=None, block_n=32, block_c=128, num_warps=4
):
    """(grad_x [N, HC, C], grad_h [N, HC]), float32, of mhc_pre_fwd."""
    g = grad_out.float().unsqueeze(1)
    return _into(out_grad_x, h_pre.float().unsqueeze(-1) * g), _into(out_grad_h, (x.float() * g).sum(-1))


@torch.no_grad()
def mhc_post_res_fwd(
    x, f_out, h_post, h_res, *, out=None, block_n=None, block_c=None, num_warps=None, num_stages=None
):
    """x_out[n, o] = sum_i h_res[n, o, i] x[n, i] + h_post[n, o] f_out[n]: [N, HC, C], float32."""
    value = h_res.float() @ x.float() + h_post.float().unsqueeze(-1) * f_out.float().unsqueeze(1)
    return _into(out, value)


@torch.no_grad()
def mhc_post_res_bwd(
    x,
    f_out,
    h_post,
    h_res,
    grad_out,
    *,
    out_grad_x=None,
    out_grad_f=None,
    out_grad_hpost=None,
    out_grad_hres=None,
    block_n=None,
    block_c=None,
    num_warps=None,
    num_stages=None,
):
    """(grad_x [N, HC, C], grad_f [N, C], grad_hpost [N, HC], grad_hres [N, HC, HC]), float32."""
    g = grad_out.float()
    return (
        _into(out_grad_x, h_res.float().transpose(-1, -2) @ g),
        _into(out_grad_f, (h_post.float().unsqueeze(-1) * g).sum(1)),
        _into(out_grad_hpost, (g * f_out.float().unsqueeze(1)).sum(-1)),
        _into(out_grad_hres, g @ x.float().transpose(-1, -2)),
    )


# ---- Gated units and activations --------------------------------------------------------------


@torch.no_grad()
def swiglu_forward(a, b, gate_multiplier: float = 1.0):
    """(a, b, silu(a * gate_multiplier) * b)."""
    a_ = a * gate_multiplier if gate_multiplier != 1.0 else a
    return a, b, torch.ops.liger.swiglu_fwd(a_, b, False)


@torch.no_grad()
def swiglu_backward(a, b, dc, gate_multiplier: float = 1.0):
    """(da, db) of swiglu_forward, new tensors (Liger-Kernel writes them over a and b)."""
    if gate_multiplier == 1.0:
        return torch.ops.liger.swiglu_bwd(dc, a, b)
    da, db = torch.ops.liger.swiglu_bwd(dc, a * gate_multiplier, b)
    return da * gate_multiplier, db


@torch.no_grad()
def swiglu_fused_gate_up_forward(y):
    """(y as rows (rows, 2 F), silu(gate) * up (..., F)) for y = cat(gate, up) along its last dim:
    the two halves are read as strided views, never copied apart."""
    if y.shape[-1] % 2:
        raise ValueError(
            f"liger_cpp: argument 'y': expected an even last dimension (gate and up), got {tuple(y.shape)}"
        )
    f = y.shape[-1] // 2
    rows = y.reshape(-1, 2 * f)
    c = torch.ops.liger.swiglu_fwd(rows[:, :f], rows[:, f:], False)
    return rows, c.reshape(*y.shape[:-1], f)


@torch.no_grad()
def swiglu_fused_gate_up_backward(y, dc, in_place=False):
    """The gradient w.r.t. y = cat(gate, up), (rows, 2 F), a new tensor (`in_place` is accepted;
    Liger-Kernel's writes it over y)."""
    f = y.shape[-1] // 2
    rows = y.reshape(-1, 2 * f)
    da, db = torch.ops.liger.swiglu_bwd(dc.reshape(-1, f), rows[:, :f], rows[:, f:])
    return torch.cat((da, db), dim=-1)


@torch.no_grad()
def geglu_forward(a, b):
    """(a, b, gelu_tanh(a) * b)."""
    return a, b, torch.ops.liger.geglu_fwd(a, b, "tanh", False)


@torch.no_grad()
def geglu_backward(a, b, dc):
    """(da, db) of geglu_forward, new tensors."""
    return torch.ops.liger.geglu_bwd(dc, a, b, "tanh")


@torch.no_grad()
def relu_squared_forward(X):
    return torch.ops.liger.relu_squared_fwd(X)


@torch.no_grad()
def relu_squared_backward(X, dY):
    return torch.ops.liger.relu_squared_bwd(dY, X)


# ---- RoPE ---------------------------------------------------------------------------------------


def _rope_tables(cos, sin, unsqueeze_dim):
    """Liger-Kernel's table shapes: 4-D tables squeezed to 3-D, 2-D ones given a batch of 1."""
    if cos.dim() == 4:
        if cos.shape[unsqueeze_dim] == 1:
            cos, sin = cos.squeeze(unsqueeze_dim), sin.squeeze(unsqueeze_dim)
        elif cos.shape[1] == 1:
            cos, sin = cos.squeeze(1), sin.squeeze(1)
        else:
            cos, sin = cos.squeeze(), sin.squeeze()
    if cos.dim() == 2:
        cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
    return cos, sin


def _vjp(fn, dq, dk):
    """(dq_in, dk_in): the transpose of the linear map (q, k) -> fn(q, k) applied to (dq, dk)."""
    q0 = torch.zeros_like(dq, requires_grad=True)
    k0 = torch.zeros_like(dk, requires_grad=True)
    with torch.enable_grad():
        qo, ko = fn(q0, k0)
    return torch.autograd.grad((qo, ko), (q0, k0), (dq, dk))


@torch.no_grad()
def rope_forward(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
    """(q_rot, k_rot, cos, sin) for q, k (B, H, S, D), the tables as Liger-Kernel shapes them."""
    cos, sin = _rope_tables(cos, sin, unsqueeze_dim)
    qo, ko = liger_rotary_pos_emb(q, k, cos, sin, None, 1, rotary_dim)
    return qo, ko, cos, sin


def rope_backward(dq, dk, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
    """(dq, dk) of rope_forward: the transposed rotation (partial rotary: the rest passed through)."""
    cos, sin = _rope_tables(cos, sin, unsqueeze_dim)
    with torch.no_grad():
        return _vjp(lambda q, k: liger_rotary_pos_emb(q, k, cos, sin, None, 1, rotary_dim), dq, dk)


@torch.no_grad()
def qwen2vl_mrope_forward(q, k, cos, sin, mrope_section):
    """(q_rot, k_rot, cos, sin) for q, k (B, H, S, D) and tables (3, B, S, D)."""
    qo, ko = liger_multimodal_rotary_pos_emb(q, k, cos, sin, list(mrope_section), 1)
    return qo, ko, cos, sin


def qwen2vl_mrope_backward(dq, dk, cos, sin, mrope_section):
    sections = list(mrope_section)
    with torch.no_grad():
        return _vjp(lambda q, k: liger_multimodal_rotary_pos_emb(q, k, cos, sin, sections, 1), dq, dk)


@torch.no_grad()
def llama4_rope_forward(q, k, freqs_cis, BLOCK_SIZE: int = None, imag_sign: float = 1.0):
    """(q_rot, k_rot) for q, k (B, S, H, D): pairs times freqs_cis, or its conjugate with imag_sign
    -1 (the backward). A complex freqs_cis is read as (S, D / 2), as Liger-Kernel reads it."""
    seq = q.shape[1]
    if freqs_cis.is_complex():
        freqs_cis = freqs_cis.reshape(-1, freqs_cis.shape[-1])[:seq]
    freqs = as_real_freqs(freqs_cis)
    if imag_sign != 1.0:
        freqs = torch.stack((freqs[..., 0], freqs[..., 1] * imag_sign), dim=-1)
    return torch.ops.liger.llama4_rope_fwd(q, k, freqs, False)


# ---- Cross entropy ------------------------------------------------------------------------------


@torch.no_grad()
def cross_entropy_forward(
    _input,
    target,
    weight,
    ignore_index,
    lse_square_scale,
    label_smoothing,
    reduction,
    softcap,
    return_z_loss,
    return_token_accuracy=False,
    return_predicted_tokens=False,
):
    """(loss, z_loss or None, token_accuracy or None, predicted_tokens or None, gradient): the
    gradient of the loss w.r.t. _input (rows, V) for grad_output 1, where _input requires grad (a new
    tensor; Liger-Kernel writes it over _input and returns that), else _input itself."""
    grad = _input.requires_grad
    loss, z, dlogits, argmax = torch.ops.liger.cross_entropy_fwd(
        _input.detach(),
        target,
        weight,
        int(ignore_index),
        float(label_smoothing),
        float(lse_square_scale),
        float(softcap or 0.0),
        reduction,
        grad,
        bool(return_token_accuracy or return_predicted_tokens),
    )
    # (the loss includes the z-loss, per row with reduction none, as Liger-Kernel's)
    accuracy = predicted = None
    if return_token_accuracy or return_predicted_tokens:
        valid = target != ignore_index
        hit = ((argmax == target) & valid).float()
        if return_token_accuracy:
            accuracy = hit if reduction == "none" else hit.sum() / valid.sum().clamp(min=1)
        if return_predicted_tokens:
            predicted = argmax
    return loss, (z if return_z_loss else None), accuracy, predicted, (dlogits if grad else _input)


@torch.no_grad()
def cross_entropy_backward(_input, grad_output):
    """The forward's gradient times grad_output (a scalar, or one value per row)."""
    if grad_output.dim() == 0 and bool(grad_output == 1.0):
        return _input
    if grad_output.dim() > 0:
        return _input * grad_output.unsqueeze(1).to(_input.dtype)
    return (_input.float() * grad_output.float()).to(_input.dtype)


# ---- Losses fused with the lm_head --------------------------------------------------------------

_CHUNK_MEM_CONST = 1  # Liger-Kernel's default chunk sizing constant (accepted, not used)


def fused_linear_cross_entropy_forward(
    _input,
    weight,
    target,
    ce_weight=None,
    bias=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    return_z_loss=False,
    accum_dtype=None,
    use_token_scaling=False,
    return_token_accuracy=False,
    return_predicted_tokens=False,
    ce_impl=None,
    ce_mode=None,
    token_grad_output=None,
    compute_gradients=None,
    weight_requires_grad=None,
    chunk_mem_const=_CHUNK_MEM_CONST,
):
    """(loss, z_loss, token_accuracy, predicted_tokens, grad_input, grad_weight, grad_bias) of
    cross entropy on _input (BT, H) @ weight^T (+ bias), the logits never held whole. The gradients
    (of the loss for grad_output 1, or of sum(token_grad_output * loss) with reduction none) are
    computed where _input requires grad (or compute_gradients), grad_weight where the weight does too
    (or weight_requires_grad); grad_input is zeros otherwise, grad_weight / grad_bias None, as
    Liger-Kernel's. `ce_impl`, `ce_mode`, `chunk_mem_const` are accepted and not used."""
    want_dx = _input.requires_grad if compute_gradients is None else bool(compute_gradients)
    want_dw = want_dx and (
        weight.requires_grad if weight_requires_grad is None else bool(weight_requires_grad)
    )
    want_db = want_dx and bias is not None
    common = dict(
        bias=None if bias is None else bias.detach(),
        ce_weight=ce_weight,
        ignore_index=int(ignore_index),
        lse_square_scale=float(lse_square_scale),
        label_smoothing=float(label_smoothing),
        reduction=reduction,
        softcap=float(softcap or 0.0),
        accum_dtype=accum_dtype,
        use_token_scaling=bool(use_token_scaling),
    )
    x, w = _input.detach(), weight.detach()
    with torch.no_grad():
        fused = token_grad_output is None
        loss, z, acc, pred, dx, dw, db = torch.ops.liger.fused_linear_cross_entropy_fwd(
            x,
            w,
            target,
            return_z_loss=bool(return_z_loss),
            return_token_accuracy=bool(return_token_accuracy),
            return_predicted_tokens=bool(return_predicted_tokens),
            compute_dx=want_dx and fused,
            compute_dw=want_dw and fused,
            compute_db=want_db and fused,
            **common,
        )
        if not fused and want_dx:
            dx, dw, db = torch.ops.liger.fused_linear_cross_entropy_bwd(
                token_grad_output,
                x,
                w,
                target,
                compute_dx=True,
                compute_dw=want_dw,
                compute_db=want_db,
                **common,
            )
    return (
        loss,
        z if return_z_loss else None,
        acc if return_token_accuracy else None,
        pred if return_predicted_tokens else None,
        dx if want_dx else torch.zeros_like(_input),
        dw if want_dw else None,
        db if want_db else None,
    )


@torch.no_grad()
def fused_linear_cross_entropy_backward(grad_output, grad_input, grad_weight, grad_bias):
    """The forward's gradients times grad_output (one value), scaled in place as Liger-Kernel's: they
    are the buffers fused_linear_cross_entropy_forward returned, not the caller's data, and a copy of
    grad_weight (V x H) would double the backward's peak."""
    if grad_output.numel() == 1 and bool(grad_output == 1.0):
        return grad_input, grad_weight, grad_bias
    empty = grad_input.new_empty(0)
    torch.ops.liger.fused_linear_cross_entropy_scale_(
        grad_input,
        empty if grad_weight is None else grad_weight,
        empty if grad_bias is None else grad_bias,
        grad_output,
    )
    return grad_input, grad_weight, grad_bias


def _loss_and_grads(loss_fn, student_input, student_weight):
    """(loss, grad_input, grad_weight or None) of loss_fn(input, weight) through liger_cpp's autograd."""
    want_dw = student_weight.requires_grad
    x = student_input.detach().requires_grad_()
    w = student_weight.detach().requires_grad_(want_dw)
    with torch.enable_grad():
        loss = loss_fn(x, w)
    grads = torch.autograd.grad(loss, (x, w) if want_dw else (x,))
    return loss.detach(), grads[0], (grads[1] if want_dw else None)


def fused_linear_jsd_forward(
    student_input,
    student_weight,
    teacher_input,
    teacher_weight,
    shift_labels,
    jsd_beta,
    ignore_index,
    has_label,
    temperature,
    jsd_impl=None,
    jsd_mode=None,
    accum_dtype=None,
):
    """(loss, grad_input, grad_weight or None): the generalized JSD of the teacher's and the
    student's heads (liger_cpp's fused distillation op), with its gradients for grad_output 1."""
    from liger_cpp.transformers.fused_linear_jsd import liger_fused_linear_jsd

    labels = shift_labels if has_label else None
    t_in, t_w = teacher_input.detach(), teacher_weight.detach()
    return _loss_and_grads(
        lambda x, w: liger_fused_linear_jsd(
            x, w, t_in, t_w, labels, float(jsd_beta), int(ignore_index), float(temperature), accum_dtype
        ),
        student_input,
        student_weight,
    )


def fused_linear_jsd_backward(grad_output, grad_input, grad_weight):
    """The forward's gradients times grad_output (one value), as new tensors."""
    if grad_output.numel() == 1 and bool(grad_output == 1.0):
        return grad_input, grad_weight
    return grad_input * grad_output, (None if grad_weight is None else grad_weight * grad_output)


def fused_linear_kl_div_forward(
    student_input,
    student_weight,
    target,
    shift_labels,
    reduction,
    ignore_index,
    has_label,
    temperature,
    eps,
    accum_dtype=None,
):
    """(loss, grad_input, grad_weight or None): KL of the given target probabilities from the
    student head's softmax (liger_cpp's fused op), with its gradients for grad_output 1."""
    from liger_cpp.transformers.functional import liger_fused_linear_kl_div

    labels = shift_labels if has_label else None
    return _loss_and_grads(
        lambda x, w: liger_fused_linear_kl_div(
            x, w, target, labels, reduction, int(ignore_index), float(temperature), float(eps), accum_dtype
        ),
        student_input,
        student_weight,
    )


def fused_linear_kl_div_backward(grad_output, grad_input, grad_weight):
    return fused_linear_jsd_backward(grad_output, grad_input, grad_weight)


def get_num_warps(BLOCK_SIZE):
    """Liger-Kernel's warps for a Triton block: 4, 8 from 2048, 16 from 8192, 32 from 32768."""
    return 32 if BLOCK_SIZE >= 32768 else 16 if BLOCK_SIZE >= 8192 else 8 if BLOCK_SIZE >= 2048 else 4


# ---- MoE routing, MLP bucketing, neighborhood attention -----------------------------------------

BLOCK_M_TOKEN = 64  # Liger-Kernel's default M tile of its fused MoE GEMMs


@torch.no_grad()
def compute_routing_metadata(topk_indices, E, block_m_token=BLOCK_M_TOKEN):
    """Liger-Kernel's token -> expert permutation of (T, K) top-k expert ids, all int32:
    (expert_token_count (E,), expert_start_idx (E + 1,) exclusive sums ending in T K,
    x_gather_idx (T K,) sorted position -> token, s_scatter_idx (T K,) sorted position -> flat
    (t, k) index, s_reverse_scatter_idx (T K,) its inverse, tile_row_start / tile_expert
    (tiles,) the first sorted row and the expert of each block_m_token-row tile). Sorted by expert,
    ties in (t, k) order. One host synchronisation (the tile count), as Liger-Kernel's."""
    T, K = topk_indices.shape
    flat = topk_indices.reshape(-1).long()
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= E):
        raise ValueError(
            f"liger_cpp: argument 'topk_indices': expected expert ids in [0, {E}), got out-of-range ids"
        )
    dev, i32 = topk_indices.device, torch.int32
    order = torch.sort(flat, stable=True).indices  # sorted position -> flat (t, k)
    count = torch.bincount(flat, minlength=E)
    start = torch.zeros(E + 1, dtype=torch.long, device=dev)
    start[1:] = torch.cumsum(count, 0)
    reverse = torch.empty_like(order)
    reverse[order] = torch.arange(order.numel(), device=dev)
    tiles_per = (count + block_m_token - 1) // block_m_token
    tile_expert = torch.repeat_interleave(torch.arange(E, device=dev), tiles_per)
    first_tile = torch.cumsum(tiles_per, 0) - tiles_per
    within = torch.arange(tile_expert.numel(), device=dev) - first_tile[tile_expert]
    tile_row_start = start[tile_expert] + within * block_m_token
    return (
        count.to(i32),
        start.to(i32),
        (order // K).to(i32),
        order.to(i32),
        reverse.to(i32),
        tile_row_start.to(i32),
        tile_expert.to(i32),
    )


@torch.no_grad()
def gemm_swiglu(input, gate_weight, up_weight, gate_multiplier, store_preact=True):
    """Liger-Kernel's fused MLP forward step, on cuBLAS's GEMMs and liger_cpp's SwiGLU: G = input
    gate_weight^T gate_multiplier, U = input up_weight^T, A = silu(G) U; returns (cat(A, G, U) on the
    last dim, None) with store_preact (the backward's buffer), else (A, None). The second element
    stands for Liger-Kernel's Triton autotuning result; liger_cpp has none."""
    G = torch.nn.functional.linear(input, gate_weight)
    if gate_multiplier != 1.0:
        G = G * gate_multiplier
    U = torch.nn.functional.linear(input, up_weight)
    A = torch.ops.liger.swiglu_fwd(G, U, False)
    return (torch.cat((A, G, U), dim=-1) if store_preact else A), None


@torch.no_grad()
def swiglu_backward_dGU(dO, down_weight, AGU, fwd_best_config, gate_multiplier, down_multiplier):
    """dG and dU (the gradients of the two projections' outputs) from dO through down_weight, written
    over G and U in AGU, as Liger-Kernel's: AGU is gemm_swiglu's buffer, which swiglu_backward_dI and
    the weight gradients then read."""
    h = down_weight.shape[1]
    dA = dO @ down_weight
    if down_multiplier != 1.0:
        dA = dA * down_multiplier
    dG, dU = torch.ops.liger.swiglu_bwd(dA, AGU[..., h : 2 * h], AGU[..., 2 * h :])
    if gate_multiplier != 1.0:
        dG = dG * gate_multiplier
    AGU[..., h : 2 * h] = dG
    AGU[..., 2 * h :] = dU


@torch.no_grad()
def swiglu_backward_dI(gate_weight, up_weight, AGU):
    """The input's gradient dG gate_weight + dU up_weight, from AGU after swiglu_backward_dGU."""
    h = gate_weight.shape[0]
    return AGU[..., h : 2 * h] @ gate_weight + AGU[..., 2 * h :] @ up_weight


def get_bucket_m(M, threshold=4096, bucket_size=128):
    """Liger-Kernel's MLP autotuning bucket of M rows: M // 32 below 256, then 8 + M // bucket_size,
    and one last bucket from `threshold` on."""
    offset = 256 // 32
    if M >= threshold:
        return offset + threshold // bucket_size
    if M < 256:
        return M // 32
    return offset + M // bucket_size


@torch.no_grad()
def fused_neighborhood_attention_forward(
    query, key, value, kernel_size=7, dilation=1, scale=None, return_lse=False
):
    """(output [B, heads, L, head_dim], attention weights [B, heads, L, L] in query's dtype, softmax
    launch settings): liger_cpp's neighborhood attention (PyTorch's ops, float32 math)."""
    from liger_cpp.transformers.neighborhood_attention import neighborhood_attention_probs

    if return_lse:
        raise NotImplementedError(
            "liger_cpp: argument 'return_lse': True is not supported (nor by Liger-Kernel)"
        )
    if value.dim() != 4 or value.shape[:3] != query.shape[:3]:
        raise ValueError(
            "liger_cpp: argument 'value': expected [B, heads, L, head_dim] with query's "
            f"{tuple(query.shape[:3])}, got {tuple(value.shape)}"
        )
    probs = neighborhood_attention_probs(query, key, kernel_size, dilation, scale)
    out = torch.matmul(probs, value.to(probs.dtype)).to(query.dtype)
    return out, probs.to(query.dtype), (*_settings(query.shape[-2]), False)


# ---- Divergences of given distributions ---------------------------------------------------------


@torch.no_grad()
def jsd_forward(_input, target, shift_labels, beta, ignore_index, has_label, jsd_impl=None, jsd_mode=None):
    """(loss in _input's dtype, the gradient w.r.t. _input)."""
    labels = shift_labels if has_label else None
    loss, dx = torch.ops.liger.jsd_fwd(_input, target, labels, float(beta), int(ignore_index), True)
    return loss.to(_input.dtype), dx


def jsd_backward(dX, grad_output):
    if grad_output.dim() == 0 and bool(grad_output == 1.0):
        return dX
    return grad_output * dX


@torch.no_grad()
def kldiv_forward_triton(y_pred, y_true, log_target, reduction, eps):
    """nn.KLDivLoss's loss of log-probabilities y_pred against y_true (log-probabilities with
    log_target); reduction none / sum / mean / batchmean."""
    return torch.ops.liger.kl_div_fwd(y_pred, y_true, reduction, bool(log_target), float(eps), False)[0]


@torch.no_grad()
def kldiv_backward_triton(target, grad_output, new_grads, log_target):
    """The unreduced gradient w.r.t. y_pred, -target (-exp(target) with log_target), written into
    new_grads (the buffer Liger-Kernel's caller hands over for it) and times grad_output."""
    new_grads.copy_(-(target.exp() if log_target else target))
    if grad_output.dim() == 0 and bool(grad_output == 1.0):
        return new_grads
    return new_grads * grad_output


@torch.no_grad()
def tv_distance_forward_triton(p, q, shift_labels, reduction, ignore_index, has_label):
    """(loss, the gradient w.r.t. p) of the total variation distance 0.5 |p - q|."""
    labels = shift_labels if has_label else None
    return torch.ops.liger.tvd_fwd(p, q, labels, reduction, int(ignore_index), True)


def tvd_backward_triton(grad_output, grads):
    if grad_output.dim() == 0 and bool(grad_output == 1.0):
        return grads
    return grads * grad_output


# ---- The int8 x int2 matmul (liger_kernel.ops.experimental.mm_int8int2) ------------------------


def unpack_weights(packed, bits=2):
    """Ternary weights (-1, 0, 1) from their 2-bit packing: packed row r holds, at bits 2 i, the
    weight of row i R + r (R the packed rows; four values a byte), stored plus one. int32, 4 R rows."""
    if bits != 2:
        raise ValueError(f"liger_cpp: argument 'bits': expected 2, got {bits}")
    parts = [((packed.to(torch.uint8) >> (2 * i)) & 3) for i in range(4)]
    return torch.cat(parts, dim=0).to(torch.int32) - 1


def pack_weights(intweights, bits=2):
    """The packing unpack_weights reads, of ternary int weights (-1, 0, 1; rows first), uint8 with
    ceil(rows / 4) rows. intweights is not modified (Liger-Kernel's adds one to it in place)."""
    if bits != 2:
        raise ValueError(f"liger_cpp: argument 'bits': expected 2, got {bits}")
    rows = intweights.shape[0]
    per = (rows + 3) // 4
    stored = (intweights + 1).to(torch.uint8)
    packed = torch.zeros((per, *intweights.shape[1:]), dtype=torch.uint8, device=intweights.device)
    for i in range(4):
        part = stored[i * per : min((i + 1) * per, rows)]
        packed[: part.shape[0]] |= part << (2 * i)
    return packed


def get_autotune_config():
    """Liger-Kernel's Triton autotuning configurations of its int8 x int2 kernel: none here (the
    product runs on PyTorch's integer or float64 matrix products, exactly)."""
    return []


@torch.no_grad()
def matmul(a, b):
    """a (M, K) int8 times the ternary weights packed in b (K / 4, N) uint8: (M, N) int32, exact
    (PyTorch's int8 x int8 -> int32 product where its shapes allow on CUDA, else float64, exact
    for these sums below 2^53)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] * 4:
        raise ValueError(
            f"liger_cpp: arguments 'a', 'b': expected (M, K) and packed (K / 4, N), got {tuple(a.shape)} and "
            f"{tuple(b.shape)}"
        )
    w = unpack_weights(b)
    M, K = a.shape
    if a.is_cuda and M > 16 and K % 8 == 0 and w.shape[1] % 8 == 0:
        return torch._int_mm(a.to(torch.int8).contiguous(), w.to(torch.int8).contiguous())
    return (a.double() @ w.double()).to(torch.int32)


# ---- liger_kernel.ops.utils ---------------------------------------------------------------------


@contextlib.contextmanager
def device_context(device):
    """The device's backend's device context (torch.cuda.device for a CUDA device), else nothing."""
    device = torch.device(device)
    backend = getattr(torch, device.type, None)
    if backend is not None and hasattr(backend, "device") and device.type != "cpu":
        with backend.device(device):
            yield
    else:
        yield


def get_amp_custom_fwd_bwd():
    """(custom_fwd, custom_bwd) of torch.amp for this machine's accelerator (CUDA, else CPU)."""
    import functools

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return (
        functools.partial(torch.amp.custom_fwd, device_type=device),
        functools.partial(torch.amp.custom_bwd, device_type=device),
    )


def get_npu_core_count(default: int = 20) -> int:
    """Ascend NPUs' vector core count; liger_cpp runs on no NPU, so always `default`."""
    return default


def set_large_grf_mode(kernel_args: dict):
    """Intel XPU's large register file mode for a Triton launch; no Triton launch here: unchanged."""
    return None
