"""Fused MoE experts (liger::moe_experts_{fwd,bwd}): output and every gradient (hidden,
top_k_weights, both projections, both biases) against an independent float64 per-expert loop and
HF's eager experts classes, every activation and layout, odd shapes, skewed routing, empty experts,
int32 / int64 indices; opcheck, torch.compile(fullgraph=True), float64 gradcheck on the CPU,
errors naming the argument; CUDA: every dtype, both GEMM paths, dropped slots, determinism,
CUDA-graph capture."""

# ruff: noqa: E741, B023  (I: the intermediate size, as in the math; closures called in their iteration)
import pytest
import torch
import torch.nn.functional as F
from conftest import CUDA_OK, DEVICES
from utils import assert_close_to_ref

import liger_cpp  # noqa: F401
from liger_cpp._testing import plan_override
from liger_cpp.ops.moe_experts import moe_experts

# (activation, transposed, interleaved, biases): SwiGLU (Qwen3-MoE / Mixtral), GeGLU, GPT-OSS's
# layout and clamped GLU with biases, and the remaining layout / bias combinations.
VARIANTS = [
    ("silu", False, False, False),
    ("gelu_tanh", False, False, False),
    ("gpt_oss", True, True, True),
    ("silu", False, False, True),
    ("silu", True, False, False),
    ("gpt_oss", False, True, False),
]
# (T, E, k, H, I): one token, the odd shapes, k = 1, many experts.
SHAPES = [(1, 7, 3, 96, 80), (37, 7, 3, 96, 80), (37, 7, 1, 96, 80), (9, 256, 8, 16, 8)]


def _act(g, u, activation, alpha, limit):
    if activation == "silu":
        return F.silu(g) * u
    if activation == "gelu_tanh":
        return F.gelu(g, approximate="tanh") * u
    g = g.clamp(max=limit)
    u = u.clamp(-limit, limit)
    return (u + 1) * (g * torch.sigmoid(g * alpha))


def reference(x, idx, w, gu, dn, gub, db, activation, transposed, interleaved, alpha=1.702, limit=7.0):
    """Per expert, in the inputs' dtype: HF's eager loop written out (slots outside [0, E) dropped)."""
    E = gu.shape[0]
    out = torch.zeros(x.shape, dtype=torch.promote_types(x.dtype, w.dtype), device=x.device)
    for e in range(E):
        tok, pos = torch.where(idx == e)
        if tok.numel() == 0:
            continue
        h = x[tok] @ (gu[e] if transposed else gu[e].t())
        if gub is not None:
            h = h + gub[e]
        if interleaved:
            g, u = h[:, 0::2], h[:, 1::2]
        else:
            g, u = h.chunk(2, dim=-1)
        a = _act(g, u, activation, alpha, limit)
        y = a @ (dn[e] if transposed else dn[e].t())
        if db is not None:
            y = y + db[e]
        out = out.index_add(0, tok, w[tok, pos, None] * y)
    return out.to(x.dtype)


def make_case(T, E, k, H, I, dtype, device, transposed=False, biases=False, routing="random", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g, dtype=torch.float64)
    if routing == "random":
        idx = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]) if T else torch.zeros(0, k)
    elif routing == "one":  # every token's slots on experts 0..k-1, expert 0 taking all
        idx = torch.arange(k).expand(T, k).clone()
    else:  # "sparse": only two experts ever chosen (others empty), repeated within a token
        idx = torch.randint(0, 2, (T, k), generator=g) * (E - 1)
    w = torch.rand(T, k, generator=g, dtype=torch.float64) + 0.1
    gu_shape = (E, H, 2 * I) if transposed else (E, 2 * I, H)
    dn_shape = (E, I, H) if transposed else (E, H, I)
    gu = torch.randn(gu_shape, generator=g, dtype=torch.float64) * H**-0.5
    dn = torch.randn(dn_shape, generator=g, dtype=torch.float64) * I**-0.5
    gub = torch.randn(E, 2 * I, generator=g, dtype=torch.float64) * 0.1 if biases else None
    db = torch.randn(E, H, generator=g, dtype=torch.float64) * 0.1 if biases else None
    go = torch.randn(T, H, generator=g, dtype=torch.float64)
    cast = lambda t: None if t is None else t.to(device=device, dtype=dtype)  # noqa: E731
    return cast(x), idx.long().to(device), cast(w), cast(gu), cast(dn), cast(gub), cast(db), cast(go)


