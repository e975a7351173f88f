// RMSNorm forward in torch.compile's skeleton (rms_norm_fwd_fixed.cu), the
// default forward of plain RMSNorm with x, w and y of one 16-bit dtype: the
// row width a compile-time constant at hidden 4096 / 8192 / 16384, a run-time
// one at the other hidden sizes of 129..2048 16-byte vectors (1032..16384).
// LIGER_CPP_RMS_FWD_FIXED=on|off|t256|t512|gen (read on every call by
// rms_norm_fwd; default on): off runs the register-cached forward instead,
// t256 / t512 force the threads a row of the compile-time widths (the others
// then take the register-cached forward), gen runs the run-time-width form
// at every width of 64..2048 vectors (A/B measurements).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/rms_norm/rms_norm.h"

namespace liger_cpp::kernels {

enum class FwdFixed : int { kOff = 0, kOn, kT256, kT512, kGen };

// Launches the forward of `a` in variant v and returns true (the launch's
// status in *err) where it applies: plain RMSNorm (no residual) with a weight,
// x, w and y of one 16-bit dtype, 16-byte aligned rows of 129..2048 16-byte
// vectors (kGen: 64..2048). Returns false, launching nothing, otherwise (and for kOff).
bool rms_norm_fwd_fixed(const RmsNormFwdArgs& a, FwdFixed v, cudaStream_t stream, cudaError_t* err);

}  // namespace liger_cpp::kernels
