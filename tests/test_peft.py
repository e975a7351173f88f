"""PEFT LoRA with liger_cpp's instance patching, in both orders (patch then wrap, as Liger
recommends, and wrap then patch): the loss and every LoRA gradient match the unpatched PEFT model,
the LoRA layers stay in place inside the converted MLPs, and the fused linear cross entropy runs
(no logits)."""

import pytest
import torch

pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from hf_models import (  # noqa: E402
    batch,
    build,
    grads,
    single_thread,  # noqa: E402,F401  (autouse fixture)
)

import liger_cpp.transformers as lt  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402

TARGETS = ["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]


def lora(model):
    torch.manual_seed(7)  # init_lora_weights=False: random A and B, so every LoRA gradient is non-zero
    cfg = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0, init_lora_weights=False
    )
    return peft.get_peft_model(model, cfg)


@pytest.mark.parametrize("order", ["patch_then_lora", "lora_then_patch"])
def test_lora_matches_unpatched(order):
    ref = lora(build("llama"))
    base = build("llama")
    try:
        if order == "patch_then_lora":
            lt.apply_liger_kernel_to_llama(model=base)
            model = lora(base)
        else:
            model = lora(base)
            lt.apply_liger_kernel_to_llama(model=model)
        model.load_state_dict(ref.state_dict())
        inner = model.get_base_model().model
        assert isinstance(inner.layers[0].mlp, lt.LigerSwiGLUMLP)
        assert isinstance(inner.norm, lt.LigerRMSNorm)
        assert type(inner.layers[0].mlp.gate_proj).__module__.startswith("peft")  # LoRA kept
        ids, labels = batch()
        out0 = ref(input_ids=ids, labels=labels)
        out0.loss.backward()
        out1 = model(input_ids=ids, labels=labels)
        out1.loss.backward()
        assert out1.logits is None and out0.logits is not None  # FLCE ran under PEFT
        torch.testing.assert_close(out1.loss, out0.loss, rtol=1e-5, atol=1e-6)
        g0, g1 = grads(ref), grads(model)
        assert g0.keys() == g1.keys() and len(g0) == 2 * len(TARGETS) * 2  # A and B, 2 layers
        for k in g0:
            torch.testing.assert_close(g1[k], g0[k], rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")
    finally:
        mp.revert_liger_kernel()