def _grads(fn, tensors, go):
    leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in tensors]
    out = fn(*leaves)
    req = [t for t in leaves if t is not None]
    grads = torch.autograd.grad(out, req, go)
    return out, grads


def check_case(case, activation, transposed, interleaved, alpha=1.702, limit=7.0, factor=2.0):
    x, idx, w, gu, dn, gub, db, go = case

    def ours(x, w, gu, dn, gub, db):
        return moe_experts(x, idx, w, gu, dn, gub, db, activation, transposed, interleaved, alpha, limit)

    def ref(x, w, gu, dn, gub, db):
        return reference(x, idx, w, gu, dn, gub, db, activation, transposed, interleaved, alpha, limit)

    tensors = [x, w, gu, dn, gub, db]
    out, grads = _grads(ours, tensors, go)
    t64 = [None if t is None else t.double() for t in tensors]
    out64, grads64 = _grads(ref, t64, go.double())
    outlo, gradslo = _grads(ref, tensors, go)
    names = [
        n
        for n, t in zip(["dx", "dw", "d_gate_up", "d_down", "d_gate_up_bias", "d_down_bias"], tensors)
        if t is not None
    ]
    assert out.dtype == x.dtype
    assert_close_to_ref(out, out64, outlo, "out", factor=factor)
    for n, a, r64, rlo in zip(names, grads, grads64, gradslo):
        assert a.dtype == r64.dtype or a.dtype == x.dtype, n
        # d top_k_weights is <dA', a> (+ <dOut, b_down>) over I, with dA' = dOut W_down^T one more
        # rounded GEMM output, not PyTorch's <dOut, y> over H: y is not kept (S x H memory). Its error
        # is a few float32 ulps of |dw| where PyTorch's is one: 16 ulps of max |dw| allowed on top.
        extra = 16.0 if n == "dw" and a.dtype == torch.float32 else 1.0
        assert_close_to_ref(a, r64, rlo, n, factor=factor, extra_ulps=extra)
    return out, grads


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_reference_cpu(variant, shape):
    activation, transposed, interleaved, biases = variant
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        case = make_case(*shape, dtype, "cpu", transposed, biases)
        check_case(case, activation, transposed, interleaved)


@pytest.mark.parametrize("routing", ["one", "sparse"])
@pytest.mark.parametrize("device", DEVICES)
def test_skewed_routing_and_empty_experts(routing, device):
    for dtype in (torch.float64, torch.float32) if device == "cpu" else (torch.float32, torch.bfloat16):
        case = make_case(37, 7, 3, 96, 80, dtype, device, routing=routing)
        _, grads = check_case(case, "silu", False, False)
        used = torch.unique(case[1]).tolist()
        for e in range(7):
            if e not in used:  # experts without a token: exactly zero weight gradients
                assert torch.count_nonzero(grads[2][e]) == 0 and torch.count_nonzero(grads[3][e]) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_int32_and_int64_indices_agree(device):
    x, idx, w, gu, dn, _, _, go = make_case(37, 7, 3, 96, 80, torch.float32, device)
    o64, g64 = _grads(lambda x, w, gu, dn: moe_experts(x, idx, w, gu, dn), [x, w, gu, dn], go)
    i32 = idx.to(torch.int32)
    o32, g32 = _grads(lambda x, w, gu, dn: moe_experts(x, i32, w, gu, dn), [x, w, gu, dn], go)
    assert torch.equal(o64, o32)
    assert all(torch.equal(a, b) for a, b in zip(g64, g32))


@pytest.mark.parametrize("device", DEVICES)
def test_no_tokens_and_one_expert(device):
    """T = 0 (an empty batch: empty output, zero weight gradients) and E = 1 (every slot on it)."""
    x, idx, w, gu, dn, _, _, go = make_case(0, 3, 2, 16, 8, torch.float32, device)
    gu.requires_grad_(True)
    out = moe_experts(x, idx, w, gu, dn)
    assert out.shape == (0, 16)
    out.sum().backward()
    assert torch.count_nonzero(gu.grad) == 0
    check_case(make_case(37, 1, 1, 96, 80, torch.float32, device), "silu", False, False)


def test_gpt_oss_clamp_regions():
    """Gate values above the limit and up values outside [-limit, limit]: HF's clamp gradients (zero)."""
    x, idx, w, gu, dn, gub, db, go = make_case(37, 7, 3, 96, 80, torch.float64, "cpu", True, True)
    check_case((x * 8, idx, w, gu, dn, gub * 30, db, go), "gpt_oss", True, True, limit=0.7)


