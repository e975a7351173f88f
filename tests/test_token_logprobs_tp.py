"""Tensor-parallel per-token NLL and entropy (Liger's LigerFusedLinearScaledCrossEntropyTPFunction):
the lm_head's vocabulary split into equal contiguous shards, one a rank, against the whole-vocabulary
float64 reference: two Gloo ranks on the CPU (spawned), and a group of one on every device."""

import math
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
from conftest import DEVICES
from spawn_ranks import WORLD, gather_on_ranks, spawn_workers

from liger_cpp.ops import LigerFusedLinearScaledCrossEntropyTPFunction, fused_linear_token_logprobs

M, H, V = 53, 24, 2 * 61  # V splits into two shards of 61
TEMPERATURE = 0.8
CASES = [
    (torch.float32, "both"),
    (torch.float32, "nll"),
    (torch.float32, "entropy"),
    (torch.bfloat16, "both"),
]


def _inputs(dtype, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, H, generator=gen, dtype=torch.float64)
    w = torch.randn(V, H, generator=gen, dtype=torch.float64) * 2 / math.sqrt(H)
    t = torch.randint(0, V, (M,), generator=gen)
    t[torch.randperm(M, generator=gen)[:5]] = -100
    t[0], t[1] = 0, V - 1  # the first and the last id: one in each shard
    g_nll = torch.randn(M, generator=gen)
    g_ent = torch.randn(M, generator=gen)
    return x.to(device, dtype), w.to(device, dtype), t.to(device), g_nll.to(device), g_ent.to(device)


def reference(x, w, t, grads, temperature=TEMPERATURE):
    """float64: nll = lse - z_y, entropy over the whole vocabulary, and the gradients of
    sum(g_nll nll + g_ent entropy) (the terms `grads` names)."""
    x64 = x.detach().double().requires_grad_(True)
    w64 = w.detach().double().requires_grad_(True)
    logits = x64 @ w64.t() / temperature
    lps = torch.log_softmax(logits, -1)
    valid = t != -100
    nll = -lps.gather(-1, torch.where(valid, t, 0).unsqueeze(-1)).squeeze(-1) * valid
    ent = -(lps.exp() * lps).sum(-1) * valid
    return nll, ent, x64, w64


def _run(x, w, t, g_nll, g_ent, grads, group, rank, world):
    shard = V // world
    xs = x.detach().clone().requires_grad_(True)
    ws = w.detach()[rank * shard : (rank + 1) * shard].clone().requires_grad_(True)
    nll, ent = LigerFusedLinearScaledCrossEntropyTPFunction.apply(
        xs, ws, t, group, TEMPERATURE, -100, 1, True
    )
    total = 0.0
    if grads in ("both", "nll"):
        total = total + (nll * g_nll).sum()
    if grads in ("both", "entropy"):
        total = total + (ent * g_ent).sum()
    total.backward()
    return nll.detach(), ent.detach(), xs.grad, ws.grad


def _results(rank):
    results = []
    for dtype, grads in CASES:
        x, w, t, g_nll, g_ent = _inputs(dtype)
        nll, ent, dx, dw = _run(x, w, t, g_nll, g_ent, grads, None, rank, WORLD)
        parts = [torch.empty_like(dw) for _ in range(WORLD)]
        dist.all_gather(parts, dw)
        results.append((nll, ent, dx, torch.cat(parts)))
    return results


def _worker(rank, init_file, out_file):
    gather_on_ranks(rank, init_file, out_file, _results)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return spawn_workers(_worker, tmp_path_factory.mktemp("tp"), what="tensor-parallel workers")


