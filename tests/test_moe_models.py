"""Fused MoE experts in models: tiny Qwen3-MoE, Mixtral and GPT-OSS patched with swiglu=True (instance
and class level) against plain HF (loss and every parameter gradient), HF's experts_implementation
choices, revert, LigerExperts' state-dict compatibility, and a 32-step convergence run."""

import pytest
import torch
from conftest import CUDA_OK
from hf_models import batch, build, run, single_thread, tiny_config  # noqa: F401

import liger_cpp.transformers as lt
from liger_cpp.transformers import monkey_patch as mp

TYPES = ["qwen3_moe", "mixtral", "gpt_oss"]
EXPERTS = {
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeExperts"),
    "mixtral": ("mixtral", "MixtralExperts"),
    "gpt_oss": ("gpt_oss", "GptOssExperts"),
}
ONLY_EXPERTS = dict(
    rope=False, cross_entropy=False, fused_linear_cross_entropy=False, rms_norm=False, swiglu=True
)


def modeling(model_type):
    name, cls = EXPERTS[model_type]
    return __import__(f"transformers.models.{name}.modeling_{name}", fromlist=["_"]), cls


def experts_modules(model):
    _, cls = modeling(model.config.model_type)
    return [m for m in model.modules() if cls in [c.__name__ for c in type(m).__mro__]]


def runs_fused_op(experts, hidden):
    """Whether the experts module's forward ran liger_cpp's fused op (its C++ autograd node)."""
    x = torch.randn(5, hidden, requires_grad=True)
    f = experts(x, torch.randint(0, 2, (5, 2)), torch.rand(5, 2)).grad_fn
    seen = []
    while f is not None:
        seen.append(f.name())
        f = f.next_functions[0][0] if f.next_functions else None
    return any("MoeExpertsFunction" in n for n in seen)


def compare(model_type, impl="eager", **kw):
    ref = build(model_type)
    model = build(model_type)
    model.load_state_dict(ref.state_dict())
    for m in (ref, model):
        m.config._experts_implementation = impl
    mp.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model, **dict(ONLY_EXPERTS, **kw))
    ex = experts_modules(model)
    assert ex and all(type(m).__name__.startswith("Liger") for m in ex)
    assert runs_fused_op(ex[0], model.config.hidden_size)
    ids, labels = batch()
    out0, g0 = run(ref, ids, labels)
    out1, g1 = run(model, ids, labels)
    torch.testing.assert_close(out1.loss, out0.loss, rtol=1e-5, atol=1e-6)
    assert g0.keys() == g1.keys()
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-4, atol=1e-6, msg=lambda m, n=n: f"{n}: {m}")
    return model


@pytest.mark.parametrize("model_type", TYPES)
def test_instance_patch_matches_hf(model_type):
    compare(model_type)
    mod, cls = modeling(model_type)
    assert getattr(mod, cls).__name__ == cls  # instance patching leaves the class alone


@pytest.mark.parametrize("model_type", ["qwen3_moe", "gpt_oss"])
def test_replaces_every_experts_implementation(model_type):
    """HF's batched_mm / grouped_mm dispatch is replaced as well (the reference runs HF's own)."""
    compare(model_type, impl="batched_mm")


@pytest.mark.parametrize("model_type", TYPES)
def test_class_level_patch_and_revert(model_type):
    mod, cls = modeling(model_type)
    orig = getattr(mod, cls)
    try:
        mp.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](**ONLY_EXPERTS)
        patched = getattr(mod, cls)
        assert patched is not orig and issubclass(patched, orig)
        model = build(model_type)
        assert all(type(m) is patched for m in experts_modules(model))
        ref = build(model_type)
        lt.revert_liger_kernel()
        assert getattr(mod, cls) is orig
        ref = build(model_type)
        ids, labels = batch()
        torch.testing.assert_close(
            run(model, ids, labels)[0].loss, run(ref, ids, labels)[0].loss, rtol=1e-5, atol=1e-6
        )
    finally:
        lt.revert_liger_kernel()
    assert getattr(mod, cls) is orig


