"""TRL with use_liger_kernel=True, through the compatibility package (import name liger_kernel).

The installed TRL (1.16) applies Liger-Kernel's layer kernels through Hugging Face's Trainer
(_apply_liger_kernel_to_instance with fused_linear_cross_entropy=False) and computes its losses with
its own fused LM head: SFTTrainer (loss_type nll and dft, mean_token_accuracy logged), DPOTrainer,
KTOTrainer, GRPOTrainer (sampled completions, rewards, KL) and the experimental GKDTrainer train a few
steps on liger_cpp's RMSNorm / SwiGLU / RoPE with TRL's losses and metrics without Liger. Older TRL
(up to 1.10, the releases that call Liger-Kernel's losses) is covered by its exact calls:
LigerFusedLinearDPOLoss / LigerFusedLinearKTOLoss as dpo_trainer.py / kto_trainer.py construct and
call them, and the model keyword arguments sft_trainer.py passes (skip_logits,
return_token_accuracy, use_token_scaling), against float64 references."""

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from packaging.version import Version

transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")

from compat_env import ensure_compat  # noqa: E402

ensure_compat()

from hf_models import (  # noqa: E402
    VOCAB,
    batch,
    build,
    single_thread,  # noqa: F401  (autouse fixture)
)

from liger_cpp.transformers import functional as cpp_functional  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402

LAYER_OPS = {"rms_norm_fwd", "rms_norm_bwd", "swiglu_fwd", "rope_fwd", "rope_bwd"}
CONFIG = {"rope": True, "rms_norm": True, "swiglu": True, "geglu": True}  # geglu: not a Llama flag
HAS_TOKEN_SCALING = (
    "use_token_scaling" in inspect.signature(cpp_functional.liger_fused_linear_cross_entropy).parameters
)
NEEDS_DFT = pytest.mark.skipif(
    not HAS_TOKEN_SCALING,
    reason="liger_cpp's fused linear cross entropy has no use_token_scaling yet (TRL's DFT loss; added by "
    "the opslayer change): runs once it is merged",
)


def tokenizer():
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="t3"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="t0", bos_token="t1", eos_token="t2", unk_token="t3"
    )


def _text(g, n):
    return " ".join(f"t{int(i)}" for i in torch.randint(8, VOCAB, (n,), generator=g))


def _common(out_dir, liger, **kw):
    return dict(
        output_dir=str(out_dir),
        max_steps=2,
        per_device_train_batch_size=4,
        optim="sgd",
        learning_rate=0.5,
        lr_scheduler_type="constant",
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
        use_liger_kernel=liger,
        liger_kernel_config=dict(CONFIG) if liger else None,
        **kw,
    )


def _run(trainer):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        trainer.train()
    ops = {e.key.split("::", 1)[1] for e in prof.key_averages() if e.key.startswith("liger::")}
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return logs, ops


def _compare(make_trainer, tmp_path, metrics, from_path=False, flce=False):
    """The same training with and without use_liger_kernel: liger_cpp's layer ops ran, and the
    logged loss and metrics agree. (The reference model of DPO / KTO, a copy of the initial model,
    is not patched: Hugging Face's Trainer patches the trained model.) from_path: the trainers get
    the model as a saved directory (GRPO loads its reference model from the policy's path). flce:
    whether the trainer takes the patched forward's fused linear cross entropy."""
    if from_path:
        build("llama").save_pretrained(tmp_path / "model")
        ref = model = str(tmp_path / "model")
    else:
        ref = build("llama")
        model = build("llama")
        model.load_state_dict(ref.state_dict())
    logs0, ops0 = _run(make_trainer(ref, tmp_path / "plain", False))
    assert not ops0
    try:
        with pytest.warns(UserWarning, match=r"\['geglu'\] do not apply to model_type 'llama'"):
            logs1, ops1 = _run(make_trainer(model, tmp_path / "liger", True))
    finally:
        mp.revert_liger_kernel()
    assert LAYER_OPS <= ops1, sorted(ops1)
    assert ("fused_linear_cross_entropy_fwd" in ops1) == flce, sorted(ops1)
    assert len(logs0) == len(logs1) == 2
    _logs_close(logs1, logs0, ("loss", *metrics), atol=1e-5)


