"""benchmarks/bench_distributed.py: one torchrun launch of its --tiny mode (a tiny Llama, CPU, gloo,
2 processes: plain HF and HF + liger_cpp under FSDP1 and FSDP2, one step after one warm-up step),
the JSON it writes per run, the table from those files, and the sweep's search for the longest
context that fits (its launches faked)."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available in this build", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_distributed as bd  # noqa: E402
from spawn_ranks import fsdp2_runs_on_cpu  # noqa: E402


@pytest.mark.skipif(not fsdp2_runs_on_cpu(), reason="this torch's FSDP2 does not run on the CPU (torch 2.6)")
def test_tiny_launch_writes_a_json_per_run_and_the_table(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        str(ROOT / "benchmarks" / "bench_distributed.py"), "--tiny", "--stacks=hf,liger_cpp",
        "--kinds=fsdp2", "--contexts=32", "--batch=2", "--steps=1", "--warmup=1",
        f"--out-dir={tmp_path}",
    ]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert sorted(runs) == sorted(f"{s}-fsdp2-t32-b2-w2.json" for s in ("hf", "liger_cpp"))
    for name, rec in runs.items():
        assert rec["status"] == "ok" and rec["world"] == 2 and rec["global_batch"] == 4
        assert rec["tokens_per_s_per_gpu"] > 0 and rec["peak_memory_per_gpu"] > 0
        assert len(rec["peak_memory_by_rank"]) == 2 and len(rec["losses"]) == 2
        # liger_cpp's fused loss ran (no logits), HF's path materialised them
        assert rec["fused_loss_path"] == (rec["stack"] == "liger_cpp"), name
    # same initial weights and batches: the same losses (FSDP1 and 2 themselves: tests/test_fsdp.py)
    a, b = runs["hf-fsdp2-t32-b2-w2.json"], runs["liger_cpp-fsdp2-t32-b2-w2.json"]
    assert a["losses"] == pytest.approx(b["losses"], rel=1e-4)
    assert bd.main(["report", f"--out-dir={tmp_path}"]) == 0
    table = (tmp_path / "table.txt").read_text()
    assert "fsdp2, 2 GPUs, batch 2 per GPU" in table and "cpp/hf tok/s" in table


def test_sweep_stops_at_the_first_oom_and_bisects_the_longest_context(tmp_path, monkeypatch):
    launched = []

    def fake_launch(args, stack, kind, seq):
        launched.append(seq)
        return "ok" if seq <= 20000 else "oom"

    monkeypatch.setattr(bd, "_launch", fake_launch)
    args = bd.parse(["sweep", "--stacks=liger_cpp", "--kinds=fsdp2", "--contexts=4096,8192,16384,32768",
                     "--find-max", "--nproc=8", "--batch=8", f"--out-dir={tmp_path}"])  # fmt: skip
    assert bd.sweep_main(args) == 0
    assert launched[:4] == [4096, 8192, 16384, 32768]  # ascending until the first OOM
    best = json.loads((tmp_path / "max-liger_cpp-fsdp2-b8-w8.json").read_text())["max_seq"]
    assert best == 18432  # the largest multiple of 2048 that fits, found by bisection
    assert all(s % 2048 == 0 for s in launched)


def test_argument_checks():
    with pytest.raises(SystemExit):
        bd.parse(["--kinds=ddp"])
    with pytest.raises(SystemExit):
        bd.parse(["--stacks=unsloth"])
    assert bd.parse(["--global-batch=8", "--nproc=8"]).batch == 1
    assert isinstance(bd.parse([]), argparse.Namespace) and bd.parse([]).dtype == "bf16"
