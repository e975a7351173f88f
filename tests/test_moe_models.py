"""Fused MoE experts in models: tiny Qwen3-MoE, Mixtral and GPT-OSS patched with swiglu=True (instance
and class level) against plain HF (loss and every parameter gradient), HF's experts_implementation
choices, revert, LigerExperts' state-dict compatibility, and a 32-step convergence run."""

import pytest
import torch
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
@pytest.mark.parametrize("model_type", TYPES)
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
