#!/usr/bin/env bash
# All set-up on a fresh machine (2 cores, Python 3.10+, PyPI reachable): the pinned torch and the
# test tools, then the liger_cpp build. With nvcc and a CUDA torch (torch 2.11.0 from PyPI is
# cu130) the CUDA kernels are compiled (sm_80, sm_90a, compute_90 PTX); otherwise CPU only.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check "torch==2.11.0" numpy pytest pytest-xdist ninja \
  "setuptools>=64,<82" wheel "ruff==0.17.6" "clang-format==14.0.6" "transformers>=5,<6" accelerate matplotlib "trl>=1,<2" "peft>=0.17,<1" \
  "deepspeed>=0.19,<0.20"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
t0=$(date +%s)
MAX_JOBS=${MAX_JOBS:-2} $PY -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
echo "liger_cpp build: $(( $(date +%s) - t0 )) s"
# The liger-kernel compatibility package (import name liger_kernel, backed by liger_cpp): what the
# tests/test_compat_*.py integration tests run Hugging Face / TRL through, as a user would.
$PY -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps ./compat
# Liger-Kernel 0.8.5 itself, beside (not over) the compatibility package: tests/test_liger_conformance.py
# runs its chunked losses on the CPU in a subprocess and compares liger_cpp's with them.
if [ ! -f .liger_upstream/liger_kernel/__init__.py ]; then
  $PY -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target .liger_upstream \
    "liger-kernel==0.8.5"
fi
$PY -m liger_cpp.env
