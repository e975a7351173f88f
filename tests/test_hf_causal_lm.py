"""The patched causal-LM loss path (fused linear cross entropy / cross entropy) against Hugging
Face's: num_items_in_batch, shift_labels, logits_to_keep, softcapping, Granite's logit scaling, MoE
auxiliary losses, token accuracy, return types, fallbacks, gradient checkpointing and SDPA."""

import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402
from hf_models import (  # noqa: E402
    VOCAB,
    batch,
    build,
    grads,
    run,
    single_thread,  # noqa: E402,F401  (autouse fixture)
)

import liger_cpp.transformers as lt  # noqa: E402
from liger_cpp.transformers import causal_lm  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402

TOL = {"rtol": 1e-5, "atol": 1e-5}
# FLCE on: plain, softcapped (gemma2 softcap 3), scaled (granite / 4), MoE, multimodal class; of the
# newer families: softcapped Gemma 4, Falcon-H1's logit multiplier, Qwen3.5-MoE (gated delta net,
# shared experts), Llama 4 (L2 q/k norm, complex RoPE), Qwen3-VL's multimodal class, MuseGlimmer's
# (output multiplier, then softcap).
FLCE_TYPES = ["llama", "gemma2", "granite", "mixtral", "qwen2_vl"]
FLCE_TYPES_NEW = ["gemma4_text", "falcon_h1", "qwen3_5_moe_text", "llama4_text", "qwen3_vl", "muse_glimmer"]
FLCE_TYPES += FLCE_TYPES_NEW


def flags(model_type, mode="flce"):
    ce = mode == "ce"
    return dict(rope=model_type not in NO_ROPE, cross_entropy=ce, fused_linear_cross_entropy=not ce)


NO_ROPE = {"glm4", "glm4v", "deepseek_v4"}  # rope=True: a NotImplementedError (a warning for deepseek_v4)


def pair(model_type, mode="flce", **build_kw):
    """(HF model, instance-patched model with the same weights)."""
    ref = build(model_type, **build_kw)
    model = build(model_type, **build_kw)
    model.load_state_dict(ref.state_dict())
    lt.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model, **flags(model_type, mode))
    return ref, model


@pytest.fixture(autouse=True)
def _reverted():
    yield
    mp.revert_liger_kernel()  # RoPE is patched module-wide


def same(o1, g1, o0, g0, tol=TOL):
    torch.testing.assert_close(o1.loss, o0.loss, **tol)
    assert g0.keys() == g1.keys() and g0
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], **tol, msg=lambda m, n=n: f"grad of {n}: {m}")


# Gemma 4's embedding gradient (scaled by sqrt(hidden), shared with the per-layer inputs) is ~1e-5
# from float64 in HF's own fp32 run (measured with logits_to_keep: HF 9.8e-6, liger_cpp 1.2e-5).
TOL_OF = {"gemma4_text": {"rtol": 5e-5, "atol": 2e-5}}


@pytest.mark.parametrize("model_type", FLCE_TYPES)
def test_num_items_in_batch(model_type):
    """Gradient accumulation (HF Trainer): the loss is a sum divided by the tokens of all micro-batches."""
    ref, model = pair(model_type)
    ids, labels = batch()
    for n in (torch.tensor(23), 23):
        o0, g0 = run(ref, ids, labels, num_items_in_batch=n)
        o1, g1 = run(model, ids, labels, num_items_in_batch=n)
        assert o1.logits is None
        same(o1, g1, o0, g0)
    mean = ref(input_ids=ids, labels=labels).loss
    assert not torch.allclose(o0.loss, mean)  # the option matters


@pytest.mark.parametrize("model_type", FLCE_TYPES)
def test_shift_labels(model_type):
    ref, model = pair(model_type)
    ids, labels = batch()
    shift = torch.randint(0, VOCAB, ids.shape, generator=torch.Generator().manual_seed(5))
    shift[1, -3:] = -100
    o0, g0 = run(ref, ids, labels, shift_labels=shift)
    o1, g1 = run(model, ids, labels, shift_labels=shift)
    same(o1, g1, o0, g0)
    # shift_labels alone (context parallelism): HF needs labels for a loss, liger_cpp does not
    model.zero_grad(set_to_none=True)
    o2 = model(input_ids=ids, shift_labels=shift)
    o2.loss.backward()
    same(o2, grads(model), o0, g0)


