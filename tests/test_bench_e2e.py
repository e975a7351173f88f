"""benchmarks/bench_e2e.py on the CPU: tiny preset, 2 timed steps, hf and liger_cpp. The driver runs
as on the GPU (command lines, worker arguments, JSON, table); only the process spawn is replaced by
an in-process call of the same command line (three fresh interpreters importing torch and
transformers cost ~30 s on a 2-core machine). The real subprocess path is what the lead runs."""

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import single_thread  # noqa: E402,F401  (autouse fixture)

from liger_cpp.transformers import monkey_patch as mp  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_e2e  # noqa: E402


def test_bench_e2e_tiny_cpu(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_spawn(cmd, env, timeout):
        assert cmd[0] == sys.executable and cmd[1] == os.path.abspath(bench_e2e.__file__)
        assert env is not None and env.get("PYTHONPATH") == os.environ.get("PYTHONPATH")  # inherited
        calls.append(cmd)
        if "--worker=compile" in cmd:  # a worker that dies: reported as a row, not a crash
            return subprocess.CompletedProcess(cmd, -9)
        try:
            rc = bench_e2e.main(cmd[2:])  # worker mode, in this process
        finally:
            mp.revert_liger_kernel()  # the liger_cpp worker patched Llama at class level
        return subprocess.CompletedProcess(cmd, rc)

    monkeypatch.setattr(bench_e2e, "_spawn", fake_spawn)
    out = tmp_path / "e2e.json"
    argv = ["--preset=tiny", "--variants=hf,liger_cpp,compile", "--warmup=1", "--steps=2", f"--out={out}"]
    assert bench_e2e.main(argv) == 1  # the dead worker
    assert len(calls) == 3 and all("--device=cpu" in c and "--model=tiny" in c for c in calls)

    data = json.loads(out.read_text())
    assert [r["variant"] for r in data["rows"]] == ["hf", "liger_cpp", "compile"]
    assert "exit -9" in data["rows"][2]["error"] and "error" not in data["rows"][0]
    hf, lg = data["results"]["hf"], data["results"]["liger_cpp"]
    assert len(hf["losses"]) == len(lg["losses"]) == 3
    assert abs(hf["losses"][0] - lg["losses"][0]) < 1e-4  # same init, same batch, fp32
    assert hf["losses"][0] > 6.0  # ~ln(1000) at random init: a real loss, not a constant
    assert hf["tokens_per_s"] > 0 and lg["peak_bytes"] > 0 and hf["params"] == lg["params"]
    # The patch took in the liger_cpp run only: its modules, and no logits with FLCE.
    assert lg["modules"]["norm"] == "LigerRMSNorm" and lg["modules"]["mlp"] == "LigerSwiGLUMLP"
    assert hf["modules"]["norm"] == "LlamaRMSNorm"
    assert hf["modules"]["logits_returned"] and not lg["modules"]["logits_returned"]
    assert data["config"]["hidden_size"] == 64 and data["meta"]["commit"]

    # The table comes last (title, header, rule, 3 rows), with the first-step comparison before it.
    text = capsys.readouterr().out
    lines = text.rstrip().splitlines()
    assert lines[-6].startswith("End-to-end training (Llama tiny, B2 T64, fp32) on ")
    assert lines[-5].split()[:3] == ["variant", "tok/s", "peak"]
    assert [ln.split()[0] for ln in lines[-3:]] == ["hf", "liger_cpp", "compile"]
    assert "First-step loss: hf " in text and "max abs diff" in text


def test_presets_match_targets():
    args = bench_e2e.parse(["--preset=1b-b4t8192"])
    assert (args.batch, args.seq, args.dtype, args.device, args.steps, args.warmup) == (
        4,
        8192,
        "bf16",
        "cuda",
        10,
        3,
    )
    assert args.variants == ["hf", "liger_cpp", "liger", "compile"]
    cfg = bench_e2e.llama_config("1b", 2048)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (
        2048,
        16,
        32,
        8,
    )
    assert (cfg.intermediate_size, cfg.vocab_size, cfg.tie_word_embeddings) == (8192, 128256, True)
    cfg = bench_e2e.llama_config("8b", 16384)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.tie_word_embeddings) == (
        4096,
        32,
        14336,
        False,
    )
    theta = cfg.rope_parameters["rope_theta"] if getattr(cfg, "rope_parameters", None) else cfg.rope_theta
    assert theta == 500000.0
    args = bench_e2e.parse(["--preset=8b-gc", "--quick"])
    assert args.grad_checkpointing and (args.batch, args.seq, args.steps, args.warmup) == (1, 16384, 5, 2)
    with pytest.raises(SystemExit):
        bench_e2e.parse(["--variants=hf,nope"])


