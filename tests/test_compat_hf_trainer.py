"""Hugging Face's Trainer with TrainingArguments(use_liger_kernel=True) and a liger_kernel_config
holding flags some model types' patchers lack, through the compatibility package (import name
liger_kernel), as a Liger-Kernel user runs it: a tiny Llama and a tiny Gemma (whose patcher takes
geglu, not swiglu) train a few steps on liger_cpp's ops (the profiler's liger:: events), with the
losses and weights of the unpatched run."""

import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from compat_env import ensure_compat  # noqa: E402

ensure_compat()

from hf_models import (  # noqa: E402
    VOCAB,
    build,
    single_thread,  # noqa: F401  (autouse fixture)
)

from liger_cpp.transformers import monkey_patch as mp  # noqa: E402

# One config for every model type, as a user writes it (Hugging Face passes it to
# liger_kernel.transformers._apply_liger_kernel_to_instance): llama has no geglu / layer_norm flag,
# gemma no swiglu / layer_norm flag.
CONFIG = {"rope": True, "rms_norm": True, "swiglu": True, "geglu": True, "layer_norm": True}
CONFIG.update(fused_linear_cross_entropy=True, cross_entropy=False)
DROPPED = {"llama": ["geglu", "layer_norm"], "gemma": ["layer_norm", "swiglu"]}
OPS = {
    "llama": (
        "rms_norm_fwd",
        "rms_norm_bwd",
        "swiglu_fwd",
        "rope_fwd",
        "rope_bwd",
        "fused_linear_cross_entropy_fwd",
    ),
    "gemma": (
        "rms_norm_fwd",
        "rms_norm_bwd",
        "geglu_fwd",
        "rope_fwd",
        "rope_bwd",
        "fused_linear_cross_entropy_fwd",
    ),
}


def dataset(n=8, t=10):
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        ids = torch.randint(8, VOCAB, (t,), generator=g)
        labels = ids.clone()
        labels[: i % 4] = -100  # varying token counts: the loss goes through num_items_in_batch
        rows.append({"input_ids": ids, "labels": labels})
    return rows


def train(model, out_dir, liger: bool, cuda_bf16: bool = False):
    args = transformers.TrainingArguments(
        output_dir=str(out_dir),
        max_steps=2,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        learning_rate=1e-2,
        optim="sgd",  # the update is the gradient: the weights compare the gradients
        lr_scheduler_type="constant",
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=not cuda_bf16,
        bf16=cuda_bf16,  # autocast, fp32 master weights
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
        use_liger_kernel=liger,
        liger_kernel_config=dict(CONFIG) if liger else None,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        trainer.train()
    ops = {e.key.split("::", 1)[1] for e in prof.key_averages() if e.key.startswith("liger::")}
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}, ops


@pytest.mark.parametrize("model_type", ["llama", "gemma"])
def test_trainer_use_liger_kernel_runs_liger_cpp(model_type, tmp_path):
    ref = build(model_type)
    model = build(model_type)
    model.load_state_dict(ref.state_dict())
    losses0, params0, ops0 = train(ref, tmp_path / "hf", liger=False)
    assert not ops0
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            losses1, params1, ops1 = train(model, tmp_path / "liger", liger=True)
    finally:
        mp.revert_liger_kernel()  # RoPE is patched module-wide
        mp.revert_liger_kernel(model=model)
    dropped = [str(w.message) for w in rec if "do not apply" in str(w.message)]
    assert len(dropped) == 1 and str(DROPPED[model_type]) in dropped[0], dropped
    assert set(OPS[model_type]) <= ops1, sorted(ops1)
    assert len(losses0) == 2
    torch.testing.assert_close(torch.tensor(losses1), torch.tensor(losses0), rtol=1e-4, atol=1e-5)
    for n in params0:
        torch.testing.assert_close(
            params1[n], params0[n], rtol=1e-5, atol=1e-6, msg=lambda m, n=n: f"{n}: {m}"
        )


def test_trainer_unsupported_model_type_trains_unpatched(tmp_path):
    """A model type liger_cpp does not patch: a warning, and Hugging Face's own model trains."""
    cfg = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=VOCAB, n_positions=32)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    with pytest.warns(UserWarning, match="no Liger kernels for model_type 'gpt2'.*unpatched"):
        losses, _, ops = train(model, tmp_path, liger=True)
    assert len(losses) == 2 and not ops


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA: the same training in bf16 on a GPU")
@pytest.mark.parametrize("model_type", ["llama", "gemma"])
def test_trainer_use_liger_kernel_cuda_bf16(model_type, tmp_path):
    ref = build(model_type).cuda()
    model = build(model_type).cuda()
    model.load_state_dict(ref.state_dict())
    losses0, _, _ = train(ref, tmp_path / "hf", liger=False, cuda_bf16=True)
    try:
        losses1, _, ops1 = train(model, tmp_path / "liger", liger=True, cuda_bf16=True)
    finally:
        mp.revert_liger_kernel()
        mp.revert_liger_kernel(model=model)
    assert set(OPS[model_type]) <= ops1, sorted(ops1)
    # bf16 GEMMs and activations in both runs, rounded at different points: Liger-Kernel's bf16
    # convergence tests compare losses to 1e-2.
    torch.testing.assert_close(torch.tensor(losses1), torch.tensor(losses0), rtol=1e-2, atol=1e-2)
