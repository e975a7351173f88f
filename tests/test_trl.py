"""A few optimizer steps through TRL's SFTTrainer, plain Hugging Face vs liger_cpp-patched: same
logged losses, same weights. TRL 1.x scores tokens with its own fused LM head (trl's
add_fused_lm_head), so liger_cpp's FusedLinearCrossEntropy is not on this path; the patched
RMSNorm, RoPE and SwiGLU modules are, under SFTConfig's default gradient checkpointing."""

import pytest
import torch

transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")

from hf_models import (  # noqa: E402
    VOCAB,
    build,
    single_thread,  # noqa: E402,F401  (autouse fixture)
)

import liger_cpp.transformers as lt  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402


def tokenizer():
    """A word-level tokenizer over the tiny models' vocabulary (no download)."""
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="t3"))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="t0", bos_token="t1", eos_token="t2", unk_token="t3"
    )


def dataset(n=12):
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(8, VOCAB, (10 + i % 3,), generator=g).tolist()} for i in range(n)]
    return datasets.Dataset.from_list(rows)  # already tokenized: SFTTrainer pads and builds labels


def train(model, out_dir):
    args = trl.SFTConfig(
        output_dir=str(out_dir),
        max_steps=3,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        # SGD: updates proportional to the gradients, so the parameters compare as tightly as the
        # gradients do (AdamW's first steps are about lr * sign(g)).
        optim="sgd",
        learning_rate=0.5,
        lr_scheduler_type="constant",
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,  # SFTConfig's default is bf16 autocast; fp32 here, for tight tolerances
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=dataset(), processing_class=tokenizer())
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def test_sft_trainer_steps_match_hf(tmp_path):
    ref = build("llama")
    model = build("llama")
    model.load_state_dict(ref.state_dict())
    init = {n: p.detach().clone() for n, p in ref.named_parameters()}
    losses0, params0 = train(ref, tmp_path / "hf")
    assert all(not torch.equal(params0[n], init[n]) for n in ("lm_head.weight", "model.norm.weight"))
    lt.apply_liger_kernel_to_llama(model=model)
    try:
        assert type(model.model.norm).__name__ == "LigerRMSNorm"
        assert type(model.model.layers[0].mlp).__name__ == "LigerSwiGLUMLP"
        losses1, params1 = train(model, tmp_path / "liger")
    finally:
        mp.revert_liger_kernel()
    assert len(losses0) == 3
    torch.testing.assert_close(torch.tensor(losses1), torch.tensor(losses0), rtol=1e-4, atol=1e-5)
    for n in params0:
        torch.testing.assert_close(
            params1[n], params0[n], rtol=1e-5, atol=1e-6, msg=lambda m, n=n: f"{n}: {m}"
        )
