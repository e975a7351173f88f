"""Llama 4's complex RoPE: fake kernels for torch.ops.liger.llama4_rope_{fwd,bwd} (the autograd is in
C++, csrc/aten/autograd/llama4_rope_autograd.cpp), and `llama4_rope` (Liger's
LigerLlama4RopeFunction): q and k times complex frequencies on interleaved pairs, out of place."""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device


def _out_like(t):
    src = t if t.stride(-1) == 1 else t.contiguous()
    return torch.empty_like(src)


def _check_fake(q, k, freqs, qn, kn):
    torch._check(q.dim() == 4, lambda: f"liger_cpp: argument '{qn}': expected a 4-D tensor")
    torch._check(k.dim() == 4, lambda: f"liger_cpp: argument '{kn}': expected a 4-D tensor")
    torch._check(k.dtype == q.dtype, lambda: f"liger_cpp: argument '{kn}': expected {qn}'s dtype")
    torch._check(q.shape[-1] % 2 == 0, lambda: f"liger_cpp: argument '{qn}': expected an even head dim")
    torch._check(freqs.shape[-1] == 2, lambda: "liger_cpp: argument 'freqs': expected (..., D/2, 2)")


@torch.library.register_fake("liger::llama4_rope_fwd")
def _llama4_rope_fwd_fake(q, k, freqs, heads_first=False):
    _check_fake(q, k, freqs, "q", "k")
    return _out_like(q), _out_like(k)


@torch.library.register_fake("liger::llama4_rope_bwd")
def _llama4_rope_bwd_fake(dq_out, dk_out, freqs, heads_first=False):
    _check_fake(dq_out, dk_out, freqs, "dq_out", "dk_out")
    return _out_like(dq_out), _out_like(dk_out)


def as_real_freqs(freqs: Tensor) -> Tensor:
    """A complex frequency table as the kernels' real (..., D/2, 2) float32 view (a real table of that
    shape is returned as it is)."""
    if freqs.is_complex():
        if freqs.dtype != torch.complex64 and not (freqs.dtype == torch.complex128 and not freqs.is_cuda):
            freqs = freqs.to(torch.complex64)
        freqs = torch.view_as_real(freqs)
    return freqs


def llama4_rope(q: Tensor, k: Tensor, freqs: Tensor, heads_first: bool = False) -> tuple[Tensor, Tensor]:
    """(q * freqs, k * freqs) on interleaved pairs (x[2j] + i x[2j+1]) with float32 math and one
    rounding: HF Llama 4's apply_rotary_emb. q, k: (B, S, H, D) (heads_first False) or (B, H, S, D);
    freqs: complex (S, D/2), (1, S, D/2) or (B, S, D/2), or their torch.view_as_real. Outputs in q's
    dtype with the inputs' memory layout."""
    check_device(q, "q")
    return torch.ops.liger.llama4_rope_fwd(q, k, as_real_freqs(freqs), bool(heads_first))