def _logs_close(got, want, keys, atol):
    """Each logged value of `keys`, step by step, within rtol 1e-4 and `atol` of the reference run's."""
    for key in keys:
        torch.testing.assert_close(
            torch.tensor([h[key] for h in got]), torch.tensor([h[key] for h in want]), rtol=1e-4, atol=atol,
            msg=lambda m, key=key: f"{key}: {m}",
        )  # fmt: skip


@pytest.mark.parametrize("loss_type", ["nll", "dft"])
def test_sft_trainer(loss_type, tmp_path):
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(8, VOCAB, (9 + i % 3,), generator=g).tolist()} for i in range(8)]

    def make(model, out_dir, liger):
        args = trl.SFTConfig(**_common(out_dir, liger, loss_type=loss_type))
        ds = datasets.Dataset.from_list(rows)
        return trl.SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer())

    # TRL 1.15 on (Python >= 3.11) keeps its own loss under use_liger_kernel (it switches the fused
    # linear cross entropy off); 1.14, the last for Python 3.10, takes the patched forward's.
    flce = Version(trl.__version__) < Version("1.15")
    _compare(make, tmp_path, ["mean_token_accuracy"], flce=flce)


def test_dpo_trainer(tmp_path):
    g = torch.Generator().manual_seed(1)
    rows = [{"prompt": _text(g, 4), "chosen": _text(g, 3 + i % 2), "rejected": _text(g, 4)} for i in range(8)]

    def make(model, out_dir, liger):
        args = trl.DPOConfig(**_common(out_dir, liger, beta=0.1, max_length=16))
        ds = datasets.Dataset.from_list(rows)
        return trl.DPOTrainer(
            model=model, ref_model=build("llama"), args=args, train_dataset=ds, processing_class=tokenizer()
        )

    _compare(make, tmp_path, ["rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen"])


def test_kto_trainer(tmp_path):
    g = torch.Generator().manual_seed(2)
    rows = [{"prompt": _text(g, 4), "completion": _text(g, 3 + i % 2), "label": i % 2 == 0} for i in range(8)]

    def make(model, out_dir, liger):
        args = trl.KTOConfig(**_common(out_dir, liger, beta=0.1, max_length=16))
        ds = datasets.Dataset.from_list(rows)
        return trl.KTOTrainer(
            model=model, ref_model=build("llama"), args=args, train_dataset=ds, processing_class=tokenizer()
        )

    _compare(make, tmp_path, ["kl", "rewards/chosen", "rewards/rejected"])


