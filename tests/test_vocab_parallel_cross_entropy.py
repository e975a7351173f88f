"""Vocabulary-parallel cross entropy (Liger's LigerVocabParallelCrossEntropy): per-token loss and
the logits' gradient against float64 references written from the label-smoothing definitions (the
target distribution q, loss = -sum q log p), on one rank and on two gloo ranks each holding half
the vocabulary ("global" mode: exactly the one-rank result; "partition": each rank's own K),
ignore_index, grad_output != 1, bfloat16, no host synchronisation in the backward, errors."""

import pytest
import torch
import torch.distributed as dist
from spawn_ranks import WORLD, gather_on_ranks, spawn_workers

from liger_cpp.transformers.vocab_parallel_cross_entropy import (
    LigerVocabParallelCEFunction,
    LigerVocabParallelCrossEntropy,
)

S, B, V = 5, 3, 22  # V split in two ranks of 11
IGNORE = -100
CASES = [(0.0, "pytorch", "global"), (0.1, "pytorch", "global"), (0.2, "megatron", "global")]
PARTITION = [(0.1, "pytorch", "partition"), (0.3, "megatron", "partition")]


def _inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(S, B, V, generator=g) * 3).to(dtype)
    target = torch.randint(0, V, (S, B), generator=g)
    target[0, 1] = IGNORE
    target[3, 0] = IGNORE
    dloss = torch.randn(S, B, generator=g)
    return logits, target, dloss


def reference(logits, target, alpha, formula, lo=0, hi=None):
    """float64 (1 - a) nll + a * (-(1/K) sum over [lo, hi) of log p), p the softmax over ALL
    logits, K = hi - lo (the whole vocabulary unless partition), a = alpha ("pytorch") or
    alpha K / (K - 1) ("megatron"): the structure Liger documents for both formulas and modes
    (test_megatron_is_its_target_distribution checks it against q's definition)."""
    x = logits.double()
    hi = x.shape[-1] if hi is None else hi
    k = hi - lo
    a = alpha * k / (k - 1) if formula == "megatron" else alpha
    logp = torch.log_softmax(x, -1)
    nll = -logp.gather(-1, target.clamp(min=0)[..., None]).squeeze(-1)
    loss = (1 - a) * nll - a * logp[..., lo:hi].sum(-1) / k
    return torch.where(target == IGNORE, 0.0, loss)


def test_megatron_is_its_target_distribution():
    """Over the whole vocabulary the megatron form is -sum q log p with q = (1 - alpha) on the
    target and alpha / (K - 1) on every other token; the pytorch form is F.cross_entropy's."""
    logits, target, _ = _inputs()
    logp = torch.log_softmax(logits.double(), -1)
    onehot = torch.nn.functional.one_hot(target.clamp(min=0), V).double()
    q = (1 - 0.2) * onehot + 0.2 / (V - 1) * (1 - onehot)
    want = torch.where(target == IGNORE, 0.0, -(q * logp).sum(-1))
    torch.testing.assert_close(reference(logits, target, 0.2, "megatron"), want, rtol=1e-12, atol=1e-12)


def _ours(logits, target, alpha, formula, mode, dloss, group=None, lo=0, hi=None):
    x = logits[..., lo:hi].detach().clone().requires_grad_()
    ce = LigerVocabParallelCrossEntropy(IGNORE, alpha, "none", formula, mode)
    loss = ce(x, target, group)
    loss.backward(dloss)
    return loss.detach(), x.grad


def _ref_grad(logits, target, alpha, formula, dloss, lo=0, hi=None):
    x = logits.double().requires_grad_()
    reference(x, target, alpha, formula, lo, hi).backward(dloss.double())
    return x.grad