def _hf_experts(kind, E, H, I, dtype):
    import transformers

    if kind == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(
            hidden_size=H, moe_intermediate_size=I, num_experts=E, hidden_act="silu"
        )
        mod = transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeExperts
    elif kind == "mixtral":
        cfg = transformers.MixtralConfig(
            hidden_size=H, intermediate_size=I, num_local_experts=E, hidden_act="silu"
        )
        mod = transformers.models.mixtral.modeling_mixtral.MixtralExperts
    else:
        cfg = transformers.GptOssConfig(hidden_size=H, intermediate_size=I, num_local_experts=E)
        mod = transformers.models.gpt_oss.modeling_gpt_oss.GptOssExperts
    cfg._experts_implementation = "eager"
    m = mod(cfg).to(dtype)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.1)
    return m


@pytest.mark.parametrize("kind", ["qwen3_moe", "mixtral", "gpt_oss"])
def test_matches_hf_eager_experts(kind):
    """Our op with each HF class's parameters against that class's eager forward (float64: to
    rounding; float32 / bfloat16: within 2x of HF's own error against float64)."""
    T, E, k, H, I = 37, 7, 3, 96, 80
    gpt = kind == "gpt_oss"
    ref64 = _hf_experts(kind, E, H, I, torch.float64)
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        hf = _hf_experts(kind, E, H, I, dtype)
        x, idx, w, *_ = make_case(T, E, k, H, I, dtype, "cpu")
        go = torch.randn(T, H, dtype=torch.float64).to(dtype)

        def run(m, x, w, fused):
            x = x.detach().clone().requires_grad_(True)
            w = w.detach().clone().requires_grad_(True)
            params = [p for _, p in sorted(m.named_parameters())]
            if fused:
                p = dict(m.named_parameters())
                out = moe_experts(
                    x,
                    idx,
                    w,
                    p["gate_up_proj"],
                    p["down_proj"],
                    p.get("gate_up_proj_bias"),
                    p.get("down_proj_bias"),
                    "gpt_oss" if gpt else "silu",
                    gpt,
                    gpt,
                )
            else:
                out = m(x, idx, w)
            return out, torch.autograd.grad(out, [x, w, *params], go.to(out.dtype))

        out, grads = run(hf, x, w, True)
        outlo, gradslo = run(hf, x, w, False)
        out64, grads64 = run(ref64, x.double(), w.double(), False)
        assert_close_to_ref(out, out64, outlo, f"{kind} out")
        for i, (a, r, lo) in enumerate(zip(grads, grads64, gradslo)):
            assert_close_to_ref(a, r, lo, f"{kind} grad {i}")


def test_opcheck_compile_gradcheck():
    x, idx, w, gu, dn, gub, db, go = make_case(5, 4, 2, 6, 3, torch.float64, "cpu", True, True)
    args = (x, idx, w, gu, dn, gub, db, "gpt_oss", True, True, 1.702, 7.0)
    torch.library.opcheck(torch.ops.liger.moe_experts_fwd, args)
    out = torch.ops.liger.moe_experts_fwd(*args)
    bargs = (go, x, w, gu, dn, gub, db, *out[1:], "gpt_oss", True, True, 1.702, 7.0)
    torch.library.opcheck(torch.ops.liger.moe_experts_bwd, bargs)
    for activation, transposed, interleaved, biases in VARIANTS:
        x, idx, w, gu, dn, gub, db, _ = make_case(
            5, 4, 2, 6, 3, torch.float64, "cpu", transposed, biases, seed=3
        )
        ts = [t.requires_grad_(True) for t in (x, w, gu, dn, gub, db) if t is not None]

        def f(*ts):
            a = list(ts)
            x, w, gu, dn = a[:4]
            gub, db = (a[4], a[5]) if biases else (None, None)
            return moe_experts(x, idx, w, gu, dn, gub, db, activation, transposed, interleaved)

        assert torch.autograd.gradcheck(f, ts)
    x, idx, w, gu, dn, _, _, go = make_case(6, 4, 2, 8, 4, torch.float32, "cpu")
    compiled = torch.compile(moe_experts, fullgraph=True)
    torch.testing.assert_close(compiled(x, idx, w, gu, dn), moe_experts(x, idx, w, gu, dn))
    xs = x.clone().requires_grad_(True)
    compiled(xs, idx, w, gu, dn).backward(go)
    xe = x.clone().requires_grad_(True)
    moe_experts(xe, idx, w, gu, dn).backward(go)
    torch.testing.assert_close(xs.grad, xe.grad)