def test_liger_orpo_trainer(tmp_path):
    """liger_kernel's LigerORPOTrainer (Liger's subclass of TRL's ORPOTrainer, the loss fused with the
    lm_head: liger_cpp's ORPO) against TRL's own ORPOTrainer: two steps from the same weights log the
    same loss, rewards, log-probs, NLL and log odds (logits/* are Liger's response-token means)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer
    from liger_kernel.transformers.trainer import LigerORPOTrainer

    g = torch.Generator().manual_seed(6)
    rows = [{"prompt": _text(g, 4), "chosen": _text(g, 3 + i % 2), "rejected": _text(g, 4)} for i in range(8)]
    ref = build("llama")

    def run(cls, out_dir):
        model = build("llama")
        model.load_state_dict(ref.state_dict())
        args = ORPOConfig(**_common(out_dir, False, beta=0.2, max_length=16))
        trainer = cls(
            model=model,
            args=args,
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=tokenizer(),
        )
        trainer.train()
        return [h for h in trainer.state.log_history if "loss" in h]

    want = run(ORPOTrainer, tmp_path / "trl")
    got = run(LigerORPOTrainer, tmp_path / "liger")
    assert len(want) == len(got) == 2
    keys = ["loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected"]
    keys += ["nll_loss", "log_odds_ratio", "log_odds_chosen", "rewards/accuracies"]
    _logs_close(got, want, keys, atol=1e-6)


def _reward_even(completions, **kwargs):
    """A deterministic reward: the share of a completion's tokens with an even id."""
    return [sum(int(w[1:]) % 2 == 0 for w in c.split()) / max(1, len(c.split())) for c in completions]


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_trainer(beta, tmp_path):
    """GRPOTrainer (TRL 1.16: layer kernels through the Trainer, its own fused LM head for the
    log-probs): two steps of sampled completions, rewards, the clipped objective and (beta > 0) the
    KL to a reference model loaded from the policy's path; the same sampling seed draws the same
    completions, so every logged metric must agree."""
    g = torch.Generator().manual_seed(3)
    rows = [{"prompt": _text(g, 3 + i % 2)} for i in range(4)]

    def make(model, out_dir, liger):
        kw = _common(out_dir, liger, beta=beta, num_generations=4, max_completion_length=6)
        kw.update(per_device_train_batch_size=8, model_init_kwargs={"dtype": "float32"})
        ds = datasets.Dataset.from_list(rows)
        return trl.GRPOTrainer(
            model=model,
            reward_funcs=_reward_even,
            args=trl.GRPOConfig(**kw),
            train_dataset=ds,
            processing_class=tokenizer(),
        )

    metrics = ["reward", "reward_std", "entropy", "completions/mean_length", "clip_ratio/region_mean"]
    _compare(make, tmp_path, metrics + (["kl"] if beta else []), from_path=True)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_grpo_trainer_with_triton_grpo_loss(loss_type, tmp_path):
    """Liger's documented use of triton_grpo_loss (transformers/grpo_loss.py's demo): a GRPOTrainer
    whose compute_loss takes the logits of the completion positions plus one and calls
    liger_kernel's triton_grpo_loss on them (here with reduce=True, TRL's loss_type), KL to a
    reference model loaded from the policy's path. Two steps train with TRL's own logged loss and KL."""
    from liger_kernel.transformers.grpo_loss import triton_grpo_loss

    g = torch.Generator().manual_seed(3)
    rows = [{"prompt": _text(g, 3 + i % 2)} for i in range(4)]
    build("llama").save_pretrained(tmp_path / "model")
    calls = []

    class LigerGRPOTrainer(trl.GRPOTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            keep = inputs["completion_ids"].size(1)
            logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=keep + 1).logits
            loss, metrics = triton_grpo_loss(
                logits,
                inputs.get("old_per_token_logps"),
                inputs.get("ref_per_token_logps"),
                inputs["completion_ids"],
                inputs["advantages"],
                inputs["completion_mask"],
                temperature=self.temperature,
                beta=self.beta,
                eps_low=self.epsilon_low,
                eps_high=self.epsilon_high,
                loss_type=self.loss_type,
                reduce=True,
                num_items_in_batch=num_items_in_batch,
            )
            calls.append(loss.detach())
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["kl"].append(metrics[0].item())
            return loss

    def run(cls, out_dir):
        kw = _common(
            out_dir, False, beta=0.04, num_generations=4, max_completion_length=6, loss_type=loss_type
        )
        kw.update(per_device_train_batch_size=8, model_init_kwargs={"dtype": "float32"})
        trainer = cls(
            model=str(tmp_path / "model"),
            reward_funcs=_reward_even,
            args=trl.GRPOConfig(**kw),
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=tokenizer(),
        )
        trainer.train()
        return [h for h in trainer.state.log_history if "loss" in h]

    want = run(trl.GRPOTrainer, tmp_path / "plain")
    got = run(LigerGRPOTrainer, tmp_path / "liger")
    assert len(calls) == 2 and len(want) == len(got) == 2
    _logs_close(got, want, ("loss", "kl", "reward"), atol=1e-6)


