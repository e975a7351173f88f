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

namespace liger_cpp {
namespace {

constexpr int64_t kRowsPerBlock = 64;

template <typename T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename acc_t>
std::vector<acc_t> as_acc(const c10::optional<at::Tensor>& t) {
  std::vector<acc_t> out;
  if (!(t.has_value() && t->defined())) return out;
  const at::Tensor c = t->to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
  out.assign(c.data_ptr<acc_t>(), c.data_ptr<acc_t>() + c.numel());
  return out;
}

template <typename T>
void fwd_rows(const at::Tensor& x2, const std::vector<acc_of<T>>& w, const std::vector<acc_of<T>>& b,
              at::Tensor& y2, at::Tensor& mean, at::Tensor& rstd, double eps) {
  using acc_t = acc_of<T>;
  const int64_t rows = x2.size(0), cols = x2.size(1), xs = x2.stride(0);
  const T* x = x2.data_ptr<T>();
  T* y = y2.data_ptr<T>();
  acc_t* mu = mean.data_ptr<acc_t>();
  acc_t* rs = rstd.data_ptr<acc_t>();
  at::parallel_for(0, rows, 16, [&](int64_t bb, int64_t be) {
    for (int64_t r = bb; r < be; ++r) {
      const T* xr = x + r * xs;
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(xr[c]);
      const double m = s / static_cast<double>(cols);
      double v = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = static_cast<double>(xr[c]) - m;
        v += d * d;
      }
      const acc_t inv = static_cast<acc_t>(1.0 / std::sqrt(v / static_cast<double>(cols) + eps));
      const acc_t ma = static_cast<acc_t>(m);
      mu[r] = ma;
      rs[r] = inv;
      T* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        acc_t o = (static_cast<acc_t>(xr[c]) - ma) * inv;
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
  const at::Tensor x2 = as_rows(X);
  at::Tensor y = at::empty(X.sizes(), X.options());
  const auto acc_dtype = X.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor mean = at::empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(acc_dtype));
  at::Tensor rstd = at::empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(acc_dtype));
  at::Tensor y2 = y.view({-1, X.size(-1)});
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "layer_norm_fwd_cpu", [&] {
    fwd_rows<scalar_t>(x2, as_acc<acc_of<scalar_t>>(W), as_acc<acc_of<scalar_t>>(B), y2, mean, rstd, eps);
  });
  return {y, mean, rstd};
}

template <typename T>
void bwd_rows(const at::Tensor& dy2, const at::Tensor& x2, const std::vector<acc_of<T>>& w,
              const at::Tensor& mean, const at::Tensor& rstd, at::Tensor& dx2, double* pw, double* pb) {
  using acc_t = acc_of<T>;
  const int64_t rows = x2.size(0), cols = x2.size(1);
  const int64_t xs = x2.stride(0), gs = dy2.stride(0);
  const T* x = x2.data_ptr<T>();
  const T* dy = dy2.data_ptr<T>();
  T* dx = dx2.data_ptr<T>();
  const acc_t* mu = mean.data_ptr<acc_t>();
  const acc_t* rs = rstd.data_ptr<acc_t>();
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  at::parallel_for(0, blocks, 1, [&](int64_t bb, int64_t be) {
    std::vector<acc_t> xh(cols), g(cols);
    for (int64_t blk = bb; blk < be; ++blk) {
      const int64_t r_end = std::min(rows, (blk + 1) * kRowsPerBlock);
      for (int64_t r = blk * kRowsPerBlock; r < r_end; ++r) {
        const T* xr = x + r * xs;
        const T* gr = dy + r * gs;
        const acc_t inv = rs[r], m = mu[r];
        double sg = 0, sgx = 0;
        for (int64_t c = 0; c < cols; ++c) {
          xh[c] = (static_cast<acc_t>(xr[c]) - m) * inv;
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
  const at::Tensor x2 = as_rows(X);
  const at::Tensor dy2 = as_rows(dY);
  const at::Tensor mean = MEAN.contiguous(), rstd = RSTD.contiguous();
  at::Tensor dx = at::empty(X.sizes(), X.options());
  at::Tensor dx2 = dx.view({-1, n});
  at::Tensor dw = at::empty({want_dw ? n : 0}, X.options().dtype(p_dtype));
  at::Tensor db = at::empty({compute_db ? n : 0}, X.options().dtype(p_dtype));
  const int64_t blocks = (x2.size(0) + kRowsPerBlock - 1) / kRowsPerBlock;
  at::Tensor pw = at::zeros({want_dw ? blocks : 0, n}, X.options().dtype(at::kDouble));
  at::Tensor pb = at::zeros({compute_db ? blocks : 0, n}, X.options().dtype(at::kDouble));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "layer_norm_bwd_cpu", [&] {
    bwd_rows<scalar_t>(dy2, x2, as_acc<acc_of<scalar_t>>(W), mean, rstd, dx2,
                       want_dw ? pw.data_ptr<double>() : nullptr,
                       compute_db ? pb.data_ptr<double>() : nullptr);
  });
  if (want_dw) dw.copy_(pw.sum(0));  // block order: deterministic
  if (compute_db) db.copy_(pb.sum(0));
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  m.impl("layer_norm_fwd", &layer_norm_fwd_cpu);
  m.impl("layer_norm_bwd", &layer_norm_bwd_cpu);
}

}  // namespace liger_cpp
