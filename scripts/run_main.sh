#!/usr/bin/env bash
# The README's main command: set-up, then the training demo (plain Hugging Face vs HF + liger_cpp,
# same model, data and steps, each in its own process; tokens/s, peak memory, losses, a PNG).
# Arguments go to the demo (python -m liger_cpp.demo -h).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
${PYTHON:-python3} -m liger_cpp.demo "$@"
