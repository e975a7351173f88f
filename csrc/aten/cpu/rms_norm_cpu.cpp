// RMSNorm on the CPU: plain loops over rows with at::parallel_for. Row sums
// (sum of squares, the backward dot product, dW) accumulate in float64, since a
// plain sequential float32 sum over thousands of columns loses more than the
// GPU's tree sums; element-wise math is float32 (float64 for float64 inputs). Same math and options as the
// CUDA kernels (csrc/kernels/rms_norm/rms_norm.h); dW is reduced over fixed blocks of
// rows and then summed in block order, so it does not depend on thread count.
#include "aten/cpu/rms_norm_cpu.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "aten/checks/common.h"
#include "aten/checks/rms_norm_checks.h"

namespace liger_cpp {
namespace {

constexpr int64_t kRowsPerBlock = 64;

template <typename T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;
using sum_t = double;

// (W + offset) in the accumulation type, or an empty vector without W.
template <typename acc_t>
std::vector<acc_t> weight_plus_offset(const c10::optional<at::Tensor>& W, double offset) {
  std::vector<acc_t> out;
  if (!(W.has_value() && W->defined())) return out;
  const at::Tensor w = W->to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
  const acc_t* p = w.data_ptr<acc_t>();
  out.resize(w.numel());
  for (int64_t i = 0; i < w.numel(); ++i) out[i] = p[i] + static_cast<acc_t>(offset);
  return out;
}

template <typename T, typename O>
void fwd_rows(const at::Tensor& x2, const std::vector<acc_of<T>>& w, at::Tensor& y2, at::Tensor& rstd,
              double eps, bool llama) {
  using acc_t = acc_of<T>;
  const int64_t rows = x2.size(0), cols = x2.size(1), xs = x2.stride(0);
  const T* x = x2.data_ptr<T>();
  O* y = y2.data_ptr<O>();
  acc_t* rs = rstd.data_ptr<acc_t>();
  at::parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * xs;
      sum_t ss = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const sum_t v = static_cast<sum_t>(xr[c]);
        ss += v * v;
      }
      const acc_t inv = static_cast<acc_t>(1.0 / std::sqrt(ss / static_cast<sum_t>(cols) + eps));
      rs[r] = inv;
      O* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        acc_t n = static_cast<acc_t>(xr[c]) * inv;
        if (llama) n = static_cast<acc_t>(static_cast<T>(n));
        yr[c] = static_cast<O>(w.empty() ? n : n * w[c]);
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_cpu(const at::Tensor& X, const c10::optional<at::Tensor>& W,
                                                    double eps, double offset, c10::string_view casting_mode,
                                                    bool /*in_place*/) {
  const Casting casting = parse_casting(casting_mode);
  check_norm_inputs(X, W, /*cuda=*/false);
  const at::Tensor x2 = as_rows(X);
  const auto out_dtype = rms_norm_out_dtype(X, W, casting);
  at::Tensor y = at::empty(X.sizes(), X.options().dtype(out_dtype));
  const auto acc_dtype = X.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor rstd = at::empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(acc_dtype));
  at::Tensor y2 = y.view({-1, X.size(-1)});
  const bool llama = casting == Casting::kLlama;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "rms_norm_fwd_cpu", [&] {
    const auto w = weight_plus_offset<acc_of<scalar_t>>(W, offset);
    if (out_dtype == X.scalar_type()) {
      fwd_rows<scalar_t, scalar_t>(x2, w, y2, rstd, eps, llama);
    } else {
      fwd_rows<scalar_t, float>(x2, w, y2, rstd, eps, llama);
    }
  });
  return {y, rstd};
}

// dX into dx2 (may alias dy2) and, when want_dw, float partial sums of dW.
template <typename T, typename G>
at::Tensor bwd_rows(const at::Tensor& dy2, const at::Tensor& x2, const std::vector<acc_of<T>>& w,
                    const at::Tensor& rstd, at::Tensor& dx2, bool want_dw, bool llama) {
  using acc_t = acc_of<T>;
  const int64_t rows = x2.size(0), cols = x2.size(1);
  const int64_t xs = x2.stride(0), gs = dy2.stride(0), ds = dx2.stride(0);
  const T* x = x2.data_ptr<T>();
  const G* dy = dy2.data_ptr<G>();
  T* dx = dx2.data_ptr<T>();
  const acc_t* rs = rstd.data_ptr<acc_t>();
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  at::Tensor partial = at::zeros({want_dw ? blocks : 0, cols}, x2.options().dtype(at::kDouble));
  sum_t* part = want_dw ? partial.data_ptr<sum_t>() : nullptr;
  at::parallel_for(0, blocks, 1, [&](int64_t bb, int64_t be) {
    for (int64_t blk = bb; blk < be; ++blk) {
      const int64_t r_end = std::min(rows, (blk + 1) * kRowsPerBlock);
      for (int64_t r = blk * kRowsPerBlock; r < r_end; ++r) {
        const T* xr = x + r * xs;
        const G* gr = dy + r * gs;
        const acc_t inv = rs[r];
        sum_t dot = 0;
        for (int64_t c = 0; c < cols; ++c)
          dot += static_cast<sum_t>(static_cast<acc_t>(gr[c]) * (w.empty() ? acc_t(1) : w[c])) *
                 static_cast<sum_t>(xr[c]);
        const acc_t k =
            static_cast<acc_t>(static_cast<sum_t>(inv) * inv * inv * dot / static_cast<sum_t>(cols));
        T* dr = dx + r * ds;
        for (int64_t c = 0; c < cols; ++c) {
          const acc_t xv = static_cast<acc_t>(xr[c]);
          const acc_t g = static_cast<acc_t>(gr[c]);  // read before dr[c] is written (in place)
          if (part) {
            acc_t n = xv * inv;
            if (llama) n = static_cast<acc_t>(static_cast<T>(n));
            part[blk * cols + c] += static_cast<sum_t>(g) * n;
          }
          dr[c] = static_cast<T>(inv * g * (w.empty() ? acc_t(1) : w[c]) - k * xv);
        }
      }
    }
  });
  return partial;
}

