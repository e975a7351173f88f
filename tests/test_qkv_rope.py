"""The attention projections + RoPE op (liger_cpp.ops.qkv_rope) and the Llama-structured attention
forward that uses it (liger_cpp/transformers/attention.py): outputs and every gradient against a
float64 pure-PyTorch reference (HF's projections, views and rotate-half RoPE), every dtype, GQA, odd
shapes, per-batch cos / sin, grad_output != 1, unused outputs, frozen weights, HF's memory layout,
bitwise parity of the forward and the weight gradients with the module path, opcheck,
torch.compile, gradcheck, errors; which attention classes get the forward and when it falls back."""

import inspect

import pytest
import torch
import torch.nn.functional as F
from conftest import CUDA_OK, DEVICES
from utils import assert_close_to_ref

import liger_cpp  # noqa: F401
import liger_cpp.transformers as lt
import liger_cpp.transformers.attention as attention
from liger_cpp.ops.qkv_rope import qkv_rope
from liger_cpp.ops.rope import rope
from liger_cpp.transformers.monkey_patch import revert_liger_kernel

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (B, S, H, Hq, Hk, D, per-batch cos/sin)
SHAPES = [
    (1, 1, 16, 2, 1, 8, False),
    (2, 7, 40, 4, 2, 10, True),
    (3, 5, 24, 3, 3, 8, False),
    (1, 33, 64, 8, 2, 16, False),
]


def _rotate_half(t):
    h = t.shape[-1] // 2
    return torch.cat((-t[..., h:], t[..., :h]), dim=-1)


def _rms(t, w, eps, offset):
    """HF's Llama-style RMSNorm over the last dim: float32 statistics (float64 for a float64 t), the
    normalised value cast back to t's dtype, times (w + offset)."""
    acc = t.double() if t.dtype == torch.float64 else t.float()
    y = acc * torch.rsqrt(acc.pow(2).mean(-1, keepdim=True) + eps)
    return y.to(t.dtype) * (w + offset)


def _ref(x, wq, wk, wv, cos, sin, d, bq=None, bk=None, bv=None, norms=None):
    """HF: proj(x).view(B, S, -1, D).transpose(1, 2); q * cos + rotate_half(q) * sin (cos unsqueezed at 1).
    norms = (n_q, n_k, eps, offset): Qwen3's per-head q / k RMSNorms ((D,) weights) or OLMo's over
    the whole projection, before RoPE."""
    b, s, _ = x.shape
    nq, nk, eps, offset = norms if norms is not None else (None, None, 0.0, 0.0)

    def proj(w, bias, n):
        p = F.linear(x, w, bias)
        if n is not None and n.shape[0] != d:
            p = _rms(p, n, eps, offset)
        p = p.view(b, s, -1, d)
        if n is not None and n.shape[0] == d:
            p = _rms(p, n, eps, offset)
        return p.transpose(1, 2)

    q, k, v = proj(wq, bq, nq), proj(wk, bk, nk), proj(wv, bv, None)
    c, sn = cos.unsqueeze(1).to(q.dtype), sin.unsqueeze(1).to(q.dtype)
    return q * c + _rotate_half(q) * sn, k * c + _rotate_half(k) * sn, v


def _same_layout(a, b):
    return all(sa == sb for n, sa, sb in zip(a.shape, a.stride(), b.stride()) if n > 1)