def test_gkd_trainer(tmp_path):
    """TRL's experimental GKDTrainer (an SFTTrainer; its generalized JSD on the logits, which TRL 1.16
    computes itself): off-policy (lmbda 0), a teacher of another seed, temperature 0.9."""
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    g = torch.Generator().manual_seed(4)
    rows = [
        {
            "messages": [
                {"role": "user", "content": _text(g, 3 + i % 2)},
                {"role": "assistant", "content": _text(g, 4)},
            ]
        }
        for i in range(8)
    ]

    def make(model, out_dir, liger):
        tok = tokenizer()
        tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
        args = GKDConfig(**_common(out_dir, liger, lmbda=0.0, beta=0.5, temperature=0.9, max_length=16))
        return GKDTrainer(
            model=model,
            teacher_model=build("llama", seed=5),
            args=args,
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=tok,
        )

    _compare(make, tmp_path, ["grad_norm"])


# --------------------------------------------------------------------------------------------
# the calls of TRL <= 1.10 (sft_trainer.py, dpo_trainer.py, kto_trainer.py)


def _logps(logits, labels, average=False):
    """Per-sequence sum (or mean) of log p(label) over the non-ignored (label != -100) positions."""
    mask = labels != -100
    lp = torch.log_softmax(logits, -1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    s = (lp * mask).sum(-1)
    return s / mask.sum(-1) if average else s


def _lm_batch(seed, b, t, h=16, v=24):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    hidden = r(b, t + 1, h).requires_grad_(True)  # the base model's last_hidden_state
    weight = (r(v, h) / math.sqrt(h)).requires_grad_(True)
    bias = (0.1 * r(v)).requires_grad_(True)
    labels = torch.randint(0, v, (b, t + 1), generator=g)
    completion_mask = torch.ones(b, t + 1, dtype=torch.bool)
    completion_mask[:, :3] = False  # the prompt
    completion_mask[1, -2:] = False  # padding
    labels[~completion_mask] = -100  # TRL: labels[completion_mask == 0] = -100
    ref = (r(b, t + 1, h), r(v, h) / math.sqrt(h), 0.1 * r(v))
    return hidden, weight, bias, labels, ref


def test_trl_dpo_trainer_calls():
    from liger_kernel.chunked_loss import LigerFusedLinearDPOLoss

    beta = 0.1
    liger_loss = LigerFusedLinearDPOLoss(beta=beta, loss_type="sigmoid")  # dpo_trainer.py L834
    hidden, weight, bias, labels, (rh, rw, rb) = _lm_batch(0, 4, 7)  # 2 pairs, chosen over rejected
    # dpo_trainer.py L1287: positional, (lin_weight, _input, target, bias, ref_input, ref_weight, ref_bias)
    loss, metrics = liger_loss(weight, hidden[:, :-1], labels[:, 1:], bias, rh[:, :-1], rw, rb)
    chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss, cr, rr = metrics
    logits = hidden[:, :-1] @ weight.T + bias
    ref_logits = (rh[:, :-1] @ rw.T + rb).detach()
    pi, ref = _logps(logits, labels[:, 1:]), _logps(ref_logits, labels[:, 1:])
    n = pi.shape[0] // 2
    margin = (pi[:n] - ref[:n]) - (pi[n:] - ref[n:])
    want = -F.logsigmoid(beta * margin).mean()
    torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(chosen_logps.double(), pi[:n].detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rejected_logps.double(), pi[n:].detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cr.double(), beta * (pi[:n] - ref[:n]).detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rr.double(), beta * (pi[n:] - ref[n:]).detach(), rtol=1e-5, atol=1e-6)
    numel = n * logits.shape[1] * logits.shape[2]
    torch.testing.assert_close(
        chosen_logits_mean.double(), logits[:n].sum().detach() / numel, rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(
        rejected_logits_mean.double(), logits[n:].sum().detach() / numel, rtol=1e-5, atol=1e-6
    )
    assert float(nll_loss) == 0.0  # compute_nll_loss=False
    g = torch.autograd.grad(loss, (hidden, weight, bias))
    g_ref = torch.autograd.grad(want, (hidden, weight, bias))
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-6)


def test_trl_kto_trainer_calls():
    from liger_kernel.chunked_loss import LigerFusedLinearKTOLoss

    beta = 0.1
    liger_loss = LigerFusedLinearKTOLoss(beta=beta, use_ref_model=True)  # kto_trainer.py L978
    hidden, weight, bias, labels, (rh, rw, rb) = _lm_batch(1, 4, 6)
    label = torch.tensor([True, False, True, False])
    kl = torch.tensor(0.05, dtype=torch.float64)
    loss, metrics = liger_loss(
        _input=hidden[:, :-1],
        lin_weight=weight,
        target=labels[:, 1:],
        bias=bias,
        preference_labels=label,
        ref_input=rh[:, :-1],
        ref_weight=rw,
        ref_bias=rb,
        kl=kl,
    )
    chosen_logps_sum, rejected_logps_sum, chosen_logits_sum, rejected_logits_sum, crs, rrs = metrics
    logits = hidden[:, :-1] @ weight.T + bias
    pi = _logps(logits, labels[:, 1:])
    ref = _logps((rh[:, :-1] @ rw.T + rb).detach(), labels[:, 1:])
    ratio = pi - ref
    losses = torch.where(
        label, 1 - torch.sigmoid(beta * (ratio - kl)), 1 - torch.sigmoid(beta * (kl - ratio))
    )
    want = losses.sum() / len(label)
    torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(chosen_logps_sum.double(), pi[label].sum().detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rejected_logps_sum.double(), pi[~label].sum().detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chosen_logits_sum.double(), logits[label].sum().detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        rejected_logits_sum.double(), logits[~label].sum().detach(), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(crs.double(), beta * ratio[label].sum().detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rrs.double(), beta * ratio[~label].sum().detach(), rtol=1e-5, atol=1e-6)
    g = torch.autograd.grad(loss, (hidden, weight, bias))
    g_ref = torch.autograd.grad(want, (hidden, weight, bias))
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-6)


def _sft_reference(model, ids, labels, dft):
    """TRL's SFT loss on HF's logits: NLL, or DFT (each token's loss times its detached probability)."""
    logits = model(input_ids=ids).logits
    target = F.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)
    logp = torch.log_softmax(logits.float().reshape(-1, logits.shape[-1]), -1)
    valid = target != -100
    lp = logp.gather(-1, target.clamp(min=0)[:, None])[:, 0]
    per_token = -lp * (lp.detach().exp() if dft else 1.0)
    acc = (logits.reshape(-1, logits.shape[-1]).argmax(-1) == target)[valid].float().mean()
    return (per_token * valid).sum() / valid.sum(), acc


