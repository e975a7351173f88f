"""The call sequences of the frameworks that drive Liger-Kernel themselves, made exactly as they
make them, through the compatibility package (their packages are not installed here):

* Axolotl (integrations/liger/plugin.py, LigerPlugin.pre_model_load): its imports, the
  torch.compiler.disable wrap of liger_kernel.ops.fused_linear_cross_entropy's kernels, the
  use_token_scaling patches of functional.liger_fused_linear_cross_entropy and
  LigerFusedLinearCrossEntropyLoss.__init__, then MODEL_TYPE_TO_APPLY_LIGER_FN[model_type] with the
  flags its signature has, class level, before the model is built;
* LLaMA-Factory (model/model_utils/liger_kernel.py): check_version("liger-kernel"), the class-level
  apply_liger_kernel_to_<type>() before loading, with fused_linear_cross_entropy=False,
  cross_entropy=True when the stage needs logits;
* oumi (_apply_liger_kernel(model_type)), verl (_apply_liger_kernel_to_instance(model=...,
  fused_linear_cross_entropy=False, swiglu=True)), ArcticTraining
  (AutoLigerKernelForCausalLM.from_pretrained(..., swiglu=...)).

Each trains one step against plain Hugging Face: same loss and gradients, liger_cpp's ops ran."""

import inspect
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from compat_env import ensure_compat  # noqa: E402

ensure_compat()

from hf_models import (  # noqa: E402
    batch,
    build,
    run,
    single_thread,  # noqa: F401  (autouse fixture)
    tiny_config,
)

from liger_cpp.transformers import causal_lm  # noqa: E402
from liger_cpp.transformers import functional as cpp_functional  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402

TOL = {"rtol": 1e-5, "atol": 1e-6}
HAS_TOKEN_SCALING = (
    "use_token_scaling" in inspect.signature(cpp_functional.liger_fused_linear_cross_entropy).parameters
)


@pytest.fixture(autouse=True)
def _revert():
    mp.revert_liger_kernel()
    yield
    mp.revert_liger_kernel()


def _step(model, ids, labels, **kw):
    """(output, grads, liger ops run) of one training forward + backward."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out, g = run(model, ids, labels, **kw)
    return out, g, {e.key.split("::", 1)[1] for e in prof.key_averages() if e.key.startswith("liger::")}


def _same(a, b):
    (o1, g1), (o0, g0) = a, b
    torch.testing.assert_close(o1.loss, o0.loss, **TOL)
    assert g0.keys() == g1.keys()
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], **TOL, msg=lambda m, n=n: f"{n}: {m}")


def _from_config(model_type, seed=0):
    """A model built after class-level patching (the same weights as build(model_type, seed))."""
    ref = build(model_type, seed)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(model_type))
    model.load_state_dict(ref.state_dict())
    return ref, model.float().train()


class _AxolotlCfg:
    """The fields of an Axolotl config that LigerPlugin.pre_model_load reads."""

    def __init__(self, **kw):
        self.torch_compile = False
        self.liger_rope = self.liger_rms_norm = self.liger_glu_activation = self.liger_layer_norm = True
        self.liger_cross_entropy = False
        self.liger_fused_linear_cross_entropy = True
        self.liger_use_token_scaling = False
        self.__dict__.update(kw)


def _axolotl_pre_model_load(cfg):
    """Axolotl's LigerPlugin.pre_model_load for a model type in MODEL_TYPE_TO_APPLY_LIGER_FN."""
    if cfg.torch_compile:
        import liger_kernel.ops.fused_linear_cross_entropy

        def patch_with_compile_disable(module, function_name):  # axolotl/integrations/liger/utils.py
            original = getattr(module, function_name)

            @torch.compiler.disable
            def wrapped(*args, **kwargs):
                return original(*args, **kwargs)

            setattr(module, function_name, wrapped)

        patch_with_compile_disable(
            liger_kernel.ops.fused_linear_cross_entropy, "fused_linear_cross_entropy_forward"
        )
        patch_with_compile_disable(
            liger_kernel.ops.fused_linear_cross_entropy, "fused_linear_cross_entropy_backward"
        )
    from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss  # noqa: F401
    from liger_kernel.transformers.functional import liger_cross_entropy  # noqa: F401
    from liger_kernel.transformers.layer_norm import LigerLayerNorm  # noqa: F401
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    from liger_kernel.transformers.rms_norm import LigerRMSNorm  # noqa: F401
    from liger_kernel.transformers.rope import liger_rotary_pos_emb  # noqa: F401
    from liger_kernel.transformers.swiglu import LigerSwiGLUMLP  # noqa: F401

    if cfg.liger_use_token_scaling:
        from liger_kernel.transformers import functional
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

        old_liger_fused_linear_cross_entropy = functional.liger_fused_linear_cross_entropy

        def patched_liger_fused_linear_cross_entropy(*args, **kwargs):
            kwargs["use_token_scaling"] = True
            return old_liger_fused_linear_cross_entropy(*args, **kwargs)

        functional.liger_fused_linear_cross_entropy = patched_liger_fused_linear_cross_entropy
        old_init = LigerFusedLinearCrossEntropyLoss.__init__

        def patched_init(self, *args, **kwargs):
            kwargs["use_token_scaling"] = True
            return old_init(self, *args, **kwargs)

        LigerFusedLinearCrossEntropyLoss.__init__ = patched_init
    assert cfg.model_config_type in MODEL_TYPE_TO_APPLY_LIGER_FN
    apply_liger_fn = MODEL_TYPE_TO_APPLY_LIGER_FN[cfg.model_config_type]
    liger_fn_sig = inspect.signature(apply_liger_fn)
    kwargs = {}
    if "rope" in liger_fn_sig.parameters:
        kwargs["rope"] = cfg.liger_rope
    if "cross_entropy" in liger_fn_sig.parameters:
        kwargs["cross_entropy"] = cfg.liger_cross_entropy
    if "fused_linear_cross_entropy" in liger_fn_sig.parameters:
        kwargs["fused_linear_cross_entropy"] = cfg.liger_fused_linear_cross_entropy
    if "rms_norm" in liger_fn_sig.parameters:
        kwargs["rms_norm"] = cfg.liger_rms_norm
    if "layer_norm" in liger_fn_sig.parameters:
        kwargs["layer_norm"] = cfg.liger_layer_norm
    if "geglu" in liger_fn_sig.parameters:
        kwargs["geglu"] = cfg.liger_glu_activation
    elif "swiglu" in liger_fn_sig.parameters:
        kwargs["swiglu"] = cfg.liger_glu_activation
    apply_liger_fn(**kwargs)