def _synthetic_trial(calls, cap=140 * 2**30, limit=0.995):
    """Peak = 20 GiB + 4 MiB per unit of length; out of memory above limit * cap."""

    def trial(t):
        calls.append(t)
        peak = 20 * 2**30 + t * 4 * 2**20
        if peak > limit * cap:
            return {"error": "out of memory at step 1", "peak_bytes": None}
        return {"peak_bytes": peak, "device_bytes": cap, "tokens_per_s": 1.0}

    return trial


def test_max_seq_search_finds_the_boundary():
    import bench_max_seq as ms

    calls = []
    res = ms.search(_synthetic_trial(calls), start=2048, step=512, max_trials=8)
    # true limit: (0.995 * 140 - 20) GiB / 4 MiB = 30541 -> 30208 is the last multiple of 512 that fits
    assert (res["longest"], res["shortest_oom"]) == (30208, 30720)
    assert calls[:2] == [2048, 4096] and 29000 < res["predicted"] < 30541  # the line, with 2 % headroom
    assert len(calls) == len(set(calls)) <= 8

    calls = []  # the first length already runs out: halve until one trains
    res = ms.search(_synthetic_trial(calls, cap=30 * 2**30), start=8192, step=512, max_trials=8)
    assert calls[:2] == [8192, 4096] and res["longest"] is not None
    assert res["shortest_oom"] - res["longest"] <= 512 or len(calls) == 8

    res = ms.search(lambda t: {"error": "RuntimeError: boom"}, start=2048, step=512, max_trials=8)
    assert res["error"] == "T=2048: RuntimeError: boom" and res["longest"] is None


