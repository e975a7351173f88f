"""benchmarks/bench_e2e.py end to end on the CPU: tiny preset, 2 timed steps, hf and liger_cpp each
in its own subprocess; the JSON has both rows and the first-step losses agree (fp32, same init, same
batch)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_e2e_tiny_cpu(tmp_path):
    out = tmp_path / "e2e.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    cmd = [
        sys.executable,
        os.path.join(ROOT, "benchmarks", "bench_e2e.py"),
        "--preset=tiny",
        "--device=cpu",
        "--variants=hf,liger_cpp",
        "--warmup=1",
        "--steps=2",
        f"--out={out}",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert [r["variant"] for r in data["rows"]] == ["hf", "liger_cpp"]
    assert not any("error" in r for r in data["rows"])
    hf, lg = data["results"]["hf"], data["results"]["liger_cpp"]
    assert len(hf["losses"]) == len(lg["losses"]) == 3
    assert abs(hf["losses"][0] - lg["losses"][0]) < 1e-4
    assert hf["losses"][0] > 6.0  # ~ln(1000) at random init: a real loss, not a constant
    assert hf["tokens_per_s"] > 0 and lg["peak_bytes"] > 0
    # The table comes last, after the title line.
    lines = proc.stdout.strip().splitlines()
    assert lines[-4].startswith("End-to-end training (Llama tiny, B2 T64, fp32) on ")
    assert lines[-3].split()[:3] == ["variant", "tok/s", "peak"]