@pytest.mark.parametrize("model_type", ["llama", "gemma", "qwen2_vl"])
def test_axolotl_plugin(model_type):
    import liger_kernel.ops.fused_linear_cross_entropy as flce_ops

    saved = (flce_ops.fused_linear_cross_entropy_forward, flce_ops.fused_linear_cross_entropy_backward)
    try:
        _axolotl_pre_model_load(_AxolotlCfg(model_config_type=model_type, torch_compile=True))
    finally:
        flce_ops.fused_linear_cross_entropy_forward, flce_ops.fused_linear_cross_entropy_backward = saved
    if model_type == "qwen2_vl":  # layer_norm is one of its flags: the vision LayerNorms are patched
        mod = sys.modules["transformers.models.qwen2_vl.modeling_qwen2_vl"]
        assert mod.LayerNorm.__name__ == "LigerNNLayerNorm"
        return
    ref, model = _from_config(model_type)
    ids, labels = batch()
    out, g, ops = _step(model, ids, labels)
    glu = "geglu_fwd" if model_type == "gemma" else "swiglu_fwd"
    assert {"rms_norm_fwd", glu, "rope_fwd", "fused_linear_cross_entropy_fwd"} <= ops, sorted(ops)
    _same((out, g), run(ref, ids, labels))


def test_axolotl_token_scaling_patch_reaches_the_patched_forward(monkeypatch):
    """Axolotl's use_token_scaling patch replaces liger_kernel.transformers.functional's
    liger_fused_linear_cross_entropy: the patched forward's fused loss goes through the replacement
    (which asks for use_token_scaling), and restoring the original routes it back."""
    from liger_kernel.transformers import functional

    from liger_cpp.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

    original, init = functional.liger_fused_linear_cross_entropy, LigerFusedLinearCrossEntropyLoss.__init__
    forward_loss = causal_lm.liger_fused_linear_cross_entropy
    seen = []
    if not HAS_TOKEN_SCALING:  # record the call, then run it without the option liger_cpp lacks yet
        monkeypatch.setattr(
            cpp_functional,
            "liger_fused_linear_cross_entropy",
            lambda *a, use_token_scaling=False, _f=cpp_functional.liger_fused_linear_cross_entropy, **k: (
                seen.append(use_token_scaling) or _f(*a, **k)
            ),
        )
    try:
        _axolotl_pre_model_load(_AxolotlCfg(model_config_type="llama", liger_use_token_scaling=True))
        assert functional.liger_fused_linear_cross_entropy is not original
        assert (
            causal_lm.liger_fused_linear_cross_entropy is not cpp_functional.liger_fused_linear_cross_entropy
        )
        ref, model = _from_config("llama")
        ids, labels = batch()
        out = model(input_ids=ids, labels=labels)
        if not HAS_TOKEN_SCALING:
            assert seen == [True]
        else:  # DFT: each token's loss scaled by its detached target probability
            logits = ref(input_ids=ids).logits
            target = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)
            lp = torch.log_softmax(logits.reshape(-1, logits.shape[-1]), -1)
            valid = target != -100
            lpt = lp.gather(-1, target.clamp(min=0)[:, None])[:, 0]
            want = (-lpt * lpt.detach().exp() * valid).sum() / valid.sum()
            torch.testing.assert_close(out.loss, want, **TOL)
    finally:
        functional.liger_fused_linear_cross_entropy = original
        LigerFusedLinearCrossEntropyLoss.__init__ = init
    assert causal_lm.liger_fused_linear_cross_entropy is forward_loss