def _check(case, nll, ent, dx, dw):
    dtype, grads = case
    x, w, t, g_nll, g_ent = _inputs(dtype, nll.device)
    rnll, rent, x64, w64 = reference(x, w, t, grads)
    total = 0.0
    if grads in ("both", "nll"):
        total = total + (rnll * g_nll.double()).sum()
    if grads in ("both", "entropy"):
        total = total + (rent * g_ent.double()).sum()
    total.backward()
    assert nll.dtype == ent.dtype == torch.float32
    if dtype == torch.float32:  # the single-device op's float32 tolerances (test_token_logprobs.py)
        torch.testing.assert_close(nll, rnll.float(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ent, rent.float(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dx, x64.grad.float(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(dw, w64.grad.float(), rtol=1e-4, atol=1e-5)
        return
    # bfloat16: against the single-device op on the whole vocabulary (tested against the float64
    # reference with bfloat16's tolerances there): what sharding changes. The statistics combine in
    # float32; each shard's dW comes from the same dlogits; dX is the ranks' bfloat16 sum.
    xs = x.detach().clone().requires_grad_(True)
    ws = w.detach().clone().requires_grad_(True)
    lp, e = fused_linear_token_logprobs(xs, ws, t, temperature=TEMPERATURE, return_entropy=True)
    ((-lp * g_nll).sum() + (e * g_ent).sum()).backward()
    torch.testing.assert_close(nll, -lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, e, rtol=1e-5, atol=1e-5)
    for name, ours, single in (("dW", dw, ws.grad), ("dX", dx, xs.grad)):
        # one bfloat16 rounding apart at most: the combined lse rounds differently from the
        # whole-row one, which can move a dlogit across a rounding boundary; dX adds the ranks' sum
        scale = single.float().abs().max().item()
        torch.testing.assert_close(ours.float(), single.float(), rtol=2**-7, atol=2**-8 * scale, msg=name)


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{c[1]}".replace("torch.", "") for c in CASES])
def test_two_ranks_match_the_whole_vocabulary(two_ranks, i):
    rank0, rank1 = two_ranks
    for a, b in zip(rank0[i], rank1[i]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # every rank gets the same results
    _check(CASES[i], *rank0[i])


@pytest.fixture
def group_of_one():
    assert not dist.is_initialized()
    store = tempfile.NamedTemporaryFile(delete=False).name

    def init(device):
        dist.init_process_group(
            "nccl" if device == "cuda" else "gloo", init_method=f"file://{store}", rank=0, world_size=1
        )

    yield init
    if dist.is_initialized():
        dist.destroy_process_group()
    if os.path.exists(store):
        os.unlink(store)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grads", ["both", "nll"])
def test_group_of_one(group_of_one, device, grads):
    group_of_one(device)
    x, w, t, g_nll, g_ent = _inputs(torch.float32, device)
    _check((torch.float32, grads), *_run(x, w, t, g_nll, g_ent, grads, None, 0, 1))
    nll = LigerFusedLinearScaledCrossEntropyTPFunction.apply(x, w, t, None, TEMPERATURE)
    assert torch.is_tensor(nll) and nll.shape == (M,)  # without return_entropy: the NLL alone


def test_bad_inputs(group_of_one):
    x, w, t, _, _ = _inputs(torch.float32)
    f = LigerFusedLinearScaledCrossEntropyTPFunction.apply
    with pytest.raises(RuntimeError, match="tp_group.*initialized"):
        f(x, w, t, None)
    group_of_one("cpu")
    with pytest.raises(ValueError, match="tiles_per_reduce"):
        f(x, w, t, None, 1.0, -100, 3)
    with pytest.raises(ValueError, match="temperature"):
        f(x, w, t, None, 0.0)
    with pytest.raises(TypeError, match="target"):
        f(x, w, t.int(), None)
    with pytest.raises(ValueError, match="input"):
        f(x.unsqueeze(0), w, t, None)
    with pytest.raises(RuntimeError, match="bias|vocab_start"):
        torch.ops.liger.fused_linear_logprobs_shard_fwd(x, w, t, -1)


def test_compat_name_is_this_function():
    from compat_env import ensure_compat

    ensure_compat()
    import liger_kernel.ops as kops
    from liger_kernel.ops.fused_linear_scaled_cross_entropy import (
        LigerFusedLinearScaledCrossEntropyTPFunction as k,
    )

    assert k is LigerFusedLinearScaledCrossEntropyTPFunction
    assert kops.LigerFusedLinearScaledCrossEntropyTPFunction is LigerFusedLinearScaledCrossEntropyTPFunction


@pytest.mark.parametrize("return_entropy", [False, True])
def test_compat_functional(group_of_one, return_entropy):
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.transformers.functional import liger_fused_linear_scaled_cross_entropy_tp as f

    group_of_one("cpu")
    x, w, t, _, _ = _inputs(torch.float32)
    out = f(x, w, t, None, TEMPERATURE, -100, 1, return_entropy)
    want = LigerFusedLinearScaledCrossEntropyTPFunction.apply(
        x, w, t, None, TEMPERATURE, -100, 1, return_entropy
    )
    for a, b in zip(out if return_entropy else (out,), want if return_entropy else (want,)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x, w, t, g_nll, g_ent = _inputs(torch.float32, device)
    shard = w[V // 2 :].contiguous()  # the second rank's shard: rows of both kinds
    fwd, bwd = (
        torch.ops.liger.fused_linear_logprobs_shard_fwd,
        torch.ops.liger.fused_linear_logprobs_shard_bwd,
    )
    torch.library.opcheck(fwd, (x, shard, t, V // 2, 0.7, -100, 7))
    _, lse, mean = fwd(x, shard, t, V // 2, 0.7)  # the shard's own lse and entropy stand in for the combined
    ent = lse - mean
    torch.library.opcheck(bwd, (g_nll, g_ent, x, shard, t, lse, ent, V // 2, 0.7, -100, 7))
    torch.library.opcheck(bwd, (g_nll, None, x, shard, t, lse, None, V // 2, 0.7, -100, 0, True, False))
