// The cross-entropy row step shared by liger::cross_entropy_fwd and the fused
// linear cross entropy (csrc/aten/composite/): loss, z-loss, argmax and the gradient of
// each row of logits, in one pass over the row where the device allows.
//
// For row r with target y (x = logits[r], after softcap when softcap > 0:
// x_j <- softcap * tanh(x_j / softcap)), w the class weights (ones when
// absent), ls = label_smoothing, lss = lse_square_scale, V = cols:
//   lse   = log sum_j exp(x_j)
//   ce    = (1 - ls) * w_y * (lse - x_y) + (ls / V) * sum_j w_j * (lse - x_j)
//   z     = lss * lse^2
//   loss[r] = ce (without z), z_loss[r] = z, argmax[r] = first j of max x_j
//   p_j   = exp(x_j - lse), evaluated as exp((x_j - max) - log(sum)) (or
//           exp(x_j - max) / sum): exp(x_j - lse) with lse rounded to float32
//           costs about 4x PyTorch's float32 gradient error at |lse| ~ 10
//   dlogits[r, j] = cs * ((1 - ls) * w_y * (p_j - [j == y]) + (ls / V) * (sum(w) * p_j - w_j))
//                 + zs * 2 * lss * lse * p_j
//                 (evaluated in this grouping: p_y - 1 is formed before any
//                 scaling, so p_y near 1 cancels exactly (Liger PR #1268), and
//                 each term is exactly 0 where it should be, e.g. V = 1)
//                 (times 1 - (x_j / softcap)^2 with softcap: the tanh's derivative)
//   with cs = ce_scale[r * stride], zs = z_scale[r * stride] (float32 device
//   tensors of 1 or rows elements: 1/N for a mean, grad_output per row, ...).
// Ignored rows (y == ignore_index): loss = z = 0, argmax = -1, gradient 0.
// Masked classes (x_j = -inf, e.g. padded vocabulary) have p_j = 0 and a zero
// gradient; the smoothing term is only formed when ls > 0 (its 0 * inf would
// otherwise turn the loss into NaN; with ls > 0 it is +inf, as in PyTorch).
// A target outside [0, V) that is not ignore_index is never read through: its
// row gets loss NaN, argmax -1 and a NaN gradient (callers check targets and
// raise first; this only keeps a missed check from reading out of bounds).
// All math in float32 (float64 for float64 logits on the CPU), one rounding
// to the output dtype.
#pragma once

#include <ATen/ATen.h>

#include <string_view>
#include <utility>

#include "aten/checks/small_tensors.h"