def test_leading_dims_and_frozen_experts():
    """[B, S, H] inputs, and experts without requires_grad (only hidden / the weights train)."""
    x, idx, w, gu, dn, _, _, go = make_case(12, 5, 2, 16, 8, torch.float64, "cpu")
    xb = x.view(3, 4, 16).requires_grad_(True)
    out = moe_experts(xb, idx.view(3, 4, 2), w.view(3, 4, 2), gu, dn)
    assert out.shape == (3, 4, 16)
    torch.testing.assert_close(
        out.view(12, 16), reference(x, idx, w, gu, dn, None, None, "silu", False, False)
    )
    out.backward(go.view(3, 4, 16))
    assert xb.grad is not None and gu.grad is None


def test_errors():
    x, idx, w, gu, dn, _, _, _ = make_case(4, 3, 2, 8, 4, torch.float32, "cpu")
    op = torch.ops.liger.moe_experts_fwd
    with pytest.raises(RuntimeError, match=r"argument 'top_k_index': expected expert indices in \[0, 3\)"):
        op(x, idx + 1, w, gu, dn)
    with pytest.raises(RuntimeError, match=r"argument 'top_k_index': expected expert indices in \[0, 3\)"):
        op(x, idx - 1, w, gu, dn)
    with pytest.raises(
        RuntimeError, match="argument 'top_k_index': expected int64 \\(or int32\\) expert indices"
    ):
        op(x, idx.float(), w, gu, dn)
    with pytest.raises(RuntimeError, match="argument 'top_k_weights': expected shape"):
        op(x, idx, w[:, :1], gu, dn)
    with pytest.raises(RuntimeError, match="argument 'hidden': expected a 2-D tensor"):
        op(x[0], idx, w, gu, dn)
    with pytest.raises(RuntimeError, match="argument 'gate_up_proj': expected"):
        op(x, idx, w, gu[:, :, :5], dn)
    with pytest.raises(RuntimeError, match="argument 'down_proj': expected shape"):
        op(x, idx, w, gu, dn[:, :, :3])
    with pytest.raises(RuntimeError, match="argument 'down_proj': expected hidden's dtype"):
        op(x, idx, w, gu, dn.double())
    with pytest.raises(RuntimeError, match="argument 'gate_up_bias': expected shape"):
        op(x, idx, w, gu, dn, torch.zeros(3, 7))
    with pytest.raises(RuntimeError, match="argument 'activation': expected 'silu'"):
        op(x, idx, w, gu, dn, None, None, "relu")
    with pytest.raises(ValueError, match="argument 'activation'"):
        moe_experts(x, idx, w, gu, dn, activation="relu")


# ---- CUDA (skipped without a GPU) ----

# aligned (bf16: the grouped GEMMs) and odd (the per-expert loop) shapes; Qwen3-MoE-like routing
CUDA_SHAPES = [
    (37, 7, 3, 96, 80),
    (1, 7, 3, 96, 80),
    (1000, 64, 8, 256, 128),
    (300, 256, 8, 64, 32),
    (33, 5, 2, 52, 20),
]


