"""Liger-Kernel's per-family forwards (liger_kernel.transformers.model.<family>.lce_forward, and
gemma3's causal_forward / multimodal_forward ...) as code that patches by hand uses them:
``model.forward = MethodType(lce_forward, model)`` and ``SomeForCausalLM.forward = lce_forward``,
also for another family than the name's (a family Liger-Kernel lacks, patched with qwen2's). Each
trains one step against plain Hugging Face (same loss and gradients, liger_cpp's fused linear cross
entropy ran, logits skipped) and gives Hugging Face's logits in eval without labels. Tiny random
models on CPU."""

import os
import subprocess
import sys
import types

import pytest
import torch

transformers = pytest.importorskip("transformers")

from compat_env import ensure_compat  # noqa: E402

ensure_compat()

from hf_models import batch, build, grads, single_thread  # noqa: E402, F401  (autouse fixture)

from liger_cpp.transformers import monkey_patch as mp  # noqa: E402

TOL = {"rtol": 1e-5, "atol": 1e-6}
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def _revert():
    mp.revert_liger_kernel()
    yield
    mp.revert_liger_kernel()


def _liger(family, name="lce_forward"):
    import importlib

    return getattr(importlib.import_module(f"liger_kernel.transformers.model.{family}"), name)


def _step(model, ids, labels):
    """(loss, grads, logits, liger ops run) of one training forward + backward."""
    model.zero_grad(set_to_none=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
    ops = {e.key.split("::", 1)[1] for e in prof.key_averages() if e.key.startswith("liger::")}
    return out.loss.detach(), grads(model), out.logits, ops


def _hf_results(ref):
    """Plain Hugging Face's training step and eval logits (taken before any patch of its class)."""
    ids, labels = batch()
    loss, g, logits, ops = _step(ref, ids, labels)
    assert logits is not None and "fused_linear_cross_entropy_fwd" not in ops
    ref.eval()
    with torch.no_grad():
        eval_logits = ref(input_ids=ids).logits
    return loss, g, eval_logits


def _check(model, hf):
    """A training step of `model` equals Hugging Face's and ran the fused loss with the logits
    skipped; in eval without labels the logits are Hugging Face's."""
    ref_loss, ref_g, ref_logits = hf
    ids, labels = batch()
    loss, g, logits, ops = _step(model, ids, labels)
    assert "fused_linear_cross_entropy_fwd" in ops, sorted(ops)
    assert logits is None
    torch.testing.assert_close(loss, ref_loss, **TOL)
    assert g.keys() == ref_g.keys()
    for n in ref_g:
        torch.testing.assert_close(g[n], ref_g[n], **TOL, msg=lambda m, n=n: f"{n}: {m}")
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, ref_logits, **TOL)


# (model type built, Liger-Kernel module and name): the name's own family, gemma2's softcap and
# granite's logit scale through another family's name, an MoE model, a multimodal class.
CASES = [
    ("llama", "llama", "lce_forward"),
    ("gemma2", "qwen2", "lce_forward"),
    ("granite", "qwen2", "lce_forward"),
    ("qwen3_moe", "qwen3_moe", "lce_forward"),
    ("gemma3_text", "gemma3", "causal_forward"),
    ("qwen2_vl", "qwen2_vl", "lce_forward"),
]


@pytest.mark.parametrize("model_type,family,name", CASES)
def test_instance_forward(model_type, family, name):
    hf, model = _hf_results(build(model_type)), build(model_type)
    model.forward = types.MethodType(_liger(family, name), model)
    _check(model, hf)
    mp.revert_liger_kernel(model=model)  # the patch is liger's: revert takes it off
    assert "forward" not in model.__dict__


@pytest.mark.parametrize("model_type,family,name", CASES[:3])
def test_class_forward(model_type, family, name, monkeypatch):
    hf, model = _hf_results(build(model_type)), build(model_type)
    monkeypatch.setattr(type(model), "forward", _liger(family, name))
    _check(model, hf)


def test_class_forward_over_liger_cpps_own_patch():
    """lce_forward assigned over the class-level patch of apply_liger_kernel_to_llama."""
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    from transformers.models.llama import modeling_llama

    hf = _hf_results(build("llama"))
    apply_liger_kernel_to_llama(rope=False, rms_norm=False, swiglu=False)
    modeling_llama.LlamaForCausalLM.forward = _liger("llama")
    try:
        _check(build("llama"), hf)
    finally:
        mp.revert_liger_kernel()
    assert modeling_llama.LlamaForCausalLM.forward is not _liger("llama")  # revert restored HF's


def _check_subclass(cls, lce_forward):
    """A model of `cls` (a subclass of LlamaForCausalLM) with build("llama")'s weights, its class's
    forward then replaced by lce_forward, against plain Hugging Face."""
    ref = build("llama")
    model = cls(ref.config)
    model.load_state_dict(ref.state_dict())
    hf = _hf_results(ref)
    cls.forward = lce_forward
    _check(model.train(), hf)