namespace liger_cpp {

enum class Reduction : int { kNone = 0, kMean = 1, kSum = 2 };

// "none" / "mean" / "sum", or an error naming argument 'reduction'.
Reduction parse_reduction(std::string_view reduction);

// Every target is ignore_index or in [0, V). On the CPU a violation raises a
// ValueError at once, naming the first bad position and value; on CUDA the
// check is queued on the stream (the prologue kernel's device-side assertion, one
// launch; no host synchronisation) and fails the next synchronising call, as PyTorch's own
// cross entropy does; that leaves the CUDA context unusable. With the opt-in
// set_check_targets(true) (Python: liger_cpp.set_check_targets) the CUDA check
// synchronises with the host instead and raises the CPU path's ValueError.
void check_ce_target_values(const at::Tensor& target, int64_t V, int64_t ignore_index);

// The opt-in above: off by default (no host synchronisation on CUDA); returns the previous setting.
bool set_check_targets(bool enabled);
bool check_targets_enabled();

// Raises the ValueError of a bad target (value at flat position).
[[noreturn]] void fail_bad_target(int64_t V, int64_t ignore_index, int64_t value, int64_t position);

// The target check above, the gradient scales of a reduced loss over all rows
// of `target` and the sum of the class weights in one step (on CUDA one launch,
// cross_entropy_reduce.cu; on the CPU plain loops, no ATen ops), as a float32
// tensor [3] = (ce_scale, z_scale, sum_j weight[j]) on target's device, with no
// host synchronisation:
//   mean: ce_scale = 1 / sum_{valid r} w[y_r] (1 / N without weights), z_scale = 1 / N,
//         where N counts the rows whose target is not ignore_index; both 0 when N = 0
//         (an all-ignored batch gives loss 0 and zero gradient, not NaN);
//   sum : both 1;  none: both 1 (a per-row grad_output is applied by the caller);
//   the weights' sum is 0 without weights. Sums in float64. target: flat int64.
// Callers form the reduced loss from the core's rows as
//   mean: sum_r loss[r] * ce_scale + sum_r z_loss[r] * z_scale; sum: plain sums;
//   none: loss[r] + z_loss[r].
at::Tensor ce_prologue(const at::Tensor& target, const at::Tensor& weight, int64_t V, int64_t ignore_index,
                       Reduction reduction);

// ce_prologue's result as [1] views: the CE and z-loss scales and, with class
// weights (weighted), their sum; weight_sum is undefined without weights.
struct CeScales {
  at::Tensor ce, z, weight_sum;
};
inline CeScales split_ce_scales(const at::Tensor& scales, bool weighted) {
  return {small_slice(scales, 0, 1), small_slice(scales, 1, 1),
          weighted ? small_slice(scales, 2, 1) : at::Tensor()};
}

// The reduced loss of a mean or sum from the row step's outputs and
// ce_prologue's scales: (loss, z) as 0-d float32 tensors,
//   z = sum_r z_rows[r] * scales[1] (0 when z_rows is undefined),
//   loss = sum_r loss_rows[r] * scales[0] + z. On CUDA one launch.
std::pair<at::Tensor, at::Tensor> ce_reduce_rows(const at::Tensor& loss_rows, const at::Tensor& z_rows,
                                                 const at::Tensor& scales);

struct CeRows {
  at::Tensor logits;      // [rows, V], unit last stride (rows may be strided)
  at::Tensor target;      // [rows] int64, logits' device
  at::Tensor weight;      // [V] float32 or undefined
  at::Tensor weight_sum;  // [1] float32 sum of weight (ce_prologue's third value), or undefined: computed
  at::Tensor dlogits;     // [rows, V] logits' dtype, unit last stride, or undefined; may be logits
  at::Tensor loss;        // [rows] float32, contiguous: the CE part
  at::Tensor z_loss;      // [rows] float32 contiguous; may be undefined only when lse_square_scale == 0
  at::Tensor argmax;      // [rows] int64 contiguous, or undefined
  at::Tensor ce_scale;    // float32, 1 or rows elements, contiguous
  at::Tensor z_scale;     // float32, 1 or rows elements, contiguous
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  double lse_square_scale = 0.0;
  double softcap = 0.0;  // 0: none
};

// Runs the row step on logits' device (no argument checks beyond the device
// being supported: callers validate). Asynchronous on CUDA.
void ce_rows(const CeRows& a);
void ce_rows_cpu(const CeRows& a);
#ifdef LIGER_CPP_WITH_CUDA
void ce_rows_cuda(const CeRows& a);
at::Tensor ce_prologue_cuda(const at::Tensor& target, const at::Tensor& weight, int64_t V,
                            int64_t ignore_index, Reduction reduction);
std::pair<at::Tensor, at::Tensor> ce_reduce_rows_cuda(const at::Tensor& loss_rows, const at::Tensor& z_rows,
                                                      const at::Tensor& scales);
#endif

// d[r, :] *= g[r] (g: float32 with 1 or rows elements); d is [rows, V] with a
// unit last stride. On CUDA rows whose factor is exactly 1 are skipped on the
// device (no host synchronisation), so a unit grad_output costs no pass.
void ce_scale_rows_(const at::Tensor& d, const at::Tensor& g);
void ce_scale_rows_cpu_(const at::Tensor& d, const at::Tensor& g);
#ifdef LIGER_CPP_WITH_CUDA
void ce_scale_rows_cuda_(const at::Tensor& d, const at::Tensor& g);
#endif

}  // namespace liger_cpp
