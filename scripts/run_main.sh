#!/usr/bin/env bash
# The README's main command: set-up, then the check-and-benchmark of every op against PyTorch
# on the available device (GPU if visible, else CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
${PYTHON:-python3} -m liger_cpp.bench "$@"