# bf16 (the grouped GEMMs where aligned) on every shape; float16 / float32 (the per-expert loop) on
# one aligned and one odd shape.
CUDA_CASES = [(torch.bfloat16, s) for s in CUDA_SHAPES] + [
    (dt, s) for dt in (torch.float16, torch.float32) for s in (CUDA_SHAPES[0], CUDA_SHAPES[-1])
]


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype, shape", CUDA_CASES)
def test_cuda_matches_reference(variant, shape, dtype):
    activation, transposed, interleaved, biases = variant
    check_case(make_case(*shape, dtype, "cuda", transposed, biases), activation, transposed, interleaved)


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
@pytest.mark.parametrize("gemm", ["grouped", "loop"])
@pytest.mark.parametrize("routing", ["random", "one", "sparse"])
def test_cuda_gemm_paths_and_determinism(gemm, routing):
    case = make_case(517, 16, 4, 128, 64, torch.bfloat16, "cuda", routing=routing)
    with plan_override(moe_gemm=gemm):
        a = check_case(case, "silu", False, False)
        b = check_case(case, "silu", False, False)
    assert torch.equal(a[0], b[0]) and all(torch.equal(p, q) for p, q in zip(a[1], b[1]))


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_cuda_loop_path_syncs_once_per_call(dtype, capfd):
    """float16 / float32 run one at::mm per expert: the offsets are copied to the host once in the
    forward and once in the backward (not once per GEMM); bfloat16's grouped GEMMs never sync."""
    import warnings

    x, idx, w, gu, dn, _, _, go = make_case(64, 8, 2, 64, 32, dtype, "cuda")
    x, w, gu, dn = (t.detach().requires_grad_(True) for t in (x, w, gu, dn))
    text = "called a synchronizing CUDA operation"

    def syncs(fn):
        # torch's sync debug mode reports each synchronisation once, as a Python warning where a
        # Python warning handler is active on the thread, else on stderr through c10's default
        # handler (the whole CUDA suite on the H100 once took that path: 0 warnings, one stderr
        # line). Both channels are counted.
        torch.cuda.synchronize()
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                fn()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum(text in str(r.message) for r in rec) + capfd.readouterr().err.count(text)

    out = []
    assert syncs(lambda: out.append(moe_experts(x, idx, w, gu, dn))) == 1
    assert syncs(lambda: out[0].backward(go)) == 1
    xb, wb, gub, dnb = (t.detach().to(torch.bfloat16).requires_grad_(True) for t in (x, w, gu, dn))
    assert syncs(lambda: moe_experts(xb, idx, wb, gub, dnb).backward(go.to(torch.bfloat16))) == 0


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
def test_cuda_dropped_slots():
    """On CUDA an index outside [0, E) drops its slot (it cannot raise without a host sync): the
    result equals the reference without those slots, with zero gradient for their weights."""
    x, idx, w, gu, dn, _, _, go = make_case(64, 8, 2, 64, 32, torch.float32, "cuda")
    idx = idx.clone()
    idx[::3, 0] = 8  # HF's expert-parallel sentinel (E)
    idx[1::5, 1] = -1
    _, grads = check_case((x, idx, w, gu, dn, None, None, go), "silu", False, False)
    dropped = (idx < 0) | (idx >= 8)
    assert torch.count_nonzero(grads[1][dropped]) == 0


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
def test_cuda_matches_cpu_routing_and_compile():
    case = make_case(37, 7, 3, 96, 80, torch.float32, "cuda")
    x, idx, w, gu, dn, _, _, go = case
    args = (x, idx, w, gu, dn, None, None, "silu", False, False, 1.702, 7.0)
    gpu = torch.ops.liger.moe_experts_fwd(*args)
    cpu = torch.ops.liger.moe_experts_fwd(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
    for a, b in zip(gpu[2:], cpu[2:]):  # the routing: the same stable sort
        assert torch.equal(a.cpu(), b)
    torch.library.opcheck(torch.ops.liger.moe_experts_fwd, args)
    compiled = torch.compile(moe_experts, fullgraph=True)
    torch.testing.assert_close(compiled(x, idx, w, gu, dn), moe_experts(x, idx, w, gu, dn))


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
def test_cuda_graph_capture():
    """bf16 (the grouped GEMMs): forward and backward captured in a CUDA graph and replayed with new
    inputs, equal to eager."""
    x, idx, w, gu, dn, _, _, go = make_case(256, 16, 4, 128, 64, torch.bfloat16, "cuda")
    gu.requires_grad_(True)
    dn.requires_grad_(True)
    sx = x.clone().requires_grad_(True)
    sidx, sw = idx.clone(), w.clone().requires_grad_(True)

    def step():
        out = moe_experts(sx, sidx, sw, gu, dn)
        return torch.autograd.grad(out, [sx, sw, gu, dn], go)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    x2, idx2, w2, *_ = make_case(256, 16, 4, 128, 64, torch.bfloat16, "cuda", seed=5)
    with torch.no_grad():
        sx.copy_(x2)
        sidx.copy_(idx2)
        sw.copy_(w2)
    graph.replay()
    torch.cuda.synchronize()
    xe, we = x2.clone().requires_grad_(True), w2.clone().requires_grad_(True)
    eager = torch.autograd.grad(moe_experts(xe, idx2, we, gu, dn), [xe, we, gu, dn], go)
    for a, b in zip(static, eager):
        assert torch.equal(a, b)
