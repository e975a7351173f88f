// Gated linear units (SwiGLU, GeGLU) CUDA kernels: plain-C++ interface (raw
// pointers, sizes, a stream). Liger's LigerSiLUMulFunction / LigerGELUMulFunction.
//
//   c = act(a) * b                    (fp32 math, one rounding to the output dtype)
//   silu(x)      = x * s, s = sigmoid(x);  silu'(x) = s * (1 + x * (1 - s))
//   gelu_tanh(x) = 0.5 x (1 + tanh(k0 (x + k1 x^3)))      (HF gelu_pytorch_tanh)
//   gelu_erf(x)  = 0.5 x (1 + erf(x / sqrt(2)))           (exact GELU)
// Backward (the activation is recomputed from a):
//   da = dc * b * act'(a),  db = dc * act(a)
// Every tensor is [rows, cols] with its own row stride and a unit column stride;
// da/db may alias a/b element for element (the in-place backward).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

// The activation (the ATen side's GluKind, same values).
enum class GluAct : int { kSilu = 0, kGeluTanh = 1, kGeluErf = 2 };

struct GluFwdArgs {
  const void* a;
  int64_t a_row_stride;
  const void* b;
  int64_t b_row_stride;
  void* c;  // never aliases a or b
  int64_t c_row_stride;
  int64_t rows, cols;
  GluAct act;
  DType dtype;  // of a, b and c
};

struct GluBwdArgs {
  const void* dc;
  int64_t dc_row_stride;
  const void* a;
  int64_t a_row_stride;
  const void* b;
  int64_t b_row_stride;
  void* da;  // may be a (same elements), for the in-place backward
  int64_t da_row_stride;
  void* db;  // may be b
  int64_t db_row_stride;
  int64_t rows, cols;
  GluAct act;
  DType dtype;  // of every tensor
};

// Plan (glu.cu: which kernel and grid, from the shape, the alignment and the device) and
// launch, once per call.
cudaError_t glu_fwd(const GluFwdArgs& a, int sm_count, cudaStream_t stream);
cudaError_t glu_bwd(const GluBwdArgs& a, int sm_count, cudaStream_t stream);

}  // namespace liger_cpp::kernels
