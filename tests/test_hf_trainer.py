"""A few optimizer steps through Hugging Face's Trainer (gradient accumulation, so the loss goes
through num_items_in_batch), plain HF vs liger_cpp-patched: same logged losses, same weights."""

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # Trainer needs it

from hf_models import (  # noqa: E402
    VOCAB,
    build,
    single_thread,  # noqa: E402,F401  (autouse fixture)
)

import liger_cpp.transformers as lt  # noqa: E402
from liger_cpp.transformers import causal_lm  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402


def dataset(n=12, t=10):
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        ids = torch.randint(8, VOCAB, (t,), generator=g)
        labels = ids.clone()
        labels[: i % 5] = -100  # varying token counts: num_items_in_batch differs from a mean of means
        rows.append({"input_ids": ids, "labels": labels})
    return rows


def train(model, out_dir):
    args = transformers.TrainingArguments(
        output_dir=str(out_dir),
        max_steps=3,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        learning_rate=1e-2,
        # Plain SGD: the update is the gradient, so the weights compare the gradients. AdamW turned
        # fp32 rounding differences of near-zero gradients into lr-sized updates (m / sqrt(v) is
        # about +-1 whatever the size), which made one weight of 2048 differ by 1.8e-4 on another CPU.
        optim="sgd",
        lr_scheduler_type="constant",
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset())
    assert trainer.model_accepts_loss_kwargs  # num_items_in_batch reaches the model's forward
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("model_type", ["llama", "qwen3_moe"])
def test_trainer_steps_match_hf(model_type, tmp_path, monkeypatch):
    ref = build(model_type)
    model = build(model_type)
    model.load_state_dict(ref.state_dict())
    init = {n: p.detach().clone() for n, p in ref.named_parameters()}
    losses0, params0 = train(ref, tmp_path / "hf")
    assert all(not torch.equal(params0[n], init[n]) for n in ("lm_head.weight", "model.norm.weight"))
    lt.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model)
    calls = []
    flce = causal_lm.liger_fused_linear_cross_entropy
    monkeypatch.setattr(
        causal_lm, "liger_fused_linear_cross_entropy", lambda *a, **k: calls.append(1) or flce(*a, **k)
    )
    try:
        losses1, params1 = train(model, tmp_path / "liger")
    finally:
        mp.revert_liger_kernel()
    assert len(calls) == 3 * 2  # 3 steps x 2 micro-batches
    assert len(losses0) == 3
    torch.testing.assert_close(torch.tensor(losses1), torch.tensor(losses0), rtol=1e-4, atol=1e-5)
    # With SGD the weights differ by lr x the gradients' fp32 rounding (Liger's fp32 convergence
    # tests allow 5e-3).
    for n in params0:
        torch.testing.assert_close(
            params1[n], params0[n], rtol=1e-5, atol=1e-6, msg=lambda m, n=n: f"{n}: {m}"
        )
