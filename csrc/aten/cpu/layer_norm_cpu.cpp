// LayerNorm on the CPU: loops over rows with at::parallel_for. Row sums (mean,
// the two-pass variance, the backward's two dot products, dW and dB) accumulate
// in float64; element-wise math is float32 (float64 for float64 inputs). Same
// math as the CUDA kernels (csrc/kernels/layer_norm/layer_norm.h). dW and dB are reduced
// over fixed blocks of rows, then summed in block order: deterministic.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "aten/checks/common.h"
#include "aten/checks/layer_norm_checks.h"
#include "aten/checks/small_tensors.h"
#include "aten/cpu/cpu_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace layer_norm_cpu_impl {

constexpr int64_t kRowsPerBlock = 64;

using cpu::acc_of;

template <typename T>
void fwd_rows(const T* x, const cpu::Rows& xr, const std::vector<acc_of<T>>& w,
              const std::vector<acc_of<T>>& b, T* y, acc_of<T>* mu, acc_of<T>* rs, double eps) {
  using acc_t = acc_of<T>;
  const int64_t rows = xr.rows, cols = xr.cols, xs = xr.stride;
  cpu::parallel(rows, 16, rows * cols, [&](int64_t bb, int64_t be) {
    for (int64_t r = bb; r < be; ++r) {
      const T* xrow = x + r * xs;
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(xrow[c]);
      const double m = s / static_cast<double>(cols);
      double v = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = static_cast<double>(xrow[c]) - m;
        v += d * d;
      }
      const acc_t inv = static_cast<acc_t>(1.0 / std::sqrt(v / static_cast<double>(cols) + eps));
      const acc_t ma = static_cast<acc_t>(m);
      mu[r] = ma;
      rs[r] = inv;
      T* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        acc_t o = (static_cast<acc_t>(xrow[c]) - ma) * inv;
        if (!w.empty()) o *= w[c];
        if (!b.empty()) o += b[c];
        yr[c] = static_cast<T>(o);
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_fwd_cpu(const at::Tensor& X,
                                                                  const c10::optional<at::Tensor>& W,
                                                                  const c10::optional<at::Tensor>& B,
                                                                  double eps) {
  check_layer_norm_fwd(X, W, B, /*cuda=*/false);
  cpu::Rows xr;
  const at::Tensor x2 = cpu::as_rows(X, xr);
  at::Tensor y = small_empty(X.sizes(), X.options());
  const auto acc_dtype = X.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor mean = small_empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(acc_dtype));
  at::Tensor rstd = small_empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(acc_dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "layer_norm_fwd_cpu", [&] {
    using acc_t = acc_of<scalar_t>;
    fwd_rows<scalar_t>(x2.const_data_ptr<scalar_t>(), xr, cpu::param_vector<acc_t>(W),
                       cpu::param_vector<acc_t>(B), y.data_ptr<scalar_t>(), mean.data_ptr<acc_t>(),
                       rstd.data_ptr<acc_t>(), eps);
  });
  return {y, mean, rstd};
}

template <typename T>
void bwd_rows(const T* dy, const cpu::Rows& dyr, const T* x, const cpu::Rows& xr,
              const std::vector<acc_of<T>>& w, const acc_of<T>* mu, const acc_of<T>* rs, T* dx, double* pw,
              double* pb) {
  using acc_t = acc_of<T>;
  const int64_t rows = xr.rows, cols = xr.cols;
  const int64_t xs = xr.stride, gs = dyr.stride;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  cpu::parallel(blocks, 1, rows * cols, [&](int64_t bb, int64_t be) {
    std::vector<acc_t> xh(cols), g(cols);
    for (int64_t blk = bb; blk < be; ++blk) {
      const int64_t r_end = std::min(rows, (blk + 1) * kRowsPerBlock);
      for (int64_t r = blk * kRowsPerBlock; r < r_end; ++r) {
        const T* xrow = x + r * xs;
        const T* gr = dy + r * gs;
        const acc_t inv = rs[r], m = mu[r];
        double sg = 0, sgx = 0;
        for (int64_t c = 0; c < cols; ++c) {
          xh[c] = (static_cast<acc_t>(xrow[c]) - m) * inv;
          const acc_t dyc = static_cast<acc_t>(gr[c]);
          g[c] = w.empty() ? dyc : dyc * w[c];
          sg += g[c];
          sgx += static_cast<double>(g[c]) * xh[c];
          if (pw) pw[blk * cols + c] += static_cast<double>(dyc) * xh[c];
          if (pb) pb[blk * cols + c] += dyc;
        }
        const acc_t a = static_cast<acc_t>(sg / static_cast<double>(cols));
        const acc_t bq = static_cast<acc_t>(sgx / static_cast<double>(cols));
        T* dr = dx + r * cols;
        for (int64_t c = 0; c < cols; ++c) dr[c] = static_cast<T>(inv * (g[c] - a - xh[c] * bq));
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_bwd_cpu(const at::Tensor& dY, const at::Tensor& X,
                                                                  const c10::optional<at::Tensor>& W,
                                                                  const at::Tensor& MEAN,
                                                                  const at::Tensor& RSTD, bool compute_dw,
                                                                  bool compute_db) {
  check_layer_norm_bwd(dY, X, W, MEAN, RSTD, /*cuda=*/false);
  const bool has_w = W.has_value() && W->defined();
  const bool want_dw = has_w && compute_dw;
  const int64_t n = X.size(-1);
  const auto p_dtype = ln_grad_dtype(W, X);
  cpu::Rows xr, dyr;
  const at::Tensor x2 = cpu::as_rows(X, xr);
  const at::Tensor dy2 = cpu::as_rows(dY, dyr);
  const at::Tensor mean = MEAN.contiguous(), rstd = RSTD.contiguous();
  at::Tensor dx = small_empty(X.sizes(), X.options());
  at::Tensor dw = small_empty({want_dw ? n : 0}, X.options().dtype(p_dtype));
  at::Tensor db = small_empty({compute_db ? n : 0}, X.options().dtype(p_dtype));
  const int64_t blocks = (xr.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<double> pw(want_dw ? blocks * n : 0, 0.0), pb(compute_db ? blocks * n : 0, 0.0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "layer_norm_bwd_cpu", [&] {
    using acc_t = acc_of<scalar_t>;
    bwd_rows<scalar_t>(dy2.const_data_ptr<scalar_t>(), dyr, x2.const_data_ptr<scalar_t>(), xr,
                       cpu::param_vector<acc_t>(W), mean.const_data_ptr<acc_t>(),
                       rstd.const_data_ptr<acc_t>(), dx.data_ptr<scalar_t>(), want_dw ? pw.data() : nullptr,
                       compute_db ? pb.data() : nullptr);
  });
  if (want_dw) cpu::sum_blocks_into(dw, pw, blocks, n);  // block order: deterministic
  if (compute_db) cpu::sum_blocks_into(db, pb, blocks, n);
  return {dx, dw, db};
}

}  // namespace layer_norm_cpu_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace layer_norm_cpu_impl;  // NOLINT(build/namespaces)

  m.impl("layer_norm_fwd", &layer_norm_fwd_cpu);
  m.impl("layer_norm_bwd", &layer_norm_bwd_cpu);
}

}  // namespace liger_cpp