// Shared by the functional and in-place backward: writes dX into dx2.
at::Tensor rms_norm_bwd_into(const at::Tensor& dY, const at::Tensor& X, const c10::optional<at::Tensor>& W,
                             const at::Tensor& RSTD, double offset, Casting casting, bool compute_dw,
                             at::Tensor& dx2) {
  const at::Tensor x2 = as_rows(X);
  const at::Tensor dy2 = as_rows(dY);
  const at::Tensor rstd = RSTD.contiguous();
  const bool has_w = W.has_value() && W->defined();
  const bool want_dw = has_w && compute_dw;
  const bool llama = casting == Casting::kLlama;
  at::Tensor dw =
      at::empty({want_dw ? X.size(-1) : 0}, X.options().dtype(has_w ? W->scalar_type() : X.scalar_type()));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "rms_norm_bwd_cpu", [&] {
    const auto w = weight_plus_offset<acc_of<scalar_t>>(W, offset);
    at::Tensor partial = dY.scalar_type() == X.scalar_type()
                             ? bwd_rows<scalar_t, scalar_t>(dy2, x2, w, rstd, dx2, want_dw, llama)
                             : bwd_rows<scalar_t, float>(dy2, x2, w, rstd, dx2, want_dw, llama);
    if (want_dw) dw.copy_(partial.sum(0));  // block order: deterministic
  });
  return dw;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cpu(const at::Tensor& dY, const at::Tensor& X,
                                                    const c10::optional<at::Tensor>& W,
                                                    const at::Tensor& RSTD, double offset,
                                                    c10::string_view casting_mode, bool compute_dw) {
  const Casting casting = parse_casting(casting_mode);
  check_rms_norm_bwd(dY, X, W, RSTD, casting, /*cuda=*/false);
  at::Tensor dx = at::empty(X.sizes(), X.options());
  at::Tensor dx2 = dx.view({-1, X.size(-1)});
  at::Tensor dw = rms_norm_bwd_into(dY, X, W, RSTD, offset, casting, compute_dw, dx2);
  return {dx, dw};
}

at::Tensor rms_norm_bwd_inplace_cpu(at::Tensor& dY, const at::Tensor& X, const c10::optional<at::Tensor>& W,
                                    const at::Tensor& RSTD, double offset, c10::string_view casting_mode,
                                    bool compute_dw) {
  const Casting casting = parse_casting(casting_mode);
  check_rms_norm_bwd(dY, X, W, RSTD, casting, /*cuda=*/false);
  LIGER_CHECK_ARG(dY.scalar_type() == X.scalar_type(), "dY", "in-place backward needs dY of X's dtype (",
                  dtype_str(X.scalar_type()), "), got ", dtype_str(dY.scalar_type()));
  LIGER_CHECK_ARG(dY.is_contiguous(), "dY", "in-place backward needs a contiguous dY");
  at::Tensor dx2 = dY.view({-1, X.size(-1)});
  at::Tensor dw = rms_norm_bwd_into(dY, X, W, RSTD, offset, casting, compute_dw, dx2);
  mark_written(dY);
  return dw;
}

}  // namespace

// Entry points reused by FusedAddRMSNorm (csrc/aten/cpu/rms_norm_cpu.h).
std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_cpu_impl(const at::Tensor& X,
                                                         const c10::optional<at::Tensor>& W, double eps,
                                                         double offset, c10::string_view casting_mode) {
  return rms_norm_fwd_cpu(X, W, eps, offset, casting_mode, false);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cpu_impl(const at::Tensor& dY, const at::Tensor& X,
                                                         const c10::optional<at::Tensor>& W,
                                                         const at::Tensor& RSTD, double offset,
                                                         c10::string_view casting_mode, bool compute_dw) {
  return rms_norm_bwd_cpu(dY, X, W, RSTD, offset, casting_mode, compute_dw);
}

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  m.impl("rms_norm_fwd", &rms_norm_fwd_cpu);
  m.impl("rms_norm_bwd", &rms_norm_bwd_cpu);
  m.impl("rms_norm_bwd_", &rms_norm_bwd_inplace_cpu);
}

}  // namespace liger_cpp
