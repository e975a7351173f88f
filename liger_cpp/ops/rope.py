"""RoPE and Qwen2-VL mRoPE: fake kernels and autograd for torch.ops.liger.{rope,mrope}_{fwd,bwd},
and `rope` / `mrope` (Liger's LigerRopeFunction / LigerQwen2VLMRopeFunction, out of place).

The kernels rotate q and k in one call and return new tensors laid out like the inputs (HF's
strided `proj(x).view(B, S, H, D).transpose(1, 2)` views are read without copies and the outputs
keep that memory layout). The backward is the transposed rotation and needs only cos and sin.
"""

from collections.abc import Sequence
from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device


def _out_like(t):
    # As the C++ ops: a unit-last-stride version of t (a copy otherwise), then empty_like.
    src = t if t.stride(-1) == 1 else t.contiguous()
    return torch.empty_like(src)


def _check_fake(q, k, qn, kn):
    torch._check(q.dim() == 4, lambda: f"liger_cpp: argument '{qn}': expected a 4-D tensor")
    torch._check(k.dim() == 4, lambda: f"liger_cpp: argument '{kn}': expected a 4-D tensor")
    torch._check(k.dtype == q.dtype, lambda: f"liger_cpp: argument '{kn}': expected {qn}'s dtype")
    torch._check(q.shape[-1] % 2 == 0, lambda: f"liger_cpp: argument '{qn}': expected an even head dim")
    torch._check(k.shape[-1] == q.shape[-1], lambda: f"liger_cpp: argument '{kn}': expected {qn}'s head dim")


@torch.library.register_fake("liger::rope_fwd")
def _rope_fwd_fake(q, k, cos, sin, unsqueeze_dim=1):
    _check_fake(q, k, "q", "k")
    return _out_like(q), _out_like(k)


@torch.library.register_fake("liger::rope_bwd")
def _rope_bwd_fake(dq_out, dk_out, cos, sin, unsqueeze_dim=1):
    _check_fake(dq_out, dk_out, "dq_out", "dk_out")
    return _out_like(dq_out), _out_like(dk_out)


