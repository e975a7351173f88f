// DyT ("Transformers without Normalization"; Liger's LigerDyTFunction) CUDA kernels: plain-C++
// interface (raw pointers, sizes, a stream).
//
//   forward   y  = gamma[c] * tanh(alpha * x) + beta[c]                   (beta optional)
//   backward  t  = tanh(alpha * x), d = 1 - t^2
//             dx = dy * gamma[c] * alpha * d
//             dgamma[c] = sum_rows dy * t,  dbeta[c] = sum_rows dy,  dalpha = sum dy * gamma[c] * x * d
// x, dy, y, dx: dense [rows, cols] in one dtype; alpha (1 element), gamma, beta ([cols]) in x's
// dtype or float32. float32 math, one rounding to the output's dtype; the parameter gradients are
// float32 sums over fixed blocks of rows, added in a fixed order (deterministic).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

struct DytArgs {
  const void* x;
  const void* dy;     // backward only
  const void* alpha;  // 1 element, wdtype
  const void* gamma;  // [cols], wdtype
  const void* beta;   // [cols], wdtype; nullptr: none (forward only)
  void* out;          // y (forward) or dx (backward), [rows, cols], dtype
  void* dalpha;       // backward: 1 element, wdtype
  void* dgamma;       // backward: [cols], wdtype
  void* dbeta;        // backward: [cols], wdtype
  float* workspace;   // backward: plan.workspace_floats floats
  int64_t rows, cols;
  DType dtype, wdtype;  // wdtype: dtype or kFloat32
};

// One call's launch: blocks of tx x ty threads, VEC elements a thread-vector; grid (row_groups,
// col_tiles). Forward: a block per (row, chunk of tx x 2 vectors), ty = 1, row_groups = rows (rows
// beyond the grid's limit loop), gamma / beta read as vectors (the host aligns them). Backward: tx
// threads along a row's columns, ty rows at a time, each block taking rows_per_group rows (two
// blocks an SM in all); it writes one float32 partial row of dgamma and of dbeta per (row group,
// ty lane) and one dalpha partial per block (summed in float64 within the block), then reduces
// them (workspace_floats in all).
struct DytPlan {
  bool vec;  // 16-byte vectors (cols % VEC == 0 and aligned pointers), else one element
  int tx, ty;
  int64_t col_tiles, row_groups, rows_per_group;
  int64_t partial_rows;      // row_groups * ty
  int64_t workspace_floats;  // backward: 2 * partial_rows * cols + col_tiles * row_groups
};

inline constexpr int kDytThreads = 256;

// Pure host plan (testable without a GPU; the launchers take it).
DytPlan plan_dyt(int64_t rows, int64_t cols, int elem_size, bool aligned, int sm_count, bool backward);

cudaError_t dyt_fwd(const DytArgs& a, const DytPlan& p, cudaStream_t stream);
cudaError_t dyt_bwd(const DytArgs& a, const DytPlan& p, cudaStream_t stream);

}  // namespace liger_cpp::kernels
