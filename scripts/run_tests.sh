#!/usr/bin/env bash
# The README's test command: set-up, lint, and the whole test suite (CPU here; the GPU script
# runs the same files on CUDA). Fails if a CUDA kernel did not compile where nvcc exists.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  $PY -c "import sys, liger_cpp.env as e; i = e.build_info(); print('CUDA kernels:', i.get('cuda'), i.get('cuda_archs')); sys.exit(0 if i.get('cuda') == 'yes' else 1)" \
    || { echo "nvcc is present but the CUDA kernels were not built"; exit 1; }
fi
bash scripts/lint.sh
$PY -m pytest tests -q -n "${PYTEST_WORKERS:-2}" -p no:cacheprovider