@pytest.mark.parametrize("model_type", FLCE_TYPES)
def test_logits_to_keep(model_type):
    ref, model = pair(model_type)
    ids, labels = batch()
    kept = labels[:, -4:]
    o0, g0 = run(ref, ids, kept, logits_to_keep=4)
    o1, g1 = run(model, ids, kept, logits_to_keep=4)
    same(o1, g1, o0, g0, TOL_OF.get(model_type, TOL))
    with pytest.raises(ValueError, match="logits_to_keep"):
        model(input_ids=ids, labels=labels, logits_to_keep=4)


MOE_AUX = ["mixtral", "qwen3_moe", "gpt_oss", "qwen3_next", "qwen3_5_moe_text", "qwen3_vl_moe", "deepseek_v4"]


@pytest.mark.parametrize("model_type", MOE_AUX)
@pytest.mark.parametrize("mode", ["flce", "ce"])
def test_moe_aux_loss(model_type, mode):
    ref, model = pair(model_type, mode)
    ids, labels = batch()
    o0, g0 = run(ref, ids, labels, output_router_logits=True, num_items_in_batch=torch.tensor(15))
    o1, g1 = run(model, ids, labels, output_router_logits=True, num_items_in_batch=torch.tensor(15))
    same(o1, g1, o0, g0)
    torch.testing.assert_close(o1.aux_loss, o0.aux_loss, **TOL)
    assert o0.aux_loss > 0 and any("gate" in n for n in g1)  # router weights get the aux-loss gradient
    assert type(o1) is type(o0)


@pytest.mark.parametrize("model_type", ["gemma2", "gemma3_text", "granite", "gemma4_text", "gemma3n_text"])
def test_softcap_and_logit_scaling_change_the_loss(model_type):
    """The configured transform matters (a test that ignored it would fail here)."""
    ref, model = pair(model_type)
    with torch.no_grad():  # logits of a few units: the softcap (3) bites
        for m in (ref, model):
            m.lm_head.weight.mul_(40)
    ids, labels = batch()
    o1, _ = run(model, ids, labels)
    key = "logits_scaling" if model_type == "granite" else "final_logit_softcapping"
    for m in (ref, model):
        # off: Gemma 3n's config takes only a float (1e6: no capping at these logits)
        off = 1e6 if model_type == "gemma3n_text" else None
        setattr(m.config, key, 1.0 if key == "logits_scaling" else off)
    o0, g0 = run(ref, ids, labels)
    o2, g2 = run(model, ids, labels)
    same(o2, g2, o0, g0)
    assert not torch.allclose(o1.loss, o2.loss, rtol=1e-3)


def test_falcon_h1_lm_head_multiplier_changes_the_loss():
    """Falcon-H1 multiplies its logits by lm_head_multiplier (read at init, as HF does)."""
    losses = []
    for mult in (0.7, 1.0):
        ref, model = pair("falcon_h1", lm_head_multiplier=mult)
        ids, labels = batch()
        o0, g0 = run(ref, ids, labels)
        o1, g1 = run(model, ids, labels)
        same(o1, g1, o0, g0)
        losses.append(o1.loss)
    assert not torch.allclose(losses[0], losses[1], rtol=1e-3)


def test_muse_glimmer_output_multiplier_and_softcap_change_the_loss():
    """MuseGlimmer's head computes T * tanh(m * logits / T): both m and T reach the fused loss. The
    gradients (up to ~50 here: the weightless embed_norm scales the tiny embeddings' up) are held to
    2x Hugging Face's own fp32 error against its float64 run."""
    losses = []
    for mult, cap in ((1.7, 3.0), (1.0, 3.0), (1.7, 1e6)):
        cfg = dict(output_multiplier=mult, final_logit_softcapping=cap)
        ref, model = pair("muse_glimmer", **cfg)
        with torch.no_grad():  # logits of a few units: the softcap (3) bites
            for m in (ref, model):
                m.lm_head.weight.mul_(40)
        ref64 = build("muse_glimmer", **cfg)
        ref64.load_state_dict(ref.state_dict())
        ids, labels = batch()
        o0, g0 = run(ref, ids, labels)
        o1, g1 = run(model, ids, labels)
        o64, g64 = run(ref64.double(), ids, labels)
        assert o1.logits is None
        torch.testing.assert_close(o1.loss, o0.loss, **TOL)
        assert g0.keys() == g1.keys() == g64.keys() and g0
        for n in g0:
            err_hf = (g0[n].double() - g64[n]).abs().max().item()
            err = (g1[n].double() - g64[n]).abs().max().item()
            assert err <= 2 * err_hf + 1e-7, f"grad of {n}: {err:.3g} from float64 (HF fp32: {err_hf:.3g})"
        losses.append(o1.loss)
    assert not torch.allclose(losses[0], losses[1], rtol=1e-3)
    assert not torch.allclose(losses[0], losses[2], rtol=1e-3)


