// PolyNorm (PolyCom; Liger's LigerPolyNormFunction) CUDA kernels: plain-C++ interface (raw pointers,
// sizes, a stream). Over each row of x [rows, cols], with u_p = x^p and
// r_p = 1 / sqrt(mean(u_p^2) + eps):
//
//   forward   y = w[0] r_3 x^3 + w[1] r_2 x^2 + w[2] r_1 x + b;   rstd[row] = (r_3, r_2, r_1)
//   backward  with A_p = sum_cols dy * x^p and a = (w[0], w[1], w[2]) for p = (3, 2, 1):
//             dx = sum_p a_p (r_p dy - r_p^3 x^p A_p / cols) * p x^(p-1)
//             dw = sum_rows (r_3 A_3, r_2 A_2, r_1 A_1),  db = sum_rows sum_cols dy
// x, dy, y, dx: dense, one dtype; w (3 elements) and b (1 element) in x's dtype or float32; rstd
// float32 [rows, 3]. float32 math and row sums, one rounding to the output's dtype; dw / db are
// float32 per-block partial sums reduced in a fixed order (deterministic).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

struct PolyNormArgs {
  const void* x;
  const void* dy;    // backward only
  const void* w;     // 3 elements, wdtype
  const void* b;     // 1 element, wdtype (forward only)
  float* rstd;       // [rows, 3]: written by the forward, read by the backward
  void* out;         // y (forward) or dx (backward)
  void* dw;          // backward: 3 elements, wdtype
  void* db;          // backward: 1 element, wdtype
  float* workspace;  // backward: plan.workspace_floats
  int64_t rows, cols;
  float eps;
  DType dtype, wdtype;  // wdtype: dtype or kFloat32
};

// One call's launch: blocks of tx x ty threads, a row to each ty lane (tx threads across it, VEC
// elements a thread per step); the forward's blocks take ty rows each, the backward's (two an SM)
// stride over the rows. nv: vectors a thread holds in registers (1, 2 or 4), or 0: rows too long
// to hold, read twice.
struct PolyNormPlan {
  bool vec;
  int tx, ty, nv;
  int64_t blocks;
  int64_t partials;          // backward: blocks * ty partial sums of (dw, db)
  int64_t workspace_floats;  // backward: partials * 4
};

inline constexpr int kPolyNormThreads = 256;

// Pure host plan (testable without a GPU; the launchers take it).
PolyNormPlan plan_poly_norm(int64_t rows, int64_t cols, int elem_size, bool aligned, int sm_count,
                            bool backward);

cudaError_t poly_norm_fwd(const PolyNormArgs& a, const PolyNormPlan& p, cudaStream_t stream);
cudaError_t poly_norm_bwd(const PolyNormArgs& a, const PolyNormPlan& p, cudaStream_t stream);

}  // namespace liger_cpp::kernels