def _llama_factory_apply(model_type, require_logits):
    """LLaMA-Factory's apply_liger_kernel(config, model_args, is_trainable, require_logits)."""
    from transformers.utils.versions import require_version

    require_version("liger-kernel")  # hparams/parser.py: check_version("liger-kernel", mandatory=True)
    if model_type == "gemma":
        from liger_kernel.transformers import apply_liger_kernel_to_gemma as apply_liger_kernel
    elif model_type == "qwen3":
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3 as apply_liger_kernel
    else:
        raise AssertionError(model_type)
    if require_logits and "fused_linear_cross_entropy" in inspect.signature(apply_liger_kernel).parameters:
        kwargs = {"fused_linear_cross_entropy": False, "cross_entropy": True}
    else:
        kwargs = {}
    apply_liger_kernel(**kwargs)


@pytest.mark.parametrize("model_type,stage", [("qwen3", "sft"), ("qwen3", "dpo"), ("gemma", "rm")])
def test_llama_factory(model_type, stage):
    _llama_factory_apply(model_type, require_logits=stage not in ("pt", "sft"))  # loader.py
    ref, model = _from_config(model_type)
    ids, labels = batch()
    out, g, ops = _step(model, ids, labels)
    loss_op = "fused_linear_cross_entropy_fwd" if stage == "sft" else "cross_entropy_fwd"
    assert {"rms_norm_fwd", "rope_fwd", loss_op} <= ops, sorted(ops)
    o0, g0 = run(ref, ids, labels)
    _same((out, g), (o0, g0))
    if stage != "sft":  # the logits the stage needs are there
        torch.testing.assert_close(out.logits, o0.logits, **TOL)


def test_llama_factory_missing_patcher_is_an_import_error_as_with_liger():
    with pytest.raises(ImportError):  # LLaMA-Factory's v1 table names one Liger-Kernel does not have
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3_5_text  # noqa: F401


def test_oumi_verl_and_arctic_training_calls(tmp_path):
    import importlib.metadata

    import liger_kernel.transformers as lk
    from packaging.version import Version

    # oumi: class level by model type, no flags
    lk._apply_liger_kernel("llama")
    ref, model = _from_config("llama")
    ids, labels = batch()
    out, g, ops = _step(model, ids, labels)
    assert "fused_linear_cross_entropy_fwd" in ops
    _same((out, g), run(ref, ids, labels))
    mp.revert_liger_kernel()
    # verl's FSDP engine: instance patching without the fused loss
    ref, model = build("qwen2"), build("qwen2")
    lk._apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=False, swiglu=True)
    out, g, ops = _step(model, ids, labels)
    assert {"swiglu_fwd", "rms_norm_fwd"} <= ops and "fused_linear_cross_entropy_fwd" not in ops
    _same((out, g), run(ref, ids, labels))
    torch.testing.assert_close(out.logits, run(ref, ids, labels)[0].logits, **TOL)
    mp.revert_liger_kernel()
    # ArcticTraining: its version check, then the Auto class with swiglu off for tiled MLP
    assert Version(importlib.metadata.version("liger_kernel")) >= Version("0.6.1")
    build("llama").save_pretrained(tmp_path)
    model = lk.AutoLigerKernelForCausalLM.from_pretrained(tmp_path, swiglu=False)
    assert type(model.model.norm).__name__ == "LigerRMSNorm"
    assert type(model.model.layers[0].mlp).__name__ == "LlamaMLP"