def _inputs(shape, dtype, device, seed=0):
    b, s, h, hq, hk, d, per_batch = shape
    g = torch.Generator().manual_seed(seed)

    def rnd(*sz, scale=1.0, grad=True):
        return (torch.randn(*sz, generator=g) * scale).to(device=device, dtype=dtype).requires_grad_(grad)

    x = rnd(b, s, h)
    ws = [rnd(n * d, h, scale=h**-0.5) for n in (hq, hk, hk)]
    ang = torch.randn(b if per_batch else 1, s, d // 2, generator=g)
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos().to(device=device, dtype=dtype), ang.sin().to(device=device, dtype=dtype)
    return [x, *ws], cos, sin, d


def _check_against_reference(ins, cos, sin, d, biases=(None, None, None), norms=None):
    """qkv_rope (with these q / k / v biases and q / k norms (n_q, n_k, eps, offset)) and its
    gradients, biases' and norm weights' included, for random grad_outputs, against the float64 HF
    projections, norms and RoPE, each within twice the low-precision HF formula's error
    (tests/utils.py), laid out as HF's views."""
    dtype, device = ins[0].dtype, ins[0].device
    extra = list(norms[:2]) if norms is not None else []
    given = [b for b in biases if b is not None] + extra
    ins64 = [t.detach().double().requires_grad_() for t in ins]
    b64 = [None if b is None else b.detach().double().requires_grad_() for b in biases]
    n64 = None
    if norms is not None:
        n64 = (*[n.detach().double().requires_grad_() for n in norms[:2]], *norms[2:])
    kw = {} if norms is None else dict(n_q=norms[0], n_k=norms[1], norm_eps=norms[2], norm_offset=norms[3])
    got = qkv_rope(*ins, cos, sin, d, *biases, **kw)
    want = _ref(*ins64, cos.double(), sin.double(), d, *b64, norms=n64)
    with torch.no_grad():
        low = _ref(*ins, cos, sin, d, *biases, norms=norms)
    for name, o, w, lo in zip("qkv", got, want, low):
        assert o.dtype == dtype and o.shape == w.shape and _same_layout(o, lo), name
        assert_close_to_ref(o, w, lo, name)
    gen = torch.Generator().manual_seed(7)
    dys = [torch.randn(o.shape, generator=gen).to(device=device, dtype=dtype) for o in got]
    g = torch.autograd.grad(got, ins + given, dys)
    extra64 = list(n64[:2]) if n64 is not None else []
    g64 = torch.autograd.grad(
        want, ins64 + [b for b in b64 if b is not None] + extra64, [t.double() for t in dys]
    )
    glo = torch.autograd.grad(_ref(*ins, cos, sin, d, *biases, norms=norms), ins + given, dys)
    names = ["dx", "dw_q", "dw_k", "dw_v"] + [f"db_{n}" for n, b in zip("qkv", biases) if b is not None]
    names += ["dn_q", "dn_k"][: len(extra)]
    for name, a, w, lo in zip(names, g, g64, glo):
        assert_close_to_ref(a, w, lo, name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_float64_reference(device, dtype, shape):
    _check_against_reference(*_inputs(shape, dtype, device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("which", ["qkv", "k"])
def test_biases_match_float64_reference(device, dtype, which):
    """Qwen2's biased q / k / v projections (or a bias on one of them only)."""
    ins, cos, sin, d = _inputs((2, 6, 24, 3, 1, 8, True), dtype, device)
    g = torch.Generator().manual_seed(4)
    biases = [
        torch.randn(w.shape[0], generator=g).to(device=device, dtype=dtype).requires_grad_()
        if n in which
        else None
        for n, w in zip("qkv", ins[1:])
    ]
    _check_against_reference(ins, cos, sin, d, biases)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width", ["head", "projection"])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_norms_match_float64_reference(device, dtype, width, offset):
    """q / k RMSNorms before RoPE: per head (Qwen3, Gemma 3's offset 1) or over the whole
    projection (OLMo 2 / 3), with Qwen2-style biases on q and v."""
    ins, cos, sin, d = _inputs((2, 5, 24, 3, 1, 8, True), dtype, device)
    g = torch.Generator().manual_seed(5)

    def rnd(n):
        return (1 + 0.3 * torch.randn(n, generator=g)).to(device=device, dtype=dtype).requires_grad_()

    n_q, n_k = (rnd(d), rnd(d)) if width == "head" else (rnd(ins[1].shape[0]), rnd(ins[2].shape[0]))
    biases = [rnd(ins[1].shape[0]), None, rnd(ins[3].shape[0])]
    _check_against_reference(ins, cos, sin, d, biases, norms=(n_q, n_k, 1e-5, offset))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_norms_bitwise_as_the_module_path(device, dtype):
    """With q / k norms the forward is nn.Linear's GEMMs, liger_cpp's rms_norm and rope on the same
    rows: bitwise the module path's (LigerRMSNorm between the projection and RoPE), and so are the
    projection and norm weight gradients."""
    from liger_cpp.ops.rms_norm import rms_norm

    ins, cos, sin, d = _inputs((2, 9, 32, 4, 2, 8, False), dtype, device)
    x, wq, wk, wv = ins
    g = torch.Generator().manual_seed(6)
    nq, nk = (
        (1 + 0.3 * torch.randn(d, generator=g)).to(device=device, dtype=dtype).requires_grad_() for _ in "qk"
    )
    got = qkv_rope(*ins, cos, sin, d, n_q=nq, n_k=nk, norm_eps=1e-6)
    b, s = x.shape[:2]
    q = rms_norm(F.linear(x, wq).view(b, s, -1, d), nq, 1e-6).transpose(1, 2)
    k = rms_norm(F.linear(x, wk).view(b, s, -1, d), nk, 1e-6).transpose(1, 2)
    v = F.linear(x, wv).view(b, s, -1, d).transpose(1, 2)
    ref = (*rope(q, k, cos, sin), v)
    for name, a, r in zip("qkv", got, ref):
        assert torch.equal(a, r), name
    dys = [torch.randn(o.shape, generator=g).to(device=device, dtype=dtype) for o in got]
    ga = torch.autograd.grad(got, [wq, wk, wv, nq, nk], dys)
    gr = torch.autograd.grad(ref, [wq, wk, wv, nq, nk], dys)
    for name, a, r in zip(["dw_q", "dw_k", "dw_v", "dn_q", "dn_k"], ga, gr):
        assert torch.equal(a, r), name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_forward_and_weight_gradients_bitwise_as_the_module_path(device, dtype):
    """The forward is nn.Linear's GEMMs and rope_fwd on HF's views: bitwise the module path's, and
    so are the weight gradients; dx differs by one rounding (one accumulation of three products)."""
    ins, cos, sin, d = _inputs((2, 9, 32, 4, 2, 8, False), dtype, device)
    x, wq, wk, wv = ins
    got = qkv_rope(*ins, cos, sin, d)
    b, s, _ = x.shape
    q, k, v = (F.linear(x, w).view(b, s, -1, d).transpose(1, 2) for w in (wq, wk, wv))
    ref = (*rope(q, k, cos, sin), v)
    for a, r in zip(got, ref):
        assert torch.equal(a, r) and _same_layout(a, r)
    dys = [torch.randn_like(t) for t in got]
    g, r = torch.autograd.grad(got, ins, dys), torch.autograd.grad(ref, ins, dys)
    for a, b_ in zip(g[1:], r[1:]):
        assert torch.equal(a, b_)
    ulp = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-7}[dtype]
    torch.testing.assert_close(g[0], r[0], rtol=3 * ulp, atol=3 * ulp * r[0].abs().max().item())


@pytest.mark.parametrize("device", DEVICES)
def test_unused_outputs_and_frozen_weights(device):
    ins, cos, sin, d = _inputs((2, 5, 24, 3, 1, 8, False), torch.float32, device)
    q, k, v = qkv_rope(*ins, cos, sin, d)
    ins64 = [t.detach().double().requires_grad_() for t in ins]
    q64, _, _ = _ref(*ins64, cos.double(), sin.double(), d)
    g = torch.autograd.grad(q.sum(), ins)  # k and v unused: no gradient reaches them
    g64 = torch.autograd.grad(q64.sum(), ins64, allow_unused=True)
    for a, w in zip(g, g64):
        torch.testing.assert_close(
            a.double(), torch.zeros_like(a.double()) if w is None else w, rtol=1e-5, atol=1e-6
        )
    x, wq, wk, wv = ins
    for t in (wq, wk, wv):
        t.requires_grad_(False)
    q, k, v = qkv_rope(x, wq, wk, wv, cos, sin, d)
    seen = []

    class Rec(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "qkv_rope_bwd" in str(func):
                seen.append(list(args[10]))
            return func(*args, **(kwargs or {}))

    with Rec():
        (q.sum() + k.sum() + v.sum()).backward()
    assert seen == [[True] + [False] * 8] and x.grad is not None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(device, dtype):
    ins, cos, sin, d = _inputs((2, 3, 16, 2, 1, 8, False), dtype, device)
    torch.library.opcheck(torch.ops.liger.qkv_rope, (*ins, cos, sin, d))
    bias = torch.randn(ins[2].shape[0], device=device, dtype=dtype, requires_grad=True)
    torch.library.opcheck(torch.ops.liger.qkv_rope, (*ins, cos, sin, d, None, bias, None))
    if dtype != torch.float32:
        return
    det = [t.detach() for t in ins]
    q, k, v = torch.ops.liger.qkv_rope(*det, cos, sin, d)
    dq, dk, dv = (torch.randn_like(t) for t in (q, k, v))
    for mask in ([True] * 7 + [False] * 2, [True, False, True, False, False, True, False, False, False]):
        torch.library.opcheck(torch.ops.liger.qkv_rope_bwd, (dq, dk, dv, *det, cos, sin, d, mask))
    # gradients of another layout than the forward's outputs (contiguous (B, heads, S, D))
    torch.library.opcheck(
        torch.ops.liger.qkv_rope_bwd, (dq.contiguous(), dk.contiguous(), dv.contiguous(), *det, cos, sin, d)
    )
    # q / k norms: per head and over the whole projection, the internal forward and the backward
    for nq, nk in ((torch.rand(d) + 0.5, torch.rand(d) + 0.5), (torch.rand(16) + 0.5, torch.rand(8) + 0.5)):
        nq, nk = nq.to(device).requires_grad_(), nk.to(device).requires_grad_()
        torch.library.opcheck(
            torch.ops.liger.qkv_rope, (*ins, cos, sin, d, None, None, None, nq, nk, 1e-5, 1.0)
        )
        fwd = torch.ops.liger.qkv_rope_fwd(
            *det, cos, sin, d, None, None, None, nq.detach(), nk.detach(), 1e-5, 1.0, "llama"
        )
        torch.library.opcheck(
            torch.ops.liger.qkv_rope_fwd,
            (*det, cos, sin, d, None, None, None, nq.detach(), nk.detach(), 1e-5, 1.0, "llama"),
        )
        saved = (fwd[3], fwd[4], nq.detach(), nk.detach(), fwd[5], fwd[6], 1.0, "llama")
        torch.library.opcheck(
            torch.ops.liger.qkv_rope_bwd, (dq, dk, dv, *det, cos, sin, d, [True] * 9, *saved)
        )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    ins, cos, sin, d = _inputs((2, 6, 32, 4, 2, 8, False), torch.float32, device)

    norms = [(torch.rand(d) + 0.5).to(device).requires_grad_() for _ in "qk"]

    def f(*t):
        q, k, v = qkv_rope(*t[:4], cos, sin, d, n_q=t[4], n_k=t[5], norm_offset=0.5)
        return (q.square().sum() + (k * 2).sum()) * v.mean()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    got = torch.autograd.grad(cf(*ins, *norms), ins + norms)
    want = torch.autograd.grad(f(*ins, *norms), ins + norms)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_gradcheck_float64_cpu():
    ins, cos, sin, d = _inputs((2, 3, 8, 2, 1, 4, True), torch.float64, "cpu", seed=3)
    assert torch.autograd.gradcheck(lambda *t: qkv_rope(*t, cos, sin, d), ins)
    g = torch.Generator().manual_seed(8)
    for widths in ((d, d), (2 * d, d)):  # per head; over the whole projection
        norms = [
            (1 + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)).requires_grad_() for n in widths
        ]
        assert torch.autograd.gradcheck(
            lambda *t: qkv_rope(*t[:4], cos, sin, d, n_q=t[4], n_k=t[5], norm_offset=0.25), ins + norms
        )


def test_errors_name_the_argument():
    ins, cos, sin, d = _inputs((1, 4, 16, 2, 1, 8, False), torch.float32, "cpu")
    x, wq, wk, wv = (t.detach() for t in ins)
    with pytest.raises(RuntimeError, match="'x'"):
        qkv_rope(x[0], wq, wk, wv, cos, sin, d)
    with pytest.raises(RuntimeError, match="'head_dim'"):
        qkv_rope(x, wq, wk, wv, cos, sin, 7)
    with pytest.raises(RuntimeError, match="'w_q'"):
        qkv_rope(x, wq[:, :15], wk, wv, cos, sin, d)
    with pytest.raises(RuntimeError, match="'w_v'"):
        qkv_rope(x, wq, wk, wq, cos, sin, d)
    with pytest.raises(RuntimeError, match="'w_k'.*multiple of head_dim"):
        qkv_rope(x, wq, wk[:5], wv[:5], cos, sin, d)
    with pytest.raises(RuntimeError, match="'cos'.*full rotary"):
        qkv_rope(x, wq, wk, wv, cos[..., :4], sin[..., :4], d)
    with pytest.raises(RuntimeError, match="'cos'.*no gradient"):
        qkv_rope(x, wq, wk, wv, cos.clone().requires_grad_(), sin, d)
    q, k, v = torch.ops.liger.qkv_rope(x, wq, wk, wv, cos, sin, d)
    with pytest.raises(RuntimeError, match="'dk'"):
        torch.ops.liger.qkv_rope_bwd(q, q, v, x, wq, wk, wv, cos, sin, d)
    n = torch.ones(d)
    with pytest.raises(RuntimeError, match="'n_k'"):
        qkv_rope(x, wq, wk, wv, cos, sin, d, n_q=n)
    with pytest.raises(RuntimeError, match="'n_q'.*per head"):
        qkv_rope(x, wq, wk, wv, cos, sin, d, n_q=torch.ones(d + 2), n_k=n)
    with pytest.raises(RuntimeError, match="'n_k'.*dtype"):
        qkv_rope(x, wq, wk, wv, cos, sin, d, n_q=n, n_k=n.double())
    with pytest.raises(RuntimeError, match="'output_mask'"):
        torch.ops.liger.qkv_rope_bwd(q, k, v, x, wq, wk, wv, cos, sin, d, [True] * 9)
    with pytest.raises(RuntimeError, match="'q_pre'"):
        torch.ops.liger.qkv_rope_bwd(q, k, v, x, wq, wk, wv, cos, sin, d, [True] * 9, None, None, n, n)


# ---- the attention forward ----


def _llama(**kw):
    import transformers

    cfg = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4)
    cfg.update(num_key_value_heads=2, vocab_size=97, use_cache=False)
    cfg.update(kw)
    torch.manual_seed(0)
    c = transformers.LlamaConfig(**cfg)
    c._attn_implementation = "sdpa"
    return transformers.LlamaForCausalLM(c)


@pytest.fixture
def counted(monkeypatch):
    calls = []
    op = attention.qkv_rope
    monkeypatch.setattr(attention, "qkv_rope", lambda *a: (calls.append(1), op(*a))[1])
    revert_liger_kernel()
    yield calls
    revert_liger_kernel()


def _step(model, ids):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return out.loss, grads


def test_llama_attention_takes_the_op_and_matches_hf(counted):
    ids = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    ref_loss, ref_grads = _step(_llama(), ids)
    lt.apply_liger_kernel_to_llama(swiglu=False, rms_norm=False, fused_linear_cross_entropy=False)
    model = _llama()
    loss, grads = _step(model, ids)
    assert len(counted) == 2  # one call per layer
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for n, g in grads.items():
        torch.testing.assert_close(g, ref_grads[n], rtol=1e-4, atol=1e-6, msg=n)
    # a model's default config (use_cache=True): HF builds a KV cache in training too; the op's k
    # and v fill it as HF's forward would
    counted.clear()
    out = _llama(use_cache=True)(input_ids=ids, labels=ids)
    out.loss.backward()
    assert len(counted) == 2
    # generation (prefill and decode steps with a KV cache): the op, HF's tokens
    model.eval()
    counted.clear()
    with torch.no_grad():
        gen = model.generate(ids[:1, :4], max_new_tokens=3, do_sample=False, use_cache=True)
    assert len(counted) == 2 * 3  # prefill + 2 decode steps, two layers
    revert_liger_kernel()
    ref_out = _llama(use_cache=True)(input_ids=ids, labels=ids)
    torch.testing.assert_close(out.loss, ref_out.loss, rtol=1e-5, atol=1e-6)
    for layer in range(2):
        for got, want in zip(
            _cache_kv(out.past_key_values, layer), _cache_kv(ref_out.past_key_values, layer)
        ):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        ref = _llama().eval().generate(ids[:1, :4], max_new_tokens=3, do_sample=False, use_cache=True)
    assert torch.equal(gen, ref)


def _cache_kv(cache, layer):
    """A layer's cached keys and values (transformers 5.25's layers or 5.17's)."""
    lay = cache.layers[layer]
    return lay.keys, lay.values


def test_attention_falls_back_where_the_op_does_not_apply(counted):
    ids = torch.randint(0, 97, (1, 6))
    lt.apply_liger_kernel_to_llama()
    model = _llama()
    attn = model.model.layers[0].self_attn
    seen = []
    h = attn.q_proj.register_forward_hook(lambda m, i, o: seen.append(1))
    model(input_ids=ids, labels=ids).loss.backward()
    h.remove()
    assert seen == [1] and len(counted) == 1  # the hooked layer: HF's forward
    counted.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # mixed precision: the op, on autocast's casts
        loss = model(input_ids=ids, labels=ids).loss
        assert len(counted) == 2
        hooks = [
            lay.self_attn.q_proj.register_forward_hook(lambda m, i, o: None) for lay in model.model.layers
        ]
        ref = model(input_ids=ids, labels=ids).loss  # HF's forward (hooked projections)
        for h in hooks:
            h.remove()
    assert len(counted) == 2 and torch.equal(loss, ref)
    counted.clear()
    model = _llama()
    lin = model.model.layers[0].self_attn.q_proj
    model.model.layers[0].self_attn.q_proj = torch.nn.utils.parametrizations.weight_norm(lin)
    model(input_ids=ids, labels=ids)  # a parametrized projection: HF's forward for that layer
    assert len(counted) == 1
    counted.clear()
    revert_liger_kernel()  # HF's forward again
    import transformers.models.llama.modeling_llama as ml

    assert not hasattr(ml.LlamaAttention.forward, "__wrapped_hf__")
    _llama()(input_ids=ids, labels=ids)
    assert counted == []


def _family(model_type, attn="sdpa", **kw):
    import transformers

    cfg = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4)
    cfg.update(num_key_value_heads=2, vocab_size=97, use_cache=False, **kw)
    torch.manual_seed(0)
    c = transformers.CONFIG_MAPPING[model_type](**cfg)
    c._attn_implementation = attn
    return transformers.AutoModelForCausalLM.from_config(c)


def _family_step_matches_hf(counted, model_type, kw, off):
    """One training step of a tiny model_type model, plain HF's and then patched with the flags
    `off` turned off: the op ran once per layer, loss and every gradient as HF's. Returns the
    patched model and its input ids."""
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(2))
    ref_loss, ref_grads = _step(_family(model_type, **kw), ids)
    patch = lt.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]
    patch(**{k: False for k in off if k in inspect.signature(patch).parameters})
    model = _family(model_type, **kw)
    loss, grads = _step(model, ids)
    assert len(counted) == 2
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for n, g in grads.items():
        torch.testing.assert_close(g, ref_grads[n], rtol=1e-4, atol=1e-6, msg=n)
    return model, ids


