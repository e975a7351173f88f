// RMSNorm forward with a compile-time row width (rms_norm_fwd_fixed.cu), the
// default forward of plain RMSNorm at hidden 4096 / 8192 / 16384 with x, w
// and y of one 16-bit dtype. LIGER_CPP_RMS_FWD_FIXED=on|off|t256|t512|gen
// (read on every call by rms_norm_fwd; default on): off runs the register-
// cached forward instead, t256 / t512 force the threads a row, gen runs the
// run-time-width form at every hidden size of 257..2048 16-byte vectors
// instead (A/B measurements).
#pragma once

#include <cuda_runtime_api.h>

#include "rms_norm.h"

namespace liger_cpp::kernels {

enum class FwdFixed : int { kOff = 0, kOn, kT256, kT512, kGen };

// Launches the forward of `a` in variant v and returns true (the launch's
// status in *err) where it applies: plain RMSNorm (no residual) with a weight,
// x, w and y of one 16-bit dtype, 16-byte aligned rows, hidden 4096, 8192 or
// 16384. Returns false, launching nothing, otherwise (and for kOff).
bool rms_norm_fwd_fixed(const RmsNormFwdArgs& a, FwdFixed v, cudaStream_t stream, cudaError_t* err);

}  // namespace liger_cpp::kernels
