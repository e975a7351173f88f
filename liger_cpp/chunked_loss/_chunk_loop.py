"""What the chunked-loss base classes' Python loops share (fused_linear_distillation.py,
fused_linear_preference.py, fused_linear_unpaired_preference.py; fused_linear_ppo.py the sums; the
log-softmax also loss_fns.py): the lm_head's gradients assembled from each chunk's dlogits, the loss
and outputs summed over chunks, and the log-softmax and sequence log-probs of a chunk's logits."""

import torch
import torch.nn.functional as F


def log_softmax32(logits):
    """log_softmax over the last dimension in float32 for 16-bit and float32 logits (Liger's), float64
    kept (so float64 gradchecks hold)."""
    return F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)


def sequence_logps(logp, target, ignore_index, average_log_prob):
    """Each sequence's log-prob: the sum (or mean) of its non-ignored tokens' log-probs."""
    mask = target != ignore_index
    tok = logp.gather(-1, torch.where(mask, target, 0).unsqueeze(-1)).squeeze(-1) * mask
    return tok.sum(-1) / mask.sum(-1) if average_log_prob else tok.sum(-1)


class HeadGrads:
    """The lm_head's gradients over chunks from each chunk's dlogits: dX written into the input rows
    the chunk came from, dW accumulated in place by one GEMM (no weight-sized temporary), dB summed;
    only those that require a gradient."""

    def __init__(self, _input, weight, bias):
        self.gx = torch.empty_like(_input) if _input.requires_grad else None
        self.gw = torch.zeros_like(weight) if weight.requires_grad else None
        self.gb = torch.zeros_like(bias) if bias is not None and bias.requires_grad else None

    def add(self, chunk_loss, leaf, x, w, rows):
        """One chunk: its loss, its logits (the leaf it was computed from), its input and the weight;
        `rows`, slices of the whole input that the chunk's rows fill in order."""
        wanted = self.gx is not None or self.gw is not None or self.gb is not None
        dlogits = torch.autograd.grad(chunk_loss, leaf)[0] if wanted and chunk_loss.requires_grad else None
        if self.gx is not None:
            gx = torch.matmul(dlogits, w) if dlogits is not None else None
            start = 0
            for s in rows:
                n = s.stop - s.start
                self.gx[s] = gx[start : start + n] if gx is not None else 0
                start += n
        if dlogits is not None:
            flat = dlogits.reshape(-1, dlogits.shape[-1])
            if self.gw is not None:
                self.gw.addmm_(flat.t(), x.reshape(-1, x.shape[-1]))
            if self.gb is not None:
                self.gb.add_(flat.sum(0))

    def result(self):
        return self.gx, self.gw, self.gb


class OutputSums:
    """The loss and a chunk's outputs over chunks: 0-dim outputs summed, the others concatenated."""

    def __init__(self, _input):
        self.device = _input.device
        self.loss = torch.zeros(
            (), dtype=torch.promote_types(_input.dtype, torch.float32), device=self.device
        )
        self.outs = []

    def add(self, chunk_loss, outs):
        self.loss += chunk_loss.detach()
        for i, o in enumerate(outs):
            # a Python number (Liger's 0.0 for an NLL not computed) becomes a device scalar by a fill,
            # not a host-to-device copy
            o = o.detach() if isinstance(o, torch.Tensor) else torch.full((), float(o), device=self.device)
            if len(self.outs) <= i:
                self.outs.append(o.clone() if o.dim() == 0 else [o])
            elif o.dim() == 0:
                self.outs[i] += o
            else:
                self.outs[i].append(o)

    def result(self):
        return self.loss, tuple(torch.cat(o) if isinstance(o, list) else o for o in self.outs)
