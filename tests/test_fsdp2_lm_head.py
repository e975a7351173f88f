"""FSDP2 with lm_head as its own fully_shard unit (CPU, gloo, 2 processes): its weight is a sharded
DTensor outside lm_head's own forward, and liger_cpp's patched forward runs the fused linear cross
entropy as lm_head's forward, under FSDP2's hooks (all-gather before the forward and the backward,
reduce-scatter of the gradient), instead of falling back to Hugging Face's materialised logits.
Trained 3 AdamW steps on half a global batch per rank: the per-step losses and the final parameters
equal a single process's on the whole batch (test_fsdp.py's harness and tolerances)."""

import os
import warnings
from datetime import timedelta

import pytest
import torch

pytest.importorskip("transformers")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available in this build", allow_module_level=True)

from hf_models import build  # noqa: E402
from test_fsdp import TOL, WORLD, _full_params, _train, spawn_workers  # noqa: E402


def _worker(rank, init_file, out_file):
    torch.set_num_threads(1)
    if os.path.isdir("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD, timeout=timedelta(seconds=60)
    )
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        import liger_cpp.transformers as lt
        import liger_cpp.transformers.causal_lm as causal_lm

        lt.apply_liger_kernel_to_llama()
        fused_calls = []
        fused = causal_lm.liger_fused_linear_cross_entropy

        def counting(*a, **k):
            # the weight the fused op gets: lm_head's full, unsharded weight (a plain tensor)
            fused_calls.append((not isinstance(a[1], DTensor), tuple(a[1].shape)))
            return fused(*a, **k)

        causal_lm.liger_fused_linear_cross_entropy = counting
        model = build("llama")
        vocab_shape = tuple(model.lm_head.weight.shape)
        mesh = init_device_mesh("cpu", (WORLD,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model.lm_head, mesh=mesh)
        fully_shard(model, mesh=mesh)
        assert isinstance(model.lm_head.weight, DTensor)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # the fallback's warning would fail here
            losses, out = _train(model, rank, WORLD)
        assert out.logits is None, "the FLCE path was not taken"
        assert fused_calls == [(True, vocab_shape)] * 3, fused_calls
        assert isinstance(model.lm_head.weight, DTensor)  # resharded after the step
        results = {"fsdp2_lm_head": (losses, _full_params(model, "fsdp2"))}
        if rank == 0:
            causal_lm.liger_fused_linear_cross_entropy = fused
            ref = build("llama")
            ref_losses, _ = _train(ref)
            results["ref"] = (ref_losses, _full_params(ref, None))
            torch.save(results, out_file)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_fsdp2_sharded_lm_head_takes_the_fused_path_and_matches(tmp_path):
    res = spawn_workers(_worker, tmp_path, what="FSDP2 lm_head workers")
    (losses, state), (ref_losses, ref_state) = res["fsdp2_lm_head"], res["ref"]
    torch.testing.assert_close(losses, ref_losses, **TOL)
    assert state.keys() == ref_state.keys()
    for k, v in ref_state.items():
        torch.testing.assert_close(state[k], v, **TOL, msg=lambda m, k=k: f"{k}: {m}")
