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
#include "aten/checks/small_tensors.h"
#include "aten/cpu/cpu_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace rms_norm_cpu_impl {

constexpr int64_t kRowsPerBlock = 64;

using cpu::acc_of;
using sum_t = double;

template <typename T, typename O>
void fwd_rows(const T* x, const cpu::Rows& xr, const std::vector<acc_of<T>>& w, O* y, acc_of<T>* rs,
              double eps, bool llama) {
  using acc_t = acc_of<T>;
  const int64_t rows = xr.rows, cols = xr.cols, xs = xr.stride;
  cpu::parallel(rows, 16, rows * cols, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xrow = x + r * xs;
      sum_t ss = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const sum_t v = static_cast<sum_t>(xrow[c]);
        ss += v * v;
      }
      const acc_t inv = static_cast<acc_t>(1.0 / std::sqrt(ss / static_cast<sum_t>(cols) + eps));
      rs[r] = inv;
      O* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        acc_t n = static_cast<acc_t>(xrow[c]) * inv;
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
  cpu::Rows xr;
  const at::Tensor x2 = cpu::as_rows(X, xr);
  const auto out_dtype = rms_norm_out_dtype(X, W, casting);
  at::Tensor y = small_empty(X.sizes(), X.options().dtype(out_dtype));
  const auto acc_dtype = X.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor rstd = small_empty(X.sizes().slice(0, X.dim() - 1), X.options().dtype(acc_dtype));
  const bool llama = casting == Casting::kLlama;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "rms_norm_fwd_cpu", [&] {
    using acc_t = acc_of<scalar_t>;
    const auto w = cpu::param_vector<acc_t>(W, offset);
    const scalar_t* x = x2.const_data_ptr<scalar_t>();
    if (out_dtype == X.scalar_type()) {
      fwd_rows<scalar_t, scalar_t>(x, xr, w, y.data_ptr<scalar_t>(), rstd.data_ptr<acc_t>(), eps, llama);
    } else {
      fwd_rows<scalar_t, float>(x, xr, w, y.data_ptr<float>(), rstd.data_ptr<acc_t>(), eps, llama);
    }
  });
  return {y, rstd};
}