def test_liger_experts_loads_hf_state_dict():
    cfg = tiny_config("qwen3_moe")
    mod, _ = modeling("qwen3_moe")
    hf = mod.Qwen3MoeExperts(cfg)
    torch.nn.init.normal_(hf.gate_up_proj, std=0.1)
    torch.nn.init.normal_(hf.down_proj, std=0.1)
    ours = lt.LigerExperts(cfg)
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(2, 5, cfg.hidden_size)
    idx = torch.randint(0, cfg.num_experts, (10, 2))
    w = torch.rand(10, 2)
    torch.testing.assert_close(
        ours(x, idx, w), hf(x.view(10, -1), idx, w).view(2, 5, -1), rtol=1e-5, atol=1e-6
    )
    cfg.hidden_act = "relu"
    with pytest.raises(ValueError, match="experts activation 'relu'"):
        lt.LigerExperts(cfg)


def test_convergence_32_steps():
    """32 AdamW steps of a tiny Qwen3-MoE: the patched model's losses track plain HF's."""

    def train(patch):
        model = build("qwen3_moe", seed=3)
        if patch:
            lt.apply_liger_kernel_to_qwen3_moe(model=model, **ONLY_EXPERTS)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for step in range(32):
            ids, labels = batch(seed=step % 4)
            opt.zero_grad()
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    hf, ours = train(False), train(True)
    assert ours[-1] < ours[0] * 0.8
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(hf), rtol=2e-3, atol=2e-3)


@pytest.mark.skipif(
    not torch.cuda.is_available() or "cuda: yes" not in torch.ops.liger.build_info(), reason="GPU"
)
@pytest.mark.parametrize("model_type", TYPES + ["llama4_text"])
def test_cuda_bf16_model_matches_hf(model_type):
    """On the GPU in bf16 (the grouped GEMMs where the sizes allow): the loss and every parameter
    gradient of the patched model against plain HF (grouped_mm experts), to bf16 accuracy."""
    ref = build(model_type).cuda().bfloat16()
    model = build(model_type).cuda().bfloat16()
    model.load_state_dict(ref.state_dict())
    for m in (ref, model):
        m.config._experts_implementation = "grouped_mm"
    mp.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model, **ONLY_EXPERTS)
    ids, labels = (t.cuda() for t in batch(b=4, t=33))
    out0, g0 = run(ref, ids, labels)
    out1, g1 = run(model, ids, labels)
    torch.testing.assert_close(out1.loss.float(), out0.loss.float(), rtol=2e-2, atol=2e-2)
    assert g0.keys() == g1.keys()
    for n in g0:
        a, b = g1[n].float(), g0[n].float()
        assert (a - b).norm() <= 5e-2 * b.norm() + 1e-6, n


def test_autocast_runs_in_the_autocast_dtype():
    """float32 experts under torch.autocast(bfloat16): the op runs in bfloat16 (as HF's eager F.linear
    does), its gradients reach the float32 parameters."""
    cfg = tiny_config("qwen3_moe")
    mod, _ = modeling("qwen3_moe")
    hf = mod.Qwen3MoeExperts(cfg)
    torch.nn.init.normal_(hf.gate_up_proj, std=0.1)
    torch.nn.init.normal_(hf.down_proj, std=0.1)
    ours = lt.LigerExperts(cfg)
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(10, cfg.hidden_size)
    idx = torch.randint(0, cfg.num_experts, (10, 2))
    w = torch.rand(10, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = ours(x, idx, w), hf(x, idx, w)
    assert a.dtype == b.dtype == torch.float32
    torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)
    a.sum().backward()
    assert ours.gate_up_proj.grad.dtype == torch.float32 and ours.gate_up_proj.grad.abs().sum() > 0


