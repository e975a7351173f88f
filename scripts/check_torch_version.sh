#!/usr/bin/env bash
# Builds liger_cpp against another torch release and runs the CPU test suite with it, in a venv of
# its own and a clone of HEAD (nothing here is touched). CI tests the pinned torch only; this is the
# check for the releases users bring (pyproject says torch>=2.6).
#
#   bash scripts/check_torch_version.sh 2.15.0          # CUDA torch from PyPI: kernels built too
#   LIGER_CPP_NO_CUDA=1 bash scripts/check_torch_version.sh 2.6.0   # host code only (its wheel is
#                                                        # cu124, nvcc here is 13: no CUDA build)
#
# About 2 GB of downloads and 5-10 minutes on 2 cores. Results: $WORK/build.log, $WORK/tests.log.
set -euo pipefail
VER=${1:?usage: check_torch_version.sh TORCH_VERSION}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/liger_cpp_torch_$VER}
rm -rf "$WORK" && mkdir -p "$WORK"
python3 -m venv "$WORK/venv"
PY=$WORK/venv/bin/python
$PY -m pip install -q --disable-pip-version-check "torch==$VER" numpy pytest pytest-xdist ninja \
  "setuptools>=64,<82" wheel "transformers>=5,<6" accelerate matplotlib "trl>=1,<2" "peft>=0.17,<1"
git clone -q "$REPO" "$WORK/src"
cd "$WORK/src"
[ -d "$REPO/.liger_upstream" ] && cp -r "$REPO/.liger_upstream" .  # Liger itself, for the conformance tests
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
echo "torch $VER: building (log: $WORK/build.log)"
TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-2} $PY setup.py build_ext --inplace \
  >"$WORK/build.log" 2>&1 || { grep -m 20 -n "error" "$WORK/build.log"; exit 1; }
$PY -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps ./compat
PYTHONPATH=. $PY -m liger_cpp.env
echo "torch $VER: CPU tests (log: $WORK/tests.log)"
PYTHONPATH=. $PY -m pytest tests -q -n "${PYTEST_WORKERS:-2}" -p no:cacheprovider -rs >"$WORK/tests.log" 2>&1 \
  && rc=0 || rc=$?
grep -E "^(FAILED|ERROR)" "$WORK/tests.log" | head -40 || true
tail -1 "$WORK/tests.log"
exit $rc