@torch.library.register_fake("liger::mrope_fwd")
def _mrope_fwd_fake(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    _check_fake(q, k, "q", "k")
    return _out_like(q), _out_like(k)


@torch.library.register_fake("liger::mrope_bwd")
def _mrope_bwd_fake(dq_out, dk_out, cos, sin, mrope_section, unsqueeze_dim=1):
    _check_fake(dq_out, dk_out, "dq_out", "dk_out")
    return _out_like(dq_out), _out_like(dk_out)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _table_grads(ctx, q, k, dq_out, dk_out, cos, sin):
    """Gradients of cos and sin (only when they require grad, which HF's buffers do not):
    HF's out = x * cos + rotate_half(x) * sin gives dcos = sum over heads of g * x and
    dsin = sum over heads of g * rotate_half(x), reduced to each table's (broadcast) shape;
    for mRoPE each plane receives the columns it supplied. float32 (float64) math in PyTorch."""
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    hdim = 1 if ctx.unsqueeze_dim in (1, -3) else 2
    gq, gk, qf, kf = (t.to(acc) for t in (dq_out, dk_out, q, k))
    dcos = (gq * qf).sum(hdim) + (gk * kf).sum(hdim)  # (B, S, D)
    dsin = (gq * _rotate_half(qf)).sum(hdim) + (gk * _rotate_half(kf)).sum(hdim)
    out = []
    for g, table, need in ((dcos, cos, ctx.needs_input_grad[2]), (dsin, sin, ctx.needs_input_grad[3])):
        if not need:
            out.append(None)
            continue
        if ctx.sections is not None:
            d = g.shape[-1]
            h = d // 2
            cols = torch.arange(d, device=g.device) % h
            t, hh = ctx.sections[0], ctx.sections[1]
            plane = (cols >= t).long() + (cols >= t + hh).long()
            g = torch.stack([g * (plane == p) for p in range(3)])  # (3, B, S, D)
            if table.shape[1] == 1:
                g = g.sum(1, keepdim=True)
        elif table.dim() == 2:
            g = g.sum(0)
        elif table.shape[0] == 1:
            g = g.sum(0, keepdim=True)
        out.append(g.to(table.dtype))
    return out


def _setup_context(ctx, inputs, output, sections):
    q, k, cos, sin = inputs[:4]
    ctx.unsqueeze_dim = inputs[-1]
    ctx.sections = sections
    ctx.q_meta = (q.shape, q.dtype, q.device)
    ctx.k_meta = (k.shape, k.dtype, k.device)
    # q and k are kept only for the (rare) gradients of cos and sin.
    keep = cos.requires_grad or sin.requires_grad
    ctx.save_for_backward(cos, sin, q if keep else None, k if keep else None)


def _grads(ctx, dq_out, dk_out, bwd_op, extra):
    cos, sin, q, k = ctx.saved_tensors
    if dq_out is None:
        dq_out = torch.zeros(ctx.q_meta[0], dtype=ctx.q_meta[1], device=ctx.q_meta[2])
    if dk_out is None:
        dk_out = torch.zeros(ctx.k_meta[0], dtype=ctx.k_meta[1], device=ctx.k_meta[2])
    dq = dk = None
    if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
        dq, dk = bwd_op(dq_out, dk_out, cos, sin, *extra, ctx.unsqueeze_dim)
    dcos = dsin = None
    if ctx.needs_input_grad[2] or ctx.needs_input_grad[3]:
        dcos, dsin = _table_grads(ctx, q, k, dq_out, dk_out, cos, sin)
    return (
        dq if ctx.needs_input_grad[0] else None,
        dk if ctx.needs_input_grad[1] else None,
        dcos,
        dsin,
    )


def _rope_setup(ctx, inputs, output):
    _setup_context(ctx, inputs, output, None)


def _rope_backward(ctx, dq_out, dk_out):
    return (*_grads(ctx, dq_out, dk_out, torch.ops.liger.rope_bwd, ()), None)


def _mrope_setup(ctx, inputs, output):
    _setup_context(ctx, inputs, output, list(inputs[4]))


def _mrope_backward(ctx, dq_out, dk_out):
    return (*_grads(ctx, dq_out, dk_out, torch.ops.liger.mrope_bwd, (ctx.sections,)), None, None)


torch.library.register_autograd("liger::rope_fwd", _rope_backward, setup_context=_rope_setup)
torch.library.register_autograd("liger::mrope_fwd", _mrope_backward, setup_context=_mrope_setup)


def rope(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Optional[Tensor] = None,
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """HF's apply_rotary_pos_emb: (q * cos + rotate_half(q) * sin, same for k), out of place.

    q: (B, Hq, S, D), k: (B, Hk, S, D) (unsqueeze_dim=1, HF's layout) or (B, S, H, D)
    (unsqueeze_dim=2); D even; any strides with a unit last stride. cos, sin: (S, D), (1, S, D) or
    (B, S, D), float32 or q's dtype; any values (not only cat(f, f)). float32 math, one rounding;
    outputs in q's dtype with the inputs' memory layout. `position_ids` is accepted and ignored,
    as by HF (cos and sin are already gathered per position).
    """
    del position_ids
    check_device(q, "q")
    return torch.ops.liger.rope_fwd(q, k, cos, sin, int(unsqueeze_dim))


def mrope(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """Qwen2-VL's apply_multimodal_rotary_pos_emb, out of place.

    cos, sin: (3, B, S, D) (temporal, height, width planes; (3, 1, S, D) broadcasts over the
    batch). mrope_section = [t, h, w] with t + h + w = D/2: columns j and j + D/2 take cos/sin
    from plane 0 for j < t, plane 1 for t <= j < t + h, plane 2 otherwise; then as `rope`.
    """
    check_device(q, "q")
    return torch.ops.liger.mrope_fwd(q, k, cos, sin, [int(s) for s in mrope_section], int(unsqueeze_dim))