def test_expert_parallel_keeps_hf_forward():
    """HF's expert parallelism marks other ranks' experts with the sentinel index E: the patched
    module then runs HF's own forward (which skips them)."""
    model = build("qwen3_moe")
    lt.apply_liger_kernel_to_qwen3_moe(model=model, **ONLY_EXPERTS)
    ex = experts_modules(model)[0]
    assert runs_fused_op(ex, model.config.hidden_size)
    ex._is_expert_parallel = True
    assert not runs_fused_op(ex, model.config.hidden_size)


_LLAMA4_CASES = [("cpu", torch.float64), ("cpu", torch.float32)] + (
    [("cuda", torch.float32), ("cuda", torch.bfloat16)] if CUDA_OK else []
)


@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("device,dtype", _LLAMA4_CASES)
def test_llama4_moe_block_matches_hf(top_k, device, dtype):
    """Llama 4's MoE block (HF runs every token through every expert, the input scaled by a router
    score that is 0 outside the top k): liger_cpp's sparse block gives HF's output, router logits
    and every gradient (router, experts, shared expert, input), with a skewed router and an expert
    no token picks."""
    import transformers.models.llama4.modeling_llama4 as m4

    cfg = tiny_config("llama4_text")
    cfg.num_experts_per_tok, cfg.num_local_experts, cfg.hidden_act = top_k, 5, "silu"
    torch.manual_seed(0)
    hf = m4.Llama4TextMoe(cfg).to(device, dtype)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.2)
        hf.router.weight[4] = -10.0  # expert 4: never in anyone's top k
        hf.router.weight[0] += 0.3  # expert 0: most tokens' choice
    mp.apply_liger_kernel_to_llama4(**_LLAMA4_ONLY_MOE)  # class level: the block built next is ours
    try:
        ours = m4.Llama4TextMoe(cfg).to(device, dtype)
    finally:
        mp.revert_liger_kernel()
    assert type(ours).__name__ == "LigerLlama4TextMoe" and m4.Llama4TextMoe is type(hf)
    ours.load_state_dict(hf.state_dict())
    # positive inputs: expert 4's logit (-10 * sum(x)) is the lowest for every token
    x = (torch.randn(2, 7, cfg.hidden_size, dtype=torch.float64).abs() + 0.1).to(device, dtype)
    g = torch.randn(2 * 7, cfg.hidden_size, dtype=torch.float64).to(device, dtype)
    outs = []
    for mod in (hf, ours):
        xi = x.clone().requires_grad_(True)
        out, logits = mod(xi)
        (out * g).sum().backward()
        outs.append((out, logits, xi.grad, {n: p.grad for n, p in mod.named_parameters()}))
    (o0, l0, dx0, g0), (o1, l1, dx1, g1) = outs
    torch.testing.assert_close(l1, l0, rtol=0, atol=0)  # the router is HF's
    assert g0.keys() == g1.keys()
    pairs = [("output", o1, o0), ("dx", dx1, dx0)] + [(f"grad of {n}", g1[n], g0[n]) for n in g0]
    for what, a, b in pairs:
        if dtype == torch.bfloat16:  # HF rounds gate, act(gate) and their product: bf16 accuracy
            assert (a.float() - b.float()).norm() <= 2e-2 * b.float().norm() + 1e-6, what
        else:
            # float32: the router's gradient sums token products that cancel (HF's dense pass and
            # the sparse one add them in other orders; on CUDA 4e-6 at an element of 0.1 whose
            # tensor peaks near 1): there, an absolute bound scaled by the tensor's largest element.
            atol = 2e-5 * float(b.abs().max()) if device == "cuda" else 2e-6
            tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-5, atol=atol)
            torch.testing.assert_close(a, b, **tol, msg=lambda s, what=what: f"{what}: {s}")
    assert g1["experts.gate_up_proj"][4].abs().max() == 0  # the unpicked expert: no gradient
    assert g1["experts.gate_up_proj"][0].abs().max() > 0


_LLAMA4_ONLY_MOE = dict(
    rope=False, cross_entropy=False, fused_linear_cross_entropy=False, rms_norm=False, swiglu=True
)