@pytest.mark.parametrize("alpha,formula,mode", CASES + [(0.1, "pytorch", "partition")])
def test_one_rank(alpha, formula, mode):
    """One rank (tp_group None): the slice is the whole vocabulary, both modes agree."""
    logits, target, dloss = _inputs()
    loss, dx = _ours(logits, target, alpha, formula, mode, dloss)
    torch.testing.assert_close(loss.double(), reference(logits, target, alpha, formula), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(
        dx.double(), _ref_grad(logits, target, alpha, formula, dloss), rtol=1e-6, atol=1e-6
    )
    if formula == "pytorch":  # and PyTorch's own label smoothing
        want = torch.nn.functional.cross_entropy(
            logits.reshape(-1, V),
            target.reshape(-1),
            ignore_index=IGNORE,
            label_smoothing=alpha,
            reduction="none",
        )
        torch.testing.assert_close(loss.reshape(-1), want, rtol=1e-5, atol=1e-5)


def test_bfloat16_logits():
    logits, target, dloss = _inputs(torch.bfloat16)
    loss, dx = _ours(logits, target, 0.1, "pytorch", "global", dloss)
    assert loss.dtype == torch.float32 and dx.dtype == torch.bfloat16
    torch.testing.assert_close(loss.double(), reference(logits, target, 0.1, "pytorch"), rtol=1e-6, atol=1e-6)
    ref = _ref_grad(logits, target, 0.1, "pytorch", dloss)
    torch.testing.assert_close(dx.double(), ref, rtol=2**-7, atol=2**-7 * ref.abs().max().item())


def test_gradcheck_float64():
    logits, target, _ = _inputs(torch.float64)
    x = logits.requires_grad_()
    for alpha, formula in ((0.0, "pytorch"), (0.2, "megatron")):
        assert torch.autograd.gradcheck(
            lambda t, a=alpha, f=formula: LigerVocabParallelCEFunction.apply(
                t, target, None, IGNORE, a, f, "global"
            ),
            (x,),
        )


def _results(rank):
    logits, target, dloss = _inputs()
    half = V // WORLD
    lo, hi = rank * half, (rank + 1) * half
    return [_ours(logits, target, *case, dloss, dist.group.WORLD, lo, hi) for case in CASES + PARTITION]


def _worker(rank, init_file, out_file):
    gather_on_ranks(rank, init_file, out_file, _results)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return spawn_workers(_worker, tmp_path_factory.mktemp("vocab_tp"), what="vocab-parallel workers")


@pytest.mark.parametrize("i", range(len(CASES) + len(PARTITION)))
def test_two_ranks(two_ranks, i):
    """Each rank's loss and its slice of the logits' gradient. Global mode: the one-rank reference
    on every rank; partition mode: the reference whose uniform term covers that rank's slice."""
    alpha, formula, mode = (CASES + PARTITION)[i]
    logits, target, dloss = _inputs()
    half = V // WORLD
    for rank, results in enumerate(two_ranks):
        loss, dx = results[i]
        lo, hi = rank * half, (rank + 1) * half
        slice_ = (lo, hi) if mode == "partition" else (0, None)
        torch.testing.assert_close(
            loss.double(), reference(logits, target, alpha, formula, *slice_), rtol=1e-6, atol=1e-6
        )
        ref = _ref_grad(logits, target, alpha, formula, dloss, *slice_)[..., lo:hi]
        torch.testing.assert_close(dx.double(), ref, rtol=1e-6, atol=1e-6)


def test_errors():
    logits, target, _ = _inputs()
    with pytest.raises(ValueError, match="argument 'vocab_parallel_logits'"):
        LigerVocabParallelCEFunction.apply(logits[0], target[0], None, IGNORE, 0.0, "pytorch", "global")
    with pytest.raises(ValueError, match="argument 'target'"):
        LigerVocabParallelCEFunction.apply(logits, target[:2], None, IGNORE, 0.0, "pytorch", "global")
    with pytest.raises(ValueError, match="argument 'label_smoothing_formula'"):
        LigerVocabParallelCrossEntropy(label_smoothing_formula="nemo")
    with pytest.raises(ValueError, match="argument 'label_smoothing_mode'"):
        LigerVocabParallelCrossEntropy(label_smoothing_mode="local")
    with pytest.raises(ValueError, match="argument 'reduction'"):
        LigerVocabParallelCrossEntropy(reduction="mean")
    with pytest.raises(ValueError, match="argument 'label_smoothing'"):
        LigerVocabParallelCrossEntropy(label_smoothing=1.0)
