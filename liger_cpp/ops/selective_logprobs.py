"""Log-probabilities of given tokens from given logits at a temperature (TRL's
selective_log_softmax, Liger's fused_selective_log_softmax): the fake kernel of
torch.ops.liger.selective_logprobs, `selective_log_softmax`, and Liger's `fused_selective_log_softmax`
(what Axolotl's asynchronous GRPO scores old log-probs with). Forward only, as Liger's: the old and
reference log-probs of RL take no gradient."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device


@torch.library.register_fake("liger::selective_logprobs")
def _fake(logits, target, temperature=1.0, ignore_index=-100):
    torch._check(
        target.numel() * logits.shape[-1] == logits.numel(),
        lambda: "liger_cpp: argument 'target': expected one element per row of logits",
    )
    return logits.new_empty(target.shape, dtype=torch.float32)


def selective_log_softmax(
    logits: Tensor, target: Tensor, temperature: float = 1.0, ignore_index: int = -100
) -> Tensor:
    """log_softmax(logits / temperature, -1) at `target` (one id per row of logits (..., V)), float32 in
    target's shape, 0 where target is ignore_index; the (rows x V) log-softmax never exists. Not
    differentiable (computed without autograd)."""
    check_device(logits, "logits")
    with torch.no_grad():
        return torch.ops.liger.selective_logprobs(
            logits.detach(), target, float(temperature), int(ignore_index)
        )


@torch.no_grad()
def fused_selective_log_softmax(
    logits: Tensor, input_ids: Tensor, temperature: float = 0.9, mask: Optional[Tensor] = None
) -> Tensor:
    """Liger's signature and layout: logits (B, L + 1, V) (the last position predicts nothing),
    input_ids (B, >= L) of which the last L are scored, mask (B, >= L) likewise (0: skipped, 0 out);
    returns float32 (B, L): log_softmax(logits[:, l] / temperature)[input_ids[:, -L:][:, l]]."""
    if logits.dim() != 3 or logits.shape[1] < 1:
        raise ValueError(
            f"liger_cpp: argument 'logits': expected shape (B, L + 1, V), got {tuple(logits.shape)}"
        )
    B, L = logits.shape[0], logits.shape[1] - 1
    if input_ids.dim() != 2 or input_ids.shape[0] != B or input_ids.shape[1] < L:
        raise ValueError(
            f"liger_cpp: argument 'input_ids': expected shape ({B}, >= {L}), got {tuple(input_ids.shape)}"
        )
    ignore = -100
    ids = torch.full((B, L + 1), ignore, dtype=torch.long, device=logits.device)
    scored = input_ids[:, input_ids.shape[1] - L :].long()
    if mask is not None:
        if mask.dim() != 2 or mask.shape[0] != B or mask.shape[1] < L:
            raise ValueError(
                f"liger_cpp: argument 'mask': expected shape ({B}, >= {L}), got {tuple(mask.shape)}"
            )
        scored = torch.where(mask[:, mask.shape[1] - L :] != 0, scored, torch.full_like(scored, ignore))
    ids[:, :L] = scored
    # every position of logits, the last one ignored: a view of logits, no copy of (B, L, V)
    out = selective_log_softmax(logits, ids, temperature, ignore)
    return out[:, :L]
