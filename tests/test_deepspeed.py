"""liger_cpp under DeepSpeed ZeRO (CPU accelerator, gloo, 2 processes): a tiny Llama patched with
apply_liger_kernel_to_llama() (RoPE, RMSNorm, SwiGLU, fused linear cross entropy) trained 3 AdamW
steps by a DeepSpeed engine with ZeRO stage 1, 2 and 3, each rank on its half of a global batch, must
match a single process trained on the whole batch (liger_cpp's modules, and Hugging Face's own): same
per-step losses, same final parameters. The same as test_fsdp.py, with DeepSpeed's engine.

ZeRO-3 partitions lm_head's weight (an empty tensor outside lm_head's forward, gathered by
DeepSpeed's module hooks): the fused linear cross entropy must still run, on the gathered weight, with
the weight's gradient reduce-scattered as usual. Checked with the class-level patch and with instance
patching (apply_liger_kernel_to_llama(model=engine.module)) of an already partitioned model, and with
LigerTiledSwiGLUMLP as every layer's MLP (its partitioned weights take DeepSpeed's TiledMLP recipe).

Skipped where deepspeed is not installed. DeepSpeed's CPU accelerator would JIT-compile its
shared-memory all-reduce op (deepspeed_shm_comm, ~100 s of C++ compilation) when its communication
backend starts; the workers mark that op incompatible, so gloo does all the collectives."""

import os
import warnings
from datetime import timedelta

import pytest
import torch

transformers = pytest.importorskip("transformers")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available in this build", allow_module_level=True)
pytest.importorskip("deepspeed")

from hf_models import build  # noqa: E402
from spawn_ranks import WORLD, gloo_on_loopback, group_torn_down_together, spawn_workers  # noqa: E402
from test_fsdp import (  # noqa: E402
    HF_TOL,
    LR,
    ROWS,
    STEPS,
    TOL,
    _check,
    _data,
    _plain_hf,
    tiled,
)

STAGES = (1, 2, 3)
NOT_PLAIN = "is not a plain nn.Linear"  # liger_cpp's warning when FLCE falls back to HF's loss path


def _ds_config(stage):
    zero = {"stage": stage}
    if stage == 3:
        # partition every parameter: by default ZeRO-3 keeps parameters of < 1e5 elements (all of
        # this tiny model's) whole on every rank
        zero.update(stage3_param_persistence_threshold=0, model_persistence_threshold=0)
    return {
        "train_micro_batch_size_per_gpu": ROWS // WORLD,
        "gradient_accumulation_steps": 1,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,  # torch's AdamW, the references' optimizer
        "gradient_clipping": 0.0,  # DeepSpeed 0.19 clips to a global norm of 1.0 unless told otherwise
        "steps_per_print": 10**9,
    }


def _count_flce_calls():
    """Wraps liger_cpp's FLCE op (the patched forward calls causal_lm's module attribute); returns
    the counter."""
    from liger_cpp.transformers import causal_lm

    calls = [0]
    fn = causal_lm.liger_fused_linear_cross_entropy

    def counted(*args, **kwargs):
        calls[0] += 1
        return fn(*args, **kwargs)

    causal_lm.liger_fused_linear_cross_entropy = counted
    return calls


def _train_ds(model, stage, rank, patch_after=False):
    """(per-step mean losses over the global batch, full parameters) of STEPS engine steps."""
    import deepspeed

    import liger_cpp.transformers as lt

    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=_ds_config(stage))
    head = engine.module.lm_head.weight
    if stage == 3:
        assert head.numel() == 0 and head.ds_numel == head.ds_shape.numel() > 0, "lm_head not partitioned"
    if patch_after:  # instance patching of the partitioned model
        lt.apply_liger_kernel_to_llama(model=engine.module)
    assert isinstance(engine.module.model.norm, lt.LigerRMSNorm)
    assert isinstance(engine.module.model.layers[0].mlp, lt.LigerSwiGLUMLP)
    rows = slice(rank * ROWS // WORLD, (rank + 1) * ROWS // WORLD)
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(STEPS):
            ids, labels = (t[rows] for t in _data(step))
            out = engine(input_ids=ids, labels=labels)
            # no logits: the fused linear cross entropy ran, not Hugging Face's loss path
            assert out.logits is None, f"ZeRO-{stage}: FLCE path not taken"
            engine.backward(out.loss)
            engine.step()
            loss = out.loss.detach().clone()
            dist.all_reduce(loss)
            losses.append(loss / WORLD)
    assert not [w for w in caught if NOT_PLAIN in str(w.message)], f"ZeRO-{stage}: FLCE fell back"
    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params) if stage == 3 else _nothing():
        state = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    assert all(v.numel() > 0 for v in state.values())
    engine.destroy()
    return torch.stack(losses), state


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _worker(rank, init_file, out_file):
    """Every ZeRO stage in one pair of processes (the imports cost more than the training)."""
    torch.set_num_threads(1)  # 2 processes on 2 cores; the tiny matmuls gain nothing from threads
    gloo_on_loopback()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD))
    import logging

    import deepspeed

    deepspeed.utils.logger.setLevel(logging.WARNING)
    # no JIT compilation of DeepSpeed's shared-memory all-reduce: gloo does the collectives
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(
        dist_backend="gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),
        auto_mpi_discovery=False,  # no launcher: no MASTER_ADDR / MASTER_PORT, the file store instead
    )
    with group_torn_down_together():
        import liger_cpp.transformers as lt

        calls = _count_flce_calls()
        results = {}
        # instance patching after ZeRO-3 has partitioned the model (the class is not patched yet)
        model = build("llama")
        assert "Liger" not in type(model.model.norm).__name__
        results["zero3-instance"] = _train_ds(model, 3, rank, patch_after=True)
        lt.apply_liger_kernel_to_llama()  # class level, before the next models are built
        for stage in STAGES:
            results[f"zero{stage}"] = _train_ds(build("llama"), stage, rank)
        # the tiled MLP under ZeRO-3: its partitioned weights take DeepSpeed's TiledMLP recipe
        results["zero3-tiled"] = _train_ds(tiled(build("llama")), 3, rank)
        assert calls[0] == STEPS * (len(STAGES) + 2), f"FLCE ran {calls[0]} times"
        if rank == 0:
            # the single-process reference with the same patched classes
            from test_fsdp import _full_params, _train

            ref = build("llama")
            ref_losses, _ = _train(ref)
            results["ref"] = (ref_losses, _full_params(ref, None))
            torch.save(results, out_file)


@pytest.fixture(scope="module")
def ds_results(tmp_path_factory):
    return spawn_workers(_worker, tmp_path_factory.mktemp("deepspeed"), what="DeepSpeed workers")


@pytest.fixture(scope="module")
def plain_hf():
    return _plain_hf()


@pytest.mark.parametrize("kind", [f"zero{s}" for s in STAGES] + ["zero3-instance", "zero3-tiled"])
def test_deepspeed_matches_single_process(kind, ds_results, plain_hf):
    res = ds_results[kind]
    _check(res, ds_results["ref"], f"{kind} vs single-process liger_cpp", TOL)
    _check(res, plain_hf, f"{kind} vs single-process Hugging Face", HF_TOL)
