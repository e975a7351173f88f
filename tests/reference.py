"""Independent pure-PyTorch references mirroring Hugging Face's modules (no liger_cpp code)."""

import torch


def rms_norm_ref(x, w, eps, offset=0.0, casting_mode="llama"):
    """HF LlamaRMSNorm (llama), GemmaRMSNorm (gemma); 'none' keeps everything in float math
    without intermediate casts. Run it on float64 copies for the exact reference, or on the
    original dtype for the 'low precision PyTorch' baseline."""
    dtype = x.dtype
    if casting_mode == "llama":
        xf = x.float() if dtype != torch.float64 else x
        var = xf.pow(2).mean(-1, keepdim=True)
        xn = (xf * torch.rsqrt(var + eps)).to(dtype)
        return xn if w is None else (w + offset) * xn
    if casting_mode == "gemma":
        xf = x.float() if dtype != torch.float64 else x
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        if w is not None:
            out = out * (offset + (w.float() if w.dtype != torch.float64 else w))
        return out.to(dtype)
    # none: the formula in the input dtype
    out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        out = out * (offset + w)
    return out.to(dtype)


def swiglu_ref(a, b):
    """HF LlamaMLP's act_fn(gate) * up with act_fn = SiLU, in the inputs' dtype."""
    return torch.nn.functional.silu(a) * b


def geglu_ref(a, b, approximate="tanh"):
    """HF GemmaMLP's gelu_pytorch_tanh(gate) * up ('tanh'), or exact GELU ('none').

    Exact GELU is written out (PyTorch's scalar formula, in fp32 for 16-bit inputs, rounded once as
    F.gelu rounds): F.gelu's vectorised fp32 CPU kernel returns NaN for +inf on some x86 CPUs
    (torch 2.11, an AMD EPYC CI machine), where GELU(+inf) = +inf.
    """
    if approximate == "none":
        af = a.float() if a.dtype in (torch.float16, torch.bfloat16) else a
        g = af * 0.5 * (1.0 + torch.erf(af * 0.7071067811865476))
        return g.to(a.dtype) * b
    return torch.nn.functional.gelu(a, approximate=approximate) * b


def fused_add_rms_norm_ref(x, r, w, eps, offset=0.0, casting_mode="llama"):
    """HF decoder layer's residual add followed by its RMSNorm: s = x + r; (rmsnorm(s), s)."""
    s = x + r
    return rms_norm_ref(s, w, eps, offset, casting_mode), s


def layer_norm_ref(x, w, b, eps):
    """nn.LayerNorm's formula (biased variance), in x's dtype or float32 math for low precision."""
    dtype = x.dtype
    xf = x.float() if dtype in (torch.float16, torch.bfloat16) else x
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    out = (xf - mean) * torch.rsqrt(var + eps)
    if w is not None:
        out = out * w.to(out.dtype)
    if b is not None:
        out = out + b.to(out.dtype)
    return out.to(dtype)


def cross_entropy_ref(
    x,
    target,
    weight=None,
    ignore_index=-100,
    label_smoothing=0.0,
    lse_square_scale=0.0,
    softcap=None,
    reduction="mean",
):
    """Liger's cross entropy from F.cross_entropy over the LAST dimension plus explicit formulas:
    softcap x <- softcap * tanh(x / softcap) first; z-loss lse_square_scale * logsumexp(x)^2 per
    valid row, summed ("sum"), per element ("none", 0 when ignored) or divided by the number of
    valid targets ("mean"); loss = CE + z-loss. An all-ignored "mean" gives 0 (PyTorch: NaN).
    Computed in x's dtype: float64 for the exact reference, x.float() for HF's float32 loss.
    Returns (loss, z_loss)."""
    import torch.nn.functional as F

    V = x.shape[-1]
    x2 = x.reshape(-1, V)
    t = target.reshape(-1).long()
    if softcap:
        x2 = softcap * torch.tanh(x2 / softcap)
    w = None if weight is None else weight.to(x2.dtype)
    kw = dict(weight=w, ignore_index=ignore_index, label_smoothing=label_smoothing)
    valid = t != ignore_index
    lse = torch.logsumexp(x2, -1)
    z = torch.where(valid, lse_square_scale * lse * lse, torch.zeros_like(lse))
    if reduction == "none":
        ce = F.cross_entropy(x2, t, reduction="none", **kw)
        return (ce + z).reshape(target.shape), z.reshape(target.shape)
    if reduction == "sum":
        ce = F.cross_entropy(x2, t, reduction="sum", **kw)
        return ce + z.sum(), z.sum()
    n = int(valid.sum())
    if n == 0:
        zero = x2.sum() * 0.0
        return zero, zero.detach()
    ce = F.cross_entropy(x2, t, reduction="mean", **kw)
    zm = z.sum() / n
    return ce + zm, zm


def cross_entropy_argmax_ref(x, target, ignore_index=-100, softcap=None):
    """First index of each row's maximum (after softcap, in float64), -1 for ignored targets."""
    x2 = x.double()
    if softcap:
        x2 = softcap * torch.tanh(x2 / softcap)
    am = x2.argmax(-1)
    return torch.where(target == ignore_index, torch.full_like(am, -1), am)


def _rotate_half(x):
    """HF's rotate_half: cat(-x2, x1) over the last dimension."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_ref(q, k, cos, sin, unsqueeze_dim=1):
    """HF's apply_rotary_pos_emb (Llama), in the inputs' dtypes (a float32 cos with bf16 q
    promotes to float32, as in HF). A 2-D (S, D) table is taken as (1, S, D)."""
    if cos.dim() == 2:
        cos = cos[None]
    if sin.dim() == 2:
        sin = sin[None]
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def mrope_ref(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """Qwen2-VL's apply_multimodal_rotary_pos_emb (transformers 4.x/early 5.x; later versions fold
    the same recomposition into Qwen2VLRotaryEmbedding): cos, sin (3, B, S, D) are split along D
    by mrope_section * 2 and chunk i is taken from plane i % 3."""
    sec = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sec, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sec, dim=-1))], dim=-1)
    return rope_ref(q, k, cos, sin, unsqueeze_dim)
