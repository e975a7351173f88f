#!/usr/bin/env bash
# Lint as CI runs it: ruff (check + format) for Python, clang-format (.clang-format) for csrc/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# One command a line: under set -e a failure on the left of && does not stop the script.
$PY -m ruff check .
$PY -m ruff format --check .
CF=$(command -v clang-format || true)
if [ -z "$CF" ]; then
  $PY -m pip install -q --disable-pip-version-check "clang-format==14.0.6" && CF=$(command -v clang-format)
fi
git ls-files 'csrc/*.cpp' 'csrc/*.h' 'csrc/*.cu' 'csrc/*.cuh' | xargs "$CF" --dry-run -Werror
echo "lint: ruff and clang-format clean"