@pytest.mark.parametrize(
    "model_type,kw",
    [
        ("qwen2", {}),  # biased q / k / v
        ("qwen2", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1)),
        ("mistral", dict(sliding_window=4)),
        # sliding layers and the attention's logit softcap (eager attention, which applies it)
        (
            "gemma2",
            dict(
                head_dim=16,
                sliding_window=4,
                attn_logit_softcapping=2.0,
                query_pre_attn_scalar=16,
                attn="eager",
            ),
        ),
    ],
    ids=["qwen2", "qwen2-sliding", "mistral-sliding", "gemma2-softcap"],
)
def test_sliding_window_families_take_the_op_and_match_hf(counted, model_type, kw):
    off = ("swiglu", "geglu", "rms_norm", "fused_linear_cross_entropy")  # only the attention's op
    _family_step_matches_hf(counted, model_type, kw, off)


@pytest.mark.parametrize(
    "model_type,kw",
    [
        ("qwen3", {}),  # per-head q / k norms
        ("qwen3", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1)),
        ("olmo2", {}),  # norms over the whole projection
        ("gemma3_text", dict(head_dim=16, sliding_window=4)),  # per head, offset 1, sliding layers
    ],
    ids=["qwen3", "qwen3-sliding", "olmo2", "gemma3"],
)
def test_qk_norm_families_take_the_op_and_match_hf(counted, model_type, kw):
    """Attention with q / k RMSNorms (liger_cpp's, from the rms_norm patch) goes through the op
    with the norms inside: loss and every gradient (the norms' weights included) as plain HF's."""
    off = ("swiglu", "geglu", "fused_linear_cross_entropy")  # the MLP and the head stay HF's
    model, ids = _family_step_matches_hf(counted, model_type, kw, off)
    counted.clear()
    # a hooked norm: HF's forward for that layer
    h = model.model.layers[0].self_attn.k_norm.register_forward_hook(lambda m, i, o: None)
    model(input_ids=ids, labels=ids)
    h.remove()
    assert len(counted) == 1