// dX into dx (rows of dxr's stride; may alias dy) and, when part is non-null, per-block float64
// partial sums of dW (blocks x cols).
template <typename T, typename G>
void bwd_rows(const G* dy, const cpu::Rows& dyr, const T* x, const cpu::Rows& xr,
              const std::vector<acc_of<T>>& w, const acc_of<T>* rs, T* dx, int64_t dx_stride, sum_t* part,
              bool llama) {
  using acc_t = acc_of<T>;
  const int64_t rows = xr.rows, cols = xr.cols;
  const int64_t xs = xr.stride, gs = dyr.stride;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  cpu::parallel(blocks, 1, rows * cols, [&](int64_t bb, int64_t be) {
    for (int64_t blk = bb; blk < be; ++blk) {
      const int64_t r_end = std::min(rows, (blk + 1) * kRowsPerBlock);
      for (int64_t r = blk * kRowsPerBlock; r < r_end; ++r) {
        const T* xrow = x + r * xs;
        const G* gr = dy + r * gs;
        const acc_t inv = rs[r];
        sum_t dot = 0;
        for (int64_t c = 0; c < cols; ++c)
          dot += static_cast<sum_t>(static_cast<acc_t>(gr[c]) * (w.empty() ? acc_t(1) : w[c])) *
                 static_cast<sum_t>(xrow[c]);
        const acc_t k =
            static_cast<acc_t>(static_cast<sum_t>(inv) * inv * inv * dot / static_cast<sum_t>(cols));
        T* dr = dx + r * dx_stride;
        for (int64_t c = 0; c < cols; ++c) {
          const acc_t xv = static_cast<acc_t>(xrow[c]);
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
}

// Shared by the functional and in-place backward: writes dX into dx (row stride dx_stride).
at::Tensor rms_norm_bwd_into(const at::Tensor& dY, const at::Tensor& X, const c10::optional<at::Tensor>& W,
                             const at::Tensor& RSTD, double offset, Casting casting, bool compute_dw,
                             void* dx, int64_t dx_stride) {
  cpu::Rows xr, dyr;
  const at::Tensor x2 = cpu::as_rows(X, xr);
  const at::Tensor dy2 = cpu::as_rows(dY, dyr);
  const at::Tensor rstd = RSTD.contiguous();
  const bool has_w = W.has_value() && W->defined();
  const bool want_dw = has_w && compute_dw;
  const bool llama = casting == Casting::kLlama;
  at::Tensor dw =
      small_empty({want_dw ? X.size(-1) : 0}, X.options().dtype(has_w ? W->scalar_type() : X.scalar_type()));
  const int64_t blocks = (xr.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<sum_t> partial(want_dw ? blocks * xr.cols : 0, 0.0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "rms_norm_bwd_cpu", [&] {
    using acc_t = acc_of<scalar_t>;
    const auto w = cpu::param_vector<acc_t>(W, offset);
    const scalar_t* x = x2.const_data_ptr<scalar_t>();
    const acc_t* rs = rstd.const_data_ptr<acc_t>();
    scalar_t* d = static_cast<scalar_t*>(dx);
    sum_t* part = want_dw ? partial.data() : nullptr;
    if (dY.scalar_type() == X.scalar_type())
      bwd_rows<scalar_t, scalar_t>(dy2.const_data_ptr<scalar_t>(), dyr, x, xr, w, rs, d, dx_stride, part,
                                   llama);
    else
      bwd_rows<scalar_t, float>(dy2.const_data_ptr<float>(), dyr, x, xr, w, rs, d, dx_stride, part, llama);
  });
  if (want_dw) cpu::sum_blocks_into(dw, partial, blocks, xr.cols);  // block order: deterministic
  return dw;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cpu(const at::Tensor& dY, const at::Tensor& X,
                                                    const c10::optional<at::Tensor>& W,
                                                    const at::Tensor& RSTD, double offset,
                                                    c10::string_view casting_mode, bool compute_dw) {
  const Casting casting = parse_casting(casting_mode);
  check_rms_norm_bwd(dY, X, W, RSTD, casting, /*cuda=*/false);
  at::Tensor dx = small_empty(X.sizes(), X.options());
  at::Tensor dw = rms_norm_bwd_into(dY, X, W, RSTD, offset, casting, compute_dw, dx.data_ptr(), X.size(-1));
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
  at::Tensor dw = rms_norm_bwd_into(dY, X, W, RSTD, offset, casting, compute_dw, dY.data_ptr(), X.size(-1));
  mark_written(dY);
  return dw;
}

}  // namespace rms_norm_cpu_impl

// Entry points reused by FusedAddRMSNorm (csrc/aten/cpu/rms_norm_cpu.h).
std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_cpu_impl(const at::Tensor& X,
                                                         const c10::optional<at::Tensor>& W, double eps,
                                                         double offset, c10::string_view casting_mode) {
  return rms_norm_cpu_impl::rms_norm_fwd_cpu(X, W, eps, offset, casting_mode, false);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cpu_impl(const at::Tensor& dY, const at::Tensor& X,
                                                         const c10::optional<at::Tensor>& W,
                                                         const at::Tensor& RSTD, double offset,
                                                         c10::string_view casting_mode, bool compute_dw) {
  return rms_norm_cpu_impl::rms_norm_bwd_cpu(dY, X, W, RSTD, offset, casting_mode, compute_dw);
}

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace rms_norm_cpu_impl;  // NOLINT(build/namespaces)

  m.impl("rms_norm_fwd", &rms_norm_cpu_impl::rms_norm_fwd_cpu);
  m.impl("rms_norm_bwd", &rms_norm_cpu_impl::rms_norm_bwd_cpu);
  m.impl("rms_norm_bwd_", &rms_norm_bwd_inplace_cpu);
}

}  // namespace liger_cpp
