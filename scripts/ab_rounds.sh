# Sourced by the device A/B scripts (scripts/gpu_*_ab.sh).
#
# install_liger_wheel: the carried Liger-Kernel wheel (.whl/, the baseline) into /tmp/site, when there.
install_liger_wheel() {
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
}

# ab_start REPORT: the wheel above, then REPORT started anew with the GPU's name and clock and the
# commit under test ($LIGER_CPP_COMMIT).
ab_start() {
  install_liger_wheel
  nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | tee "$1"
  echo "commit ${LIGER_CPP_COMMIT:-unknown}" | tee -a "$1"
}

# ab_rounds SCRIPT REPORT runs the Python
# probe SCRIPT once per side named in $SIDES (default "base new"; base: the package carried in
# .ab_base/, a: .ab_a/, new: this tree), two alternating rounds, with that side's package first on
# PYTHONPATH, appending to REPORT.
ab_rounds() {
  local script=$1 report=$2 round side root
  for round in 1 2; do
    for side in ${SIDES:-base new}; do
      case $side in base) root=$PWD/.ab_base ;; a) root=$PWD/.ab_a ;; *) root=$PWD ;; esac
      echo "== $side round $round" | tee -a "$report"
      PYTHONPATH=$root:$PWD/benchmarks timeout 150 python3 "$script" 2>&1 | tee -a "$report"
    done
  done
}