def test_granite_flce_needs_cross_entropy_off():
    ref, model = build("granite"), build("granite")
    model.load_state_dict(ref.state_dict())
    lt.apply_liger_kernel_to_granite(model=model, cross_entropy=False, fused_linear_cross_entropy=True)
    ids, labels = batch()
    o0, g0 = run(ref, ids, labels)
    o1, g1 = run(model, ids, labels)
    assert o1.logits is None
    same(o1, g1, o0, g0)


@pytest.mark.parametrize("mode", ["flce", "ce"])
def test_token_accuracy(mode):
    ref, model = pair("qwen3", mode)
    ids, labels = batch()
    ref.eval()
    logits = ref(input_ids=ids).logits
    target = F.pad(labels, (0, 1), value=-100)[:, 1:]
    valid = target != -100
    want = ((logits.argmax(-1) == target) & valid).sum() / valid.sum()
    for train in (True, False):  # fused path and materialised logits
        model.train(train)
        out = model(input_ids=ids, labels=labels, return_token_accuracy=True)
        assert isinstance(out, transformers.modeling_outputs.CausalLMOutputWithPast)
        torch.testing.assert_close(out.token_accuracy, want.float())
    model.train()
    assert not hasattr(model(input_ids=ids, labels=labels), "token_accuracy")


def test_return_dict_false_and_skip_logits():
    ref, model = pair("llama")
    ids, labels = batch()
    t0 = ref(input_ids=ids, labels=labels, return_dict=False)
    t1 = model(input_ids=ids, labels=labels, return_dict=False)
    assert isinstance(t1, tuple) and len(t1) == len(t0) - 1  # no logits
    torch.testing.assert_close(t1[0], t0[0], **TOL)
    with pytest.raises(ValueError, match="skip_logits=True needs labels"):
        model(input_ids=ids, skip_logits=True)
    model.eval()
    out = model(input_ids=ids, labels=labels, skip_logits=True)  # forced in eval mode
    assert out.logits is None
    torch.testing.assert_close(out.loss, t0[0], **TOL)


def _spy(monkeypatch, calls):
    """Record the liger_cpp loss functions the patched forward calls (by their module attribute)."""
    for name in ("liger_cross_entropy", "liger_fused_linear_cross_entropy"):
        fn = getattr(causal_lm, name)
        monkeypatch.setattr(causal_lm, name, lambda *a, _f=fn, _n=name, **k: calls.append(_n) or _f(*a, **k))


def test_cross_entropy_patches_only_the_models_loss(monkeypatch):
    ce = F.cross_entropy
    ref, model = pair("qwen2", "ce")
    lt.apply_liger_kernel_to_llama(cross_entropy=True, fused_linear_cross_entropy=False)  # class level
    assert F.cross_entropy is ce and torch.nn.functional.cross_entropy is ce
    ids, labels = batch()
    calls = []
    _spy(monkeypatch, calls)
    o0, g0 = run(ref, ids, labels, num_items_in_batch=torch.tensor(11))
    o1, g1 = run(model, ids, labels, num_items_in_batch=torch.tensor(11))
    assert calls == ["liger_cross_entropy"]
    same(o1, g1, o0, g0)
    torch.testing.assert_close(o1.logits, o0.logits, **TOL)


def test_flce_is_what_runs(monkeypatch):
    ref, model = pair("llama")
    calls = []
    _spy(monkeypatch, calls)
    run(model, *batch())
    model.eval()
    model(input_ids=batch()[0], labels=batch()[1])  # eval: HF's loss on materialised logits
    assert calls == ["liger_fused_linear_cross_entropy"]


