"""Liger's LigerORPOTrainer: TRL's ORPOTrainer whose policy forward stops at the last hidden state and
whose ORPO loss (the chosen sequences' NLL minus the odds-ratio term) runs fused with the lm_head
(liger_cpp's LigerFusedLinearORPOLoss): the (2B x T x V) logits never exist. The loss and the logged
metrics are TRL's (its logits/chosen and logits/rejected are Liger's: the mean logit over the
response tokens, not over every position of the vocabulary).

Importing this module imports trl: its ORPOTrainer from trl.trainer (TRL < 1.0) or
trl.experimental.orpo (TRL >= 1.0, where Axolotl's shim also puts it back in trl.trainer).
Decoder-only models (model.model gives the last hidden state and model.lm_head the head), plain,
DataParallel or FSDP1-wrapped; encoder-decoder models are a NotImplementedError.
"""

import inspect
import warnings

import torch
from torch import nn

try:
    from trl.trainer import ORPOTrainer as _ORPOTrainer
except ImportError:  # TRL >= 1.0 keeps it under trl.experimental (which warns that it is)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*trl.experimental.*")
        from trl.experimental.orpo import ORPOTrainer as _ORPOTrainer

from liger_cpp.chunked_loss import LigerFusedLinearORPOLoss

__all__ = ["LigerORPOTrainer"]


def _fsdp1(model) -> bool:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return isinstance(model, FullyShardedDataParallel)


class LigerORPOTrainer(_ORPOTrainer):
    def concatenated_forward(self, model: nn.Module, batch: dict):
        """(loss, aux): the ORPO loss of the concatenated chosen and rejected sequences, and the
        fused loss's outputs (chosen / rejected log-probs, mean logits, the NLL, rewards, log odds)."""
        if self.is_encoder_decoder:
            raise NotImplementedError("liger_cpp: LigerORPOTrainer supports decoder-only models")
        pad = getattr(self, "label_pad_token_id", -100)
        kw = dict(is_encoder_decoder=False, padding_value=self.padding_value, device=self.accelerator.device)
        if "label_pad_token_id" in inspect.signature(self.concatenated_inputs).parameters:
            kw["label_pad_token_id"] = pad
        cat = self.concatenated_inputs(batch, **kw)
        ids, attention = cat["concatenated_input_ids"], cat["concatenated_attention_mask"]
        extra = {"output_router_logits": True} if self.aux_loss_enabled else {}
        # The NLL counts every attended token, prompt included (TRL's); the odds ratio the response.
        nll_target = torch.where(attention == 1, ids, pad)[:, 1:]
        loss_fn = LigerFusedLinearORPOLoss(ignore_index=pad, beta=self.beta)

        def body(causal_lm):
            outputs = causal_lm.model(ids, attention_mask=attention, use_cache=False, **extra)
            head = causal_lm.lm_head
            hidden = outputs.last_hidden_state[:, :-1]
            loss, aux = loss_fn(head.weight, hidden, cat["concatenated_labels"][:, 1:], head.bias, nll_target)
            if self.aux_loss_enabled:
                loss = loss + self.aux_loss_coef * outputs.aux_loss
            return loss, aux

        if _fsdp1(model):
            # The head and the base model run inside the FSDP1 wrapper's forward (its all-gather).
            from liger_kernel.transformers.fsdp import _FSDPForwardRedirection

            return _FSDPForwardRedirection()(model, body, model._fsdp_wrapped_module)
        if isinstance(model, nn.DataParallel):
            model = model.module
        return body(model)

    def get_batch_loss_metrics(self, model, batch: dict, train_eval: str = "train"):
        loss, aux = self.concatenated_forward(model, batch)
        chosen_logps, rejected_logps, chosen_logits, rejected_logits, nll = aux[:5]
        chosen_rewards, rejected_rewards, log_odds_ratio, log_odds_chosen = aux[5:9]
        gather = self.accelerator.gather_for_metrics
        prefix = "eval_" if train_eval == "eval" else ""
        values = {
            "rewards/chosen": gather(chosen_rewards).mean(),
            "rewards/rejected": gather(rejected_rewards).mean(),
            "rewards/accuracies": gather((chosen_rewards > rejected_rewards).float()).mean(),
            "rewards/margins": gather(chosen_rewards - rejected_rewards).mean(),
            "logps/rejected": gather(rejected_logps.detach()).mean(),
            "logps/chosen": gather(chosen_logps.detach()).mean(),
            "logits/rejected": gather(rejected_logits.detach()).mean(),
            "logits/chosen": gather(chosen_logits.detach()).mean(),
            "nll_loss": gather(nll.detach()).mean(),
            "log_odds_ratio": gather(log_odds_ratio.detach()).mean(),
            "log_odds_chosen": gather(log_odds_chosen.detach()).mean(),
        }
        return loss, {prefix + k: v.item() for k, v in values.items()}
