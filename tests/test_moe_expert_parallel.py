"""LigerExpertParallelFusedMoe (Liger's name; liger_cpp/transformers/moe.py): the experts' SwiGLU MoE
with the expert weights passed in, run locally and over two gloo ranks that each hold half of the
experts, against a float64 PyTorch reference of every token through all experts: outputs and the
gradients of the tokens, the combine weights and every expert's weights. With two GPUs the same
two ranks run over NCCL, each on its own GPU."""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from conftest import CUDA_OK
from spawn_ranks import WORLD, gather_on_ranks, spawn_workers

from liger_cpp.transformers.moe import LigerExpertParallelFusedMoe

E, K, H, INTER, T = 6, 2, 16, 12, 9


def _weights(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    B = torch.randn(E, INTER, H, generator=g) * 0.3
    C = torch.randn(E, INTER, H, generator=g) * 0.3
    A = torch.randn(E, H, INTER, generator=g) * 0.3
    return B.to(dtype), C.to(dtype), A.to(dtype)


def _tokens(seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(T, H, generator=g).to(dtype)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    w = torch.softmax(torch.randn(T, K, generator=g), -1).to(dtype)
    go = torch.randn(T, H, generator=g).to(dtype)
    return x, idx, w, go


def reference(x, idx, w, B, C, A):
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            e = int(idx[t, j])
            out[t] = out[t] + w[t, j] * (A[e] @ (F.silu(B[e] @ x[t]) * (C[e] @ x[t])))
    return out


def _leaves(*ts):
    return [t.detach().double().requires_grad_() for t in ts]


def test_local_matches_reference():
    B, C, A = _weights()
    x, idx, w, go = _tokens(0)
    leaves = [t.clone().requires_grad_() for t in (x, w, B, C, A)]
    out = LigerExpertParallelFusedMoe()(
        leaves[0].reshape(3, 3, H), idx.reshape(3, 3, K), leaves[1].reshape(3, 3, K), *leaves[2:], E
    )
    assert out.shape == (3, 3, H)
    ref_leaves = _leaves(x, w, B, C, A)
    ref = reference(ref_leaves[0], idx, ref_leaves[1], *ref_leaves[2:])
    torch.testing.assert_close(out.reshape(T, H).double(), ref, rtol=1e-5, atol=1e-5)
    out.reshape(T, H).backward(go)
    for a, b in zip(leaves, torch.autograd.grad(ref, ref_leaves, go.double())):
        torch.testing.assert_close(a.grad.double(), b, rtol=1e-5, atol=1e-5)


def test_bad_shapes_name_the_arguments():
    B, C, A = _weights()
    x, idx, w, _ = _tokens(0)
    with pytest.raises(ValueError, match="'all_B', 'all_C', 'all_A', 'num_experts'"):
        LigerExpertParallelFusedMoe()(x, idx, w, B, C, A, E + 1)
    with pytest.raises(ValueError, match="'all_B', 'all_C', 'all_A', 'num_experts'"):
        LigerExpertParallelFusedMoe()(x, idx, w, B, C[:, :-1], A, E)


def _results(rank, device_type="cpu"):
    dev = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
    B, C, A = _weights()
    half = E // WORLD
    mine = [t[rank * half : (rank + 1) * half].to(dev).requires_grad_() for t in (B, C, A)]
    x, idx, w, go = (t.to(dev) for t in _tokens(rank))
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = LigerExpertParallelFusedMoe(dist.group.WORLD)(x, idx, w, *mine, E)
    out.backward(go)
    return [out.detach(), x.grad, w.grad] + [t.grad for t in mine]


def _worker(rank, init_file, out_file, device_type):
    gather_on_ranks(rank, init_file, out_file, lambda r: _results(r, device_type), device_type)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return spawn_workers(_worker, tmp_path_factory.mktemp("ep"), "cpu", what="expert-parallel workers")


@pytest.fixture(scope="module")
def two_ranks_cuda(tmp_path_factory):
    return spawn_workers(
        _worker, tmp_path_factory.mktemp("ep_cuda"), "cuda", what="expert-parallel NCCL workers"
    )


def _check_two_ranks(results):
    B, C, A = _weights()
    experts = _leaves(B, C, A)
    total = 0
    per_rank = []
    for rank in range(WORLD):
        x, idx, w, go = _tokens(rank)
        xl, wl = _leaves(x, w)
        ref = reference(xl, idx, wl, *experts)
        total = total + (ref * go.double()).sum()
        per_rank.append((ref, xl, wl))
    grads = torch.autograd.grad(total, [t for r in per_rank for t in r[1:]] + experts)
    half = E // WORLD
    for rank, (out, gx, gw, gB, gC, gA) in enumerate(results):
        ref = per_rank[rank][0]
        torch.testing.assert_close(out.double(), ref.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gx.double(), grads[2 * rank], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gw.double(), grads[2 * rank + 1], rtol=1e-5, atol=1e-5)
        sl = slice(rank * half, (rank + 1) * half)
        for got, want in zip((gB, gC, gA), grads[2 * WORLD :]):
            torch.testing.assert_close(got.double(), want[sl], rtol=1e-5, atol=1e-5)


def test_two_ranks_match_reference(two_ranks):
    _check_two_ranks(two_ranks)


@pytest.mark.skipif(
    not (CUDA_OK and torch.cuda.device_count() >= 2 and dist.is_nccl_available()),
    reason="needs two GPUs and NCCL",
)
def test_two_ranks_cuda_over_nccl_match_reference(two_ranks_cuda):
    _check_two_ranks(two_ranks_cuda)
