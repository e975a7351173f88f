// Cross-entropy row kernel: plain-C++ interface (raw pointers, sizes, a
// stream). The core of liger::cross_entropy_fwd and of the fused linear cross
// entropy's per-chunk step (csrc/aten/checks/cross_entropy_core.h states the math).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

struct CeRowsArgs {
  const void* logits;  // [rows, cols], unit column stride
  int64_t logits_row_stride;
  const int64_t* target;    // [rows]
  const float* weight;      // [cols] class weights, or null (all ones)
  const float* weight_sum;  // device scalar sum(weight) when weight is given
  void* dlogits;            // [rows, cols] in logits' dtype, or null (no gradient); may equal logits
  int64_t dlogits_row_stride;
  float* loss;              // [rows]: per-row CE loss (without z-loss), 0 for ignored rows
  float* z_loss;            // [rows] or null (only when lse_square_scale == 0): lse_square_scale * lse^2
  int64_t* argmax;          // [rows] or null: first index of the row's max, -1 for ignored rows
  const float* ce_scale;    // scale of the CE part of row r's gradient: ce_scale[r * ce_scale_stride]
  int64_t ce_scale_stride;  // 0 (one scalar) or 1 (per row)
  const float* z_scale;     // scale of the z-loss part of the gradient, likewise
  int64_t z_scale_stride;
  int64_t rows, cols;
  int64_t ignore_index;
  float label_smoothing, lse_square_scale;
  float softcap;  // 0: none
  DType dtype;    // of logits and dlogits
};

cudaError_t ce_rows(const CeRowsArgs& a, int sm_count, cudaStream_t stream);

// d[r, :] *= g[r * g_stride] (g_stride 0: one scalar; rows whose factor is
// exactly 1 are left untouched, so a unit grad_output costs no pass over d).
cudaError_t ce_scale_rows(void* d, int64_t row_stride, int64_t rows, int64_t cols, const float* g,
                          int64_t g_stride, DType dtype, int sm_count, cudaStream_t stream);

// One launch before the row kernel of a loss over `rows` targets
// (cross_entropy_reduce.cu): checks that every target is ignore_index or in
// [0, V) (otherwise a device-side assertion, as at::_assert_async) and writes
//   scales[0] = ce_scale: mean 1 / sum_{valid} w[y] (1 / N without weights), else 1,
//   scales[1] = z_scale:  mean 1 / N, else 1 (both 0 for an all-ignored mean),
//   scales[2] = sum_j weight[j] (the row kernel's weight_sum; 0 without weights).
// reduction: 0 none, 1 mean, 2 sum. Sums in float64, in a fixed order.
cudaError_t ce_prologue(const int64_t* target, int64_t rows, int64_t V, int64_t ignore_index,
                        const float* weight, int reduction, float* scales, cudaStream_t stream);

// One launch after it for a reduced loss: *loss = sum(loss_rows) * scales[0]
// + sum(z_rows) * scales[1] and *z = the second term (0 when z_rows is null),
// summed in float64 in a fixed order, rounded once.
cudaError_t ce_epilogue(const float* loss_rows, const float* z_rows, int64_t rows, const float* scales,
                        float* loss, float* z, cudaStream_t stream);

}  // namespace liger_cpp::kernels