def test_which_attention_classes_are_wrapped():
    import transformers.models.llama.modeling_llama as ml
    import transformers.models.mistral.modeling_mistral as mm
    import transformers.models.qwen3.modeling_qwen3 as mq

    revert_liger_kernel()
    assert attention.structure("LlamaAttention", ml.LlamaAttention.forward) == "llama"
    assert attention.structure("", mm.MistralAttention.forward) is None  # sliding_window, not named
    assert attention.structure("", mq.Qwen3Attention.forward) is None  # q_norm, k_norm, not named
    import transformers.models.cohere2.modeling_cohere2 as mc
    import transformers.models.qwen2.modeling_qwen2 as mq2

    assert attention.structure("MistralAttention", mm.MistralAttention.forward) == "config"
    assert attention.structure("Qwen2Attention", mq2.Qwen2Attention.forward) == "module"
    # the same names as Qwen2's, but RoPE only on its sliding layers: not wrapped
    assert attention.structure("Cohere2Attention", mc.Cohere2Attention.forward) is None
    import transformers.models.olmo2.modeling_olmo2 as mo

    assert attention.structure("Qwen3Attention", mq.Qwen3Attention.forward) == "norms+module"
    assert attention.structure("Olmo2Attention", mo.Olmo2Attention.forward) == "norms"
    # Llama's names plus q / k norms, but a class not named (the norm's placement is not read)
    assert attention.structure("SomeAttention", mo.Olmo2Attention.forward) is None
    import transformers.models.gemma2.modeling_gemma2 as mg2

    assert attention.structure("Gemma2Attention", mg2.Gemma2Attention.forward) == "module+softcap"
    lt.apply_liger_kernel_to_llama(rope=False)
    assert "__wrapped_hf__" not in vars(ml.LlamaAttention.forward)
    lt.apply_liger_kernel_to_llama()
    assert ml.LlamaAttention.forward.__wrapped_hf__ is not None
    revert_liger_kernel()
    assert not hasattr(ml.LlamaAttention.forward, "__wrapped_hf__")


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA and liger_cpp's CUDA kernels")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_llama_1b_shape(dtype):
    """A 1B Llama layer's projections (H 2048, 32 / 8 heads of 64) at 1024 tokens."""
    _check_against_reference(*_inputs((1, 1024, 2048, 32, 8, 64, False), dtype, "cuda"))