def test_wrong_logit_transform_is_a_clear_error():
    model = build("llama")
    cls = type(model)
    bad = causal_lm.make_forward(cls.forward, "flce", causal_lm.LossSpec(logit_scale=lambda c: 2.0))
    model.forward = bad.__get__(model)
    with pytest.raises(RuntimeError, match="transforms its logits differently"):
        model(input_ids=batch()[0], labels=batch()[1])
    assert "_loss_function" not in vars(model) and type(model.lm_head) is torch.nn.Linear  # restored


def test_custom_loss_function_and_hooked_lm_head_keep_hf_path():
    ref, model = pair("llama")
    ids, labels = batch()
    seen = []

    def custom(logits, labels, vocab_size, **kw):
        seen.append(logits.shape)
        return logits.float().square().mean()

    model.loss_function = custom
    with pytest.warns(UserWarning, match="loss function other than"):
        out = model(input_ids=ids, labels=labels)
    assert seen and out.logits is not None
    del model._loss_function
    model.lm_head.register_forward_hook(lambda m, i, o: None)
    o0, g0 = run(ref, ids, labels)
    with pytest.warns(UserWarning, match="not a plain nn.Linear"):
        o1, g1 = run(model, ids, labels)
    assert o1.logits is not None
    same(o1, g1, o0, g0)


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text", "qwen3_moe", "qwen3_next"])
def test_sdpa_and_gradient_checkpointing(model_type):
    ref, model = pair(model_type, attn="sdpa")
    for m in (ref, model):
        if hasattr(m, "activation_checkpointing_enable"):  # transformers >= 5.2x
            m.activation_checkpointing_enable({"use_reentrant": False})
        else:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        on = (
            "is_activation_checkpointing"
            if hasattr(type(m), "is_activation_checkpointing")
            else "is_gradient_checkpointing"
        )
        assert getattr(m, on)
    ids, labels = batch()
    o0, g0 = run(ref, ids, labels)
    o1, g1 = run(model, ids, labels)
    same(o1, g1, o0, g0)


def test_class_level_forward_and_generation():
    ref = build("llama")
    ids, labels = batch()
    o0, g0 = run(ref, ids, labels)
    ref.eval()
    gen0 = ref.generate(ids[:, :4], max_new_tokens=5, do_sample=False, pad_token_id=0)
    lt.apply_liger_kernel_to_llama()
    model = build("llama")
    model.load_state_dict(ref.state_dict())
    o1, g1 = run(model, ids, labels)
    assert o1.logits is None
    same(o1, g1, o0, g0)
    model.eval()
    gen1 = model.generate(ids[:, :4], max_new_tokens=5, do_sample=False, pad_token_id=0)
    torch.testing.assert_close(gen1, gen0)


def test_bf16_autocast_close_to_hf():
    ref, model = pair("qwen2")
    ids, labels = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        l0 = ref(input_ids=ids, labels=labels).loss
        l1 = model(input_ids=ids, labels=labels).loss
    assert l1.dtype == torch.float32
    torch.testing.assert_close(l1, l0, rtol=2e-2, atol=2e-2)


def test_liger_for_causal_lm_loss_matches_hf_formula():
    from transformers.loss.loss_utils import ForCausalLMLoss

    g = torch.Generator().manual_seed(0)
    h, w, b = (
        torch.randn(2, 7, 16, generator=g),
        torch.randn(40, 16, generator=g),
        torch.randn(40, generator=g),
    )
    labels = torch.randint(0, 40, (2, 7), generator=g)
    labels[0, 3] = -100
    for softcap, scale, n in [(None, 1.0, None), (4.0, 0.5, torch.tensor(9))]:
        logits = (h @ w.T + b) * scale
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        want = ForCausalLMLoss(logits, labels, 40, num_items_in_batch=n)
        got, acc = lt.liger_for_causal_lm_loss(
            h,
            w,
            labels,
            b,
            softcap=softcap,
            logit_scale=scale,
            num_items_in_batch=n,
            return_token_accuracy=True,
        )
        torch.testing.assert_close(got, want, **TOL)
        assert 0 <= acc <= 1
    with pytest.raises(ValueError, match="labels"):
        lt.liger_for_causal_lm_loss(h, w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lt.liger_for_causal_lm_loss(h, w, shift_labels=labels)
