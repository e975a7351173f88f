// RMSNorm forward with a compile-time row width (rms_norm_fwd_fixed.cu): an
// A/B experiment against the default forward, selected by
// LIGER_CPP_RMS_FWD_FIXED=off|t256|t512|t1024|r512|p512|n512 (read on every
// call by rms_norm_fwd; default off). tN: N threads a row, torch.compile's
// skeleton; r512: rsqrtf for rstd (approximate); p512: the second pass's
// loads all issued first; n512: no L1 eviction priorities.
#pragma once

#include <cuda_runtime_api.h>

#include "rms_norm.h"

namespace liger_cpp::kernels {

enum class FwdFixed : int { kOff = 0, kT256, kT512, kT1024, kR512, kP512, kN512 };

// Launches the forward of `a` in variant v and returns true (the launch's
// status in *err) where it applies: plain RMSNorm (no residual) with a weight,
// x, w and y of one 16-bit dtype, 16-byte aligned rows, hidden 4096, 8192 or
// 16384. Returns false, launching nothing, otherwise.
bool rms_norm_fwd_fixed(const RmsNormFwdArgs& a, FwdFixed v, cudaStream_t stream, cudaError_t* err);

}  // namespace liger_cpp::kernels