@pytest.mark.parametrize("loss_type", ["nll", pytest.param("dft", marks=NEEDS_DFT)])
def test_trl_sft_trainer_model_kwargs(loss_type):
    """sft_trainer.py L1717-1733 (TRL <= 1.10): HF's apply_liger_kernel, then the model called with
    skip_logits, return_token_accuracy=True and use_token_scaling, reading outputs.token_accuracy."""
    from transformers.integrations.liger import apply_liger_kernel

    ref = build("llama")
    model = build("llama")
    model.load_state_dict(ref.state_dict())
    apply_liger_kernel(model, {})  # Trainer.train() with use_liger_kernel=True, no config
    try:
        ids, labels = batch()
        want, want_acc = _sft_reference(ref, ids, labels, loss_type == "dft")
        out = model(
            input_ids=ids,
            labels=labels,
            skip_logits=True,
            return_token_accuracy=True,
            use_token_scaling=loss_type == "dft",
        )
        assert out.logits is None
        torch.testing.assert_close(out.loss, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out.token_accuracy, want_acc)
        g1 = torch.autograd.grad(out.loss, list(model.parameters()))
        g0 = torch.autograd.grad(want, list(ref.parameters()))
        for a, b in zip(g1, g0):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    finally:
        mp.revert_liger_kernel()