def test_max_seq_main_table_and_json(tmp_path, monkeypatch, capsys):
    import bench_max_seq as ms

    calls = []
    trial = _synthetic_trial(calls)
    monkeypatch.setattr(ms.bench_e2e, "run_variant", lambda v, args, tmp: trial(args.seq))
    out = tmp_path / "max_seq.json"
    rc = ms.main(["--variants=hf,liger_cpp", "--device=cpu", f"--out={out}"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert [r["longest"] for r in data["rows"]] == [30208, 30208]
    text = capsys.readouterr().out.rstrip().splitlines()
    assert text[-5].startswith("Longest sequence at batch 8 (Llama 1b, bf16")
    assert [ln.split()[:2] for ln in text[-2:]] == [["hf", "30208"], ["liger_cpp", "30208"]]


def test_breakdown_kernel_categories():
    """--breakdown's categories for kernel names as the profiler reports them on the H200."""
    cat = bench_e2e.kernel_category
    assert cat("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNT") == "gemm"
    assert cat("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert cat("void at::native::(anonymous namespace)::cutlass_fmha_kernel<...>") == "attention"
    assert cat("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>") == "attention"
    assert cat("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<...>>") == "optimizer"
    assert cat("void liger_cpp::kernels::(anonymous namespace)::glu_bwd_kernel<...>(...)") == "own"
    assert cat("_swiglu_backward_kernel") == "own"  # Triton kernels: bare identifiers
    assert cat("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0") == "own"
    assert cat("void at::native::vectorized_elementwise_kernel<8, CUDAFunctor_add<...>>") == "other"
    assert cat("Memset (Device)") == "other"


def test_host_profile_of_a_step_on_the_cpu():
    """--breakdown's host side, from the profiler's CPU events of a small step (liger_cpp's RMSNorm,
    a matmul, backward, AdamW): categories, threads, the untraced bound and the top ops."""
    from torch.profiler import ProfilerActivity, profile

    import liger_cpp.transformers as lt

    assert bench_e2e.host_category("cudaLaunchKernel") == "cuda runtime"
    assert bench_e2e.host_category("liger::rms_norm_fwd") == "liger_cpp ops"
    assert bench_e2e.host_category("Optimizer.step#AdamW.step") == "optimizer"
    assert bench_e2e.host_category("autograd::engine::evaluate_function: MmBackward0") == "autograd engine"
    assert bench_e2e.host_category("aten::mm") == "aten ops"
    assert bench_e2e.host_category("ProfilerStep#1") == "other"
    w = torch.nn.Parameter(torch.ones(64))
    lin = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW([w, *lin.parameters()])
    x = torch.randn(8, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        lin(lt.liger_rms_norm(x, w, 1e-6)).square().sum().backward()
        opt.step()
    h = bench_e2e.host_profile(prof.events(), wall_ms=1e6)
    cats = h["by_category_ms"]
    assert {"liger_cpp ops", "aten ops", "optimizer"} <= set(cats) and all(v >= 0 for v in cats.values())
    assert h["kernel_launches"] == 0  # the CPU launches no kernels
    assert h["by_thread_ms"] == sorted(h["by_thread_ms"], reverse=True)
    assert 0 < h["untraced_ms"] < 1e6
    assert sum(cats.values()) == pytest.approx(sum(h["by_thread_ms"]), abs=0.01)  # rounded to µs
    assert any(o["name"].startswith("liger::rms_norm") for o in h["top_ops"])


def test_breakdown_rows_bound_liger_by_the_floor():
    """'liger / floor' = Liger's median step over a variant's GEMM + attention time."""
    bd = dict(
        wall_ms=101.0,
        gpu_busy_ms=99.0,
        by_category_ms=dict(gemm=60.0, attention=20.0, own=10.0, optimizer=5.0, other=4.0),
        top_kernels=[],
    )
    results = {
        "liger_cpp": dict(step_ms=[500.0, 90.0, 92.0, 91.0, 93.0, 95.0], breakdown=bd),
        "liger": dict(step_ms=[600.0, 100.0, 100.0, 100.0, 100.0, 100.0], breakdown=bd),
        "hf": dict(step_ms=[1.0], error="out of memory", breakdown=bd),  # failed: no row
        "compile": dict(step_ms=[1.0]),  # not profiled: no row
    }
    rows = bench_e2e.breakdown_rows(results, warmup=1)
    assert [r["variant"] for r in rows] == ["liger_cpp", "liger"]
    assert rows[0]["floor"] == "80.0" and rows[0]["liger / floor"] == "1.250"
    assert rows[0]["step"] == "92.0"  # median of the steps after the warm-up one
    assert rows[0]["own"] == "10.0" and rows[0]["gpu busy"] == "99.0"


@pytest.mark.parametrize(
    "family, norm, mlp",
    [
        ("olmo3", "LigerRMSNormForOlmo3", "LigerSwiGLUMLP"),
        ("hunyuan_v1_moe", "LigerRMSNorm", "LigerHunYuanMoEV1Experts"),  # the fused experts op
        ("qwen3_moe", "LigerRMSNorm", "LigerQwen3MoeExperts"),
        ("qwen3_vl", "LigerRMSNorm", "Qwen3VLTextMLP"),  # Liger-Kernel's default: swiglu off
    ],
)
def test_bench_e2e_newer_families_tiny_cpu(tmp_path, monkeypatch, family, norm, mlp):
    """The --family runs (issue 27's dense / MoE / multimodal benchmark) on the tiny shapes: hf and
    liger_cpp from the same init, the family's apply function with its defaults in liger_cpp's."""

    def fake_spawn(cmd, env, timeout):
        try:
            rc = bench_e2e.main(cmd[2:])
        finally:
            mp.revert_liger_kernel()
        return subprocess.CompletedProcess(cmd, rc)

    monkeypatch.setattr(bench_e2e, "_spawn", fake_spawn)
    out = tmp_path / "e2e.json"
    argv = ["--preset=tiny", f"--family={family}", "--variants=hf,liger_cpp", "--warmup=0", "--steps=1"]
    assert bench_e2e.main(argv + [f"--out={out}"]) == 0
    data = json.loads(out.read_text())
    hf, lg = data["results"]["hf"], data["results"]["liger_cpp"]
    assert abs(hf["losses"][0] - lg["losses"][0]) < 1e-4 and hf["params"] == lg["params"]
    assert (lg["modules"]["norm"], lg["modules"]["mlp"]) == (norm, mlp)
    assert not lg["modules"]["logits_returned"] and hf["modules"]["logits_returned"]
    assert data["config"]["family"] == family


def test_family_shapes_at_1b():
    """The 1b shapes of the newer families are ~1B parameters (on the meta device, nothing allocated)."""
    import torch
    import transformers

    for family, low, high in [
        ("olmo3", 1.0e9, 1.6e9),
        ("hunyuan_v1_moe", 1.3e9, 2.0e9),
        ("qwen3_vl", 0.9e9, 1.6e9),
    ]:
        cfg = bench_e2e.family_config(family, "1b", 2048)
        auto = (
            transformers.AutoModelForImageTextToText
            if family == "qwen3_vl"
            else transformers.AutoModelForCausalLM
        )
        with torch.device("meta"):
            n = sum(p.numel() for p in auto.from_config(cfg).parameters())
        assert low < n < high, (family, n)


def test_qwen3_moe_shape():
    """The moe preset's Qwen3-MoE-like model: 12 layers of 128 experts (768, top 8), ~8.1 B parameters."""
    import torch
    import transformers

    cfg = bench_e2e.family_config("qwen3_moe", "moe", 2048)
    assert bench_e2e.PRESETS["moe-b8t2048"]["batch"] * bench_e2e.PRESETS["moe-b8t2048"]["seq"] == 16384
    with torch.device("meta"):
        n = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(cfg).parameters())
    assert 7.8e9 < n < 8.4e9, n
