// PolyNorm on the CPU: the CUDA kernels' maths (csrc/kernels/poly_norm/poly_norm.h) as row loops
// with cpu::parallel; float64 row sums, float32 element-wise maths (float64 for float64), dw / db
// as float64 sums over fixed blocks of rows added in block order (deterministic).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "aten/checks/poly_norm_checks.h"
#include "aten/cpu/cpu_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace poly_norm_cpu_impl {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

constexpr int64_t kRowsPerBlock = 64;

std::vector<int64_t> rstd_shape(const at::Tensor& x) {
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().end() - 1);
  s.push_back(3);
  return s;
}

Pair poly_norm_fwd_cpu(const at::Tensor& X, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  check_poly_norm_inputs(X, weight, bias, /*cuda=*/false);
  const at::Tensor x = X.contiguous();
  at::Tensor y = at::empty(X.sizes(), X.options());
  at::Tensor rstd = at::empty(rstd_shape(X), X.options().dtype(poly_norm_rstd_dtype(X)));
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "poly_norm_fwd_cpu", [&] {
    using acc_t = cpu::acc_of<scalar_t>;
    using x_t = scalar_t;  // scalar_t is rstd's below
    const std::vector<acc_t> w = cpu::param_vector<acc_t>(weight);
    const acc_t b = cpu::param_vector<acc_t>(bias)[0];
    const x_t* xp = x.const_data_ptr<x_t>();
    x_t* yp = y.data_ptr<x_t>();
    AT_DISPATCH_FLOATING_TYPES(rstd.scalar_type(), "poly_norm_rstd", [&] {
      scalar_t* rp = rstd.data_ptr<scalar_t>();
      cpu::parallel(rows, 16, rows * cols, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const auto* xr = xp + r * cols;
          double s2 = 0, s4 = 0, s6 = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const double v = static_cast<double>(xr[c]), v2 = v * v;
            s2 += v2;
            s4 += v2 * v2;
            s6 += v2 * v2 * v2;
          }
          const acc_t r1s = static_cast<acc_t>(1.0 / std::sqrt(s2 / cols + eps));
          const acc_t r2s = static_cast<acc_t>(1.0 / std::sqrt(s4 / cols + eps));
          const acc_t r3s = static_cast<acc_t>(1.0 / std::sqrt(s6 / cols + eps));
          rp[r * 3] = static_cast<scalar_t>(r3s);
          rp[r * 3 + 1] = static_cast<scalar_t>(r2s);
          rp[r * 3 + 2] = static_cast<scalar_t>(r1s);
          const acc_t k3 = w[0] * r3s, k2 = w[1] * r2s, k1 = w[2] * r1s;
          for (int64_t c = 0; c < cols; ++c) {
            const acc_t v = static_cast<acc_t>(xr[c]);
            yp[r * cols + c] = static_cast<x_t>(((k3 * v + k2) * v + k1) * v + b);
          }
        }
      });
    });
  });
  return {y, rstd};
}

Triple poly_norm_bwd_cpu(const at::Tensor& dY, const at::Tensor& X, const at::Tensor& weight,
                         const at::Tensor& bias, const at::Tensor& rstd) {
  check_poly_norm_inputs(X, weight, bias, /*cuda=*/false);
  check_poly_norm_grad(dY, X, rstd);
  const at::Tensor x = X.contiguous(), dy = dY.contiguous();
  at::Tensor dx = at::empty(X.sizes(), X.options());
  at::Tensor dw = at::empty(weight.sizes(), weight.options()), db = at::empty(bias.sizes(), bias.options());
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<double> pw(blocks * 3, 0.0), pb(blocks, 0.0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "poly_norm_bwd_cpu", [&] {
    using acc_t = cpu::acc_of<scalar_t>;
    using x_t = scalar_t;  // scalar_t is rstd's below
    const std::vector<acc_t> w = cpu::param_vector<acc_t>(weight);
    const x_t *xp = x.const_data_ptr<x_t>(), *gp = dy.const_data_ptr<x_t>();
    x_t* dp = dx.data_ptr<x_t>();
    AT_DISPATCH_FLOATING_TYPES(rstd.scalar_type(), "poly_norm_rstd", [&] {
      const scalar_t* rp = rstd.const_data_ptr<scalar_t>();
      cpu::parallel(blocks, 1, rows * cols, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t r_end = std::min(rows, (blk + 1) * kRowsPerBlock);
          for (int64_t r = blk * kRowsPerBlock; r < r_end; ++r) {
            const x_t* xr = xp + r * cols;
            const x_t* gr = gp + r * cols;
            double a1 = 0, a2 = 0, a3 = 0, gs = 0;  // sum g x, g x^2, g x^3, g
            for (int64_t c = 0; c < cols; ++c) {
              const double v = static_cast<double>(xr[c]), g = static_cast<double>(gr[c]);
              a1 += g * v;
              a2 += g * v * v;
              a3 += g * v * v * v;
              gs += g;
            }
            const acc_t r3 = static_cast<acc_t>(rp[r * 3]), r2 = static_cast<acc_t>(rp[r * 3 + 1]),
                        r1 = static_cast<acc_t>(rp[r * 3 + 2]);
            pw[blk * 3] += static_cast<double>(r3) * a3;
            pw[blk * 3 + 1] += static_cast<double>(r2) * a2;
            pw[blk * 3 + 2] += static_cast<double>(r1) * a1;
            pb[blk] += gs;
            const acc_t k3 = w[0] * r3, k2 = w[1] * r2, k1 = w[2] * r1;
            const acc_t c3 = k3 * r3 * r3 * static_cast<acc_t>(a3 / cols),
                        c2 = k2 * r2 * r2 * static_cast<acc_t>(a2 / cols),
                        c1 = k1 * r1 * r1 * static_cast<acc_t>(a1 / cols);
            for (int64_t c = 0; c < cols; ++c) {
              const acc_t v = static_cast<acc_t>(xr[c]), g = static_cast<acc_t>(gr[c]), v2 = v * v;
              dp[r * cols + c] = static_cast<x_t>(acc_t(3) * v2 * (k3 * g - c3 * v2 * v) +
                                                  acc_t(2) * v * (k2 * g - c2 * v2) + (k1 * g - c1 * v));
            }
          }
        }
      });
    });
  });
  cpu::sum_blocks_into(dw, pw, blocks, 3);
  cpu::sum_blocks_into(db, pb, blocks, 1);
  return {dx, dw, db};
}

}  // namespace poly_norm_cpu_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace poly_norm_cpu_impl;  // NOLINT(build/namespaces)

  m.impl("poly_norm_fwd", &poly_norm_fwd_cpu);
  m.impl("poly_norm_bwd", &poly_norm_bwd_cpu);
}

}  // namespace liger_cpp
