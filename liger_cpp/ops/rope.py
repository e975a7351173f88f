"""RoPE and Qwen2-VL mRoPE: fake kernels for torch.ops.liger.{rope,mrope}_{fwd,bwd} (their autograd is
in C++), and `rope` / `mrope` (Liger's LigerRopeFunction / LigerQwen2VLMRopeFunction, out of place).

The kernels rotate q and k in one call and return new tensors laid out like the inputs (HF's
strided `proj(x).view(B, S, H, D).transpose(1, 2)` views are read without copies and the outputs
keep that memory layout). The backward is the transposed rotation and needs only cos and sin; the
autograd formula lives in C++ (csrc/aten/autograd/rope_autograd.cpp), with the gradients of cos and sin when
they require grad.
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


# Autograd of rope_fwd / mrope_fwd is registered in C++ (csrc/aten/autograd/rope_autograd.cpp, the Autograd
# dispatch key), not with torch.library.register_autograd: the kernels are short enough that the
# Python autograd.Function around them (and a Python backward run under the GIL by the engine's
# device thread) cost as much as the GPU work in a fwd+bwd step.
_rope_fwd = torch.ops.liger.rope_fwd.default
_mrope_fwd = torch.ops.liger.mrope_fwd.default


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
    return _rope_fwd(q, k, cos, sin, int(unsqueeze_dim))


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
    return _mrope_fwd(q, k, cos, sin, [int(s) for s in mrope_section], int(unsqueeze_dim))