def test_class_created_after_import_keeps_its_own_forward():
    """A model class created after lce_forward's import (transformers imports its modeling modules
    lazily) has its own forward recorded before the assignment replaces it; that forward runs."""
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    lce_forward = _liger("qwen2")
    calls = []

    class CountedForCausalLM(LlamaForCausalLM):
        def forward(self, input_ids=None, labels=None, **kwargs):
            calls.append(1)
            return super().forward(input_ids=input_ids, labels=labels, **kwargs)

    _check_subclass(CountedForCausalLM, lce_forward)
    assert calls  # the class's own forward ran inside liger_cpp's


def test_own_forward_taking_only_args_and_kwargs():
    """A subclass's forward of (self, *args, **kwargs): labels arrive in its **kwargs, and the fused
    loss runs around that forward (before, the patched forward saw no labels and kept Hugging
    Face's loss)."""
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    lce_forward = _liger("llama")
    calls = []

    class WrappedForCausalLM(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            calls.append(1)
            return super().forward(*args, **kwargs)

    _check_subclass(WrappedForCausalLM, lce_forward)
    assert calls


def test_replaced_forward_never_seen_is_not_guessed():
    """A class whose own forward was replaced before it could be recorded: a clear error, not its
    base's forward in its place."""
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    from liger_cpp.transformers import lce_forward as impl

    class UnseenForCausalLM(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs)

    impl._HF.pop(UnseenForCausalLM, None)  # as if created before lce_forward's import
    UnseenForCausalLM.forward = _liger("llama")
    model = UnseenForCausalLM(build("llama").config)
    with pytest.raises(TypeError, match="cannot find Hugging Face's forward of .*UnseenForCausalLM"):
        model(input_ids=torch.zeros(1, 3, dtype=torch.long))


def test_forward_never_known_is_a_clear_error():
    from transformers.models.llama.modeling_llama import LlamaPreTrainedModel

    class Bare(LlamaPreTrainedModel):
        forward = _liger("llama")

    ref = build("llama")
    model = Bare(ref.config)
    with pytest.raises(TypeError, match="cannot find Hugging Face's forward of .*Bare"):
        model(input_ids=torch.zeros(1, 3, dtype=torch.long))


def test_import_before_the_modeling_module_in_a_fresh_process():
    """The order isort gives a hand-patching script: liger_kernel's name first, the modeling module
    (of a family Liger-Kernel lacks) after, then the class's forward replaced."""
    code = f"""
import sys, torch
sys.path.insert(0, {HERE!r})
from compat_env import ensure_compat
ensure_compat()
from liger_kernel.transformers.model.qwen2 import lce_forward
assert "transformers.models.olmo.modeling_olmo" not in sys.modules
from transformers.models.olmo import modeling_olmo
from hf_models import batch
cfg = modeling_olmo.OlmoConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2)
torch.manual_seed(0)
ref = modeling_olmo.OlmoForCausalLM(cfg).train()
ids, labels = batch()
want = ref(input_ids=ids, labels=labels).loss
modeling_olmo.OlmoForCausalLM.forward = lce_forward
out = ref(input_ids=ids, labels=labels)
assert out.logits is None
torch.testing.assert_close(out.loss, want, rtol=1e-5, atol=1e-6)
print("ok")
"""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE, os.environ.get("PYTHONPATH", "")]),
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]


def test_every_liger_forward_name_runs_liger_cpp():
    from liger_kernel._lce_forwards import NAMES
    from liger_kernel._surface import MODULES

    found = 0
    for module, names in MODULES.items():
        if not module.startswith("liger_kernel.transformers.model."):
            continue
        for name in names:
            if name in NAMES:
                fn = _liger(module.rsplit(".", 1)[1], name)
                assert fn._liger_mode == "flce" and fn.__module__ == module, (module, name)
                found += 1
    assert found >= 40, found


@pytest.mark.parametrize("peft_head", [False, True])
def test_lce_maybe_trainable_lm_head(peft_head):
    """Liger-Kernel's helper of its llama / smollm3 forwards: the causal-LM loss of given hidden
    states with the model's lm_head (through PEFT's ModulesToSaveWrapper when lm_head is trained as a
    module to save), against Hugging Face's loss on the logits; dW reaches the trained copy."""
    ref = build("llama")
    ids, labels = batch()
    hidden = ref.model(input_ids=ids).last_hidden_state.detach().requires_grad_()
    model = ref
    if peft_head:
        peft = pytest.importorskip("peft")
        cfg = peft.LoraConfig(r=2, target_modules=["q_proj"], modules_to_save=["lm_head"])
        model = peft.get_peft_model(ref, cfg).base_model.model
    head = model.lm_head.modules_to_save["default"] if peft_head else model.lm_head
    with torch.no_grad():
        head.weight.add_(0.01)  # the trained copy differs from the original
    fn = _liger("llama", "lce_maybe_trainable_lm_head")
    assert fn is _liger("smollm3", "lce_maybe_trainable_lm_head")
    loss = fn(model, hidden, hidden.shape[-1], labels, None)
    loss.backward()
    got = (hidden.grad.clone(), head.weight.grad.clone())
    hidden.grad = head.weight.grad = None
    want = model.loss_function(logits=head(hidden), labels=labels, vocab_size=head.out_features)
    want.backward()
    torch.testing.assert_close(loss, want, **TOL)
    torch.testing.assert_close(got[0], hidden.grad, **TOL)
    torch.testing.assert_close(got[1], head.weight.grad, **TOL)
